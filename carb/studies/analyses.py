"""Characterization analyses of measured datasets: how cost grows with the batch (scaling),
how well one device's costs carry over to another (transfer), which inputs drive a model
(importance), and the Pareto front of measured configs.

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

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "TARGETS", "UNITS", "ARCH_COLUMNS", "MIN_REGIME_CONTRAST", "ScalingResult", "scaling",
    "TransferResult", "transfer", "GBMRegressor", "default_model_factory", "HELP_GPU_BATCH1",
    "help_fbnet_datasets", "help_fbnet_transfer", "holdout_predictions", "importance",
    "measured_front", "objectives_for", "config_label", "split_devices",
    "NB201_GPUS", "nb201_batch_scaling", "nb201_transfer_matrix", "nb201_decoupling",
]

#: the targets analysed, with their units
TARGETS: tuple[str, ...] = ("energy_j", "latency_ms", "memory_mb")
UNITS: dict[str, str] = {"energy_j": "J", "latency_ms": "ms", "memory_mb": "MB",
                         "energy_j_per_image": "J", "flops_per_image": "FLOP"}
#: the columns that identify an architecture at a precision (every parameter but the batch)
ARCH_COLUMNS: tuple[str, ...] = ("family", "block", "depth", "width", "early_downsample", "input_size",
                                 "precision", "classes")
#: two-segment slopes closer than this are one regime (no boundary reported)
MIN_REGIME_CONTRAST = 0.2
#: the batch-1 GPU settings of HELP's FBNet data (latency, ms)
HELP_GPU_BATCH1: tuple[str, ...] = ("1080ti_1", "2080ti_1", "titan_rtx_1", "titanx_1", "titanxp_1")


# -- helpers --------------------------------------------------------------------------------


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``status == ok`` (all rows when there is no status column)."""
    return df[df["status"] == "ok"] if "status" in df.columns else df


def _positive(v: Any) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return np.isfinite(a) & (a > 0)


def split_devices(df: pd.DataFrame, name: str = "data") -> dict[str, pd.DataFrame]:
    """One frame per value of the ``device`` column (``{name: df}`` without one)."""
    if "device" not in df.columns or df["device"].nunique(dropna=True) == 0:
        return {name: df}
    return {str(d): g.reset_index(drop=True) for d, g in df.groupby("device", sort=True)}


def config_label(df: pd.DataFrame) -> pd.Series:
    """A short human label per row: ``cifar basic d20 w0.5 ds 32px b8 bf16`` for CARB
    configs, ``arch 123`` where only an ``arch_id`` is known, else the ``config_id``."""
    if df.empty:  # empty columns may have any dtype; string concatenation would fail on them
        return pd.Series([], index=df.index, dtype=object)
    if all(c in df.columns for c in ("family", "block", "depth", "width", "input_size", "batch", "precision")):
        ds = df["early_downsample"].map(lambda v: " ds" if bool(v) else "") if "early_downsample" in df.columns \
            else ""
        return (df["family"].astype(str) + " " + df["block"].astype(str) + " d" + df["depth"].astype(str)
                + " w" + df["width"].map(lambda w: f"{float(w):g}") + ds + " "
                + df["input_size"].astype(str) + "px b" + df["batch"].astype(str) + " " + df["precision"].astype(str))
    if "arch_id" in df.columns:
        return "arch " + df["arch_id"].astype(str)
    if "config_id" in df.columns:
        return df["config_id"].astype(str)
    return pd.Series([f"row {i}" for i in range(len(df))], index=df.index)


# -- scaling --------------------------------------------------------------------------------


