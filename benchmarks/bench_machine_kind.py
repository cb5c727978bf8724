"""The measured step between machine kinds: how far a network model is off on a CPU kind it was not fitted on.

A network model's own intervals come from residuals on its own machine kind. On another
kind (AVX2 kernels against AVX-512, native bf16 or not) its errors are of another size,
and the interval an uncalibrated prediction carries there must come from what was
measured about that step, not from in-kind residuals. This script measures it:

``measure``  ``carb.families.zoo`` networks (seeded draw, 4 per family of up to 12 GFLOP,
             none of the torchvision networks any benchmark tests on) measured on this machine with
             CARB's own pipeline (``run_campaign``: a fresh worker per visit, 2 rounds at
             different moments, the speed sentinel), 1 thread, allocator ``retain`` (the
             shipped models' steady state), into ``--store``; resumes.
``step``     predicts the stored networks with ``--model`` (fitted on another kind) and
             writes, per target, the quantiles of |log(measured / predicted)| (the step's
             90% half-width in log) with the machines of both sides into ``--out`` JSON.
             With them, from shipped data only: the ``range`` step (the ResNets of
             ``cpu-avx2-1t``, measured on the model's own machine kind, beyond the range
             of the 100 carb.zoo networks the shipped model was fitted on) and the
             ``precision`` step (bf16 against fp32 of the same configs of ``cpu-1t``, a CPU
             with native bf16). ``scripts/ship.py steps --network JSON --model DIR`` records
             the three steps and the fitted range in that network model's ``meta``, so that
             predictions outside its domain widen by them (:mod:`carb.netmodel.domain`).

``config-steps``  the same for config models (CARB bundles), from shipped data only: the
             ``range`` step (fit ``fast`` on the small batches of a dataset, score the rows
             beyond their range, and the reverse; cpu-avx2-1t, cpu-1t, h200) and the
             ``precision`` step (fit on cpu-1t's fp32 rows, score its bf16 rows), into
             ``--json``; ``scripts/ship.py steps --config JSON`` ships them to
             ``carb/data/domain_steps.json`` (read by :mod:`carb.model.domain`).

Run (repository root; core 1 reserved for the campaign)::

    taskset -c 1 python benchmarks/bench_machine_kind.py measure --store campaigns/kind-zoo.duckdb
    python benchmarks/bench_machine_kind.py step --store campaigns/kind-zoo.duckdb \
        --model layers-cpu-avx2-1t --json benchmarks/results/machine_kind_step.json
    python benchmarks/bench_machine_kind.py config-steps --json benchmarks/results/config_steps.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone

import _common
import numpy as np

ROOT = _common.ROOT


def _configs(per_family: int, seed: int, max_gflops: float) -> list:
    from carb.families import zoo

    return zoo.sample_configs(per_family=per_family, seed=seed, max_gflops=max_gflops)


def measure(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.measure import Protocol, get_backend

    configs = _configs(args.per_family, args.seed, args.max_gflops)
    protocol = replace(Protocol.default_for("cpu"), max_time_s=args.max_time)
    backend = get_backend("cpu", threads=1, protocol=protocol, allocator="retain")
    store = Store(args.store)
    t0 = time.time()

    def on_result(cfg, m) -> None:
        lat = m.latency_ms.median if m.latency_ms else float("nan")
        print(f"{time.time() - t0:6.0f}s {cfg.label():50s} {m.status:6s} {lat:9.2f} ms", flush=True)

    try:
        run_campaign(
            configs,
            backend,
            store,
            rounds=args.rounds,
            chunk=len(configs),
            command="python " + " ".join(sys.argv),
            on_result=on_result,
        )
    finally:
        store.close()
        backend.close()


def _measured(store_path: str) -> tuple[list, np.ndarray, np.ndarray, dict]:
    """The stored zoo networks (configs), their latency (ms) and memory (MB), and the campaign's provenance."""
    from carb.campaign.store import Store
    from carb.families.space import configs_from_frame

    store = Store(store_path, read_only=True)
    try:
        df = store.measurements()
        runs = store.runs()
    finally:
        store.close()
    df = df[(df["status"] == "ok") & (df["family"] == "zoo")].reset_index(drop=True)
    prov = json.loads(runs["provenance"].iloc[-1]) if len(runs) else {}
    return configs_from_frame(df), df["latency_ms"].to_numpy(float), df["memory_mb"].to_numpy(float), prov


