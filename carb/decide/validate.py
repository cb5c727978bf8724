"""Validation of a screening against measurements.

It asks two questions: did the budgets classify configs correctly, and did the shortlist recover the true Pareto
front?

Budget classification counts a config *accepted* when the screening kept it as feasible
(Stage 1 and Stage 2 both), and *truly feasible* when its measured targets are all within
the budgets:

* ``accuracy``: share of configs where the two agree;
* ``false_accept_rate``: share of the truly infeasible (over-budget) configs that were
  accepted (a budget broken on the device: the costly mistake), out of ``over_budget``;
* ``false_discovery_rate``: share of the accepted configs that are over budget (how far
  a user can trust an accept); it differs from the former wherever accepts are few or the
  over-budget configs many, so both are reported (:func:`false_accept_line`);
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

from carb.campaign import speed as drift
from carb.decide import pareto

__all__ = [
    "budget_metrics",
    "decision_metrics",
    "false_accept_line",
    "truly_feasible",
    "validate_against_truth",
    "with_per_image",
    "corrected_latency",
    "drift_corrected_calls",
]


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
    """Accuracy, false-accept and false-reject rates of accept decisions vs the truth.

    Counts: ``n``, ``accepted``, ``truly_feasible``, ``over_budget`` (truly infeasible),
    ``false_accepts`` (accepted and over budget), ``false_rejects``. Shares (0 where their
    denominator is empty): ``accuracy``, ``false_accept_rate`` (false accepts over
    ``over_budget``), ``false_discovery_rate`` (false accepts over ``accepted``),
    ``false_reject_rate`` (false rejects over ``truly_feasible``).
    """
    accepted, feasible = np.asarray(accepted, bool), np.asarray(feasible, bool)
    n = len(accepted)
    tp = int(np.sum(accepted & feasible))
    fp = int(np.sum(accepted & ~feasible))
    tn = int(np.sum(~accepted & ~feasible))
    fn = int(np.sum(~accepted & feasible))
    return {
        "n": n,
        "accepted": tp + fp,
        "truly_feasible": tp + fn,
        "over_budget": fp + tn,
        "accuracy": (tp + tn) / n if n else float("nan"),
        "false_accept_rate": fp / (fp + tn) if fp + tn else 0.0,
        "false_discovery_rate": fp / (tp + fp) if tp + fp else 0.0,
        "false_reject_rate": fn / (fn + tp) if fn + tp else 0.0,
        "false_accepts": fp,
        "false_rejects": fn,
    }


def false_accept_line(m: Mapping[str, Any]) -> str:
    """Say the false accepts both ways, from :func:`budget_metrics` (or :func:`decision_metrics`).

    E.g. ``"false accepts: 2 of 40 over-budget configs accepted (5.0%); 2 of 150 accepted
    are over budget (1.3%)"``.
    """
    fa, over, acc = int(m["false_accepts"]), int(m["over_budget"]), int(m["accepted"])
    first = (
        f"{fa} of {over:,} over-budget configs accepted ({100 * m['false_accept_rate']:.1f}%)"
        if over
        else "no config over budget"
    )
    second = (
        f"{fa} of {acc:,} accepted are over budget ({100 * m['false_discovery_rate']:.1f}%)" if acc else "none accepted"
    )
    return f"false accepts: {first}; {second}"


def decision_metrics(calls: Sequence[str] | np.ndarray, feasible: np.ndarray) -> dict[str, float]:
    """Score three-way budget calls against the truth.

    The calls are ``accept`` / ``measure`` / ``reject`` (:func:`carb.decide.screen.screen` with ``risk="decide"``).
    Accuracy and the false-accept and false-reject rates are over the *decided* configs (accept or reject);
    ``decided`` is their share of all configs and ``measure_share`` the rest, sent to profiling.
    ``accuracy_after_measuring``: over all configs, once the ``measure`` ones are measured (and so called right).
    """
    calls = np.asarray(calls).astype(str)
    feasible = np.asarray(feasible, bool)
    bad = set(np.unique(calls)) - {"accept", "measure", "reject"}
    if bad:
        raise ValueError(f"unknown budget call {sorted(bad)[0]!r} (expected accept, measure or reject)")
    dec = calls != "measure"
    out = budget_metrics(calls[dec] == "accept", feasible[dec])
    n = len(calls)
    m = int((~dec).sum())
    out.update(
        n_all=n,
        decided=(n - m) / n if n else float("nan"),
        measure=m,
        measure_share=m / n if n else float("nan"),
        accuracy_after_measuring=(n - out["false_accepts"] - out["false_rejects"]) / n if n else float("nan"),
    )
    return out


def validate_against_truth(
    summary_feasible_ids: Sequence[str],
    shortlist_ids: Sequence[str],
    truth: pd.DataFrame,
    budgets: Mapping[str, float],
    objectives: Sequence[tuple[str, str]],
    measure_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Validate a screening of a space whose every config was measured.

    ``truth`` holds one row per config with ``config_id`` and measured targets, ``status == "ok"``.

    ``measure_ids``: the configs a three-way screening sent to ``measure``; given, the
    result also holds :func:`decision_metrics` under ``"decisions"`` (every other config
    not accepted counts as rejected).
    """
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
        out.update(
            true_front=int(len(front)),
            pareto_recall=pareto.pareto_recall(list(shortlist_ids), true_feasible, objs),
            hypervolume_ratio=hv_short / hv_true if hv_true else float("nan"),
        )
    return out


