"""Replay `carb demo` sittings with another statistic of each visit's samples than the median
(issue 16): the fastest sample (raw, and against the paired sentinel's fastest) and the 5th /
10th / 25th percentiles, side by side in one run.

The fastest samples repeat best between two campaigns (``bench_drift.py``); does measuring
the K calibration configs and the validated ones by them lower the demo's validated error?
Each sitting is replayed as ``replay_demo_elasticity.py`` replays it (carb's full sentinel
ratio), once per statistic: the map refitted on the K rows, the validated configs
predicted and scored raw and drift-corrected, beside the sitting's floor.

    python benchmarks/replay_demo_statistic.py DIR [DIR ...] [--json OUT]

Data only (the source model refitted, CARB `fast`, deterministic).
"""

from __future__ import annotations

import json

import pandas as pd

#: (name, percentile of the samples (None: carb's median), the sentinel's same percentile too)
STATISTICS = (
    ("median", None, False),
    ("fastest", 0.0, False),
    ("fastest, x sentinel's fastest", 0.0, True),
    ("p5", 5.0, False),
    ("p10", 10.0, False),
    ("p25", 25.0, False),
)


def main() -> None:
    from demo_floor import folders_args, sittings
    from replay_demo_elasticity import _replay

    a = folders_args(__doc__)
    rows = []
    for d, source in sittings(a.folders):
        for name, q, sentinel_too in STATISTICS:
            r = _replay(d, source, 0.0, q, sentinel_too)
            rows.append({"folder": str(d), "statistic": name, **r})
    df = pd.DataFrame(rows)
    by = df.groupby("statistic", sort=False)
    table = pd.DataFrame(
        {
            "raw, mean": by.raw.mean(),
            "drift-corrected, mean": by.corrected.mean(),
            "floor (corrected), mean": by.floor_corrected.mean(),
            "sittings <= 10% corrected": by.corrected.apply(lambda s: int((s <= 0.10).sum())),
            "sittings": by.size(),
        }
    )
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(table.to_string())
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "summary": json.loads(table.to_json(orient="index"))}, indent=1))


if __name__ == "__main__":
    main()