def step(args: argparse.Namespace) -> None:
    from carb.measure.fingerprint import from_provenance, here
    from carb.netmodel import capture_config, load, predict_tables

    nm = load(args.model)
    cfgs, lat, mem, prov = _measured(args.store)
    from carb.netmodel.domain import fingerprint_of

    # the model's own interval (as on its own machine kind): what the step is compared with
    preds = predict_tables([capture_config(c) for c in cfgs], nm, fingerprint_of(nm))
    out: dict = {
        "model": str(args.model),
        "model_machine": nm.meta.get("fingerprint"),
        "measured_on": from_provenance(prov).to_dict() if prov else here().to_dict(),
        "store": args.store,
        "networks": len(cfgs),
        "computed": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python " + " ".join(sys.argv),
        "targets": {},
    }
    for t, y, p in (
        ("latency_ms", lat, np.array([q.latency_ms for q in preds])),
        ("memory_mb", mem, np.array([q.memory_mb for q in preds])),
    ):
        e = np.log(y / p)
        inside = np.mean((y >= [getattr(q, f"{t}_lo") for q in preds]) & (y <= [getattr(q, f"{t}_hi") for q in preds]))
        out["targets"][t] = {
            "median_log_error": float(np.median(e)),
            "mape": float(np.mean(np.abs(np.exp(e) - 1))),
            "q80_abs_log": float(np.quantile(np.abs(e), 0.8)),
            "q90_abs_log": float(np.quantile(np.abs(e), 0.9)),
            "q95_abs_log": float(np.quantile(np.abs(e), 0.95)),
            "coverage_of_in_kind_interval": float(inside),
        }
        print(f"{t}: {json.dumps(out['targets'][t])}")
    out["range"], out["range_step"] = _range_step(nm)
    out["precision_step"] = _precision_step()
    print(f"range step: {json.dumps(out['range_step'])}\nprecision step: {json.dumps(out['precision_step'])}")
    _common.write_json(args.json, out)
    print(f"wrote {args.json} (ship it: python scripts/ship.py steps --network {args.json} --model DIR)")


def _abs_log_q90(y: np.ndarray, p: np.ndarray) -> dict:
    e = np.log(y / p)
    return {"q90_abs_log": float(np.quantile(np.abs(e), 0.9)), "median_log_error": float(np.median(e)), "n": len(e)}


def _range_step(nm) -> tuple[dict, dict]:
    """The fitted range (the 100 zoo networks of the shipped fit) and the errors of networks beyond it."""
    from carb.families import resnet, zoo
    from carb.graph import capture
    from carb.netmodel import capture_config
    from carb.netmodel.domain import RANGE_COLUMNS, network_range
    from carb.netmodel.network import _network_rows

    fit_rows = _network_rows([capture_config(c) for c in zoo.sample_configs(per_family=10, seed=0)], nm.layer)[0]
    rng = network_range(fit_rows)
    import carb

    df = carb.load_dataset("cpu-avx2-1t")
    df = df[df["status"] == "ok"].reset_index(drop=True)
    tables = [
        capture(resnet.build(resnet._from_row(r)), (int(r["batch"]), 3, int(r["input_size"]), int(r["input_size"])))
        for r in df.to_dict("records")
    ]
    rows = _network_rows(tables, nm.layer)[0]
    pred = nm.predict_rows(rows)
    out = np.zeros(len(rows), bool)
    for c in RANGE_COLUMNS:
        lo, hi = rng[c]
        out |= (rows[c].to_numpy() < lo * 0.999) | (rows[c].to_numpy() > hi * 1.001)
    step = {t: _abs_log_q90(df[t].to_numpy(float)[out], pred[t].to_numpy()[out]) for t in ("latency_ms", "memory_mb")}
    step["from"] = (
        f"{int(out.sum())} ResNets of cpu-avx2-1t (the AVX2 kind, default allocator) beyond the range of the "
        "100 carb.zoo networks (per_family=10, seed=0) the shipped model was fitted on"
    )
    return rng, step


def _precision_step() -> dict:
    """bf16 against fp32 of the same configs on a CPU with native bf16 (cpu-1t)."""
    import carb

    df = carb.load_dataset("cpu-1t")
    df = df[df["status"] == "ok"]
    key = ["block", "depth", "width", "early_downsample", "input_size", "batch", "classes"]
    a = df[df["precision"] == "fp32"].set_index(key)[["latency_ms", "memory_mb"]]
    b = df[df["precision"] == "bf16"].set_index(key)[["latency_ms", "memory_mb"]]
    j = a.join(b, rsuffix="_bf16", how="inner")
    step = {t: _abs_log_q90(j[f"{t}_bf16"].to_numpy(float), j[t].to_numpy(float)) for t in ("latency_ms", "memory_mb")}
    step["from"] = f"{len(j)} configs of cpu-1t measured in both bf16 and fp32 (a CPU with native bf16)"
    return step


