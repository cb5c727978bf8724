"""Replay `carb demo` sittings with and without the retakes of visits timed in another
state of the machine (`carb.campaign.rounds.retake_off_state`, issue 16), side by side.

A sitting's store (``demo.duckdb``) keeps every config's first visit (``measurements``) and
every retake (``remeasurements``); its ``characterized.csv`` and ``validation.csv`` hold the
rows the demo used (after retakes). This script redoes the demo's arithmetic twice on the
same configs: once on the rows the demo used, once on the first visits alone (as the demo
ran before retakes). Each time the calibration map is refitted on the K rows at their median
sentinel speed (`carb.campaign.speed.at_median_speed`), the validated configs are predicted and
scored raw and drift-corrected (at the calibration's median speed), beside the sitting's
floor. The shortlist is the retaking run's in both (the first visits would have chosen
another), so the "without" figures are a replay, not a second demo.

    python benchmarks/replay_demo_retakes.py DIR [DIR ...] [--json OUT]

Data only (the source model is refitted as the demo does; deterministic).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd

MEASURED = ["status", "latency_ms", "sentinel_ms", "memory_mb"]


def first_visits(d: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with their measured values of the first visit (the store's main table)."""
    con = duckdb.connect(str(d / "demo.duckdb"), read_only=True)
    try:
        first = con.execute("SELECT config_id, " + ", ".join(MEASURED) + " FROM measurements").df()
    finally:
        con.close()
    first = first.drop_duplicates("config_id").set_index("config_id")
    out = rows.copy()
    for c in MEASURED:
        out[c] = out["config_id"].map(first[c]).to_numpy()
    return out


def replay(source, k: pd.DataFrame, v: pd.DataFrame) -> dict[str, float]:
    """The demo's latency figures for calibration rows ``k`` and validation rows ``v``
    (``replay_demo_elasticity.replay_rows``), and how many of each were off the
    calibration's state."""
    from replay_demo_elasticity import replay_rows

    from carb.campaign import rounds as states

    k = k[k.status == "ok"].reset_index(drop=True)
    v = v[v.status == "ok"].reset_index(drop=True)
    state = states.machine_state(k)
    return {
        **replay_rows(source, k, v),
        "off_calibration": int(states.off_state(k, state).sum()),
        "off_validation": int(states.off_state(v, state).sum()),
    }


def main() -> None:
    from demo_floor import folders_args, sittings

    a = folders_args(__doc__)
    rows = []
    for d, source in sittings(a.folders):
        k = pd.read_csv(d / "characterized.csv")
        v = pd.read_csv(d / "validation.csv")
        used = replay(source, k, v)
        first = replay(source, first_visits(d, k), first_visits(d, v))
        rows.append(
            {
                "folder": str(d),
                **{f"{x}_retakes": y for x, y in used.items()},
                **{f"{x}_first": y for x, y in first.items()},
            }
        )
    df = pd.DataFrame(rows)
    cols = [
        "folder",
        "off_calibration_first",
        "off_validation_first",
        "raw_first",
        "corrected_first",
        "floor_corrected_first",
        "off_calibration_retakes",
        "off_validation_retakes",
        "raw_retakes",
        "corrected_retakes",
        "floor_corrected_retakes",
    ]
    with pd.option_context("display.width", 250, "display.float_format", "{:.3f}".format):
        print(df[cols].to_string(index=False))
    n = len(df)
    print(
        f"\ndrift-corrected median latency error <= 10%: first visits in {(df.corrected_first <= 0.10).sum()} of {n}, "
        f"with retakes in {(df.corrected_retakes <= 0.10).sum()} of {n} sittings; mean "
        f"{100 * df.corrected_first.mean():.1f}% -> {100 * df.corrected_retakes.mean():.1f}% "
        f"(raw {100 * df.raw_first.mean():.1f}% -> {100 * df.raw_retakes.mean():.1f}%)"
    )
    if a.json:
        a.json.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
