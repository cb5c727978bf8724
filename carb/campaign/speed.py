"""Drift of the machine's speed: the speed index of a campaign, its summary, and drift-corrected values.

The speed sentinel (:mod:`carb.measure.sentinel`) is read at regular moments of every
campaign; each row carries the sentinel at its measurement time (``sentinel_ms``). From
those, this module says how much the machine's speed moved while it measured, and puts
figures taken at different moments on the same footing: a latency at the reference speed
is ``latency_ms * ref_ms / sentinel_ms`` (``ref_ms``: a sentinel latency both sides share,
by default the median of the rows' sentinel).

Everything here reads plain DataFrames (a store's ``speed_readings()``, dataset rows), so
it works on a store, an exported dataset or a demo's tables alike; a store or dataset
without sentinel readings gives "no speed index" and nothing else.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from carb._safeio import loads_json

__all__ = [
    "NO_INDEX",
    "speed_summary",
    "speed_lines",
    "normalize",
    "phase_drift",
    "drift_line",
    "corrected",
    "paired_rows",
    "CORRECTED_LATENCY",
    "REPEAT_FIGURES",
    "remeasure_figures",
    "remeasure_lines",
    "sentinels",
]

#: what a store or dataset without sentinel readings says
NO_INDEX = "no speed index"


def speed_summary(readings: pd.DataFrame) -> dict[str, Any]:
    """Summary of a store's sentinel readings (``Store.speed_readings()``).

    Returns ``{"readings": 0, "note": "no speed index"}`` without readings, else: count,
    first and last time, the reference (median reading, ms), the speed index (median
    reading over each reading: 1 = median speed, > 1 faster) min/p5/p95/max, its CoV, the
    largest ratio of two readings (slowest over fastest), the median CI of a reading and
    what the readings cost (s), per platform in ``platforms`` when there are several.
    """
    if readings is None or len(readings) == 0:
        return {"readings": 0, "note": NO_INDEX}
    out: dict[str, Any] = {}
    for plat, every in readings.groupby("platform", sort=True):
        r = every[every["used"].fillna(True).astype(bool)] if "used" in every.columns else every
        noisy = int(len(every) - len(r))
        if r.empty:
            out[str(plat)] = {
                "readings": 0,
                "noisy": noisy,
                "runs": int(every["run_id"].nunique()),
                "note": f"every reading too noisy to use ({noisy}): no drift correction",
            }
            continue
        ms = r["sentinel_ms"].to_numpy(float)
        ref = float(np.median(ms))
        idx = ref / ms
        out[str(plat)] = {
            "readings": int(len(r)),
            "first": str(r["t"].min())[:19],
            "last": str(r["t"].max())[:19],
            "runs": int(r["run_id"].nunique()),
            "ref_ms": ref,
            "index_min": float(idx.min()),
            "index_p5": float(np.quantile(idx, 0.05)),
            "index_p95": float(np.quantile(idx, 0.95)),
            "index_max": float(idx.max()),
            "index_cov": float(np.std(idx, ddof=1) / np.mean(idx)) if len(idx) > 1 else math.nan,
            "max_ratio": float(ms.max() / ms.min()),
            "reading_ci_rel_median": float(np.nanmedian(r["sentinel_ci_rel"].to_numpy(float)))
            if r["sentinel_ci_rel"].notna().any()
            else math.nan,
            "wall_s": float(every["wall_s"].sum()),
            "noisy": noisy,
        }
    return {"readings": int(len(readings)), "platforms": out}


def speed_lines(summary: dict[str, Any], timeline: pd.DataFrame | None = None, bins: int = 8) -> list[str]:
    """Plain-text lines of a :func:`speed_summary` for ``carb dataset info`` and dataset cards.

    Given the readings (``timeline``), also the index over time in ``bins`` time bins.
    """
    if not summary.get("readings"):
        return [f"{NO_INDEX}: {summary.get('why') or 'the store has no speed sentinel readings'}"]
    lines = []
    for plat, s in summary["platforms"].items():
        if not s.get("readings"):
            lines.append(f"{plat}: {NO_INDEX}: {s['note']}")
            continue
        lines.append(
            f"{plat}: {s['readings']} sentinel readings in {s['runs']} run(s), "
            f"{s['first']} to {s['last']} UTC; "
            f"speed index (1 = median speed, reference {s['ref_ms']:.3f} ms) p5 {s['index_p5']:.3f}, "
            f"p95 {s['index_p95']:.3f} (min {s['index_min']:.3f}, max {s['index_max']:.3f}), CoV "
            f"{s['index_cov']:.3f}; slowest/fastest {s['max_ratio']:.2f}x; a reading's 95% CI "
            f"±{100 * s['reading_ci_rel_median']:.1f}%; readings cost {s['wall_s']:.1f} s"
            + (f"; {s['noisy']} more too noisy to use" if s.get("noisy") else "")
        )
        if timeline is not None and len(timeline):
            r = timeline[timeline["platform"] == plat].sort_values("t")
            if "used" in r.columns:
                r = r[r["used"].fillna(True).astype(bool)]
            t = r["t"].map(lambda x: x.timestamp()).to_numpy(float)
            idx = s["ref_ms"] / r["sentinel_ms"].to_numpy(float)
            edges = np.linspace(t.min(), t.max() + 1e-6, min(bins, len(r)) + 1)
            cells = []
            for a, b in zip(edges[:-1], edges[1:]):
                m = (t >= a) & (t < b)
                if m.any():
                    stamp = pd.Timestamp(a, unit="s", tz="UTC").strftime("%H:%M")
                    cells.append(f"{stamp} {np.median(idx[m]):.2f}")
            lines.append(f"{plat}: index over time: " + " | ".join(cells))
    return lines


def normalize(df: pd.DataFrame, ref_ms: float | None = None, target: str = "latency_ms") -> pd.Series:
    """``target`` of each row at the reference speed: ``target * ref_ms / sentinel_ms``.

    NaN where a row has no sentinel. ``ref_ms`` defaults to the median of the rows'
    ``sentinel_ms``, so that rows measured at different moments (calibration and
    validation, two campaigns) are put on one footing. Units: those of ``target``.
    """
    if "sentinel_ms" not in df.columns:
        return pd.Series(np.nan, index=df.index)
    s = pd.to_numeric(df["sentinel_ms"], errors="coerce")
    if ref_ms is None:
        ref_ms = float(s.median()) if s.notna().any() else math.nan
    return df[target] * ref_ms / s


def phase_drift(before: pd.DataFrame, after: pd.DataFrame) -> dict[str, Any]:
    """How much the machine's speed moved between two sets of rows measured at different moments.

    E.g. calibration and validation, from their ``sentinel_ms``.

    Returns ``speed_change`` (relative: +0.2 = the machine ran 20% faster during ``after``,
    i.e. its sentinel took 1/1.2 the time), ``noise`` (how far the ratio of the two phases'
    median sentinels moves by chance: twice its standard error, from the rows' spread in
    log around each phase's median (MAD) and their counts; at least 1%. With the paired
    sentinel the rows' values differ from config to config, so the spread of single rows
    would overstate it), ``exceeds`` (``|speed_change| > noise``), and the medians (ms);
    ``{"note": "no speed index"}`` when either side has no sentinel.
    """
    a = sentinels(before)
    b = sentinels(after)
    if a.size == 0 or b.size == 0:
        return {"note": NO_INDEX}
    ma, mb = float(np.median(a)), float(np.median(b))
    change = ma / mb - 1.0
    dev = np.concatenate([np.log(a / ma), np.log(b / mb)])
    sigma = 1.4826 * float(np.median(np.abs(dev)))  # robust sd of one row's log sentinel
    se = 1.2533 * sigma * math.sqrt(1 / a.size + 1 / b.size)  # of the difference of the log medians
    noise = max(0.01, float(np.expm1(2 * se)))
    return {
        "speed_change": change,
        "noise": noise,
        "exceeds": bool(abs(change) > noise),
        "sentinel_ms_before": ma,
        "sentinel_ms_after": mb,
        "n_before": int(a.size),
        "n_after": int(b.size),
    }


def drift_line(d: dict[str, Any], what: str = "between calibration and validation") -> str:
    """One sentence of a :func:`phase_drift` result."""
    if "speed_change" not in d:
        return f"machine speed {what}: {NO_INDEX}"
    c = d["speed_change"]
    word = "faster" if c > 0 else "slower"
    verdict = "beyond" if d["exceeds"] else "within"
    return (
        f"the machine ran {100 * abs(c):.1f}% {word} {what} (speed sentinel: {d['sentinel_ms_before']:.3f} -> "
        f"{d['sentinel_ms_after']:.3f} ms), {verdict} the sentinel's chance variation ±{100 * d['noise']:.1f}%"
    )


#: the latency figures whose repeatability a remeasurement reports: (key, column, name)
REPEAT_FIGURES = (
    ("raw", "latency_ms", "raw median"),
    ("corrected", "latency_ms_norm", "drift-corrected median"),
    ("fastest", "latency_ms_min", "fastest sample"),
)


def remeasure_figures(first: pd.DataFrame, again: pd.DataFrame) -> dict[str, Any]:
    """How a remeasurement repeats the first measurement of the same configs.

    A store's ``measurements`` and ``remeasurements`` rows, matched on ``config_id``; ``ok``
    rows only; a config measured again more than once counts with its last remeasurement.

    Returns ``configs`` (matched), ``hours_between`` (median, h), ``memory_ratio_median``, and
    per latency figure of :data:`REPEAT_FIGURES` that both sides carry (a store without the
    sentinel or the fastest sample has none of those): ``ratio_median``, ``ratio_p5``,
    ``ratio_p95`` (again / first), ``abs_diff_mean``, ``abs_diff_median`` (of ``|ratio - 1|``),
    ``within_5pct``, ``within_10pct``, ``n``. Empty figures (``configs`` 0) when nothing matches.
    """
    a = first[first.status == "ok"]
    b = again[again.status == "ok"]
    if "measured_at" in b.columns:
        b = b.sort_values("measured_at")
    b = b.drop_duplicates("config_id", keep="last")
    j = b.merge(a, on="config_id", suffixes=("_re", ""))
    out: dict[str, Any] = {"configs": int(len(j)), "latency": {}}
    if j.empty:
        return out
    if {"measured_at", "measured_at_re"} <= set(j.columns):
        dt = (pd.to_datetime(j.measured_at_re, utc=True) - pd.to_datetime(j.measured_at, utc=True)).dt.total_seconds()
        out["hours_between"] = float(dt.median() / 3600)
    if {"memory_mb", "memory_mb_re"} <= set(j.columns):
        out["memory_ratio_median"] = float(
            (pd.to_numeric(j.memory_mb_re, errors="coerce") / pd.to_numeric(j.memory_mb, errors="coerce")).median()
        )
    for key, col, _ in REPEAT_FIGURES:
        if col not in j.columns or f"{col}_re" not in j.columns:
            continue
        r = pd.to_numeric(j[f"{col}_re"], errors="coerce") / pd.to_numeric(j[col], errors="coerce")
        r = r[np.isfinite(r) & (r > 0)]
        if r.empty:
            continue
        d = (r - 1).abs()
        out["latency"][key] = {
            "n": int(len(r)),
            "ratio_median": float(r.median()),
            "ratio_p5": float(r.quantile(0.05)),
            "ratio_p95": float(r.quantile(0.95)),
            "abs_diff_mean": float(d.mean()),
            "abs_diff_median": float(d.median()),
            "within_5pct": float((d <= 0.05).mean()),
            "within_10pct": float((d <= 0.10).mean()),
        }
    return out


def remeasure_lines(f: dict[str, Any]) -> list[str]:
    """The sentences of a :func:`remeasure_figures` result: one per latency figure."""
    if not f.get("configs"):
        return ["no config has both a first measurement and a remeasurement to compare"]
    when = f" (median {60 * f['hours_between']:.1f} min later)" if "hours_between" in f else ""
    lines = [f"{f['configs']} config(s) measured again{when}: latency again / first, mean |difference|"]
    for key, col, name in REPEAT_FIGURES:
        v = f["latency"].get(key)
        if v is None:
            continue
        lines.append(
            f"  {name} ({col}): {100 * v['abs_diff_mean']:.1f}% (median ratio {v['ratio_median']:.3f}, "
            f"{100 * v['within_5pct']:.0f}% within ±5%, {v['n']} configs)"
        )
    if "memory_ratio_median" in f:
        lines.append(f"  memory: median ratio {f['memory_ratio_median']:.3f}")
    return lines


#: how reports name the latency :func:`corrected` gives with ``paired_only``
CORRECTED_LATENCY = "drift-corrected (latency_ms_norm) where the paired speed sentinel timed the row"


def paired_rows(df: pd.DataFrame) -> np.ndarray:
    """Which rows were timed with the paired sentinel.

    Their ``extra`` telemetry, a dict or its JSON text, holds the block ratios
    ``pair_ratio``: their ``latency_ms_norm`` comes
    from the sentinel read at their own samples' moments, not from readings between visits.
    """
    if "extra" not in df.columns:
        return np.zeros(len(df), bool)

    def paired(e: Any) -> bool:
        if isinstance(e, str):
            if "pair_ratio" not in e:  # most rows of older data: skip the parse
                return False
            try:
                e = loads_json(e, "an extra cell")  # DocumentError (a ValueError) too: too large or too deep
            except ValueError:
                return False
        return isinstance(e, dict) and bool(e.get("pair_ratio"))

    return np.fromiter((paired(e) for e in df["extra"]), bool, len(df))


def corrected(df: pd.DataFrame, paired_only: bool = False) -> pd.DataFrame:
    """A dataset whose ``latency_ms`` is the drift-corrected value where the rows have one.

    That is ``latency_ms_norm``, the raw median kept as ``latency_ms_raw``; unchanged (a copy)
    for data without a speed index. ``paired_only``: correct only the rows timed with the
    paired sentinel (:func:`paired_rows`), since corrections from readings between visits
    repeat no better than raw. The count of corrected rows is in ``attrs["corrected_rows"]``.
    """
    out = df.copy()
    out.attrs["corrected_rows"] = 0
    if "latency_ms_norm" not in out.columns or not out["latency_ms_norm"].notna().any():
        return out
    use = out["latency_ms_norm"].notna().to_numpy()
    if paired_only:
        use = use & paired_rows(out)
        if not use.any():
            return out
    out["latency_ms_raw"] = out["latency_ms"]
    out["latency_ms"] = out["latency_ms_norm"].where(use, out["latency_ms"])
    out.attrs["corrected_rows"] = int(use.sum())
    return out


def at_median_speed(rows: pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """Rows measured in one sitting (e.g. calibration's K configs) with ``latency_ms`` at their median sentinel speed.

    That is ``latency_ms * median(sentinel_ms) / sentinel_ms``, the
    raw value kept as ``latency_ms_raw``; and that median (ms). Unchanged (a copy) with
    ``None`` unless every ``ok`` row has a sentinel. With the paired sentinel each row's
    sentinel is taken at its own samples' moments, so the speed changes between the configs
    do not bend a fit.
    """
    out = rows.copy()
    ok = out["status"] == "ok" if "status" in out.columns else pd.Series(True, index=out.index)
    if "sentinel_ms" not in out.columns or not ok.any():
        return out, None
    s = pd.to_numeric(out.loc[ok, "sentinel_ms"], errors="coerce")
    if not (s > 0).all():
        return out, None
    ref = float(s.median())
    out["latency_ms_raw"] = out["latency_ms"]
    out.loc[ok, "latency_ms"] = normalize(out.loc[ok], ref_ms=ref)
    return out, ref


def sentinels(df: pd.DataFrame) -> np.ndarray:
    """The rows' positive, finite paired-sentinel latencies (ms)."""
    if df is None or "sentinel_ms" not in df.columns:
        return np.array([])
    s = pd.to_numeric(df["sentinel_ms"], errors="coerce").to_numpy(float)
    return s[np.isfinite(s) & (s > 0)]