@dataclass
class ScalingResult:
    """Output of :func:`scaling`.

    Attributes:
        profile: one row per device, target and batch size: ``n_rows`` measured there,
            ``cost`` (target units per forward of the batch) and ``cost_per_image`` of the
            median architecture, ``elasticity``, ``median_measured`` and
            ``median_measured_per_image`` (plain medians of the rows at that batch).
        summary: one row per device and target: ``unit``, ``batch_min``, ``batch_max``,
            ``n_rows``, ``n_archs``, ``n_archs_linked`` (architectures measured at two batch
            sizes or more: they carry the profile), ``factor``, ``per_image_gain``,
            ``boundary_batch``, ``slope_launch``, ``slope_throughput``, ``saturation_batch``,
            ``note`` (why a target was skipped or what limits it).
        definitions: the definitions of the columns, in words.
    """

    profile: pd.DataFrame
    summary: pd.DataFrame
    definitions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"summary": [...], "profile": [...], "definitions": {...}}`` (NaN -> None)."""
        return {"summary": _records(self.summary), "profile": _records(self.profile),
                "definitions": dict(self.definitions)}


_SCALING_DEFINITIONS = {
    "cost": "cost of one forward of the batch for the median architecture: exp(median(a) + b[batch]) of "
            "the least-squares fit log cost = a[architecture] + b[batch]",
    "factor": "cost at the largest batch / cost at the smallest batch",
    "per_image_gain": "per-image cost at the smallest batch / per-image cost at the largest batch",
    "elasticity": "log-log slope of cost against batch from the previous batch size (0: the extra images "
                  "are free, launch-bound; 1: cost grows with the images, throughput-bound)",
    "boundary_batch": "breakpoint of a continuous two-segment least-squares line through the profile in "
                      f"log-log; NaN when the two slopes differ by less than {MIN_REGIME_CONTRAST}",
    "saturation_batch": "smallest batch whose per-image cost is within flat_tol of the profile's lowest",
}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for r in df.to_dict(orient="records"):
        out.append({k: _jsonable(v) for k, v in r.items()})
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _two_way(arch: np.ndarray, bidx: np.ndarray, y: np.ndarray, n_batch: int,
             iters: int = 5000, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of ``y = a[arch] + b[batch]`` by alternating means (exact for the two-way
    additive model; converges on a connected design). Returns (a, b) with b[0] = 0."""
    n_arch = int(arch.max()) + 1
    a = np.bincount(arch, weights=y, minlength=n_arch) / np.maximum(np.bincount(arch, minlength=n_arch), 1)
    b = np.zeros(n_batch)
    cnt_a = np.maximum(np.bincount(arch, minlength=n_arch), 1)
    cnt_b = np.maximum(np.bincount(bidx, minlength=n_batch), 1)
    for _ in range(iters):
        b_new = np.bincount(bidx, weights=y - a[arch], minlength=n_batch) / cnt_b
        a_new = np.bincount(arch, weights=y - b_new[bidx], minlength=n_arch) / cnt_a
        done = max(np.max(np.abs(b_new - b)), np.max(np.abs(a_new - a))) < tol
        a, b = a_new, b_new
        if done:
            break
    shift = b[0]
    return a + shift, b - shift


