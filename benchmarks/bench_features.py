"""Throughput of closed-form features versus counting FLOPs on built networks.

Side by side, in one run, on the ``paper`` space:

* ``FlopCounterMode (meta)``: for each of N sampled configs, build the network on the meta
  device (no memory, no real compute) and count one forward with
  ``torch.utils.flop_counter.FlopCounterMode``; the cheapest way torch offers to get the
  FLOPs alone.
* ``features.compute``: every feature column (FLOPs, params, bytes, counts...) for the
  whole space (17,280 rows), and for 1,000,000 rows drawn from it with replacement; the
  per-network cache is cleared before each timed run, so the figures include walking every
  distinct network and the grouping.

The FLOPs of both methods are checked equal on the sampled configs. Prints a table of
configs/s and the ratio to FlopCounterMode. Run::

    python benchmarks/bench_features.py [--flop-configs 200] [--rows 1000000] [--repeats 3] [--json OUT.json]
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import _common
import torch
from torch.utils.flop_counter import FlopCounterMode

from carb.families import arch, features, space


def _flop_counter(configs: list[space.Config]) -> tuple[float, list[int]]:
    """Seconds to build + count each config on the meta device, and the counts."""
    counts = []
    t0 = time.perf_counter()
    for cfg in configs:
        with torch.device("meta"):
            model = arch.build(cfg).to(arch.dtype_of(cfg.precision))
        x = torch.empty(cfg.batch, 3, cfg.input_size, cfg.input_size, device="meta", dtype=arch.dtype_of(cfg.precision))
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            model(x)
        counts.append(counter.get_total_flops())
    return time.perf_counter() - t0, counts


def _compute(frame, repeats: int) -> float:
    """Median seconds of features.compute on ``frame``, the per-network cache cleared each time."""
    times = []
    for _ in range(repeats):
        features.arch_features.cache_clear()
        t0 = time.perf_counter()
        features.compute(frame)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = _common.parser(__doc__.split("\n")[0])
    ap.add_argument("--flop-configs", type=int, default=200, help="configs for FlopCounterMode")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the large table")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of features.compute (median)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    paper = space.load("paper")
    frame = paper.to_frame()
    big = frame.sample(n=args.rows, replace=True, random_state=args.seed).reset_index(drop=True)
    sample = paper.sample(args.flop_configs, seed=args.seed)

    # warm-up: imports, first dispatch, first factorize
    _flop_counter(sample[:2])
    features.compute(frame.iloc[:100])

    t_fc, counts = _flop_counter(sample)
    ours = features.compute(sample)["flops"].tolist()
    if ours != counts:
        raise SystemExit("FLOPs differ between features.compute and FlopCounterMode")
    t_small = _compute(frame, args.repeats)
    t_big = _compute(big, args.repeats)

    base = len(sample) / t_fc
    rows = [
        ("FlopCounterMode (meta), build + count", len(sample), t_fc),
        ("features.compute, paper space", len(frame), t_small),
        (f"features.compute, {args.rows:,} rows (with replacement)", len(big), t_big),
    ]
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs visible, torch threads {torch.get_num_threads()}; "
        f"distinct networks: paper {frame.groupby(list(features.ARCH_KEYS)).ngroups}"
    )
    print(f"{'method':<52} {'configs':>10} {'seconds':>9} {'configs/s':>12} {'vs FlopCounterMode':>19}")
    for name, n, t in rows:
        print(f"{name:<52} {n:>10,} {t:>9.3f} {n / t:>12,.0f} {n / t / base:>18,.0f}x")
    print(f"FLOPs agree exactly on {len(sample)} sampled configs.")
    if args.json:
        _common.write_json(
            args.json,
            {
                "torch_threads": torch.get_num_threads(),
                "flops_agree_on": len(sample),
                "rows": [
                    {
                        "method": name,
                        "configs": n,
                        "seconds": t,
                        "configs_per_s": n / t,
                        "vs_flop_counter": n / t / base,
                    }
                    for name, n, t in rows
                ],
            },
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
