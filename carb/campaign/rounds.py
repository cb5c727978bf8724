"""The retake policy of campaigns on machines that switch between speed states.

A visit whose paired speed sentinel says it was timed in another state of the machine than
the one a sitting is scored in is measured again rather than scaled by one ratio: a 2-thread
worker's two states slow a config by far less than they slow the sentinel.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.campaign.speed import NO_INDEX, sentinels

__all__ = ["STATE_FACTOR", "RETAKES", "machine_state", "off_state", "retake_off_state", "state_line"]


#: paired sentinels within one machine state stay within x1.15 of their median; beyond this factor: another state
STATE_FACTOR = 1.25

#: how many times a visit timed in another state of the machine is measured again
#: (:func:`retake_off_state`); the states last seconds to minutes
RETAKES = 2


def machine_state(rows: pd.DataFrame | Any, factor: float = STATE_FACTOR, min_share: float = 0.25) -> float | None:
    """The speed sentinel (ms) of the fastest state of the machine that a fair share of ``rows`` were timed in.

    The median sentinel of the fastest group of rows whose
    sentinels lie within ``factor`` of the group's fastest, among the groups holding at least
    ``min_share`` of the rows (and 3 of them; with fewer rows, all); ``None`` without any
    sentinel. ``rows``: a frame with ``sentinel_ms`` (its ``ok`` rows) or the sentinels.

    Why the fastest: contention only ever adds time, and the slow state of a 2-thread worker
    also scatters its visits more; why a share: a lone visit whose paired sentinel ran fast
    (some configs leave the threads warm for it) is not a state. Unlike the plain median it
    never falls between two states (half
    the rows at 0.5 ms and half at 1.1 ms give 0.5 ms, not 0.8 ms).
    """
    if not isinstance(rows, pd.DataFrame):
        rows = pd.DataFrame({"sentinel_ms": np.asarray(rows, float)})
    s = sentinels(rows[rows["status"] == "ok"] if "status" in rows.columns else rows)
    if s.size == 0:
        return None
    ls = np.sort(np.log(s))
    # the group of each sentinel: those within [x, x + log factor], x the group's fastest
    counts = np.searchsorted(ls, ls + math.log(factor), side="right") - np.arange(ls.size)
    need = min(ls.size, max(3, math.ceil(min_share * ls.size)))
    big = counts >= need
    # the fastest group big enough; none (e.g. two rows far apart): the largest, the faster on ties
    i = int(np.argmax(big)) if big.any() else int(np.argmax(counts))
    return float(np.exp(np.median(ls[i : i + counts[i]])))


def off_state(rows: pd.DataFrame, ref_ms: float, factor: float = STATE_FACTOR) -> np.ndarray:
    """Which ``ok`` rows were timed in another state of the machine than the one whose sentinel is ``ref_ms``.

    Their ``sentinel_ms`` lies more than ``factor`` away from it, either way (rows without
    a sentinel: ``False``).
    """
    if "sentinel_ms" not in rows.columns or ref_ms is None or not ref_ms > 0:
        return np.zeros(len(rows), bool)
    s = pd.to_numeric(rows["sentinel_ms"], errors="coerce").to_numpy(float)
    ok = rows["status"].to_numpy() == "ok" if "status" in rows.columns else np.ones(len(rows), bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        far = np.abs(np.log(s / ref_ms)) > math.log(factor)
    return ok & np.isfinite(s) & (s > 0) & far


def retake_off_state(
    rows: pd.DataFrame,
    measure_again: Callable[[pd.DataFrame], pd.DataFrame],
    ref_ms: float | None = None,
    tries: int = RETAKES,
    factor: float = STATE_FACTOR,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Measure again the rows timed in another state of the machine than the reference one.

    A visit's paired sentinel says which state the machine was in while it was timed
    (:func:`off_state`); a visit of another state is measured again, up to ``tries`` times,
    and its row replaced by the retake whose sentinel is nearest the reference (in log). Why
    not correct it instead: see :data:`STATE_FACTOR`.

    Args:
        rows: measured rows of one sitting (``config_id``, ``status``, ``sentinel_ms``).
        measure_again: measures the configs of the rows it is given once more and returns
            their new rows (``config_id`` and the same measurement columns).
        ref_ms: the reference state's sentinel (ms); default :func:`machine_state` of ``rows``.
        tries: retakes at most per row.
        factor: see :data:`STATE_FACTOR`.

    Returns:
        The rows (index reset), retaken rows with their retake's values and a ``retakes``
        column (visits made again per row, added to any it had), and a summary: ``ref_ms``,
        ``factor``, ``n`` rows with a
        sentinel, ``off`` rows first timed in another state, ``off_sentinel_ms`` (their
        median sentinel), ``visits`` retakes made, ``back`` rows now in the reference state,
        ``left`` rows still out of it; ``{"note": "no speed index"}`` without sentinels.
    """
    out = rows.reset_index(drop=True).copy()
    out["retakes"] = out["retakes"].fillna(0).astype(int) if "retakes" in out.columns else 0  # earlier retakes count
    ref = ref_ms if ref_ms is not None else machine_state(out, factor)
    if ref is None or "sentinel_ms" not in out.columns:
        return out, {"note": NO_INDEX}
    first = off_state(out, ref, factor)
    summary: dict[str, Any] = {
        "ref_ms": float(ref),
        "factor": float(factor),
        "n": int(sentinels(out).size),
        "off": int(first.sum()),
        "visits": 0,
        "off_sentinel_ms": (float(np.median(out.loc[first, "sentinel_ms"])) if first.any() else None),
    }
    for _ in range(max(0, tries)):
        off = off_state(out, ref, factor)
        if not off.any():
            break
        again = measure_again(out.loc[off])
        summary["visits"] += int(off.sum())
        out.loc[off, "retakes"] += 1
        pos = {cid: i for i, cid in zip(out.index[off], out.loc[off, "config_id"])}
        cols = [c for c in again.columns if c in out.columns and c != "retakes"]
        for _, r in again.iterrows():
            i = pos.get(r["config_id"])
            s_new = pd.to_numeric(pd.Series([r.get("sentinel_ms")]), errors="coerce").iloc[0]
            if i is None or r.get("status") != "ok" or not s_new > 0:
                continue  # a failed retake keeps the first visit: nothing is lost
            if abs(math.log(s_new / ref)) < abs(math.log(float(out.at[i, "sentinel_ms"]) / ref)):
                for c in cols:
                    out.at[i, c] = r[c]
    left = off_state(out, ref, factor)
    summary["left"] = int(left.sum())
    summary["back"] = int((first & ~left).sum())
    return out, summary


def state_line(d: dict[str, Any], what: str = "validation") -> str | None:
    """One sentence of a :func:`retake_off_state` summary.

    ``None`` when every visit was timed in the reference state (or there is no speed index).
    """
    if not d.get("off"):
        return None
    return (
        f"{d['off']} of {d['n']} {what} visits were timed in another state of the machine (speed sentinel "
        f"{d['off_sentinel_ms']:.3f} ms against {d['ref_ms']:.3f} ms, beyond x{d['factor']:.2f}, where one "
        f"ratio does not correct every config) and measured again ({d['visits']} visits): {d['back']} back in "
        f"the reference state, {d['left']} left as measured"
    )
