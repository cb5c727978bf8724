"""Cross-GPU transferability of latency on the real GPUs of HELP's public FBNet data:
train on one GPU (and batch size), test on another (:func:`carb.studies.analyses.help_fbnet_transfer`,
the matrix `carb report --data help-fbnet` draws).

Prints, per train -> test pair: R² of log latency, the same after one fitted factor,
MAPE and Spearman on the held-out architectures (30%, the same on every device), and the
measured factor and log-log slope of B against A on all architectures.

    python benchmarks/bench_help_gpu_transfer.py [--archs 2000] [--devices 1080ti_1 ...]
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    from carb.studies.help_fbnet import HELP_GPU_BATCH1, help_fbnet_transfer

    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", nargs="+", default=list(HELP_GPU_BATCH1))
    ap.add_argument("--archs", type=int, default=2000, help="architectures drawn from the 5,000 (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    t = time.perf_counter()
    r = help_fbnet_transfer(a.devices, n_archs=a.archs, seed=a.seed)
    print(f"{len(a.devices)} devices, {a.archs} archs, {time.perf_counter() - t:.1f} s")
    for metric in ("r2_log", "r2_log_factor", "mape", "spearman"):
        print(f"\n{metric} (rows: trained on, columns: tested on)")
        print(r.pivot(metric).round(3).to_string())
    print("\nmeasured factor B / A (median) and log-log slope, all archs")
    print(r.factors("latency_ms", "factor").round(3).to_string())
    print(r.factors("latency_ms", "loglog_slope").round(3).to_string())


if __name__ == "__main__":
    main()