def corrected_latency(measured: pd.DataFrame, ref_ms: float | None) -> pd.DataFrame:
    """Return ``measured`` with ``latency_ms`` put at the sentinel speed ``ref_ms`` (ms).

    A row that carries its own ``sentinel_ms`` is normalized (:func:`carb.campaign.speed.normalize`; ``ref_ms``
    ``None``: the rows' own median sentinel); a row that does not keeps its raw value. The raw median is kept as
    ``latency_ms_raw``. Units: ms.
    """
    out = measured.copy()
    if "latency_ms" not in out.columns:
        return out
    norm = drift.normalize(out, ref_ms=ref_ms)
    out["latency_ms_raw"] = out["latency_ms"]
    out["latency_ms"] = norm.where(norm.notna() & (norm > 0), out["latency_ms"])
    return out


def drift_corrected_calls(
    measured: pd.DataFrame,
    budgets: Mapping[str, float],
    calls: Sequence[str] | np.ndarray,
    calibration_sentinel_ms: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Budget calls scored against drift-corrected latencies as well as raw ones.

    A validation sitting measures each config once, at whatever speed the machine runs
    then; on a VM whose speed swings 2x within a minute, a config timed at a slow moment
    breaks a latency budget it meets at the machine's usual speed. With each row's paired
    sentinel (``sentinel_ms``), its latency is put at a reference speed: the calibration's
    median sentinel (``calibration_sentinel_ms``, kept by ``carb calibrate``: the speed the
    target model was fitted at) or, without it, the validation's own median.

    Args:
        measured: the validation rows, with ``latency_ms`` (ms) and, where timed with the
            paired sentinel, ``sentinel_ms`` (ms).
        budgets: target -> budget.
        calls: accept / measure / reject per row of ``measured``.
        calibration_sentinel_ms: the calibration's sentinel readings (ms), if kept.

    Returns:
        ``drift`` (:func:`carb.campaign.speed.phase_drift` between the calibration's readings
        and the validation rows, with its ``line``), and, when rows carry a sentinel and a
        latency budget is set, ``corrected``: ``reference`` (which speed), ``reference_ms``,
        ``rows`` (how many rows were corrected) and the :func:`decision_metrics` of ``calls``
        against the corrected values.
    """
    cal = pd.DataFrame({"sentinel_ms": list(calibration_sentinel_ms or [])})
    if len(cal):
        moved = drift.phase_drift(cal, measured)
        line = drift.drift_line(moved)
    else:
        moved = {"note": drift.NO_INDEX}
        line = (
            "machine speed between calibration and validation: no calibration speed index (a target model "
            "not calibrated by carb calibrate, or calibrated before the sentinel)"
        )
    out: dict[str, Any] = {"drift": {**moved, "line": line}}
    s = pd.to_numeric(measured["sentinel_ms"], errors="coerce") if "sentinel_ms" in measured.columns else None
    if "latency_ms" not in budgets or s is None or not (s > 0).any():
        return out
    if "speed_change" in moved:
        ref, what = float(moved["sentinel_ms_before"]), "the calibration's median sentinel speed"
    else:
        ref, what = float(s[s > 0].median()), "this validation's median sentinel speed"
    corr = corrected_latency(measured, ref)
    out["corrected"] = {
        "reference": what,
        "reference_ms": ref,
        "rows": int((s > 0).sum()),
        **decision_metrics(calls, truly_feasible(corr, budgets)),
    }
    return out
