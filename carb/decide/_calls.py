"""The three-way budget calls of a screening, and what it reports of them.

:func:`calls` turns each config's intervals (or its chances of meeting each budget) into ``accept``, ``measure`` or
``reject`` by one of the rules of :data:`carb.decide.screen.RULES`; the other functions sort the configs to measure
and count the calls for :class:`carb.decide.screen.ScreenResult`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

#: the three budget calls of ``risk="decide"``
DECISIONS = ("accept", "measure", "reject")


def measure_set(pred: pd.DataFrame, budgets: Mapping[str, float]) -> pd.DataFrame:
    """The configs called ``measure``, the most useful to profile first: likely on the front, then nearest a budget."""
    measure = pred[pred["decision"] == "measure"].copy()
    measure["_near"] = (
        np.min([np.abs(np.log(measure[t].to_numpy(float) / b)) for t, b in budgets.items()], axis=0)
        if budgets and len(measure)
        else 0.0
    )
    keys = (["p_front"] if "p_front" in measure.columns else []) + ["_near"]
    measure = measure.sort_values(keys, ascending=[False] * (len(keys) - 1) + [True]).drop(columns="_near")
    return measure.reset_index(drop=True)


def call_counts(
    pred: pd.DataFrame, measure: pd.DataFrame, budgets: Mapping[str, float], n: int, survivors: int
) -> dict[str, Any]:
    """Return the three-way summary (see :class:`carb.decide.screen.ScreenResult`).

    It holds ``decisions`` (Stage 1 prunes counted as rejects), ``decided_share``, ``measure_by_budget`` and
    ``crowding``.
    """
    counts = {d: int((pred["decision"] == d).sum()) for d in DECISIONS}
    counts["reject"] += n - survivors  # Stage 1 prunes are rejects
    straddle, crowd = crowding(pred, measure, budgets, n)
    return {
        "decisions": counts,
        "decided_share": 1.0 - counts["measure"] / n,
        "measure_by_budget": straddle,
        "crowding": crowd,
    }


def crowding(
    pred: pd.DataFrame, measure: pd.DataFrame, budgets: Mapping[str, float], n: int
) -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """Return, per budgeted target, how many configs to measure straddle its budget and how crowded it is.

    The first counts the configs to measure whose upper bound is over the budget (a config can count under
    several). The crowding is the share of candidates whose point prediction lies within the intervals' median
    relative half-width of the budget: where that share is large, narrower intervals decide few more.
    """
    straddle, crowd = {}, {}
    for t, b in budgets.items():
        if f"{t}_hi" not in pred.columns or f"{t}_lo" not in pred.columns:
            continue
        straddle[t] = int((measure[f"{t}_hi"].to_numpy(float) > b).sum()) if len(measure) else 0
        p, lo, hi = (pred[c].to_numpy(float) for c in (t, f"{t}_lo", f"{t}_hi"))
        with np.errstate(divide="ignore", invalid="ignore"):
            hw = np.log(hi / lo) / 2
            hw = float(np.median(hw[np.isfinite(hw)])) if np.isfinite(hw).any() else float("nan")
            near = np.abs(np.log(p / b)) < hw
        crowd[t] = {"half_width_rel": float(np.expm1(hw)), "share_within": float(near.sum() / n)}
    return straddle, crowd


def decisions_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Every Stage 2 survivor: its id, call and chances, then its predicted costs."""
    keep = [c for c in ("config_id", "decision", "p_within", "p_feasible", "p_front") if c in pred.columns]
    return pred[
        keep + [c for c in pred.columns if c not in keep and c.split("_")[0] in ("energy", "latency", "memory")]
    ].copy()


def calls(
    pred: pd.DataFrame, budgets: Mapping[str, float], confidence: float | None = None, rule: str = "interval"
) -> np.ndarray:
    """Return the three-way budget calls.

    ``rule="joint"``, from the chances ``<target>_p_within``: ``accept`` when their product
    is at least ``confidence``, ``reject`` when one target's chance of being over is at
    least ``confidence``, ``measure`` otherwise (NaN chances: measure).
    ``rule="interval"``: ``accept`` when every upper bound is within its budget;
    ``reject`` when one target's chance of being over is at least ``confidence`` (with
    ``confidence`` and the ``<target>_p_within`` columns; else when a lower bound is over
    its budget); ``measure`` otherwise.
    """
    n = len(pred)
    if not budgets:
        return np.full(n, "accept")
    chances = confidence is not None and all(f"{t}_p_within" in pred.columns for t in budgets)
    if rule == "joint" and not chances:
        raise ValueError("the joint rule needs a confidence and <target>_p_within columns")
    if chances:  # both rules reject alike: one target over with chance >= confidence
        pw = np.column_stack([pred[f"{t}_p_within"].to_numpy(float) for t in budgets])
        over = np.max(1 - pw, axis=1) >= confidence  # NaN compares False
    else:
        over = np.any([pred[f"{t}_lo"].to_numpy(float) > b for t, b in budgets.items()], axis=0)
    if rule == "joint":
        within = np.prod(pw, axis=1) >= confidence  # NaN compares False
    else:  # NaN compares False: never accepted
        within = np.all([pred[f"{t}_hi"].to_numpy(float) <= b for t, b in budgets.items()], axis=0)
    return np.where(over, "reject", np.where(within, "accept", "measure"))
