"""A size-elastic drift correction, tried for issue 16 and not adopted (benchmarks/RESULTS.md,
"A size elasticity for the drift correction?").

carb corrects a latency measured while the speed sentinel read ``sentinel_ms`` to the speed
where it reads ``ref_ms`` by the full ratio: ``latency_ms * ref_ms / sentinel_ms``. On the
AVX-512 kind, configs of 8 ms and more followed the sentinel only in part in one run (run 15),
so this module scales each config by the ratio to a power that falls with its size,

    beta = clip(1 - SLOPE * ln(max(latency_ms, REF_MS) / REF_MS), 0, 1)

(1 up to 1 ms, 0.65 at 10 ms, 0.31 at 100 ms), with the two constants fitted on the
two-campaign runs 6-15 of ``bench_drift.py``. The benchmarks score it beside carb's
correction in the same run; ``slope=0`` gives carb's correction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: latency up to which a config follows the sentinel fully. Units: ms.
REF_MS = 1.0
#: how much less per e-fold of latency above ``REF_MS``
SLOPE = 0.15


def elasticity(latency_ms: Any, slope: float = SLOPE, ref_ms: float = REF_MS) -> Any:
    """How far a config of raw latency ``latency_ms`` (ms; number or array) follows the
    sentinel's speed (1 = fully, 0 = not at all); unitless."""
    lat = np.maximum(np.asarray(latency_ms, float), ref_ms)
    return np.clip(1.0 - slope * np.log(lat / ref_ms), 0.0, 1.0)


def at_speed(latency_ms: Any, ref_ms: Any, sentinel_ms: Any, slope: float = SLOPE) -> Any:
    """``latency_ms * (ref_ms / sentinel_ms) ** elasticity(latency_ms)`` (ms; arrays broadcast,
    NaN in, NaN out)."""
    lat = np.asarray(latency_ms, float)
    return lat * (np.asarray(ref_ms, float) / np.asarray(sentinel_ms, float)) ** elasticity(lat, slope)


def _fit_runs(argv: list[str] | None = None) -> None:
    """Fit ``REF_MS`` and ``SLOPE`` on two-campaign runs of ``bench_drift.py`` (their --json:
    per config the raw and fully corrected B/A ratios and campaign A's latency) and check
    them leaving one run out: the mean |B/A - 1| of each run with the constants fitted on
    the others, against carb's full ratio."""
    import argparse
    import glob
    import json

    ap = argparse.ArgumentParser(description=_fit_runs.__doc__.splitlines()[0])
    ap.add_argument(
        "runs", nargs="*", help="bench_drift JSON files (default: benchmarks/results/bench_drift_run{6..15}*.json)"
    )
    a = ap.parse_args(argv)
    files = a.runs or sorted(
        f
        for f in glob.glob("benchmarks/results/bench_drift_run*.json")
        if 6 <= int(f.split("_run")[1].split("_")[0].split(".")[0]) <= 15
    )
    runs = {}
    for f in files:
        pc = json.load(open(f))["per_config"].values()
        lat, raw, full = (np.array([v[k] for v in pc], float) for k in ("latency_ms_A", "raw", "corrected"))
        runs[f] = (lat, raw, full / raw)  # the sentinel's ratio A/B per config

    grid = [(r, k) for r in (0.5, 1.0, 2.0, 3.0, 5.0, 8.0) for k in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)]

    def err(f: str, ref: float, k: float) -> float:
        lat, raw, ratio = runs[f]
        return float(np.mean(np.abs(raw * ratio ** elasticity(lat, k, ref) - 1)))

    def best(names: list[str]) -> tuple[float, float]:
        return min(grid, key=lambda p: np.mean([err(f, *p) for f in names]))

    print(f"fitted on all {len(runs)} runs: REF_MS, SLOPE = {best(list(runs))}")
    better = 0
    for f in runs:
        p = best([g for g in runs if g != f])
        full, held = err(f, 1.0, 0.0), err(f, *p)
        better += held < full
        print(
            f"{f}: full ratio {100 * full:.1f}%, size-elastic {100 * held:.1f}% (constants {p}, fitted on the others)"
        )
    print(f"held out, the size-elastic correction was better in {better} of {len(runs)} runs")


if __name__ == "__main__":
    _fit_runs()
