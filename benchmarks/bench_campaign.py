"""Measurement overhead of a campaign on this machine's CPU.

Runs the same seeded sample of the `cpu` space twice in one process, once with one burst
per config and once with 3 pooled rounds, into throw-away stores, and prints per run:
wall time, time spent inside timed inference, their ratio (the overhead: >= 1, lower is
better), configs per hour, and the median CoV of latency.

    python benchmarks/bench_campaign.py [--n 12] [--max-time 1.0] [--threads 1] [--json OUT.json]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import _common
import numpy as np


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-time", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    from dataclasses import replace

    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure import get_backend
    from carb.measure.base import Protocol

    configs = space.load("cpu").sample(a.n, seed=a.seed, method="stratified")
    protocol = replace(Protocol.default_for("cpu"), max_time_s=a.max_time)
    print(f"command: {_common.command_line()}")
    print(f"{a.n} configs of `cpu` (seed {a.seed}), max_time_s={a.max_time}, threads={a.threads}")
    print(f"{'protocol':<18}{'wall s':>9}{'timed s':>9}{'overhead':>10}{'configs/h':>11}{'median CoV':>12}")
    rows, res = {}, []
    with tempfile.TemporaryDirectory() as tmp, get_backend("cpu", threads=a.threads, protocol=protocol) as backend:
        for name, rounds in (("1 burst", 1), ("3 rounds", 3)):
            with Store(Path(tmp) / f"{rounds}.duckdb") as store:
                r = run_campaign(configs, backend, store, rounds=rounds)
                cov = float(np.nanmedian(store.measurements().latency_ms_cov))
            rows[name] = r
            res.append(
                {
                    "protocol": name,
                    "rounds": rounds,
                    "wall_s": r.wall_s,
                    "timed_s": r.timed_s,
                    "overhead": r.overhead,
                    "configs_per_hour": 3600 * r.measured / r.wall_s,
                    "latency_cov_median": cov,
                }
            )
            print(
                f"{name:<18}{r.wall_s:>9.1f}{r.timed_s:>9.1f}{r.overhead:>10.2f}"
                f"{3600 * r.measured / r.wall_s:>11.0f}{cov:>12.3f}"
            )
    print(f"wall ratio 3 rounds / 1 burst: {rows['3 rounds'].wall_s / rows['1 burst'].wall_s:.2f}x")
    if a.json:
        _common.write_json(
            a.json,
            {
                "configs": a.n,
                "seed": a.seed,
                "max_time_s": a.max_time,
                "threads": a.threads,
                "runs": res,
                "wall_ratio_rounds_to_burst": rows["3 rounds"].wall_s / rows["1 burst"].wall_s,
            },
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
