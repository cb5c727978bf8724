"""Characterization analyses of measured datasets: scaling, transfer, importance, fronts.

How cost grows with the batch (scaling), how well one device's costs carry over to
another (transfer), which inputs drive a model (importance), and the Pareto front of
measured configs.

Every function takes plain dataset DataFrames (see :mod:`carb.datasets`: one row per config
and device, targets ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB)) and returns
DataFrames, so the numbers can be used without the HTML report of :mod:`carb.report`.

Scaling (:func:`scaling`)
    Configs of a sampled space are not a balanced grid: an architecture is measured at one
    or a few batch sizes, so the plain median at each batch mixes different architectures.
    The batch profile is therefore estimated within architectures: per target, a two-way
    additive model in log space, ``log cost = a[architecture] + b[batch]`` (least squares;
    architecture = every parameter but the batch, precision included), and the profile is
    the cost of the median architecture, ``exp(median(a) + b[batch])``. On a balanced grid
    where the model holds this is exactly the median over architectures at each batch; the
    plain medians are reported beside it (``median_measured``). Where no architecture is
    measured at two batch sizes, nothing links the batch sizes within architectures and the
    profile falls back to the plain medians, with a note saying so.

    Definitions (per device and target; "cost" is the cost of one forward of the batch):

    * ``factor``: cost at the largest batch / cost at the smallest batch (the study's growth
      factors: energy ~35.4x vs latency ~11.2x from its smallest to its largest batch).
    * ``per_image_gain``: per-image cost at the smallest batch / at the largest batch
      (= batch ratio / ``factor``): how much cheaper an image gets by batching.
    * ``elasticity`` (per batch): the log-log slope of cost against batch from the previous
      batch size. ~0: a bigger batch is almost free (launch- or overhead-bound); ~1: cost
      grows with the images (throughput-bound).
    * ``boundary_batch``: the breakpoint of a continuous two-segment line fitted to the
      profile in log-log (least squares over a fine grid of breakpoints), with the slopes
      ``slope_launch`` below and ``slope_throughput`` above it. When the two slopes differ by
      less than :data:`MIN_REGIME_CONTRAST` there is one regime only and the boundary is NaN.
    * ``saturation_batch``: the smallest batch whose per-image cost is within
      ``flat_tol`` (10%) of the lowest per-image cost of the profile: where batching stops
      paying much.

Transfer (:func:`transfer`)
    For each pair of devices (A, B): a model trained on A's rows (less a held-out test set
    of configs, the same for every device) predicts B's held-out rows (``r2_log``: R² of
    log cost; ``r2_log_factor``: the same once predictions are divided by their median
    ratio to the measured values, i.e. with the device factor known; ``mape``;
    ``spearman``: rank correlation). A == B is the ordinary held-out
    accuracy on one device. Beside the model, the measured costs of configs measured on
    both devices give ``factor`` (``exp(median(log B - log A))``: the typical ratio B/A;
    the study's RTX 3080 -> 5090 "slopes" energy 1.61x, latency 2.09x, memory 0.92x are
    such factors) and ``loglog_slope`` (least-squares slope of log B on log A: 1 means B
    costs a constant factor times A; < 1 means B's costs spread less).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from carb.model import TARGETS
from carb.model.gbm import GBMRegressor
from carb.model.gbm import ok_rows as _ok
from carb.model.gbm import positive as _positive

from ._frames import UNITS, _records, config_label, split_devices
from ._frames import _jsonable as _jsonable
from ._scaling import ARCH_COLUMNS, MIN_REGIME_CONTRAST, ScalingResult, scaling

__all__ = [
    "TARGETS",
    "UNITS",
    "ARCH_COLUMNS",
    "MIN_REGIME_CONTRAST",
    "ScalingResult",
    "scaling",
    "TransferResult",
    "transfer",
    "default_model_factory",
    "holdout_predictions",
    "importance",
    "measured_front",
    "objectives_for",
    "config_label",
    "split_devices",
]

# -- models for transfer and holdouts ---------------------------------------------------------


def _is_config_table(df: pd.DataFrame) -> bool:
    from carb.families.features import REQUIRED_COLUMNS

    return all(c in df.columns for c in REQUIRED_COLUMNS)


def default_model_factory(example: pd.DataFrame) -> Callable[[], Any]:
    """Return a factory of fresh models for ``example``: ``CARB(preset="fast")`` on configs, else GBMRegressor."""
    if _is_config_table(example):
        from carb.model import CARB

        return lambda: CARB(preset="fast", n_jobs=1)
    return lambda: GBMRegressor()


def _transfer_factory(example: pd.DataFrame) -> Callable[[], Any]:
    """:func:`default_model_factory`, less the intervals a transfer matrix does not use."""
    if _is_config_table(example):
        return default_model_factory(example)
    return lambda: GBMRegressor(interval_folds=0)


def _fit_quiet(model: Any, df: pd.DataFrame) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "energy_j not trained" on CPUs: the metrics say NaN anyway
        return model.fit(df)


# -- transfer -------------------------------------------------------------------------------


@dataclass
class TransferResult:
    """Output of :func:`transfer`.

    Attributes:
        matrix: one row per (``train``, ``test``, ``target``): ``n_test`` rows scored,
            ``r2_log``, ``r2_log_factor``, ``mape``, ``spearman`` of the train-device model on the test device's
            held-out rows, ``bias`` (median predicted / measured), ``note``.
        pairs: one row per (``a``, ``b``, ``target``) of distinct devices: ``n_common``
            configs measured on both, ``factor`` (median B/A), ``loglog_slope``,
            ``intercept`` (of log B = intercept + slope log A), ``spearman_measured``.
        key: the column configs were matched on.
        devices: the devices, in order.
    """

    matrix: pd.DataFrame
    pairs: pd.DataFrame
    key: str
    devices: list[str]
    definitions: dict[str, str] = field(default_factory=dict)

    def pivot(self, metric: str = "r2_log", target: str = "latency_ms") -> pd.DataFrame:
        """The matrix of one metric and target: rows = train device, columns = test device."""
        m = self.matrix[self.matrix["target"] == target]
        return m.pivot(index="train", columns="test", values=metric).reindex(index=self.devices, columns=self.devices)

    def factors(self, target: str = "latency_ms", metric: str = "factor") -> pd.DataFrame:
        """Measured ``factor`` (or ``loglog_slope``) of column device B over row device A."""
        p = self.pairs[self.pairs["target"] == target]
        out = p.pivot(index="a", columns="b", values=metric).reindex(index=self.devices, columns=self.devices)
        for d in self.devices:
            out.loc[d, d] = 1.0
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "key": self.key,
            "devices": list(self.devices),
            "matrix": _records(self.matrix),
            "pairs": _records(self.pairs),
            "definitions": dict(self.definitions),
        }


_TRANSFER_DEFINITIONS = {
    "r2_log": "R² of log cost: model trained on the train device's rows (less the held-out configs) "
    "against the test device's measured held-out rows",
    "r2_log_factor": "R² of log cost after dividing the predictions by their median ratio to the measured "
    "values: what a transfer reaches once the device factor is known (an upper bound of a "
    "one-factor calibration, since the factor comes from the test rows)",
    "mape": "mean absolute percentage error of those predictions",
    "spearman": "Spearman rank correlation of predicted and measured cost",
    "bias": "median of predicted / measured (1 = unbiased; the device factor an uncalibrated transfer misses)",
    "factor": "exp(median(log B - log A)) over configs measured on both devices: the typical ratio B/A",
    "loglog_slope": "least-squares slope of log B on log A (1: B = constant x A)",
}


def _match_key(frames: Iterable[pd.DataFrame], key: str | None) -> str:
    frames = list(frames)
    if key is not None:
        missing = [i for i, f in enumerate(frames) if key not in f.columns]
        if missing:
            raise ValueError(f"key {key!r} is missing from a dataset")
        return key
    for k in ("config_id", "arch_id"):
        if all(k in f.columns for f in frames):
            return k
    raise ValueError("no column to match configs across datasets on (config_id or arch_id); pass key=")


def _metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from scipy.stats import spearmanr

    ok = _positive(y) & _positive(p)
    y, p = y[ok], p[ok]
    if len(y) < 3:
        return {
            "n_test": int(len(y)),
            "r2_log": np.nan,
            "r2_log_factor": np.nan,
            "mape": np.nan,
            "spearman": np.nan,
            "bias": np.nan,
        }
    ly, lp = np.log(y), np.log(p)
    ss = float(np.sum((ly - ly.mean()) ** 2))
    shifted = lp - np.median(lp - ly)
    return {
        "n_test": int(len(y)),
        "r2_log": float(1 - np.sum((ly - lp) ** 2) / ss) if ss > 0 else np.nan,
        "r2_log_factor": float(1 - np.sum((ly - shifted) ** 2) / ss) if ss > 0 else np.nan,
        "mape": float(np.mean(np.abs(p - y) / y)),
        "spearman": float(spearmanr(y, p).statistic) if np.ptp(y) > 0 and np.ptp(p) > 0 else np.nan,
        "bias": float(np.median(p / y)),
    }


def transfer(
    datasets: Mapping[str, pd.DataFrame],
    targets: Sequence[str] | None = None,
    model_factory: Callable[[], Any] | None = None,
    *,
    key: str | None = None,
    test_fraction: float = 0.3,
    seed: int = 0,
    say: Callable[[str], None] | None = None,
) -> TransferResult:
    """Train on device A, test on device B, for every pair of the given datasets.

    Args:
        datasets: device name -> its dataset (one device each; ``ok`` rows are used).
        targets: targets to score; default: those of :data:`TARGETS` with values somewhere.
        model_factory: returns a fresh model with ``fit(df)`` and ``predict(df)``; default
            :func:`default_model_factory` of the first dataset.
        key: column that identifies a config across devices (default ``config_id``, else
            ``arch_id``).
        test_fraction: share of the distinct configs (over all devices) held out; the same
            configs are held out on every device, so no test config is ever trained on.
        seed: seed of the held-out split.
        say: progress messages.

    Returns:
        A :class:`TransferResult` (definitions in this module's docstring).

    Raises:
        ValueError: fewer than one dataset, no key to match on, or a bad ``test_fraction``.
    """
    if not datasets:
        raise ValueError("transfer needs at least one dataset")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction {test_fraction!r} must be in (0, 1)")
    names = [str(n) for n in datasets]
    frames = {str(n): _ok(d).reset_index(drop=True) for n, d in datasets.items()}
    k = _match_key(frames.values(), key)
    # one row per config and device: duplicates (re-measurements) would count twice
    frames = {n: d.drop_duplicates(k, keep="first").reset_index(drop=True) for n, d in frames.items()}
    if targets is None:
        targets = [t for t in TARGETS if any(t in d.columns and _positive(d[t]).any() for d in frames.values())]
    factory = model_factory or _transfer_factory(next(iter(frames.values())))
    keys = np.unique(np.concatenate([d[k].astype(str).to_numpy() for d in frames.values()]))
    rng = np.random.default_rng(seed)
    test_keys = set(keys[rng.random(len(keys)) < test_fraction])
    matrix = _transfer_matrix(frames, names, targets, k, test_keys, factory, say)
    pairs = _measured_pairs(frames, names, targets, k)
    return TransferResult(matrix=matrix, pairs=pairs, key=k, devices=names, definitions=dict(_TRANSFER_DEFINITIONS))


def _transfer_matrix(
    frames: Mapping[str, pd.DataFrame],
    names: Sequence[str],
    targets: Sequence[str],
    k: str,
    test_keys: set[str],
    factory: Callable[[], Any],
    say: Callable[[str], None] | None,
) -> pd.DataFrame:
    """Return the scores of a model trained on each device's rows less ``test_keys`` on every device's held-out rows.

    A device whose model cannot be trained, or a pair without held-out rows, gets rows with ``n_test`` 0 and a note.
    """
    rows: list[dict[str, Any]] = []
    for a in names:
        da = frames[a]
        train = da[~da[k].astype(str).isin(test_keys)]
        model, err = None, ""
        try:
            model = _fit_quiet(factory(), train)
        except Exception as e:  # too few rows, no target: the row says why instead of failing the matrix
            err = f"model not trained on {a}: {' '.join(str(e).split())[:160]}"
        if say:
            say(f"transfer: trained on {a} ({len(train)} rows)")
        for b in names:
            db = frames[b]
            test = db[db[k].astype(str).isin(test_keys)]
            pred = model.predict(test) if model is not None and len(test) else None
            for t in targets:
                base = {"train": a, "test": b, "target": t}
                if pred is None or t not in test.columns or t not in pred.columns:
                    rows.append(
                        {
                            **base,
                            "n_test": 0,
                            "note": err or ("no held-out rows" if not len(test) else f"{t} not predicted"),
                        }
                    )
                    continue
                m = _metrics(test[t].to_numpy(np.float64), pred[t].to_numpy(np.float64))
                rows.append({**base, **m, "note": "" if m["n_test"] >= 3 else f"{t}: too few rows to score"})
    matrix = pd.DataFrame(rows).reindex(
        columns=["train", "test", "target", "n_test", "r2_log", "r2_log_factor", "mape", "spearman", "bias", "note"]
    )
    matrix["note"] = matrix["note"].fillna("")
    return matrix


def _measured_pairs(
    frames: Mapping[str, pd.DataFrame], names: Sequence[str], targets: Sequence[str], k: str
) -> pd.DataFrame:
    """Return, per pair of distinct devices and target, the factor and log-log line of the configs measured on both."""
    from scipy.stats import spearmanr

    prs: list[dict[str, Any]] = []
    for a in names:
        for b in names:
            if a == b:
                continue
            for t in targets:
                if t not in frames[a].columns or t not in frames[b].columns:
                    continue
                m = frames[a][[k, t]].merge(frames[b][[k, t]], on=k, suffixes=("_a", "_b"))
                ok = _positive(m[f"{t}_a"]) & _positive(m[f"{t}_b"])
                la, lb = np.log(m[f"{t}_a"].to_numpy(np.float64)[ok]), np.log(m[f"{t}_b"].to_numpy(np.float64)[ok])
                rec: dict[str, Any] = {"a": a, "b": b, "target": t, "n_common": int(ok.sum())}
                if ok.sum() >= 3 and np.ptp(la) > 0:
                    slope, icpt = np.polyfit(la, lb, 1)
                    rec.update(
                        factor=float(np.exp(np.median(lb - la))),
                        loglog_slope=float(slope),
                        intercept=float(icpt),
                        spearman_measured=float(spearmanr(la, lb).statistic),
                    )
                elif ok.sum() >= 1:
                    rec.update(factor=float(np.exp(np.median(lb - la))))
                prs.append(rec)
    pairs = pd.DataFrame(prs).reindex(
        columns=["a", "b", "target", "n_common", "factor", "loglog_slope", "intercept", "spearman_measured"]
    )
    return pairs


# -- holdout, importance, front ---------------------------------------------------------------


def holdout_predictions(
    df: pd.DataFrame, model: Any | None = None, *, test_fraction: float = 0.25, seed: int = 0, key: str | None = None
) -> tuple[pd.DataFrame, Any, bool]:
    """Measured vs predicted on one device's dataset.

    Without ``model``: a model of :func:`default_model_factory` is fitted on all but
    ``test_fraction`` of the configs and predicts the rest. With ``model`` (fitted): it
    predicts every ``ok`` row (in-sample if it was trained on them).

    Returns:
        (rows with the measured targets and ``pred_<target>``, ``pred_<target>_lo``,
        ``pred_<target>_hi`` columns, the model, whether the rows are held out).
    """
    data = _ok(df).reset_index(drop=True)
    if model is not None:
        pred = model.predict(data)
        return data.join(pred.add_prefix("pred_").set_index(data.index)), model, False
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction {test_fraction!r} must be in (0, 1)")
    k = key or ("config_id" if "config_id" in data.columns else "arch_id" if "arch_id" in data.columns else None)
    ids = data[k].astype(str).to_numpy() if k else np.arange(len(data)).astype(str)
    uniq = np.unique(ids)
    test = np.isin(ids, uniq[np.random.default_rng(seed).random(len(uniq)) < test_fraction])
    if test.all() or not test.any():
        raise ValueError(f"holdout: {len(data)} rows are too few to hold out {test_fraction:g} of them")
    model = _fit_quiet(default_model_factory(data)(), data[~test])
    rows = data[test].reset_index(drop=True)
    pred = model.predict(rows)
    return rows.join(pred.add_prefix("pred_").set_index(rows.index)), model, True


#: groups of config parameters permuted together (an architecture only exists as a whole)
IMPORTANCE_GROUPS: dict[str, tuple[str, ...]] = {
    "architecture": ("family", "block", "depth", "width", "early_downsample", "classes"),
    "input_size": ("input_size",),
    "batch": ("batch",),
    "precision": ("precision",),
}


def importance(
    model: Any,
    df: pd.DataFrame,
    targets: Sequence[str] | None = None,
    *,
    groups: Mapping[str, Sequence[str]] | None = None,
    n_repeats: int = 3,
    seed: int = 0,
    top: int = 15,
) -> pd.DataFrame:
    """Measure permutation importance: how much the RMSE of log cost grows when an input is shuffled.

    Units: log cost; 0 = the model ignores the input.

    For CARB config tables the inputs are the config parameters, shuffled in
    :data:`IMPORTANCE_GROUPS` (an architecture's parameters move together, so every shuffled
    row is a valid network) and the static features recomputed from them. Otherwise each
    of the model's ``features_`` columns is shuffled alone, and the ``top`` are kept.

    Returns:
        Columns ``target``, ``input``, ``importance``, ``importance_std``, sorted.
    """
    from carb.families.features import FEATURE_COLUMNS

    data = _ok(df).reset_index(drop=True)
    targets = [t for t in (targets or getattr(model, "targets_", TARGETS)) if t in data.columns]
    config = _is_config_table(data)
    if groups is None:
        if config:
            groups = {g: tuple(c for c in cols if c in data.columns) for g, cols in IMPORTANCE_GROUPS.items()}
        else:
            groups = {c: (c,) for c in getattr(model, "features_", [])}
    base_in = data.drop(columns=[c for c in FEATURE_COLUMNS if c in data.columns]) if config else data

    def rmse(pred: pd.DataFrame) -> dict[str, float]:
        out = {}
        for t in targets:
            y, p = data[t].to_numpy(np.float64), pred[t].to_numpy(np.float64)
            ok = _positive(y) & _positive(p)
            out[t] = float(np.sqrt(np.mean((np.log(y[ok]) - np.log(p[ok])) ** 2))) if ok.sum() else np.nan
        return out

    ref = rmse(model.predict(base_in))
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for name, cols in groups.items():
        cols = [c for c in cols if c in base_in.columns]
        if not cols:
            continue
        deltas: dict[str, list[float]] = {t: [] for t in targets}
        for _ in range(n_repeats):
            perm = rng.permutation(len(base_in))
            x = base_in.copy()
            x[cols] = base_in[cols].iloc[perm].to_numpy()
            try:
                r = rmse(model.predict(x))
            except Exception:  # a shuffled combination the model cannot take: no score for it
                continue
            for t in targets:
                deltas[t].append(r[t] - ref[t])
        for t in targets:
            d = np.array(deltas[t], dtype=np.float64)
            rows.append(
                {
                    "target": t,
                    "input": name,
                    "importance": float(np.nanmean(d)) if len(d) else np.nan,
                    "importance_std": float(np.nanstd(d)) if len(d) else np.nan,
                }
            )
    out = pd.DataFrame(rows, columns=["target", "input", "importance", "importance_std"])
    out = out.sort_values(["target", "importance"], ascending=[True, False])
    return out.groupby("target", group_keys=False).head(top).reset_index(drop=True)


def objectives_for(df: pd.DataFrame) -> list[tuple[str, str]]:
    """Return the default Pareto objectives ``df`` has values for (energy per image derived from energy and batch)."""
    from carb.decide.pareto import DEFAULT_OBJECTIVES

    out = []
    for c, d in DEFAULT_OBJECTIVES:
        if c == "energy_j_per_image" and c not in df.columns and {"energy_j", "batch"} <= set(df.columns):
            v = df["energy_j"]
        elif c in df.columns:
            v = df[c]
        else:
            continue
        if np.isfinite(np.asarray(v, dtype=np.float64)).any():
            out.append((c, d))
    return out


def measured_front(
    df: pd.DataFrame, objectives: Sequence[tuple[str, str]] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """Return (``ok`` rows with derived columns, their Pareto front ranked as screen's shortlist, the objectives)."""
    from carb.decide.pareto import front_mask

    data = _ok(df).reset_index(drop=True)
    if "energy_j" in data.columns and "batch" in data.columns and "energy_j_per_image" not in data.columns:
        data = data.assign(energy_j_per_image=data["energy_j"] / data["batch"])
    objs = list(objectives) if objectives is not None else objectives_for(data)
    if not objs:
        raise ValueError("no objective with values to build a Pareto front on")
    front = data[front_mask(data, objs)].copy()
    ranks = np.column_stack([front[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
    front["rank"] = pd.Series(ranks.mean(axis=1), index=front.index).rank(method="first").astype(int)
    return data, front.sort_values("rank").reset_index(drop=True), objs
