"""Config ids of a table without a ``config_id`` column: the vectorized path versus one
:class:`carb.families.space.Config` per row (what ``carb predict --configs`` did before issue 13).

Side by side, in one run, interleaved (per-row, vectorized, per-row, ...), on rows drawn
with replacement from the ``paper`` space (17,280 distinct configs):

* ``per row``: ``[c.config_id for c in configs_from_frame(df)]`` on ``--row-rows`` rows
  (the old path is slow: its figure is scaled to rows/s);
* ``vectorized``: :func:`carb.families.space.config_ids` on ``--rows`` rows.

The ids of both are checked byte-identical on the rows the per-row path sees. Prints
seconds, rows/s and the ratio. Run::

    python benchmarks/bench_config_ids.py [--rows 1000000] [--row-rows 100000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from carb.families import space


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--row-rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    full = space.load("paper").to_frame()
    rng = np.random.default_rng(a.seed)
    big = full.iloc[rng.integers(len(full), size=a.rows)].reset_index(drop=True)
    want = big["config_id"].to_numpy()
    big = big.drop(columns="config_id")
    small = big.head(a.row_rows)

    per_row, vector = [], []
    for _ in range(a.repeats):  # interleaved: the machine's drift weighs on both alike
        t0 = time.perf_counter()
        ids_rows = [c.config_id for c in space.configs_from_frame(small)]
        per_row.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ids_vec = space.config_ids(big)
        vector.append(time.perf_counter() - t0)
        assert list(ids_vec[: a.row_rows]) == ids_rows and (ids_vec == want).all(), "ids differ"

    r_rows = a.row_rows / statistics.median(per_row)
    r_vec = a.rows / statistics.median(vector)
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs; median of {a.repeats} interleaved runs")
    print(f"{'path':<12} {'rows':>10} {'seconds':>9} {'rows/s':>12}")
    print(f"{'per row':<12} {a.row_rows:>10,} {statistics.median(per_row):>9.2f} {r_rows:>12,.0f}")
    print(f"{'vectorized':<12} {a.rows:>10,} {statistics.median(vector):>9.2f} {r_vec:>12,.0f}")
    print(
        f"vectorized / per row: {r_vec / r_rows:.1f}x rows/s; per row would take "
        f"{a.rows / r_rows:.0f} s for {a.rows:,} rows; ids byte-identical"
    )


if __name__ == "__main__":
    main()
