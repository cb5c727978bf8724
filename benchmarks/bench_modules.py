"""Issue 15 evaluation: predict whole CNNs from their layers (carb.graph + carb.netmodel).

Subcommands (run from the repository root, ``. .venv/bin/activate``):

``measure``   measure the zoo (carb.zoo: 10 families of real CNN designs, plain torch) on this
              CPU, 1 thread, with the ordinary pipeline (``run_campaign``: a fresh worker per
              visit, 3 rounds spread over the whole campaign, the speed sentinel) into
              ``campaigns/zoo-cpu-1t.duckdb``; resumes.
``evaluate``  leave-one-family-out: per held-out family, the network model fitted on the
              other families (layer model from the measured ``layers`` campaign + network
              terms), calibrated with K = 10 whole-network measurements of the other
              families measured in the same run as the truth; MAPE, within +-10/20%,
              Spearman, 90% interval coverage, beside a FLOPs-only and a sum-of-layers-only
              baseline; memory too; the resnext/wideresnet pairs; the ResNets of cpu-1t.
              Writes ``benchmarks/results/bench_modules.json``.
``speed``     capture + predict of a ~100-layer network, and of 1,000 networks.

Every figure was measured on a 2-core machine shared with other sessions; see RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGNS = ROOT / "campaigns"


def zoo_configs(per_family: int, seed: int):
    from carb import zoo

    return zoo.sample_configs(per_family=per_family, seed=seed)


def cmd_measure(args: argparse.Namespace) -> None:
    from dataclasses import replace

    import pandas as pd

    from carb import families, zoo
    from carb.campaign import run_campaign
    from carb.measure import Protocol, get_backend
    from carb.store import Store

    if "zoo" not in families.names():
        families.register(zoo.ZOO)
    cfg_file = CAMPAIGNS / f"zoo-configs-{args.per_family}-s{args.seed}.parquet"
    if cfg_file.exists():
        configs = [zoo.ZooConfig.from_dict(r) for r in pd.read_parquet(cfg_file).drop(columns=["config_id"]).to_dict("records")]
    else:
        configs = zoo_configs(args.per_family, args.seed)
        df = pd.DataFrame([c.to_dict() for c in configs])
        df.insert(0, "config_id", [c.config_id for c in configs])
        CAMPAIGNS.mkdir(exist_ok=True)
        df.to_parquet(cfg_file)
    print(f"{len(configs)} zoo networks -> {args.store}", flush=True)
    protocol = replace(Protocol.default_for("cpu"), max_time_s=args.max_time)
    backend = get_backend("cpu", threads=1, protocol=protocol)
    store = Store(args.store)
    t0 = time.time()

    def on_result(cfg, m) -> None:
        lat = m.latency_ms.median if m.latency_ms else float("nan")
        print(f"{time.time() - t0:7.0f}s {cfg.label():55s} {m.status:6s} {lat:9.2f} ms {m.memory_mb or 0:8.1f} MB",
              flush=True)

    try:
        res = run_campaign(configs, backend, store, rounds=args.rounds, chunk=None,
                           command="python " + " ".join(sys.argv), on_result=on_result)
        print(res.to_dict() if hasattr(res, "to_dict") else res, flush=True)
    finally:
        store.close()
        backend.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the zoo on this CPU (1 thread)")
    m.add_argument("--store", default=str(CAMPAIGNS / "zoo-cpu-1t.duckdb"))
    m.add_argument("--per-family", type=int, default=10)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--max-time", type=float, default=3.0)
    m.set_defaults(func=cmd_measure)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
