"""Evaluation of CARB models side by side on a split of a dataset.

Splits (:data:`SPLITS`), every one seeded:

``random``
    80% train / 20% test, configs drawn at random.
``stratified``
    The study's 70/15/15 train/validation/test, configs drawn within each stratum of batch tier
    (``small`` batch <= 8, ``medium`` 16..64, ``large`` >= 128) x depth tier (``shallow``
    depth <= 20, ``medium`` 21..56, ``deep`` > 56). CARB tunes itself by internal
    cross-validation, so models are fitted on train + validation (85%) and scored on test.
``grouped``
    Unseen architectures: rows are grouped by architecture (family, block, depth, width,
    early_downsample; a NAS-Bench-201 cell's or FBNet's operations:
    :func:`carb.model._inputs.arch_keys`) and whole groups (every batch, input size and
    precision of an architecture) go to one side, ~20% of the rows to test. The strict split.
``batch-tier``
    Train on batch > 8, test on batch <= 8 (extrapolation to small batches).

Where a family has no depth (``nb201``, ``fbnet``), ``stratified`` uses tertiles of
``flops_per_image`` in its place.

A config measured more than once (rows of the same ``config_id``) stays on one side of every split and in one fold
of every cross-validation (:func:`config_groups`, :func:`cv_folds`, :func:`holdout`): a copy in training would
score the model on a row it has learned, and a dataset of repeated rows would read several times more accurate
than it is. :func:`duplicate_rows` counts such rows.

Besides the presets of :mod:`carb.model`, :data:`BASELINES` can be named as models:
``power-latency``, energy = a model's own predicted latency x the median power
(energy / latency) of the training rows: the honest energy baseline where energy is
nearly latency times a constant power (the Jetson TX2 of the ``nb201`` dataset).

Metrics per model and target (:func:`metrics`): ``r2`` (R² on the original scale: J, ms,
MB, so dominated by the largest configs), ``r2_log`` (R² of log target, every config
weighing the same), ``mae`` (target units), ``mape`` (fraction), ``within_10pct`` (share
of predictions within ±10% of the measurement), ``spearman`` (rank correlation),
``coverage`` (share of measurements inside the prediction interval) and ``mean_width``
(mean interval width, target units) with ``median_rel_width`` (median of width /
measurement); and at a budget (default: the test set's median) for the question "is this
config within budget?": ``budget_accuracy`` (share answered right), and the false accepts
both ways: ``false_accept_rate`` (share of the configs truly over budget that the model
accepts; NaN when none is over) and ``false_discovery_rate`` (share of the configs the model
accepts that are truly over budget: how far an accept can be trusted; NaN when none is
accepted). The two differ wherever accepts are few or the configs over budget many.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from .folds import config_groups, cv_folds, duplicate_rows, holdout, rows_in_order, take_groups

__all__ = [
    "SPLITS",
    "split",
    "metrics",
    "evaluate",
    "METRICS",
    "BASELINES",
    "arch_folds",
    "config_groups",
    "duplicate_rows",
    "cv_folds",
    "holdout",
]

SPLITS: tuple[str, ...] = ("random", "stratified", "grouped", "batch-tier")
#: the architecture key of the grouped split
GROUP_KEYS: tuple[str, ...] = ("family", "block", "depth", "width", "early_downsample")
#: models that are not presets: derived from another model's predictions (module docstring)
BASELINES: tuple[str, ...] = ("power-latency",)
METRICS: tuple[str, ...] = (
    "r2",
    "r2_log",
    "mae",
    "mape",
    "within_10pct",
    "spearman",
    "coverage",
    "mean_width",
    "median_rel_width",
    "budget",
    "budget_accuracy",
    "false_accept_rate",
    "false_discovery_rate",
    "n",
)


def _tier(values: np.ndarray, edges: list[float], names: list[str]) -> np.ndarray:
    return np.asarray(names, dtype=object)[np.searchsorted(np.asarray(edges), values, side="left")]


def split(df: pd.DataFrame, kind: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Return the positional row indices of a split.

    Positional row indices of a split: ``{"train": ..., "test": ...}`` (``stratified``
    also gives ``"val"``; its ``"train"`` already includes it, see the module docstring).

    Raises:
        ValueError: unknown split, or one side would be empty.
    """
    n = len(df)
    rng = np.random.default_rng(seed)
    groups = config_groups(df)  # a config's copies go to one side together
    sizes = np.bincount(groups) if n else np.zeros(0, dtype=np.int64)
    if kind == "random":
        test = take_groups(rng.permutation(len(sizes)), sizes, int(round(0.2 * n)))
        is_test = np.isin(groups, test)
        out = {"train": np.flatnonzero(~is_test), "test": np.flatnonzero(is_test)}
    elif kind == "stratified":
        batch_tier = _tier(df["batch"].to_numpy(), [8, 64], ["small", "medium", "large"])
        if "depth" in df.columns and df["depth"].notna().all():
            depth_tier = _tier(df["depth"].to_numpy(), [20, 56], ["shallow", "medium", "deep"])
        else:  # families without a depth: the network's size in thirds instead
            f = df["flops_per_image"].to_numpy(float)
            depth_tier = _tier(f, list(np.nanquantile(f, [1 / 3, 2 / 3])), ["small", "medium", "large"])
        strata = pd.factorize(pd.Series(batch_tier).astype(str) + "/" + pd.Series(depth_tier).astype(str))[0]
        tr, va, te = [], [], []
        for s in np.unique(strata):
            rows = np.flatnonzero(strata == s)
            order = rng.permutation(pd.unique(groups[rows]))  # the stratum's configs, in order of appearance
            n_te, n_va = int(round(0.15 * len(rows))), int(round(0.15 * len(rows)))
            g_te = take_groups(order, sizes, n_te)
            g_va = take_groups(order[len(g_te) :], sizes, n_va)
            te.append(rows_in_order(groups, g_te))
            va.append(rows_in_order(groups, g_va))
            tr.append(rows_in_order(groups, order[len(g_te) + len(g_va) :]))
        val = np.sort(np.concatenate(va))
        out = {"train": np.sort(np.concatenate(tr + va)), "val": val, "test": np.sort(np.concatenate(te))}
    elif kind == "grouped":
        from carb.model._inputs import arch_keys

        groups = arch_keys(df)
        n_groups = int(groups.max()) + 1 if n else 0
        order = rng.permutation(n_groups)
        sizes = np.bincount(groups, minlength=n_groups)
        test_groups, count = [], 0
        for g in order:  # whole groups to test until a fifth of the rows
            if count >= 0.2 * n:
                break
            test_groups.append(g)
            count += sizes[g]
        is_test = np.isin(groups, test_groups)
        out = {"train": np.flatnonzero(~is_test), "test": np.flatnonzero(is_test)}
    elif kind == "batch-tier":
        small = df["batch"].to_numpy() <= 8
        out = {"train": np.flatnonzero(~small), "test": np.flatnonzero(small)}
    else:
        raise ValueError(f"unknown split {kind!r} (expected one of {', '.join(SPLITS)})")
    if not len(out["train"]) or not len(out["test"]):
        raise ValueError(
            f"split {kind!r}: {len(out['train'])} train and {len(out['test'])} test rows; both sides need rows"
        )
    return out


