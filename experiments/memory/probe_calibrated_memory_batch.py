"""Per-batch coverage of the demo's calibrated memory intervals, offline on shipped data.

The demo's path (``carb demo``): CARB ``fast`` on every ``cpu-1t`` row as the source, K = 12
configs chosen by ``choose_samples`` (seeds 0-7), ``fit_calibrated`` on their measured
values, the 90% memory intervals scored on the target's other fp32 configs, per batch.
Targets: ``cpu-2t`` (2 threads, the AVX-512 machine) and ``cpu-avx2-1t`` (this machine
kind, 1 thread): no shipped dataset is this machine at 2 threads, the demo's setting.
Data only (no timing). Printed per seed: coverage overall, at batch 1/2/4/8/16/32, the
median log half-width and median |log error| at batch 1, and the memory map chosen.

    python benchmarks/probe_calibrated_memory_batch.py
"""

import warnings

import numpy as np

from carb import datasets
from carb.model import CARB
from carb.transfer.calibrate import choose_samples, fit_calibrated

warnings.simplefilter("ignore")
BATCHES = (1, 2, 4, 8, 16, 32)
a = datasets.load("cpu-1t")
src = CARB(preset="fast").fit(a[a.status == "ok"])
for name in ("cpu-2t", "cpu-avx2-1t"):
    b = datasets.load(name)
    b = b[(b.status == "ok") & (b.precision == "fp32")].reset_index(drop=True)
    rows = []
    for seed in range(8):
        pick = choose_samples(b, src, 12, seed=seed)
        rest = b[~b.config_id.isin(pick.config_id)].reset_index(drop=True)
        cal = fit_calibrated(src, b[b.config_id.isin(pick.config_id)])
        p = cal.predict(rest)
        y = rest.memory_mb.to_numpy()
        inside = (y >= p.memory_mb_lo) & (y <= p.memory_mb_hi)
        one = (rest.batch == 1).to_numpy()
        row = (
            [np.mean(inside)]
            + [np.mean(inside[(rest.batch == k).to_numpy()]) for k in BATCHES]
            + [np.median(np.log(p.memory_mb_hi / p.memory_mb)[one]), np.median(np.abs(np.log(p.memory_mb / y))[one])]
        )
        rows.append(row)
        m = cal.maps_["memory_mb"]
        print(
            name,
            seed,
            " ".join(f"{v:.3f}" for v in row),
            "map",
            getattr(m, "coef", None),
            getattr(m, "add", None),
            flush=True,
        )
    print(name, "mean", " ".join(f"{v:.3f}" for v in np.mean(rows, axis=0)))
