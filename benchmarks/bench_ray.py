"""Throughput of a campaign on Ray with 1 and 2 worker slots, next to the local executor,
and Ray's own per-task overhead, in one run on this machine.

Measures the same configs (the `tiny` space, repeated under different platform labels so
that nothing is resumed past) into throw-away stores:

- local: this process's CPU backend, one config at a time;
- ray, 1 slot and ray, 2 slots: a Ray cluster started here with 2 CPUs;
- the round trip of an empty call to a slot (what Ray adds to every visit).

Prints wall time, configs per hour, the speed-up of 2 slots over 1 and the per-visit
overhead of Ray against local ((ray-1 wall - local wall) / visits).

    python benchmarks/bench_ray.py [--repeat 2] [--max-time 0.5] [--rounds 1]

On a 2-core machine the driver, Ray's own processes and both slots share the cores, so
the 2-slot figure is a floor for machines where slots have their own cores or GPUs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2, help="measure the 8 tiny configs this many times")
    ap.add_argument("--max-time", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    from dataclasses import replace

    import numpy as np
    import pandas as pd
    import ray

    from carb.campaign.ray_executor import RayExecutor
    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure import get_backend
    from carb.measure.base import Protocol

    configs = list(space.load("tiny"))
    protocol = replace(Protocol.default_for("cpu"), max_time_s=a.max_time)
    n = len(configs) * a.repeat
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"{n} visits of the `tiny` configs, max_time_s={a.max_time}, rounds={a.rounds}, 1 thread per slot, "
        f"{os.cpu_count()} cores"
    )

    latency: dict[str, pd.Series] = {}

    def campaign(executor, store_dir: str, name: str) -> tuple[float, float]:
        """Wall seconds and summed per-config wall seconds of `repeat` campaigns."""
        wall = inner = 0.0
        with Store(Path(store_dir) / f"{name}.duckdb") as store:
            for k in range(a.repeat):
                t = time.monotonic()
                r = run_campaign(configs, executor, store, platform=f"{name}-{k}", rounds=a.rounds)
                wall += time.monotonic() - t
                assert r.measured == len(configs), r
            m = store.measurements()
            inner = float(m.wall_s.sum())
            latency[name] = m.groupby("config_id").latency_ms.median()
        return wall, inner

    rows: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with get_backend("cpu", threads=1, protocol=protocol) as b:
            rows["local"] = campaign(b, tmp, "local")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=100_000_000,
        )
        try:
            for slots in (1, 2):
                with RayExecutor("cpu", workers=slots, protocol=protocol) as ex:
                    rows[f"ray, {slots} slot{'s' * (slots > 1)}"] = campaign(ex, tmp, f"ray{slots}")
                    if slots == 1:
                        slot = ex._slots[0]
                        ray.get(slot.info.remote())
                        rtt = []
                        for _ in range(50):
                            t = time.perf_counter()
                            ray.get(slot.info.remote())
                            rtt.append(time.perf_counter() - t)
        finally:
            ray.shutdown()

    print(f"{'executor':<14}{'wall s':>9}{'configs/h':>11}{'sum of per-config wall s':>26}")
    for name, (wall, inner) in rows.items():
        print(f"{name:<14}{wall:>9.1f}{3600 * n / wall:>11.0f}{inner:>26.1f}")
    one, two, local = rows["ray, 1 slot"][0], rows["ray, 2 slots"][0], rows["local"][0]
    print(f"speed-up 2 slots / 1 slot: {one / two:.2f}x")
    print(
        f"ray 1 slot / local: {one / local:.2f}x; overhead per visit vs local: "
        f"{1000 * (one - local) / (n * a.rounds):.0f} ms"
    )
    for name in ("ray1", "ray2"):
        ratio = (latency[name] / latency["local"]).dropna()
        print(
            f"measured latency {name} / local: median {ratio.median():.3f} over {len(ratio)} configs "
            f"(min {ratio.min():.3f}, max {ratio.max():.3f})"
        )
    print(
        f"empty round trip to a slot: median {1000 * float(np.median(rtt)):.2f} ms "
        f"(p95 {1000 * float(np.percentile(rtt, 95)):.2f} ms, 50 calls)"
    )


if __name__ == "__main__":
    main()
