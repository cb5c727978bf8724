"""Replay `carb demo` sittings with carb's drift correction and with the size-elastic one
tried for issue 16 and not adopted (``benchmarks/elasticity.py``).

A demo folder keeps what the sitting measured: the K calibration rows
(``characterized.csv``) and the validated rows (``validation.csv``), each with its paired
sentinel (``sentinel_ms``). This script redoes the demo's arithmetic on them twice, side by
side in one run: once with every config scaled by the full sentinel ratio (elasticity 1:
carb's correction; it reproduces the sittings' own figures) and once with the size
elasticity. Each time: the calibration map is refitted on the K rows put at their median
sentinel speed (``carb.campaign.speed.at_median_speed``), the validated configs are predicted, and
scored raw and drift-corrected (at the calibration's median speed), beside the sitting's
floor (``carb.demo.sitting_floor``) on the corrected values. Budget calls are not
replayed (the shortlist would change with the map).

    python benchmarks/replay_demo_elasticity.py DIR [DIR ...] [--json OUT]

Data only (the source model is refitted, CARB `fast` on the sitting's source dataset, as
the demo does; deterministic), so it can run on a loaded machine.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def _at_percentile(rows: pd.DataFrame, q: float | None, sentinel_too: bool = False) -> pd.DataFrame:
    """``rows`` with ``latency_ms`` replaced by the ``q``-th percentile of each row's pooled
    samples (``extra["latency_samples_ms"]``; 0: the fastest) and, with ``sentinel_too``,
    ``sentinel_ms`` by the same percentile of its paired sentinel samples; unchanged for
    ``None``, and a row keeps its value where it lacks the samples."""
    if q is None:
        return rows

    def pick(extra, key, value):
        try:
            s = json.loads(extra).get(key) if isinstance(extra, str) else None
        except ValueError:
            s = None
        return float(np.percentile(s, q)) if s else value

    out = rows.assign(latency_ms=[pick(e, "latency_samples_ms", m) for e, m in zip(rows.extra, rows.latency_ms)])
    if sentinel_too:
        out["sentinel_ms"] = [pick(e, "pair_sentinel_ms", m) for e, m in zip(rows.extra, rows.sentinel_ms)]
    return out


def _replay(d: Path, source, slope: float, q: float | None = None, sentinel_too: bool = False) -> dict[str, float]:
    """One sitting's median latency errors, each latency put at a reference sentinel speed
    with the size elasticity of ``slope`` (``elasticity.py``; 0: carb's full ratio); with
    ``q``, every latency is the ``q``-th percentile of its samples instead of their median
    (and, with ``sentinel_too``, every sentinel the same percentile of its paired samples)."""
    k = _at_percentile(pd.read_csv(d / "characterized.csv"), q, sentinel_too)
    v = pd.read_csv(d / "validation.csv")
    v = _at_percentile(v[v.status == "ok"].reset_index(drop=True), q, sentinel_too)
    return replay_rows(source, k, v, slope)


def replay_rows(source, k: pd.DataFrame, v: pd.DataFrame, slope: float = 0.0) -> dict[str, float]:
    """The demo's arithmetic on calibration rows ``k`` and validated rows ``v`` (``ok`` rows
    scored): the map refitted on the K rows at their median sentinel speed (``slope`` 0: as
    :func:`carb.campaign.speed.at_median_speed`), the validated configs predicted, their median
    latency error raw and drift-corrected (at the calibration's median speed), the sitting's
    floor on the corrected values and the speed change between the two."""
    from elasticity import at_speed

    from carb.campaign import speed as drift
    from carb.demo import sitting_floor
    from carb.transfer.calibrate import fit_calibrated

    v = v[v.status == "ok"].reset_index(drop=True)
    # as carb.campaign.speed.at_median_speed: the K rows at their median sentinel speed
    ok = k.status == "ok"
    ref = float(k.loc[ok, "sentinel_ms"].median())
    fit_rows = k.copy()
    fit_rows.loc[ok, "latency_ms"] = at_speed(k.loc[ok, "latency_ms"], ref, k.loc[ok, "sentinel_ms"], slope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fit_calibrated(source, fit_rows, meta={"device": "cpu"})
        p = model.predict(v)["latency_ms"].to_numpy(float)
    moved = drift.phase_drift(k[ok], v)
    corr = v.assign(latency_ms=at_speed(v.latency_ms, ref, v.sentinel_ms, slope))  # at the calibration's speed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        floor = sitting_floor(source, v, corr, ["latency_ms"]).get("latency_ms", np.nan)
    return {
        "raw": float(np.median(np.abs(p / v.latency_ms - 1))),
        "corrected": float(np.nanmedian(np.abs(p / corr.latency_ms - 1))),
        "floor_corrected": float(floor),
        "speed_change": float(moved.get("speed_change", np.nan)),
    }


def main() -> None:
    from demo_floor import folders_args, sittings
    from elasticity import SLOPE

    a = folders_args(__doc__)

    rows = []
    for d, source in sittings(a.folders):
        full = _replay(d, source, 0.0)
        el = _replay(d, source, SLOPE)
        rows.append(
            {
                "folder": str(d),
                "speed_change": el["speed_change"],
                "raw": el["raw"],
                "corrected_elasticity_1": full["corrected"],
                "corrected_elasticity": el["corrected"],
                "floor_elasticity_1": full["floor_corrected"],
                "floor_elasticity": el["floor_corrected"],
                "raw_elasticity_1_map": full["raw"],
            }
        )
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    n = len(df)
    print(
        f"\nmedian latency error <= 10%: elasticity 1 in {(df.corrected_elasticity_1 <= 0.10).sum()} of {n}, "
        f"size elasticity in {(df.corrected_elasticity <= 0.10).sum()} of {n} sittings; mean "
        f"{100 * df.corrected_elasticity_1.mean():.1f}% -> {100 * df.corrected_elasticity.mean():.1f}% "
        f"(raw {100 * df.raw.mean():.1f}%)"
    )
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "elasticity_slope": SLOPE}, indent=1))


if __name__ == "__main__":
    main()
