"""Scoring models on a dataset: a fitted model on every row, or presets fitted on a split and compared on its test side.

What ``carb evaluate`` does, as functions: :func:`score_model` scores a model you have (a bundle or a calibrated
model) with the accuracy, interval and budget metrics of :func:`carb.model.evaluation.metrics` and the false accepts
both ways; :func:`compare_presets` fits presets (and baselines) on a split and names the one recommended for the data.

Messages name the parameters as Python passes them; the command line says them as its flags.

Example:
    >>> from carb import datasets                                              # doctest: +SKIP
    >>> from carb.decide.scoring import compare_presets                       # doctest: +SKIP
    >>> res = compare_presets(datasets.load("cpu-1t"), ["default", "paper"])  # doctest: +SKIP
    >>> res["results"]["default"]["latency_ms"]["mape"]                       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .validate import budget_metrics

__all__ = ["DEFAULT_PRESETS", "check_settings", "compare_presets", "false_accepts", "score_model", "with_auto"]

#: the presets compared when none is named (the data's family preset is added and recommended)
DEFAULT_PRESETS: tuple[str, ...] = ("default", "paper", "flops-linear", "lgbm", "power-latency")


def check_settings(split: str | None = None, coverage: float | None = None) -> None:
    """Refuse an unknown split or a coverage outside (0, 1) before any data is read (``None``: not checked).

    Raises:
        ValueError: naming the parameter.
    """
    from carb.model.evaluation import SPLITS

    if split is not None and split not in SPLITS:
        raise ValueError(f"split {split}: unknown split (expected one of {', '.join(SPLITS)})")
    if coverage is not None and not 0 < coverage < 1:
        raise ValueError(f"coverage {coverage}: must be in (0, 1)")


def false_accepts(y: np.ndarray, pred: np.ndarray, budget: float) -> dict[str, float]:
    """The counts of false accepts at ``budget`` (accept: predicted within it), on the rows measured.

    The rates come from :func:`carb.model.evaluation.metrics` (``false_accept_rate``: of the configs over budget;
    ``false_discovery_rate``: of the accepted configs); these are their counts ``false_accepts``, ``over_budget``,
    ``accepted``.
    """
    ok = np.isfinite(y)
    if not ok.any() or not np.isfinite(budget):
        return {"false_accepts": 0, "over_budget": 0, "accepted": 0}
    m = budget_metrics(pred[ok] <= budget, y[ok] <= budget)
    return {k: m[k] for k in ("false_accepts", "over_budget", "accepted")}


def score_model(model: Any, df: pd.DataFrame, budgets: Mapping[str, float] | None = None) -> dict[str, dict]:
    """A fitted model scored on every row of ``df``, per target it predicts and the rows measure.

    Args:
        model: a fitted model (a bundle or a calibrated model) with ``predict`` and ``targets_``.
        df: measured rows (``status == "ok"``).
        budgets: target -> budget of the budget metrics (``None`` or a target missing: the rows' median).

    Returns:
        target -> :func:`carb.model.evaluation.metrics` with the :func:`false_accepts` counts.

    Raises:
        ValueError: rows the model cannot read, or none of its targets measured.
    """
    from carb.model.evaluation import metrics

    pred = model.predict(df)
    targets = [t for t in model.targets_ if t in df.columns and df[t].notna().any()]
    if not targets:
        raise ValueError(f"has none of the model's targets ({', '.join(model.targets_)})")
    out = {}
    for t in targets:
        m = metrics(
            df[t].to_numpy(),
            pred[t].to_numpy(),
            pred[f"{t}_lo"].to_numpy(),
            pred[f"{t}_hi"].to_numpy(),
            (budgets or {}).get(t),
        )
        m.update(false_accepts(df[t].to_numpy(float), pred[t].to_numpy(float), m["budget"]))
        out[t] = m
    return out


def with_auto(names: Sequence[str], df: pd.DataFrame, asked: bool) -> tuple[list[str], tuple[str, str] | None]:
    """The presets with ``auto`` resolved, and the recommended one with why (or ``None``).

    Without presets ``asked`` for, the default list gains the data's family preset, recommended; ``auto`` stands
    for it; presets named otherwise are fitted as asked.
    """
    from carb.model import AUTO, auto_preset

    names = list(names)
    if asked and AUTO not in names:
        return names, None
    pick, why = auto_preset(df)
    names = [pick if n == AUTO else n for n in names] if asked else [*names, pick]
    return list(dict.fromkeys(names)), (pick, why)  # each once, in order


def compare_presets(
    df: pd.DataFrame,
    presets: Sequence[str] | None = None,
    split: str = "grouped",
    *,
    seed: int = 0,
    budgets: Mapping[str, float] | None = None,
    coverage: float = 0.9,
    n_jobs: int = 1,
    prior: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit presets on a split of ``df`` and compare them on its test side.

    Args:
        df: measured rows.
        presets: the presets and baselines to compare (``auto``: the data's family preset); ``None``:
            :data:`DEFAULT_PRESETS` and the data's family preset, recommended.
        split: ``random``, ``stratified``, ``grouped`` or ``batch-tier``.
        seed: the split's and the models' seed.
        budgets: target -> budget of the budget metrics (a target missing: the test median).
        coverage: nominal coverage of the prediction intervals.
        n_jobs: threads per learner.
        prior: a fitted model of another device; each preset is also fitted reading it.
        progress: told each preset as it is fitted.

    Returns:
        :func:`carb.model.evaluation.evaluate`'s results, with ``recommended_preset`` and ``recommended_why`` where
        the family preset was chosen.

    Raises:
        ValueError: an unknown split, a coverage outside (0, 1), rows the presets cannot learn.
    """
    from carb.model.evaluation import evaluate

    check_settings(split, coverage)
    names, recommended = with_auto(list(presets) if presets else list(DEFAULT_PRESETS), df, asked=bool(presets))
    res = evaluate(
        df,
        split,
        names,
        seed=seed,
        budgets=dict(budgets or {}),
        coverage=coverage,
        n_jobs=n_jobs,
        progress=progress,
        prior=prior,
    )
    if recommended is not None:
        res["recommended_preset"], res["recommended_why"] = recommended
    return res