def _largest_component(arch: np.ndarray, bidx: np.ndarray, n_batch: int) -> np.ndarray:
    """Mask of the rows in the largest connected component of the architecture-batch graph:
    batch effects are only comparable within one component."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n_arch = int(arch.max()) + 1
    n = n_arch + n_batch
    g = coo_matrix((np.ones(len(arch)), (arch, n_arch + bidx)), shape=(n, n))
    _, lab = connected_components(g, directed=False)
    row_lab = lab[arch]
    best = np.bincount(row_lab).argmax()
    return row_lab == best


def _hinge(x: np.ndarray, y: np.ndarray, grid: int = 200) -> tuple[float, float, float]:
    """Continuous two-segment least-squares line through (x, y): (breakpoint, slope below,
    slope above). Needs 4 points or more (NaNs otherwise)."""
    if len(x) < 4:
        return float("nan"), float("nan"), float("nan")
    best = None
    # breakpoints strictly inside the data, with at least two points on each side's span
    lo, hi = x[1], x[-2]
    for x0 in np.linspace(lo, hi, grid):
        X = np.column_stack([np.ones_like(x), np.minimum(x, x0) - x0, np.maximum(x, x0) - x0])
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        sse = float(np.sum((y - X @ coef) ** 2))
        if best is None or sse < best[0] - 1e-12:
            best = (sse, float(x0), float(coef[1]), float(coef[2]))
    return best[1], best[2], best[3]


def scaling(df: pd.DataFrame, device: str | None = None, targets: Sequence[str] = TARGETS,
            flat_tol: float = 0.10, by: str | None = None) -> ScalingResult:
    """How energy (J), latency (ms) and peak memory (MB) grow with the batch, per device.

    Args:
        df: a dataset (``ok`` rows are used; needs ``batch`` and the architecture columns
            :data:`ARCH_COLUMNS` that it has).
        device: analyse only this device (value of the ``device`` column); default: each.
        targets: target columns to analyse (absent or all-NaN ones get a row with a note).
        flat_tol: tolerance of ``saturation_batch`` (fraction of the lowest per-image cost).
        by: also split by this column (e.g. ``precision`` or ``family``); the outputs then
            have a column of that name after ``device``.

    Returns:
        A :class:`ScalingResult` (definitions in this module's docstring).

    Raises:
        ValueError: no ``batch`` column, ``device`` not in the data, or no ``by`` column.
    """
    if "batch" not in df.columns:
        raise ValueError("scaling needs a batch column (this dataset has none)")
    if by is not None and by not in df.columns:
        raise ValueError(f"by: no column {by!r} in the data")
    data = _ok(df)
    if device is not None:
        if "device" not in data.columns or device not in set(data["device"].astype(str)):
            raise ValueError(f"device {device!r} not in the data")
        data = data[data["device"].astype(str) == device]
    groups: dict[tuple[str, Any], pd.DataFrame] = {}
    for dev, g in split_devices(data, name=device or "data").items():
        for val, part in (g.groupby(by, sort=True) if by is not None else [(None, g)]):
            groups[(dev, val)] = part
    keys = [c for c in ARCH_COLUMNS if c in data.columns]
    prof_rows: list[dict[str, Any]] = []
    sum_rows: list[dict[str, Any]] = []
    for (dev, val), g in groups.items():
        grp = {by: val} if by is not None else {}
        for t in targets:
            base = {"device": dev, **grp, "target": t, "unit": UNITS.get(t, "")}
            if t not in g.columns:
                sum_rows.append({**base, "note": f"no {t} column"})
                continue
            ok = _positive(g[t])
            rows = g[ok]
            batches = np.sort(rows["batch"].unique())
            if len(rows) == 0:
                sum_rows.append({**base, "n_rows": 0, "note": f"{t} not measured on this device"})
                continue
            if len(batches) < 2:
                sum_rows.append({**base, "n_rows": int(len(rows)), "batch_min": float(batches[0]),
                                 "batch_max": float(batches[0]), "note": "one batch size only"})
                continue
            arch = (pd.factorize(rows[keys].astype(str).agg("|".join, axis=1))[0] if keys
                    else np.zeros(len(rows), dtype=int))
            bidx = np.searchsorted(batches, rows["batch"].to_numpy())
            y = np.log(rows[t].to_numpy(np.float64))
            n_archs = int(arch.max()) + 1
            # architectures measured at 2+ batch sizes (distinct batches, not rows): they carry the profile
            linked = int((pd.Series(bidx).groupby(arch).nunique() >= 2).sum())
            note = ""
            comp = _largest_component(arch, bidx, len(batches))
            if linked and not comp.all() and len(np.unique(bidx[comp])) >= 2:
                note = f"{int((~comp).sum())} rows outside the largest linked set of architectures left out"
                arch = pd.factorize(arch[comp])[0]
                used = np.unique(bidx[comp])
                bidx = np.searchsorted(used, bidx[comp])
                batches, y, rows = batches[used], y[comp], rows[comp]
                comp = np.ones(len(rows), dtype=bool)
            raw = rows.groupby("batch")[t].median().reindex(batches).to_numpy()
            if linked and comp.all():
                a, b = _two_way(arch, bidx, y, len(batches))
                cost = np.exp(float(np.median(a)) + b)
            else:
                # no within-architecture link between batch sizes: the plain medians are all there is
                cost = raw.astype(np.float64)
                note = "no architecture links two batch sizes: plain medians per batch (they mix architectures)"
            per_img = cost / batches
            lb = np.log(batches.astype(np.float64))
            el = np.r_[np.nan, np.diff(np.log(cost)) / np.diff(lb)]
            n_at = np.bincount(bidx, minlength=len(batches))
            for i, bs in enumerate(batches):
                prof_rows.append({"device": dev, **grp, "target": t, "batch": float(bs), "n_rows": int(n_at[i]),
                                  "cost": float(cost[i]), "cost_per_image": float(per_img[i]),
                                  "elasticity": float(el[i]), "median_measured": float(raw[i]),
                                  "median_measured_per_image": float(raw[i] / bs)})
            x0, s1, s2 = _hinge(lb, np.log(cost))
            boundary = float(np.exp(x0)) if np.isfinite(x0) and abs(s2 - s1) >= MIN_REGIME_CONTRAST else float("nan")
            sat = float(batches[np.flatnonzero(per_img <= per_img.min() * (1 + flat_tol))[0]])
            sum_rows.append({**base, "batch_min": float(batches[0]), "batch_max": float(batches[-1]),
                             "n_rows": int(len(rows)), "n_archs": n_archs, "n_archs_linked": linked,
                             "factor": float(cost[-1] / cost[0]),
                             "per_image_gain": float(per_img[0] / per_img[-1]),
                             "boundary_batch": boundary, "slope_launch": s1, "slope_throughput": s2,
                             "saturation_batch": sat, "note": note})
    extra = [by] if by is not None else []
    summary_cols = ["device", *extra, "target", "unit", "batch_min", "batch_max", "n_rows", "n_archs", "n_archs_linked",
                    "factor", "per_image_gain", "boundary_batch", "slope_launch", "slope_throughput",
                    "saturation_batch", "note"]
    summary = pd.DataFrame(sum_rows).reindex(columns=summary_cols)
    summary["note"] = summary["note"].fillna("")
    profile = pd.DataFrame(prof_rows, columns=["device", *extra, "target", "batch", "n_rows", "cost",
                                               "cost_per_image", "elasticity", "median_measured",
                                               "median_measured_per_image"])
    defs = {**_SCALING_DEFINITIONS, "saturation_batch": _SCALING_DEFINITIONS["saturation_batch"].replace(
        "flat_tol", f"{100 * flat_tol:g}%")}
    return ScalingResult(profile=profile, summary=summary, definitions=defs)


# -- models for transfer and holdouts ---------------------------------------------------------


_NOT_FEATURES = ("config_id", "arch_id", "device", "status", "message", "run_id", "measured_at", "extra",
                 "timed_s", "wall_s", "energy_missing_reason", "energy_gross_j")


class GBMRegressor:
    """A light model for any table: one LightGBM per target on log(target), reading the
    numeric columns that are neither targets, their spread columns nor identifiers.

    The default model of :func:`transfer` for data that are not CARB configs (e.g. HELP's
    FBNet latency). Same interface as :class:`carb.model.CARB`: ``fit(df)``,
    ``predict(df)`` with ``<target>``, ``_lo``, ``_hi`` (a conformal interval: the
    ``coverage`` quantile of out-of-fold absolute log residuals), ``targets_``.

    Args:
        targets: target columns to model (those with >= ``min_rows`` positive values are).
        features: input columns; default: every numeric non-target, non-id column.
        n_estimators, num_leaves, learning_rate: LightGBM settings.
        coverage: nominal coverage of the interval.
        interval_folds: folds of the out-of-fold residuals of the interval; 0: no interval
            (``_lo``/``_hi`` NaN; fitting is then ``interval_folds + 1`` times faster).
        random_state: seed.
        min_rows: fewest labelled rows a target needs.
    """

    def __init__(self, targets: Sequence[str] = TARGETS, features: Sequence[str] | None = None,
                 n_estimators: int = 200, num_leaves: int = 31, learning_rate: float = 0.08,
                 coverage: float = 0.9, interval_folds: int = 5, random_state: int = 0,
                 min_rows: int = 20) -> None:
        self.targets = tuple(targets)
        self.features = features
        self.n_estimators = n_estimators
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.coverage = coverage
        self.interval_folds = interval_folds
        self.random_state = random_state
        self.min_rows = min_rows

    def _columns(self, df: pd.DataFrame) -> list[str]:
        if self.features is not None:
            return list(self.features)
        tgt_prefixes = tuple(TARGETS) + tuple(self.targets)
        return [c for c in df.columns
                if c not in _NOT_FEATURES and not c.startswith(tgt_prefixes)
                and (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))]

    def _new(self) -> Any:
        import lightgbm as lgb

        return lgb.LGBMRegressor(n_estimators=self.n_estimators, num_leaves=self.num_leaves,
                                 learning_rate=self.learning_rate, min_child_samples=5,
                                 random_state=self.random_state, n_jobs=1, verbose=-1)

    def fit(self, df: pd.DataFrame) -> "GBMRegressor":
        """Fit one model per target with enough labelled rows (``ok`` rows only).

        Raises:
            ValueError: no target has ``min_rows`` labelled rows.
        """
        df = _ok(df).reset_index(drop=True)
        self.features_ = self._columns(df)
        X = df[self.features_].to_numpy(np.float64)
        self.models_: dict[str, Any] = {}
        self.halfwidth_: dict[str, float] = {}
        for t in self.targets:
            if t not in df.columns:
                continue
            ok = _positive(df[t])
            if ok.sum() < self.min_rows:
                continue
            y = np.log(df[t].to_numpy(np.float64)[ok])
            Xt = X[ok]
            K = int(self.interval_folds)
            if K >= 2:
                folds = np.random.default_rng(self.random_state).permutation(len(y)) % K
                oof = np.empty(len(y))
                for k in range(K):
                    tr, va = folds != k, folds == k
                    oof[va] = self._new().fit(Xt[tr], y[tr]).predict(Xt[va])
                r = np.abs(y - oof)
                q = min(1.0, math.ceil((len(r) + 1) * self.coverage) / len(r))
                self.halfwidth_[t] = float(np.quantile(r, q, method="higher"))
            else:
                self.halfwidth_[t] = float("nan")
            self.models_[t] = self._new().fit(Xt, y)
        if not self.models_:
            raise ValueError(f"no target with {self.min_rows} labelled rows to fit")
        self.targets_ = [t for t in self.targets if t in self.models_]
        return self

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """Predictions (target units) with the interval, one row per row of ``df``."""
        X = df[self.features_].to_numpy(np.float64)
        out = pd.DataFrame(index=df.index)
        for t in self.targets:
            if t in self.models_:
                z = self.models_[t].predict(X)
                h = self.halfwidth_[t]
                out[t], out[f"{t}_lo"], out[f"{t}_hi"] = np.exp(z), np.exp(z - h), np.exp(z + h)
            else:
                out[t] = out[f"{t}_lo"] = out[f"{t}_hi"] = np.nan
        return out


def _is_config_table(df: pd.DataFrame) -> bool:
    from carb.families.features import REQUIRED_COLUMNS

    return all(c in df.columns for c in REQUIRED_COLUMNS)


def default_model_factory(example: pd.DataFrame) -> Callable[[], Any]:
    """A factory of fresh, unfitted models suited to ``example``: ``CARB(preset="fast")`` for
    CARB config datasets, :class:`GBMRegressor` for anything else."""
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
        return m.pivot(index="train", columns="test", values=metric).reindex(index=self.devices,
                                                                             columns=self.devices)

    def factors(self, target: str = "latency_ms", metric: str = "factor") -> pd.DataFrame:
        """Measured ``factor`` (or ``loglog_slope``) of column device B over row device A."""
        p = self.pairs[self.pairs["target"] == target]
        out = p.pivot(index="a", columns="b", values=metric).reindex(index=self.devices, columns=self.devices)
        for d in self.devices:
            out.loc[d, d] = 1.0
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"key": self.key, "devices": list(self.devices), "matrix": _records(self.matrix),
                "pairs": _records(self.pairs), "definitions": dict(self.definitions)}


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
        return {"n_test": int(len(y)), "r2_log": np.nan, "r2_log_factor": np.nan, "mape": np.nan,
                "spearman": np.nan, "bias": np.nan}
    ly, lp = np.log(y), np.log(p)
    ss = float(np.sum((ly - ly.mean()) ** 2))
    shifted = lp - np.median(lp - ly)
    return {"n_test": int(len(y)),
            "r2_log": float(1 - np.sum((ly - lp) ** 2) / ss) if ss > 0 else np.nan,
            "r2_log_factor": float(1 - np.sum((ly - shifted) ** 2) / ss) if ss > 0 else np.nan,
            "mape": float(np.mean(np.abs(p - y) / y)),
            "spearman": float(spearmanr(y, p).statistic) if np.ptp(y) > 0 and np.ptp(p) > 0 else np.nan,
            "bias": float(np.median(p / y))}


def transfer(datasets: Mapping[str, pd.DataFrame], targets: Sequence[str] | None = None,
             model_factory: Callable[[], Any] | None = None, *, key: str | None = None,
             test_fraction: float = 0.3, seed: int = 0,
             say: Callable[[str], None] | None = None) -> TransferResult:
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
                    rows.append({**base, "n_test": 0, "note": err or ("no held-out rows" if not len(test) else
                                                                      f"{t} not predicted")})
                    continue
                m = _metrics(test[t].to_numpy(np.float64), pred[t].to_numpy(np.float64))
                rows.append({**base, **m, "note": "" if m["n_test"] >= 3 else f"{t}: too few rows to score"})
    matrix = pd.DataFrame(rows).reindex(columns=["train", "test", "target", "n_test", "r2_log", "r2_log_factor", "mape",
                                                 "spearman",
                                                 "bias", "note"])
    matrix["note"] = matrix["note"].fillna("")

    prs: list[dict[str, Any]] = []
    from scipy.stats import spearmanr

    for i, a in enumerate(names):
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
                    rec.update(factor=float(np.exp(np.median(lb - la))), loglog_slope=float(slope),
                               intercept=float(icpt), spearman_measured=float(spearmanr(la, lb).statistic))
                elif ok.sum() >= 1:
                    rec.update(factor=float(np.exp(np.median(lb - la))))
                prs.append(rec)
    pairs = pd.DataFrame(prs).reindex(columns=["a", "b", "target", "n_common", "factor", "loglog_slope", "intercept",
                                               "spearman_measured"])
    return TransferResult(matrix=matrix, pairs=pairs, key=k, devices=names, definitions=dict(_TRANSFER_DEFINITIONS))


def help_fbnet_datasets(devices: Sequence[str] = HELP_GPU_BATCH1, n_archs: int | None = None,
                        seed: int = 0) -> dict[str, pd.DataFrame]:
    """HELP's public FBNet latency (ms) as one dataset per device setting (rows keyed by
    ``arch_id``, with the numeric config and feature columns), optionally ``n_archs``
    architectures drawn at random (the same on every device).

    Raises:
        ValueError: an unknown device setting.
    """
    from carb.datasets import help_fbnet

    wide = help_fbnet.load(wide=True)
    unknown = [d for d in devices if f"latency_ms_{d}" not in wide.columns]
    if unknown:
        raise ValueError(f"help-fbnet: unknown device {unknown[0]!r} (devices: {', '.join(help_fbnet.devices())})")
    if n_archs is not None and n_archs < len(wide):
        wide = wide.sample(n=n_archs, random_state=seed).sort_values("arch_id")
    lat = [c for c in wide.columns if c.startswith("latency_ms_")]
    base = wide.drop(columns=lat)
    return {d: base.assign(device=d, latency_ms=wide[f"latency_ms_{d}"].to_numpy()).reset_index(drop=True)
            for d in devices}


def help_fbnet_transfer(devices: Sequence[str] = HELP_GPU_BATCH1, n_archs: int | None = 2000,
                        seed: int = 0, test_fraction: float = 0.3) -> TransferResult:
    """:func:`transfer` of latency (ms) between HELP's GPU settings (default: the five
    batch-1 GPUs) with :class:`GBMRegressor` on the FBNet config and feature columns."""
    data = help_fbnet_datasets(devices, n_archs=n_archs, seed=seed)
    return transfer(data, targets=["latency_ms"],
                    model_factory=lambda: GBMRegressor(targets=["latency_ms"], interval_folds=0),
                    key="arch_id", test_fraction=test_fraction, seed=seed)


# -- holdout, importance, front ---------------------------------------------------------------


def holdout_predictions(df: pd.DataFrame, model: Any | None = None, *, test_fraction: float = 0.25,
                        seed: int = 0, key: str | None = None) -> tuple[pd.DataFrame, Any, bool]:
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


def importance(model: Any, df: pd.DataFrame, targets: Sequence[str] | None = None, *,
               groups: Mapping[str, Sequence[str]] | None = None, n_repeats: int = 3,
               seed: int = 0, top: int = 15) -> pd.DataFrame:
    """Permutation importance: how much the RMSE of log cost grows when an input is
    shuffled across rows (units: log cost; 0 = the model ignores it).

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
            rows.append({"target": t, "input": name,
                         "importance": float(np.nanmean(d)) if len(d) else np.nan,
                         "importance_std": float(np.nanstd(d)) if len(d) else np.nan})
    out = pd.DataFrame(rows, columns=["target", "input", "importance", "importance_std"])
    out = out.sort_values(["target", "importance"], ascending=[True, False])
    return out.groupby("target", group_keys=False).head(top).reset_index(drop=True)