def metrics(
    y: np.ndarray,
    pred: np.ndarray,
    lo: np.ndarray | None = None,
    hi: np.ndarray | None = None,
    budget: float | None = None,
) -> dict[str, float]:
    """Return the accuracy of predictions against measurements.

    Accuracy of predictions ``pred`` of measurements ``y`` (same units), with the
    interval ``[lo, hi]`` and a ``budget`` (default: the median of ``y``); see the module
    docstring for each metric. NaN measurements are ignored.
    """
    from scipy.stats import spearmanr

    y, pred = np.asarray(y, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    ok = np.isfinite(y)
    y, pred = y[ok], pred[ok]
    out: dict[str, float] = {"n": float(len(y))}
    if not len(y) or not np.isfinite(pred).all():
        return {**{m: float("nan") for m in METRICS}, "n": float(len(y))}
    ss = np.sum((y - y.mean()) ** 2)
    out["r2"] = float(1 - np.sum((y - pred) ** 2) / ss) if ss > 0 else float("nan")
    pos = (y > 0) & (pred > 0)
    ly, lp = np.log(y[pos]), np.log(pred[pos])
    ssl = np.sum((ly - ly.mean()) ** 2)
    out["r2_log"] = float(1 - np.sum((ly - lp) ** 2) / ssl) if ssl > 0 and pos.all() else float("nan")
    err = np.abs(pred - y)
    rel = err / np.maximum(np.abs(y), 1e-12)
    out["mae"] = float(err.mean())
    out["mape"] = float(rel.mean())
    out["within_10pct"] = float(np.mean(rel <= 0.10))
    out["spearman"] = float(spearmanr(y, pred).statistic) if len(y) > 2 else float("nan")
    if lo is not None and hi is not None:
        lo, hi = np.asarray(lo, dtype=np.float64)[ok], np.asarray(hi, dtype=np.float64)[ok]
        out["coverage"] = float(np.mean((lo <= y) & (y <= hi)))
        out["mean_width"] = float(np.mean(hi - lo))
        out["median_rel_width"] = float(np.median((hi - lo) / np.maximum(np.abs(y), 1e-12)))
    else:
        out["coverage"] = out["mean_width"] = out["median_rel_width"] = float("nan")
    b = float(np.median(y)) if budget is None else float(budget)
    within, accepted = y <= b, pred <= b
    out["budget"] = b
    out["budget_accuracy"] = float(np.mean(within == accepted))
    over = ~within
    out["false_accept_rate"] = float(np.mean(accepted[over])) if over.any() else float("nan")
    out["false_discovery_rate"] = float(np.mean(over[accepted])) if accepted.any() else float("nan")
    return {m: out[m] for m in METRICS}


def evaluate(
    df: pd.DataFrame,
    split_kind: str,
    presets: Iterable[str] = ("default", "paper", "flops-linear", "lgbm"),
    seed: int = 0,
    budgets: Mapping[str, float] | None = None,
    coverage: float = 0.9,
    learner_params: Mapping[str, Mapping[str, Any]] | None = None,
    n_jobs: int = 1,
    progress: Any = None,
    prior: Any = None,
) -> dict[str, Any]:
    """Fit each preset on the train side of a split and score it on the test side.

    Args:
        df: a dataset (only ``status == "ok"`` rows are used; one device).
        split_kind: one of :data:`SPLITS`.
        presets: preset names (models) to compare, in the order to report.
        seed: seed of the split and of the models.
        budgets: budget per target (target units) for the budget metrics; default: the
            test set's median of each target.
        coverage: nominal coverage of the prediction intervals.
        learner_params: per preset, the ``learner_params`` of :class:`carb.model.CARB`.
        n_jobs: threads per learner.
        progress: called as ``progress(preset)`` before each fit, if given.
        prior: a fitted model of another device (``CARB(prior=)``): each preset is then also
            fitted reading it, reported as ``"<preset> + prior"`` beside the preset alone.

    Returns:
        ``{"split", "seed", "rows": {"ok", "train", "test", "duplicates"}, "targets", "budgets",
        "fit_seconds": {model: s}, "predict_seconds": {model: s}, "trained": {model: [targets]},
        "results": {model: {target: {metric: value}}}}``.
    """
    from carb.model.estimator import TARGETS

    data = df[df["status"] == "ok"] if "status" in df.columns else df
    data = data.reset_index(drop=True)
    sides = split(data, split_kind, seed)
    train, test = data.iloc[sides["train"]], data.iloc[sides["test"]]
    targets = [t for t in TARGETS if t in data.columns and test[t].notna().any() and train[t].notna().sum() > 0]
    budgets = dict(budgets or {})
    unknown = [t for t in budgets if t not in TARGETS]
    if unknown:
        raise ValueError(f"budget: unknown target {unknown[0]!r} (expected one of {', '.join(TARGETS)})")
    budget_used = {t: float(budgets[t]) if t in budgets else float(test[t].median()) for t in targets}
    out: dict[str, Any] = {
        "split": split_kind,
        "seed": seed,
        "coverage_nominal": coverage,
        "rows": {"ok": len(data), "train": len(train), "test": len(test), "duplicates": duplicate_rows(data)},
        "targets": targets,
        "budgets": budget_used,
        "fit_seconds": {},
        "predict_seconds": {},
        "trained": {},
        "results": {},
    }
    presets = list(presets)
    unknown_models = [p for p in presets if p in BASELINES and p != "power-latency"]
    if unknown_models:
        raise ValueError(f"unknown baseline {unknown_models[0]!r}")
    fitted = [p for p in presets if p not in BASELINES]
    if "power-latency" in presets and not fitted:
        fitted = ["default"]  # the baseline needs a model's latency; CARB's own, not reported
    preds: dict[str, pd.DataFrame] = {}
    # each preset alone, and beside it reading the prior when one is given (same split, seed)
    runs = [(p, p, None) for p in fitted] + (
        [(f"{p} + prior", p, prior) for p in fitted if p in presets] if prior is not None else []
    )
    settings = {"coverage": coverage, "random_state": seed, "n_jobs": n_jobs}
    for name, p, pri in runs:
        if progress is not None:
            progress(name)
        params = dict((learner_params or {}).get(p, {})) or None
        model, preds[name] = _fit_and_predict(
            out, name, train, test, preset=p, learner_params=params, prior=pri, **settings
        )
        if p not in presets:
            continue
        # which upstream predictions each target reads (the cascade the preset chose)
        out.setdefault("cascade", {})[name] = {t: list(model.models_[t].upstream) for t in model.targets_}
        out["trained"][name] = list(model.targets_)
        out["results"][name] = _score(test, preds[name], targets, budget_used)
    if "power-latency" in presets and {"energy_j", "latency_ms"} <= set(targets):
        _power_latency(out, train, test, preds, "default" if "default" in fitted else fitted[0], targets, budget_used)
    elif "power-latency" in presets:
        out["skipped"] = {"power-latency": "needs energy_j and latency_ms in the data"}
    return out


def _fit_and_predict(
    out: dict[str, Any], name: str, train: pd.DataFrame, test: pd.DataFrame, **params: Any
) -> tuple[Any, pd.DataFrame]:
    """Fit a CARB model on ``train`` and predict ``test``, recording both times (s) in ``out`` under ``name``."""
    import warnings

    from carb.model.estimator import CARB

    model = CARB(**params)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # missing targets are reported by the caller
        model.fit(train)
    out["fit_seconds"][name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = model.predict(test)
    out["predict_seconds"][name] = time.perf_counter() - t0
    return model, pred


def _score(
    test: pd.DataFrame, pred: pd.DataFrame, targets: Iterable[str], budgets: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Return :func:`metrics` of each target's predictions and intervals against the test rows."""
    return {
        t: metrics(
            test[t].to_numpy(),
            pred[t].to_numpy(),
            pred[f"{t}_lo"].to_numpy(),
            pred[f"{t}_hi"].to_numpy(),
            budgets[t],
        )
        for t in targets
    }


def _power_latency(
    out: dict[str, Any],
    train: pd.DataFrame,
    test: pd.DataFrame,
    preds: Mapping[str, pd.DataFrame],
    base: str,
    targets: list[str],
    budgets: Mapping[str, float],
) -> None:
    """Score the ``power-latency`` baseline into ``out``: energy = ``base``'s latency x the median power."""
    # energy = the base model's predicted latency x the training rows' median power
    both = train["energy_j"].notna() & train["latency_ms"].notna() & (train["latency_ms"] > 0)
    power_w = float(np.median(train.loc[both, "energy_j"] / train.loc[both, "latency_ms"]) * 1000.0)
    pred = preds[base]
    others = [t for t in targets if t != "energy_j"]
    scored = out["results"][base] if base in out["results"] else _score(test, pred, others, budgets)
    res = {t: dict(scored[t]) for t in others}
    e = pred["latency_ms"].to_numpy() * power_w / 1000.0
    res["energy_j"] = metrics(
        test["energy_j"].to_numpy(),
        e,
        pred["latency_ms_lo"].to_numpy() * power_w / 1000.0,
        pred["latency_ms_hi"].to_numpy() * power_w / 1000.0,
        budgets["energy_j"],
    )
    out["results"]["power-latency"] = {t: res[t] for t in targets}
    out["fit_seconds"]["power-latency"] = out["fit_seconds"][base]
    out["predict_seconds"]["power-latency"] = out["predict_seconds"][base]
    out["trained"]["power-latency"] = [t for t in targets]
    out["power_latency"] = {"base": base, "power_w": power_w}


def arch_folds(df: pd.DataFrame, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold of each row, with whole architectures per fold.

    Rows are grouped by :data:`GROUP_KEYS` (family, block, depth, width, early_downsample), so
    no input size or class count of a test architecture is in training.

    Args:
        df: configs, one per row.
        folds: number of folds.
        seed: seed of the folds' random assignment.

    Returns:
        The fold (0 .. folds - 1) of each row.
    """
    keys = [c for c in GROUP_KEYS if c in df.columns]
    # missing values (a net row's block or depth) read as text too
    groups = pd.factorize(df[keys].astype(object).fillna("").astype(str).agg("|".join, axis=1))[0]
    return np.random.default_rng(seed).permutation(groups.max() + 1)[groups] % folds
