"""Validation of a screening against measurements: did the budgets classify configs
correctly, and did the shortlist recover the true Pareto front?

Budget classification counts a config *accepted* when the screening kept it as feasible
(Stage 1 and Stage 2 both), and *truly feasible* when its measured targets are all within
the budgets:

* ``accuracy``: share of configs where the two agree;
* ``false_accept_rate``: share of the truly infeasible configs that were accepted
  (a budget broken on the device: the costly mistake);
* ``false_reject_rate``: share of the truly feasible configs that were rejected
  (a good config never profiled).

Front recovery (where the measured truth covers the whole space, as in the shipped
datasets): ``pareto_recall`` is the share of the true front of the truly feasible configs
that the shortlist contains; ``hypervolume_ratio`` is the hypervolume of the shortlist's
measured costs over that of the true front (1 = as good as the true front).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from carb import pareto

__all__ = ["budget_metrics", "decision_metrics", "truly_feasible", "validate_against_truth", "with_per_image"]


def with_per_image(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``energy_j_per_image`` (J) where ``energy_j`` exists."""
    if "energy_j" in df.columns and "energy_j_per_image" not in df.columns:
        df = df.assign(energy_j_per_image=df["energy_j"] / df["batch"])
    return df


def truly_feasible(measured: pd.DataFrame, budgets: Mapping[str, float]) -> np.ndarray:
    """Measured targets all within budgets (a NaN target counts as infeasible)."""
    ok = np.ones(len(measured), dtype=bool)
    for t, b in budgets.items():
        ok &= measured[t].to_numpy(float) <= b
    return ok


def budget_metrics(accepted: np.ndarray, feasible: np.ndarray) -> dict[str, float]:
    """Accuracy, false-accept and false-reject rates of accept decisions vs the truth."""
    accepted, feasible = np.asarray(accepted, bool), np.asarray(feasible, bool)
    n = len(accepted)
    tp = int(np.sum(accepted & feasible))
    fp = int(np.sum(accepted & ~feasible))
    tn = int(np.sum(~accepted & ~feasible))
    fn = int(np.sum(~accepted & feasible))
    return {
        "n": n, "accepted": tp + fp, "truly_feasible": tp + fn,
        "accuracy": (tp + tn) / n if n else float("nan"),
        "false_accept_rate": fp / (fp + tn) if fp + tn else 0.0,
        "false_reject_rate": fn / (fn + tp) if fn + tp else 0.0,
        "false_accepts": fp, "false_rejects": fn,
    }


def decision_metrics(calls: Sequence[str] | np.ndarray, feasible: np.ndarray) -> dict[str, float]:
    """Three-way budget calls (``accept`` / ``measure`` / ``reject``, :func:`carb.screen.screen`
    with ``risk="decide"``) against the truth. Accuracy and the false-accept and
    false-reject rates are over the *decided* configs (accept or reject); ``decided`` is
    their share of all configs and ``measure_share`` the rest, sent to profiling.
    ``accuracy_after_measuring``: over all configs, once the ``measure`` ones are measured
    (and so called right)."""
    calls = np.asarray(calls).astype(str)
    feasible = np.asarray(feasible, bool)
    bad = set(np.unique(calls)) - {"accept", "measure", "reject"}
    if bad:
        raise ValueError(f"unknown budget call {sorted(bad)[0]!r} (expected accept, measure or reject)")
    dec = calls != "measure"
    out = budget_metrics(calls[dec] == "accept", feasible[dec])
    n = len(calls)
    m = int((~dec).sum())
    out.update(n_all=n, decided=(n - m) / n if n else float("nan"), measure=m,
               measure_share=m / n if n else float("nan"),
               accuracy_after_measuring=(n - out["false_accepts"] - out["false_rejects"]) / n if n else float("nan"))
    return out


def validate_against_truth(summary_feasible_ids: Sequence[str], shortlist_ids: Sequence[str],
                           truth: pd.DataFrame, budgets: Mapping[str, float],
                           objectives: Sequence[tuple[str, str]],
                           measure_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Validate a screening of a space whose every config was measured (``truth``: one
    row per config with ``config_id`` and measured targets, ``status == "ok"``).

    ``measure_ids``: the configs a three-way screening sent to ``measure``; given, the
    result also holds :func:`decision_metrics` under ``"decisions"`` (every other config
    not accepted counts as rejected)."""
    truth = with_per_image(truth[truth["status"] == "ok"] if "status" in truth.columns else truth)
    truth = truth.reset_index(drop=True)
    accepted = truth["config_id"].isin(set(summary_feasible_ids)).to_numpy()
    feas = truly_feasible(truth, budgets)
    out: dict[str, Any] = budget_metrics(accepted, feas)
    if measure_ids is not None:
        meas = truth["config_id"].isin(set(measure_ids)).to_numpy()
        calls = np.where(meas, "measure", np.where(accepted, "accept", "reject"))
        out["decisions"] = decision_metrics(calls, feas)
    true_feasible = truth[feas]
    objs = [o for o in objectives if o[0] in truth.columns and truth[o[0]].notna().any()]
    out["objectives"] = [f"{d}:{c}" for c, d in objs]
    if len(true_feasible) and objs:
        front = true_feasible[pareto.front_mask(true_feasible, objs)]
        short = truth[truth["config_id"].isin(set(shortlist_ids))]
        bounds = pareto.bounds_of(true_feasible, objs)
        hv_true = pareto.hypervolume(front, objs, bounds)
        # only shortlisted configs that really meet the budgets count toward the shortlist's volume
        hv_short = pareto.hypervolume(short[truly_feasible(short, budgets)], objs, bounds)
        out.update(true_front=int(len(front)), pareto_recall=pareto.pareto_recall(
            list(shortlist_ids), true_feasible, objs), hypervolume_ratio=hv_short / hv_true if hv_true else float("nan"))
    return out