def objectives_for(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The default Pareto objectives (:data:`carb.decide.pareto.DEFAULT_OBJECTIVES`) that ``df``
    has values for (energy per image is derived from ``energy_j`` and ``batch``)."""
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


def measured_front(df: pd.DataFrame, objectives: Sequence[tuple[str, str]] | None = None
                   ) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """The Pareto front of measured configs (``ok`` rows): (all rows with derived columns,
    the front ranked like :func:`carb.decide.screen.screen`'s shortlist, the objectives used)."""
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


# -- the nb201 dataset (NAS-Bench-201 on 29 device settings) ---------------------------------

#: the five desktop GPUs of HELP's NAS-Bench-201 data, each at batch 1, 32 and 256
NB201_GPUS: tuple[str, ...] = ("1080ti", "2080ti", "titanx", "titanxp", "titan_rtx")


def _nb201_cifar10(df: pd.DataFrame) -> pd.DataFrame:
    """``ok`` rows of the CIFAR-10 input (every platform has it), latency per arch and platform."""
    d = df[(df["status"] == "ok") & (df["dataset"] == "cifar10")]
    return d.pivot_table(index="arch_idx", columns="platform", values="latency_ms", aggfunc="first")


def nb201_batch_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Latency against batch on the five desktop GPUs of the ``nb201`` dataset (CIFAR-10
    input, all cells measured at batch 1, 32 and 256: a balanced grid).

    One row per GPU: ``b1_ms``, ``b32_ms``, ``b256_ms`` (median over cells of the time of
    one forward of the whole batch, ms), ``ratio_32_1`` and ``ratio_256_1`` (medians over
    cells of the per-cell ratios), ``per_image_gain_256`` (per-image time at batch 1 / at
    256, median over cells), ``elasticity_1_32`` and ``elasticity_32_256`` (log-log slopes
    of the median profile: ~0 launch-bound, ~1 throughput-bound), ``share_flat_32``
    (share of cells whose batch-32 forward costs at most 1.2x their batch-1 one).
    """
    lat = _nb201_cifar10(df)
    rows = []
    for g in NB201_GPUS:
        cols = [f"{g}_b{b}" for b in (1, 32, 256)]
        if not all(c in lat.columns for c in cols):
            continue
        t = lat[cols].dropna()
        b1, b32, b256 = (t[c].to_numpy(float) for c in cols)
        m1, m32, m256 = np.median(b1), np.median(b32), np.median(b256)
        rows.append({"gpu": g, "cells": len(t), "b1_ms": m1, "b32_ms": m32, "b256_ms": m256,
                     "ratio_32_1": float(np.median(b32 / b1)), "ratio_256_1": float(np.median(b256 / b1)),
                     "per_image_gain_256": float(np.median(256 * b1 / b256)),
                     "elasticity_1_32": float(np.log(m32 / m1) / np.log(32)),
                     "elasticity_32_256": float(np.log(m256 / m32) / np.log(8)),
                     "share_flat_32": float(np.mean(b32 <= 1.2 * b1))})
    return pd.DataFrame(rows)


def nb201_transfer_matrix(df: pd.DataFrame, method: str = "spearman") -> pd.DataFrame:
    """How one setting's latency ranks the cells of another, for all settings of the ``nb201``
    dataset (CIFAR-10 input; cells measured on both): the Spearman correlation of the
    two settings' measured latencies (``method="spearman"``), or the R² of the log-log line
    from one to the other (``"r2_log"``: the share of log-latency variance a per-device
    factor and exponent carry over). A square DataFrame, settings sorted."""
    lat = _nb201_cifar10(df)
    lat = lat[sorted(lat.columns)]
    if method == "spearman":
        return lat.corr(method="spearman")
    if method == "r2_log":
        return np.log(lat).corr(method="pearson") ** 2
    raise ValueError(f"method {method!r}: expected spearman or r2_log")


def nb201_decoupling(df: pd.DataFrame, platform: str = "edgegpu") -> dict[str, Any]:
    """Energy against latency on one energy platform of the ``nb201`` dataset (default the
    Jetson TX2): how far energy is more than latency times a constant power.

    Returns ``summary`` (rows; mean / sd / p5 / p95 / min / max of the mean power
    ``energy_j / latency_ms`` in W; R² of log energy on log latency; Spearman of energy
    with latency; the share of cell pairs, same input, that energy and latency order
    differently (2,000 cells sampled per input); the MAPE of "latency x median power" as an
    energy predictor; the noise floor: median |cifar10 - cifar100| / pair mean of energy and
    latency), ``by_input`` (power per input variant), ``drivers`` (Spearman of power with
    the latency and each static feature on the CIFAR-10 rows, largest first: what the
    power depends on; needs the feature columns), ``power`` (the rows' power in W).
    """
    d = df[(df["status"] == "ok") & (df["platform"] == platform) & df["energy_j"].notna()].copy()
    if not len(d):
        raise ValueError(f"nb201_decoupling: no energy rows on {platform!r}")
    d["power_w"] = d["energy_j"] / d["latency_ms"] * 1000.0
    p = d["power_w"].to_numpy(float)
    le, ll = np.log(d["energy_j"].to_numpy(float)), np.log(d["latency_ms"].to_numpy(float))
    r2 = float(np.corrcoef(le, ll)[0, 1] ** 2)
    from scipy.stats import spearmanr

    med_power = float(np.median(p))
    const = d["latency_ms"].to_numpy(float) * med_power / 1000.0
    discord = []
    rng = np.random.default_rng(0)
    for _, g in d.groupby("dataset"):
        s = g.iloc[rng.choice(len(g), min(2000, len(g)), replace=False)]
        e, t = s["energy_j"].to_numpy(), s["latency_ms"].to_numpy()
        i, j = np.triu_indices(len(s), 1)
        discord.append(float(np.mean(np.sign(e[i] - e[j]) != np.sign(t[i] - t[j]))))
    pair = d.pivot_table(index="arch_idx", columns="dataset", values=["energy_j", "latency_ms"])
    floor = {}
    for t in ("energy_j", "latency_ms"):
        if ("cifar10" in pair[t].columns) and ("cifar100" in pair[t].columns):
            a, b = pair[t]["cifar10"], pair[t]["cifar100"]
            floor[t] = float(np.nanmedian(np.abs(a - b) / ((a + b) / 2)))
    summary = {"platform": platform, "rows": int(len(d)), "power_mean_w": float(p.mean()), "power_sd_w": float(p.std()),
               "power_p5_w": float(np.quantile(p, 0.05)), "power_p95_w": float(np.quantile(p, 0.95)),
               "power_min_w": float(p.min()), "power_max_w": float(p.max()), "power_median_w": med_power,
               "r2_log_energy_on_log_latency": r2,
               "spearman_energy_latency": float(spearmanr(d["energy_j"], d["latency_ms"]).statistic),
               "pairs_ordered_differently": float(np.mean(discord)),
               "mape_latency_x_median_power": float(np.mean(np.abs(const - d["energy_j"]) / d["energy_j"])),
               "noise_floor_cifar10_vs_cifar100": floor}
    by_input = d.groupby("dataset")["power_w"].agg(["count", "mean", "std", "median"]).reset_index()
    cand = ["latency_ms", "flops", "params", "activation_bytes", "live_activation_bytes", "n_conv", "n_ops",
            "n_none", "n_skip_connect", "n_nor_conv_1x1", "n_nor_conv_3x3", "n_avg_pool_3x3", "n_zero_nodes",
            "arithmetic_intensity", "input_size", "classes"]
    drivers = []
    # within one input (CIFAR-10): across inputs the input size alone moves power (by_input)
    one = d[d["dataset"] == "cifar10"] if (d["dataset"] == "cifar10").any() else d
    for c in cand:
        if c in one.columns and one[c].nunique() > 1:
            drivers.append({"input": c, "spearman_with_power": float(spearmanr(one[c], one["power_w"]).statistic)})
    drivers = pd.DataFrame(drivers)
    if len(drivers):
        drivers = drivers.reindex(drivers["spearman_with_power"].abs().sort_values(ascending=False).index)
    return {"summary": summary, "by_input": by_input, "drivers": drivers.reset_index(drop=True), "power": d[
        ["arch_idx", "dataset", "latency_ms", "energy_j", "power_w"]].reset_index(drop=True)}