def config_steps(args: argparse.Namespace) -> None:
    import warnings

    import carb
    from carb.model import CARB

    def fit_score(train, test) -> dict:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = CARB(preset="fast", random_state=0).fit(train)
            pred = model.predict(test)
        ex = pred["extrapolated"].to_numpy(bool)
        errs = {}
        for t in model.targets_:
            y, p = test[t].to_numpy(float), pred[t].to_numpy(float)
            ok = ex & np.isfinite(y) & (y > 0)
            errs[t] = np.abs(np.log(y[ok] / p[ok]))
        return errs

    pooled: dict = {"range": {}, "precision": {}}
    runs = []
    for name in ("cpu-avx2-1t", "cpu-1t", "h200"):
        df = carb.load_dataset(name)
        df = df[df["status"] == "ok"].reset_index(drop=True)
        cut = 8
        small, large = df[df["batch"] <= cut], df[df["batch"] > cut]
        for tr, te, what in (
            (small, large, f"batch <= {cut} -> > {cut}"),
            (large, small, f"batch > {cut} -> <= {cut}"),
        ):
            errs = fit_score(tr, te)
            runs.append({"kind": "range", "data": name, "split": what, "n": {t: len(e) for t, e in errs.items()}})
            for t, e in errs.items():
                pooled["range"].setdefault(t, []).append(e)
            print(
                f"range {name} {what}: "
                + ", ".join(f"{t} n={len(e)} q90={np.quantile(e, 0.9):.3f}" for t, e in errs.items() if len(e))
            )
    df = carb.load_dataset("cpu-1t")
    df = df[df["status"] == "ok"].reset_index(drop=True)
    errs = fit_score(df[df["precision"] == "fp32"], df[df["precision"] == "bf16"])
    runs.append(
        {"kind": "precision", "data": "cpu-1t", "split": "fp32 -> bf16", "n": {t: len(e) for t, e in errs.items()}}
    )
    for t, e in errs.items():
        pooled["precision"].setdefault(t, []).append(e)
    print("precision cpu-1t fp32 -> bf16: " + ", ".join(f"{t} q90={np.quantile(e, 0.9):.3f}" for t, e in errs.items()))
    doc = {
        "about": (
            "Measured steps beyond a config model's training domain: per target, the 90% quantile of "
            "|log(measured / predicted)| of rows a CARB fast model flags as extrapolated (carb.model.domain.widen)."
        ),
        "computed": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_machine_kind.py config-steps",
        "runs": runs,
        "config": {
            kind: {
                t: {"q90_abs_log": float(np.quantile(np.concatenate(es), 0.9)), "n": int(sum(len(e) for e in es))}
                for t, es in per.items()
                if sum(len(e) for e in es) >= 20
            }
            for kind, per in pooled.items()
        },
    }
    print(f"config steps: {json.dumps(doc['config'])}")
    _common.write_json(args.json, doc)
    print(f"wrote {args.json} (ship it: python scripts/ship.py steps --config {args.json})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure carb.zoo networks on this machine into --store")
    m.add_argument("--store", required=True)
    m.add_argument("--per-family", type=int, default=4)
    m.add_argument("--seed", type=int, default=7)
    # up to the size of the ImageNet CNNs users deploy (carb calibrate's CALIBRATION_MAX_GFLOPS)
    m.add_argument("--max-gflops", type=float, default=12.0)
    m.add_argument("--rounds", type=int, default=2)
    m.add_argument("--max-time", type=float, default=1.2)
    s = sub.add_parser("step", help="the step of a network model fitted on another kind; JSON")
    s.add_argument("--store", required=True)
    s.add_argument("--model", default="layers-cpu-avx2-1t")
    _common.add_json(s, required=True, aliases=("--out",))
    _common.add_json(
        sub.add_parser("config-steps", help="the steps of config models (ship them with scripts/ship.py steps)"),
        required=True,
    )
    args = ap.parse_args()
    {"measure": measure, "step": step, "config-steps": config_steps}[args.cmd](args)


if __name__ == "__main__":
    main()
