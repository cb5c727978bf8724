"""Few-shot transfer of a cost predictor to an unseen device.

The problem: many configs are measured on some *source* devices; on a new *target*
device only K of them (K = 5 .. 50) are. Predict the target's cost (latency in ms, or
any other positive additive cost such as energy in J) for every config.

The method, chosen by measurement on HELP's public FBNet data
(``benchmarks/bench_help_fewshot.py``; validation devices for the choices, target
devices for the report):

1. **Source models** (:class:`SourceModels`), one per source device, learn the cost from
   the config features on all the source measurements. The default is a ridge
   regression (its penalty chosen by generalized cross-validation): on layer-operation
   counts it is a per-layer lookup table, which transferred better than gradient boosting
   (mean Spearman 0.984 against 0.971 on HELP's validation devices, two GPUs at three
   batch sizes and a CPU, 10 reference + 10 random measurements). LightGBM is available
   for costs that are not sums of per-layer costs.
2. **The map** (:class:`FewShotModel`) to the target is fitted on the K measurements. Its
   features are the source models' predictions plus *passthrough* config features that
   are themselves costs (multiply-accumulates, parameters, activation elements, number
   of convolutions). Both are physically non-negative contributions to latency, so:

   - ``"nnls"``: non-negative least squares on the standardized features with a free
     intercept. The sign constraint is the regularization: no penalty to tune, and a
     sparse, readable mix (raspi4 from 10 + 10 measurements: 0.9 ms per million
     depthwise MACs, 6.6 ms per million parameters, 1.6 ms per million activations,
     0.75 x the 1080 Ti's batch-64 latency, ...).
   - ``"single"``: a weighted average of one-feature linear fits (positive slope only),
     each weighted by ``exp(-(e - e_min) / e_min)`` with ``e`` its exact leave-one-out
     squared error. Two parameters per fit, so it survives K = 5, where NNLS over a dozen
     features overfits (mean Spearman 0.945 against 0.922 on the validation devices).
   - ``"auto"`` (default): ``"single"`` below :data:`AUTO_MIN_K_NNLS` measurements,
     ``"nnls"`` from there (0.985 against 0.983 at K = 20, 0.980 against 0.979 at K = 10).

What did not help in exploratory runs on the same data: ridge maps with the penalty
chosen by leave-one-out on the K points, Bayesian ridge, choosing among maps by
leave-one-out (all noisier than NNLS at K <= 20), per-stage analytic features (they
overfit), and a per-target residual ridge on the op counts (+0.001 at K = 20, nothing at
K = 10: not worth its code).

Units: the map works in the target's own units (ms for latency); predictions are in
those units. Spearman correlation, the usual few-shot metric, is unaffected by them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import nnls
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import RidgeCV
from sklearn.utils.validation import check_is_fitted

__all__ = ["AUTO_MIN_K_NNLS", "SourceModels", "FewShotModel", "fit_fewshot", "LogMap", "fit_additive", "fit_log_map", "ModelSource", "fewshot_help_fbnet", "HELP_PASSTHROUGH", "HELP_TRIM", "trim_middle"]

#: With fewer target measurements than this, ``method="auto"`` uses ``"single"``.
#: Measured on HELP's validation devices: ``"single"`` wins at K = 5, ``"nnls"`` at 10.
AUTO_MIN_K_NNLS = 8

_RIDGE_ALPHAS = np.logspace(-4, 3, 15)

ArrayLike = pd.DataFrame | np.ndarray


def _select(X: ArrayLike, columns: Sequence[str] | Sequence[int] | None) -> np.ndarray:
    """Columns of X as a float matrix; names for a DataFrame, indices for an array."""
    if isinstance(X, pd.DataFrame):
        frame = X if columns is None else X.loc[:, list(columns)]
        return frame.to_numpy(dtype=float)
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D feature matrix, got shape {arr.shape}")
    return arr if columns is None else arr[:, list(columns)]


class SourceModels:
    """One cost model per source device, fitted on that device's measurements.

    Parameters
    ----------
    model:
        ``"ridge"`` (default; penalty chosen by generalized cross-validation over
        1e-4 .. 1e3) or ``"lgbm"`` (LightGBM, ``n_estimators`` trees).
    columns:
        Feature columns the models use (names for a DataFrame, indices for an array);
        all columns when None.
    log_target:
        Fit log(cost) and predict exp of it. Off by default: a sum of per-layer costs
        is linear in raw units.
    n_estimators, learning_rate, num_leaves, n_jobs, random_state:
        LightGBM settings (ignored for ridge).
    """

    def __init__(
        self,
        model: str = "ridge",
        *,
        columns: Sequence[str] | Sequence[int] | None = None,
        log_target: bool = False,
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        n_jobs: int = 1,
        random_state: int = 0,
    ) -> None:
        self.model = model
        self.columns = columns
        self.log_target = log_target
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _new(self):
        if self.model == "ridge":
            return RidgeCV(alphas=_RIDGE_ALPHAS)
        if self.model == "lgbm":
            import lightgbm as lgb  # optional: only this model needs it

            return lgb.LGBMRegressor(
                n_estimators=self.n_estimators, learning_rate=self.learning_rate,
                num_leaves=self.num_leaves, n_jobs=self.n_jobs,
                random_state=self.random_state, verbose=-1,
                # same inputs, same trees, whatever the thread count (LightGBM's documented pair)
                deterministic=True, force_row_wise=True,
            )
        raise ValueError(f"unknown source model {self.model!r} (expected 'ridge' or 'lgbm')")

    def fit(self, X: ArrayLike, y_sources: Mapping[str, np.ndarray],
            rows: Mapping[str, np.ndarray] | None = None) -> "SourceModels":
        """Fit one model per device. ``y_sources[device]`` holds the cost of every row of
        X on that device (units: as measured, e.g. ms), finite and, with ``log_target``,
        positive. ``rows[device]`` (optional; positional indices into X) restricts that
        device's model to those rows, e.g. HELP's per-device trimmed pool
        (:func:`trim_middle`); the costs outside them are not read. Returns self."""
        if not y_sources:
            raise ValueError("no source devices given")
        F = _select(X, self.columns)
        self.models_: dict[str, object] = {}
        for device, y in y_sources.items():
            y = np.asarray(y, dtype=float)
            if y.shape != (len(F),):
                raise ValueError(f"source {device}: {y.shape[0] if y.ndim else 0} costs for {len(F)} configs")
            idx = np.arange(len(F)) if rows is None or device not in rows else np.asarray(rows[device], dtype=int)
            y = y[idx]
            if not np.isfinite(y).all() or (self.log_target and (y <= 0).any()):
                raise ValueError(f"source {device}: costs must be finite{' and positive' if self.log_target else ''}")
            self.models_[device] = self._new().fit(F[idx], np.log(y) if self.log_target else y)
        self.devices_: list[str] = list(self.models_)
        return self

    def predict(self, X: ArrayLike, devices: Sequence[str] | None = None) -> np.ndarray:
        """Predicted cost on each source device, shape (n, devices); units of the
        source measurements. ``devices`` picks and orders a subset (all by default)."""
        F = _select(X, self.columns)
        names = self.devices_ if devices is None else list(devices)
        missing = [d for d in names if d not in self.models_]
        if missing:
            raise ValueError(f"no source model for {missing}")
        out = np.column_stack([self.models_[d].predict(F) for d in names])
        return np.exp(out) if self.log_target else out


def _batch(X: ArrayLike) -> np.ndarray:
    if isinstance(X, pd.DataFrame) and "batch" in X.columns:
        return X["batch"].to_numpy(float)
    return np.ones(len(X))


def _nnls_map(F: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative weights on standardized features plus a free intercept, returned as
    weights and intercept on the raw features."""
    mu = F.mean(axis=0)
    sd = F.std(axis=0)
    usable = sd > 1e-12 * (np.abs(mu) + 1.0)  # a feature constant on the K points says nothing
    w = np.zeros(F.shape[1])
    if usable.any():
        Z = (F[:, usable] - mu[usable]) / sd[usable]
        c, _ = nnls(Z, y - y.mean())
        w[usable] = c / sd[usable]
    return w, float(y.mean() - mu @ w)


def _single_map(F: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Weighted average of one-feature least-squares lines with positive slope; the
    weight of each falls with its leave-one-out error. Being linear, the average is again
    one weight per feature and an intercept."""
    k = len(y)
    slopes, intercepts, errors, which = [], [], [], []
    for j in range(F.shape[1]):
        f = F[:, j]
        fc = f - f.mean()
        ss = fc @ fc
        if ss <= 1e-12 * (f @ f + 1.0):
            continue
        slope = fc @ (y - y.mean()) / ss
        if slope <= 0:  # a cost feature that ranks the target backwards is not a cost model
            continue
        resid = y - (y.mean() + slope * fc)
        if k >= 3:
            # exact leave-one-out residual of a simple linear fit: r / (1 - leverage)
            leverage = 1.0 / k + fc**2 / ss
            err = float(np.mean((resid / np.maximum(1.0 - leverage, 1e-9)) ** 2))
        else:
            err = 0.0  # two points: every line fits, nothing tells them apart
        slopes.append(slope)
        intercepts.append(y.mean() - slope * f.mean())
        errors.append(err)
        which.append(j)
    w = np.zeros(F.shape[1])
    if not which:  # no feature rises with the target: predict its mean
        return w, float(y.mean())
    e = np.array(errors)
    scale = e.min() if e.min() > 0 else (e.mean() if e.mean() > 0 else 1.0)
    weights = np.exp(-(e - e.min()) / scale)
    weights /= weights.sum()
    w[which] = weights * np.array(slopes)
    return w, float(weights @ np.array(intercepts))


#: from this many measurements on, the log-space map may also read log(batch)
MIN_K_BATCH_TERM = 8


@dataclass
class LogMap:
    """A map in log space from one source prediction ``s`` to the target:
    ``log y = coef[0] + coef[1] log s (+ coef[2] log batch)``; ``q`` is the quantile of
    its leave-one-out residuals (log) that widens intervals; ``n`` the K it was fitted on."""

    coef: list[float]
    q: float
    n: int
    #: conformal quantile of the leave-one-out residuals divided by the source's own
    #: interval half-width (log) at each measured config; when set, intervals are the
    #: source's locally adaptive width times this, instead of the source interval widened
    #: by ``q`` (which counts the source's error twice). ``None``: not fitted (too few K).
    scale_q: float | None = None
    #: the leave-one-out residuals (log) of the chosen map, kept for fitting ``scale_q``
    loo: list[float] | None = field(default=None, repr=False, compare=False)
    #: ``(min, max)`` of the source predictions the map was fitted on (target units). Outside
    #: it the map holds the ratio target / source it has at the nearer end (slope 1 in log)
    #: instead of carrying its fitted slope on: a slope learnt between 2 and 600 ms said
    #: nothing about 0.4 ms configs, and on the cpu pair the 2-thread ratio flattens at both
    #: ends (``benchmarks/RESULTS.md``, the demo simulated offline). ``None``: no limit.
    s_range: tuple[float, float] | None = None
    #: a constant added after the log map, in the target's units (``0``: none). Fitted only
    #: where :func:`fit_log_map` is offered the additive form (``y = s + add``): a device
    #: that holds a fixed amount more or less than the source, such as the memory of a
    #: second thread's runtime buffers, which no multiplicative map expresses.
    add: float = 0.0

    def to_dict(self) -> dict:
        """The map as JSON-ready fields (what :meth:`from_dict` reads back)."""
        return {"coef": self.coef, "q": self.q, "n": self.n, "scale_q": self.scale_q,
                "s_range": None if self.s_range is None else list(self.s_range), "add": self.add}

    @classmethod
    def from_dict(cls, m: dict) -> "LogMap":
        """A map from :meth:`to_dict`'s fields; fields written before they existed read as
        absent (no scale, no range: the map carries its slope on, no constant)."""
        return cls(coef=[float(c) for c in m["coef"]], q=float(m["q"]), n=int(m["n"]),
                   scale_q=None if m.get("scale_q") is None else float(m["scale_q"]),
                   s_range=None if m.get("s_range") is None else (float(m["s_range"][0]), float(m["s_range"][1])),
                   add=float(m.get("add", 0.0)))

    def design(self, log_s: np.ndarray, batch: np.ndarray) -> np.ndarray:
        cols = [np.ones_like(log_s), log_s]
        if len(self.coef) == 3:
            cols.append(np.log(batch))
        return np.column_stack(cols)

    def apply(self, s: np.ndarray, batch: np.ndarray, widen: float = 0.0) -> np.ndarray:
        """``exp(map(log s) + widen) + add``, in the target's units; outside ``s_range`` the
        ratio at its nearer end times ``s``."""
        s = np.maximum(np.asarray(s, float), 1e-12)
        inside = s if self.s_range is None else np.clip(s, *self.s_range)
        z = self.design(np.log(inside), np.asarray(batch, float))
        out = np.exp(z @ np.asarray(self.coef) + widen) * (s / inside)
        # a negative constant must not take a cost to or below zero far from the K points
        return np.maximum(out + self.add, 1e-3 * out) if self.add else out


def fit_additive(s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray] | None:
    """The additive map ``y = s + c``: ``c`` (the median of ``y - s``, in the units of
    ``s`` and ``y``) and its exact leave-one-out residuals in log, ``log y_i - log(s_i +
    c_-i)``; ``None`` when a left-out ``s_i + c_-i`` is not positive (no log residual)."""
    s, y = np.asarray(s, float), np.asarray(y, float)
    n = len(y)
    keep = ~np.eye(n, dtype=bool)
    c_loo = np.array([np.median((y - s)[keep[i]]) for i in range(n)])
    if not (s + c_loo > 0).all():
        return None
    return float(np.median(y - s)), np.log(y) - np.log(s + c_loo)


def fit_log_map(s: np.ndarray, y: np.ndarray, batch: np.ndarray, coverage: float = 0.9,
                additive: bool = False, max_terms: int = 3) -> LogMap:
    """Choose among four maps by exact leave-one-out error (least squares, hat matrix):
    the identity (``log y = log s``), a device factor alone (``log y = a + log s``), a
    line (``a + b log s``), and, from :data:`MIN_K_BATCH_TERM` measurements, a line plus
    ``c log batch``. With few or noisy measurements the simpler maps win: they cannot
    overfit. ``s`` and ``y`` are positive costs (e.g. ms), ``batch`` images per forward.
    ``additive``: a fifth candidate, :func:`fit_additive` (``y = s + c``, its leave-one-out
    residuals in log like the others'), a device that holds a fixed amount more or less
    than the source (:attr:`LogMap.add`).
    ``max_terms``: the most coefficients a candidate map may fit (1: the identity or the
    factor only; 2: also the line).
    The map keeps the range of ``s`` (:attr:`LogMap.s_range`): outside it, it holds its ratio."""
    log_s, log_y = np.log(np.asarray(s, float)), np.log(np.asarray(y, float))
    batch = np.asarray(batch, float)
    n = len(log_y)
    # None: the identity (the source as it is: nothing fitted, so its leave-one-out
    # residuals are its residuals). It wins where the target does not change between
    # devices (memory between thread counts), where any fitted map only adds noise.
    candidates: list[np.ndarray | None] = [None, np.ones((n, 1))]
    if n >= 4 and np.ptp(log_s) > 0 and max_terms >= 2:
        candidates.append(np.column_stack([np.ones(n), log_s]))
    if n >= MIN_K_BATCH_TERM and len(np.unique(batch)) > 1 and max_terms >= 3:
        candidates.append(np.column_stack([np.ones(n), log_s, np.log(batch)]))
    best: tuple[float, list[float], np.ndarray] | None = None
    for X in candidates:
        if X is None:
            loo = log_y - log_s
            best = (float(np.median(np.abs(loo))), [0.0, 1.0], loo)
            continue
        # the factor-only map regresses log(y / s) on a constant, with the slope fixed at 1
        target = log_y - log_s if X.shape[1] == 1 else log_y
        coef = np.linalg.lstsq(X, target, rcond=None)[0]
        H = X @ np.linalg.pinv(X)
        loo = (target - X @ coef) / np.clip(1 - np.diag(H), 1e-6, None)
        # median, not mean: the sampler picks the extremes of the cost range on purpose, and
        # leaving out an extreme point makes any slope extrapolate; one such point should not decide
        err = float(np.median(np.abs(loo)))
        if best is None or err < best[0] - 1e-12:
            full = [float(coef[0]), 1.0] if X.shape[1] == 1 else [float(c) for c in coef]
            best = (err, full, loo)
    assert best is not None
    _, coef_list, loo = best
    add = 0.0
    fit = fit_additive(s, y) if additive and n >= 3 else None
    if fit is not None and float(np.median(np.abs(fit[1]))) < best[0] - 1e-12:
        add, loo = fit
        coef_list = [0.0, 1.0]
    level = min(1.0, math.ceil((n + 1) * coverage) / n)
    q = float(np.quantile(np.abs(loo), level)) if n > 1 else 0.0
    return LogMap(coef=coef_list, q=q, n=n, loo=[float(v) for v in loo],
                  s_range=(float(np.exp(log_s.min())), float(np.exp(log_s.max()))), add=add)


class ModelSource:
    """A fitted cost predictor (e.g. a CARB model of the source device) as the one source
    device of a :class:`FewShotModel`: its prediction of ``target`` for every row."""

    def __init__(self, model: object, target: str, name: str = "source") -> None:
        self.model, self.target, self.devices_ = model, target, [name]

    def predict(self, X: ArrayLike, devices: Sequence[str] | None = None) -> np.ndarray:
        return self.model.predict(X)[self.target].to_numpy(float)[:, None]  # type: ignore[attr-defined]


class FewShotModel(BaseEstimator, RegressorMixin):
    """Cost on a target device from K measurements there and models of source devices.

    Follows scikit-learn's contract: settings in ``__init__``, learning in :meth:`fit`,
    a pure :meth:`predict`.

    Parameters
    ----------
    sources:
        Fitted :class:`SourceModels`; fit it once and share it across targets and seeds.
    passthrough:
        Config feature columns used directly by the map (names for a DataFrame, indices
        for an array). They should be costs that grow with latency: MACs, parameters,
        activation elements, convolution count.
    source_devices:
        Which source models feed the map (all when None), e.g. to leave the target out.
    method:
        ``"auto"``, ``"nnls"``, ``"single"`` (see the module docstring) or ``"log"``: one
        source prediction mapped in log space (:func:`fit_log_map`; the batch term reads
        the ``batch`` column when X has one). ``carb calibrate`` uses ``"log"`` by default.
    coverage:
        Nominal coverage of the ``log`` map's interval widening (its ``log_map_.q``).
    """

    def __init__(
        self,
        sources: SourceModels | None = None,
        *,
        passthrough: Sequence[str] | Sequence[int] = (),
        source_devices: Sequence[str] | None = None,
        method: str = "auto",
        coverage: float = 0.9,
    ) -> None:
        self.sources = sources
        self.passthrough = passthrough
        self.source_devices = source_devices
        self.method = method
        self.coverage = coverage

    def _features(self, X: ArrayLike) -> np.ndarray:
        parts = []
        if len(self.passthrough):
            parts.append(_select(X, self.passthrough))
        if self.sources is not None and self.sources_used_:
            parts.append(self.sources.predict(X, self.sources_used_))
        if not parts:
            raise ValueError("the map has no features: give sources and/or passthrough columns")
        return np.column_stack(parts)

    def fit(self, X: ArrayLike, y: np.ndarray) -> "FewShotModel":
        """Fit the map on the K target measurements ``y`` (units: e.g. ms) of the
        configs in X. Needs K >= 2 finite values."""
        if self.method not in ("auto", "nnls", "single", "log"):
            raise ValueError(f"unknown method {self.method!r} (expected 'auto', 'nnls', 'single' or 'log')")
        y = np.asarray(y, dtype=float).ravel()
        if len(y) != len(X):
            raise ValueError(f"{len(y)} target measurements for {len(X)} configs")
        if len(y) < 2:
            raise ValueError(f"need at least 2 target measurements, got {len(y)}")
        if not np.isfinite(y).all():
            raise ValueError("target measurements must be finite")
        if self.sources is not None:
            used = list(self.sources.devices_ if self.source_devices is None else self.source_devices)
        else:
            used = []
        self.sources_used_: list[str] = used
        F = self._features(X)
        self.feature_names_: list[str] = [*(str(c) for c in self.passthrough), *used]
        method = self.method
        if method == "auto":
            method = "single" if len(y) < AUTO_MIN_K_NNLS else "nnls"
        self.method_: str = method
        if method == "log":
            if F.shape[1] != 1 or not ((F[:, 0] > 0).all() and (y > 0).all()):
                raise ValueError("method 'log' maps one positive source prediction to positive costs "
                                 f"(got {F.shape[1]} features)")
            self.log_map_ = fit_log_map(F[:, 0], y, _batch(X), self.coverage)
            self.coef_, self.intercept_ = np.array(self.log_map_.coef), 0.0
            return self
        self.coef_, self.intercept_ = (_nnls_map if method == "nnls" else _single_map)(F, y)
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predicted cost on the target, shape (n,); units of the target measurements."""
        check_is_fitted(self, "coef_")
        if self.method_ == "log":
            return self.log_map_.apply(self._features(X)[:, 0], _batch(X))
        return self._features(X) @ self.coef_ + self.intercept_

    def weights(self) -> dict[str, float]:
        """The map's non-zero weights by feature name (per unit of each feature; for
        ``log``: intercept, slope on log source, slope on log batch)."""
        if self.method_ == "log":
            return dict(zip(("log intercept", "log source", "log batch"), map(float, self.coef_)))
        return {n: float(w) for n, w in zip(self.feature_names_, self.coef_) if w != 0}


def fit_fewshot(
    X_source: ArrayLike | None,
    y_sources: Mapping[str, np.ndarray] | None,
    X_target_k: ArrayLike,
    y_target_k: np.ndarray,
    *,
    passthrough: Sequence[str] | Sequence[int] = (),
    method: str = "auto",
    source_model: str = "ridge",
    source_columns: Sequence[str] | Sequence[int] | None = None,
    sources: SourceModels | None = None,
    source_devices: Sequence[str] | None = None,
) -> FewShotModel:
    """Fit a predictor for an unseen target device from K measurements on it.

    ``X_source`` (configs x features) and ``y_sources`` (device -> cost of each config,
    e.g. latency in ms) train the source models, unless a fitted ``sources`` is given
    (then both may be None: fit the sources once, reuse them for every target and seed).
    ``X_target_k`` / ``y_target_k`` are the K configs measured on the target (same
    columns as ``X_source``; units of the target, e.g. ms). ``passthrough`` names cost
    features the map uses directly (see :class:`FewShotModel`). Returns the fitted
    :class:`FewShotModel`; ``.predict(X)`` gives the target's cost in its units.
    """
    if sources is None:
        if X_source is None or y_sources is None:
            raise ValueError("give X_source and y_sources, or fitted sources")
        sources = SourceModels(source_model, columns=source_columns).fit(X_source, y_sources)
    return FewShotModel(sources, passthrough=passthrough, source_devices=source_devices,
                        method=method).fit(X_target_k, y_target_k)


# -- the FBNet space of HELP's public data: sources from its devices, K target measurements --

#: Cost features of help-fbnet architectures that the map reads directly (MACs in millions,
#: pointwise and depthwise MACs, parameters, activation elements, convolutions).
HELP_PASSTHROUGH: tuple[str, ...] = ("macs_m", "pw_macs_m", "dw_macs_m", "params_m", "activations_m", "convs")

#: HELP's outlier trimming (its ``loader.py``, ``remove_outlier=True``, on in all its
#: published runs): per device, the training pool and the test set are each cut to the
#: sorted positions ``[int(0.1 n), int(0.9 n))`` of that device's latency, the middle 80%.
HELP_TRIM: tuple[float, float] = (0.1, 0.9)


def trim_middle(ids: Sequence[int] | np.ndarray, cost: np.ndarray,
                keep: tuple[float, float] = HELP_TRIM) -> np.ndarray:
    """HELP's per-device outlier trimming of one set of architectures.

    ``cost[i]`` is one device's cost (e.g. latency in ms) of ``ids[i]``. The ids are
    sorted by cost and the sorted positions ``[int(keep[0] n), int(keep[1] n))`` are
    kept: 4,000 -> 3,200 (positions 400..3599), 1,000 -> 800. As in HELP's loader the cost
    is compared in float32; ties at a cut (whole-millisecond phone latencies) are broken
    by the ids' given order (a stable sort). HELP's loader used numpy's default sort,
    whose order among ties depends on the numpy version and the CPU, so no run can
    promise its exact sets; a stable sort gives the same sets on every machine.
    Returns the kept ids in their given order.

    Evaluating on the trimmed protocol: the target's K random measurements come from its
    trimmed pool, the test set is its trimmed test set, and each source model learns from
    its own device's trimmed pool (:meth:`SourceModels.fit` ``rows``); ``fewshot_help_fbnet
    (trim=True)`` does the last.
    """
    ids = np.asarray(ids)
    cost = np.asarray(cost, dtype=np.float32)
    if cost.shape != ids.shape:
        raise ValueError(f"{len(cost)} costs for {len(ids)} ids")
    lo, hi = keep
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"keep {keep}: expected 0 <= lo < hi <= 1")
    n = len(ids)
    # stable: ties keep their given order. numpy's default sort hands float32 to a SIMD
    # kernel chosen by the CPU (AVX-512 or AVX2), which breaks ties differently on each, so
    # the trimmed sets of tied devices (pixel2: 33 distinct latencies in 900 cells) and every
    # draw from them changed with the machine the protocol ran on
    kept = np.argsort(cost, kind="stable")[int(n * lo):int(n * hi)]
    return ids[np.sort(kept)]


def fewshot_help_fbnet(measured: pd.DataFrame, *, sources: Sequence[str] | None = None,
                       method: str = "auto", table: pd.DataFrame | None = None,
                       trim: bool = False) -> tuple[pd.DataFrame, FewShotModel]:
    """Latency of every architecture of HELP's FBNet data on a new device, from K of them
    measured there.

    Args:
        measured: the K measurements: ``arch_id`` (0..4999) and ``latency_ms`` (ms, > 0).
        sources: source devices (default: HELP's :data:`carb.datasets.help_fbnet.SOURCE_DEVICES`);
            their models learn from architectures 0..3999 (HELP's training side), per-block
            operation counts in, latency out (ridge).
        method: the map (``auto``, ``nnls``, ``single``; see :class:`FewShotModel`).
        table: the wide help-fbnet table (default :func:`carb.datasets.help_fbnet.load` ``(wide=True)``).
        trim: HELP's protocol as its code runs it (:func:`trim_middle`): each source model
            learns from the middle 80% of architectures 0..3999 by that device's latency.
            Off by default: every architecture is used.

    Returns:
        ``(predictions, model)``: one row per architecture (``arch_id``, ``latency_ms``
        predicted in ms, ``measured`` True for the K given), and the fitted map.

    Raises:
        ValueError: (one line) unknown architectures or devices, missing columns, fewer
            than 2 or non-positive measurements.
    """
    from carb.datasets import help_fbnet as hf

    wide = hf.load(wide=True) if table is None else table
    for col in ("arch_id", "latency_ms"):
        if col not in measured.columns:
            raise ValueError(f"measurements: missing column {col!r} (need arch_id and latency_ms)")
    ids = pd.to_numeric(measured["arch_id"], errors="coerce")
    y = pd.to_numeric(measured["latency_ms"], errors="coerce").to_numpy(float)
    known = set(wide["arch_id"])
    bad = [i for i in ids if i != i or i not in known]
    if bad:
        raise ValueError(f"measurements: arch_id {bad[0]!r} is not an architecture of help-fbnet (0..4999)")
    if ids.duplicated().any():
        raise ValueError(f"measurements: arch_id {int(ids[ids.duplicated()].iloc[0])} appears twice")
    if not (np.isfinite(y) & (y > 0)).all():
        raise ValueError("measurements: every latency_ms must be a positive number (ms)")
    devs = list(hf.SOURCE_DEVICES if sources is None else sources)
    have = [c.removeprefix("latency_ms_") for c in wide.columns if c.startswith("latency_ms_")]
    unknown = [d for d in devs if d not in have]
    if unknown or not devs:
        raise ValueError(f"source device {unknown[0] if unknown else '(none)'!r} not in help-fbnet "
                         f"(devices: {', '.join(sorted(have))})")
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[list(HELP_PASSTHROUGH)]], axis=1)
    train = wide["arch_id"].isin(hf.TRAIN_ARCH_IDS).to_numpy()
    y_src = {d: wide.loc[train, f"latency_ms_{d}"].to_numpy(float) for d in devs}
    keep = {d: trim_middle(np.arange(len(y)), y) for d, y in y_src.items()} if trim else None
    src = SourceModels("ridge", columns=list(counts.columns)).fit(X[train], y_src, rows=keep)
    rows = pd.Index(wide["arch_id"]).get_indexer(ids.astype(int))
    model = FewShotModel(src, passthrough=list(HELP_PASSTHROUGH), method=method).fit(X.iloc[rows], y)
    pred = pd.DataFrame({"arch_id": wide["arch_id"].to_numpy(), "latency_ms": model.predict(X)})
    pred["measured"] = pred["arch_id"].isin(set(ids.astype(int)))
    return pred, model


# -- NAS-Bench-201 (the nb201 dataset): HELP's few-shot protocol on its 15,625 cells ------

#: cost features of a NAS-Bench-201 cell the nb201 map reads in log space (FLOP, count, B, count)
NB201_PASSTHROUGH: tuple[str, ...] = ("flops", "params", "activation_bytes", "n_ops")


@functools.cache
def _nb201_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(X, latency): per NAS-Bench-201 architecture (index = arch_idx, CIFAR-10 input as
    HELP's files), the source-model inputs (one-hot edge operations, the passthrough costs,
    zero nodes and node sums) and the latency (ms) on every platform under HELP's names."""
    from carb.datasets import nb201 as d
    from carb.families import nb201 as fam

    archs = d.archs()
    codes = fam.edge_codes(archs)
    feats = fam.features(archs.assign(input_size=32, classes=10))
    X = pd.DataFrame({f"e{k}_{op}": (codes[:, k] == j).astype(float) for k in range(6) for j, op in enumerate(fam.OPS)},
                     index=archs["arch_idx"])
    for c in (*NB201_PASSTHROUGH, "n_conv", "live_activation_bytes", "n_zero_nodes", "n_node_adds"):
        X[c] = feats[c].to_numpy(float)
    w = d._wide_by_metric(str(d._data_dir()))
    w = w[w["dataset"] == "cifar10"]
    lat = w.pivot(index="arch_idx", columns="device", values="latency_ms").reindex(archs["arch_idx"])
    return X, lat


#: maps of :func:`fewshot_nb201`: ``ensemble`` (default) and ``ridge`` (the map before it, kept to compare)
NB201_METHODS: tuple[str, ...] = ("ensemble", "ridge")


def fewshot_nb201(measured: pd.DataFrame, *, sources: Sequence[str] | None = None,
                  trim: bool = True, method: str = "ensemble") -> tuple[pd.DataFrame, dict]:
    """Latency (ms) of all 15,625 NAS-Bench-201 cells on a new device, from K of them measured
    there (HELP's setting: the device's latency of its 10 reference cells + a few more).

    Source models, learnt from HELP's training pool (archs 0..899, each trimmed to the
    middle 80% of its device's latency when ``trim``, as HELP's loader): per source device
    a ridge of log latency on the one-hot edge operations and cell costs (additive: one
    factor per operation on each edge); with ``method="ensemble"`` the mean (log) of that
    ridge and a second one that also reads the products of pairs of edge one-hots (which
    operations meet in a cell: a convolution fed by a dead node costs what it costs on
    some devices and not others).

    The map (``method``):

    - ``"ridge"``: a ridge (penalty by generalized cross-validation) from the log source
      predictions and the log costs :data:`NB201_PASSTHROUGH` to the log of the K
      measurements (the map before ``ensemble``; mean Spearman 0.944 on HELP's targets).
    - ``"ensemble"`` (default): the mean, in log space, of three maps fitted on the K
      measurements from those source predictions: that ridge, which here also reads the
      cell's operation counts (how many of its six edges carry each operation); the same
      ridge anchored on the one source that alone tracks the target best (slope 1 and a
      free offset, least median deviation on the K; the ridge then fits the residual, so
      the penalty shrinks toward that source instead of toward a constant); and HELP-style
      non-negative least squares in milliseconds (:func:`_nnls_map`: the source latencies
      and the raw costs as non-negative parts of the target's latency). The three err
      differently (log vs linear units, shrunk toward zero vs toward a source), and their
      mean beat each of them on HELP's validation devices (titanx_1/32/256, gold_6240).
      Mean Spearman, seeds 0..9 (``benchmarks/bench_nb201.py fewshot``,
      ``benchmarks/RESULTS.md``): validation 0.968 against 0.949 for ``ridge``; HELP's nine
      meta-training devices, each left out of the sources and taken as the target, 0.931
      against 0.914 (the operation counts: 0.911 without them); HELP's six targets 0.952
      against 0.942 (HELP: 0.932).

    Args:
        measured: ``arch_idx`` (0..15624) and ``latency_ms`` (ms, > 0), K >= 3 rows.
        sources: HELP device names (default HELP's meta-training devices).
        trim: HELP's per-device trimming of the sources' training pool.
        method: ``ensemble`` or ``ridge`` (above).

    Returns:
        ``(predictions, info)``: ``arch_idx``, ``latency_ms`` (ms), ``measured``; and the
        map's ``sources``, ``method``, ``alpha`` (the ridge map's penalty) and ``k``.

    Raises:
        ValueError: (one line) unknown architectures or devices, too few or bad measurements.
    """
    from carb.datasets import nb201 as d

    for col in ("arch_idx", "latency_ms"):
        if col not in measured.columns:
            raise ValueError(f"measurements: missing column {col!r} (need arch_idx and latency_ms)")
    ids = pd.to_numeric(measured["arch_idx"], errors="coerce").to_numpy(float)
    y = pd.to_numeric(measured["latency_ms"], errors="coerce").to_numpy(float)
    if not (np.isfinite(ids) & (ids >= 0) & (ids < 15625) & (ids == np.round(ids))).all():
        raise ValueError("measurements: every arch_idx must be an architecture of nb201 (0..15624)")
    if len(set(ids.tolist())) != len(ids):
        raise ValueError("measurements: an arch_idx appears twice")
    if len(y) < 3 or not (np.isfinite(y) & (y > 0)).all():
        raise ValueError(f"measurements: need >= 3 positive latency_ms values (ms), got {len(y)} rows")
    X, lat = _nb201_inputs()
    devs = list(d.HELP_SOURCE_DEVICES if sources is None else sources)
    unknown = [s for s in devs if s not in lat.columns]
    if unknown or not devs:
        raise ValueError(f"source device {unknown[0] if unknown else '(none)'!r} not in nb201 "
                         f"(devices: {', '.join(sorted(lat.columns))})")
    if method not in NB201_METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(NB201_METHODS)}")
    S = _nb201_source_logs(tuple(devs), trim)
    if method == "ensemble":  # each source: the mean (log) of its additive and its pairs ridge
        S = (S + _nb201_source_logs(tuple(devs), trim, pairs=True)) / 2
    costs = X[list(NB201_PASSTHROUGH)].to_numpy(float)
    k = ids.astype(int)
    Z = np.column_stack([S, np.log(costs)])
    if method == "ensemble":
        # how many of the six edges carry each operation: with them the map can price from
        # the K points an operation the target weighs unlike every source (eyeriss, the ASIC;
        # the 1080 Ti at batch 256); chosen on HELP's validation devices and on its
        # meta-training devices left out one at a time as targets (RESULTS.md)
        Z = np.column_stack([Z, _nb201_op_counts(X)])
    m = RidgeCV(alphas=np.logspace(-3, 2, 11)).fit(Z[k], np.log(y))
    log_pred = m.predict(Z)
    if method == "ensemble":
        log_pred = (log_pred + _anchored_ridge(S, Z, k, np.log(y)) + _nnls_ms(S, costs, k, y)) / 3
    pred = pd.DataFrame({"arch_idx": X.index.to_numpy(), "latency_ms": np.exp(log_pred)})
    pred["measured"] = pred["arch_idx"].isin(set(k.tolist()))
    return pred, {"sources": devs, "method": method, "alpha": float(m.alpha_), "k": int(len(k))}


def _nb201_op_counts(X: pd.DataFrame) -> np.ndarray:
    """Per cell, how many of its six edges carry each operation of NAS-Bench-201, shape
    (n, 5), from the one-hot edge columns ``e{edge}_{op}`` of :func:`_nb201_inputs`."""
    from carb.families import nb201 as fam

    return np.column_stack([X[[f"e{k}_{op}" for k in range(6)]].to_numpy(float).sum(axis=1) for op in fam.OPS])


def _anchored_ridge(S: np.ndarray, Z: np.ndarray, k: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    """Log prediction of a ridge anchored on one source: ``log y = S[:, j] + ridge(Z)``, with
    ``j`` the source whose log prediction, shifted by its mean offset, deviates least (median)
    from the K measured ``log_y`` (rows ``k``); Z centred on the K so the ridge's intercept is
    the offset. Shrinking the ridge then leaves that source, not a constant."""
    dev = log_y[:, None] - S[k]
    j = int(np.argmin(np.median(np.abs(dev - dev.mean(axis=0)), axis=0)))
    Zc = Z - Z[k].mean(axis=0)
    r = RidgeCV(alphas=np.logspace(-2, 3, 11)).fit(Zc[k], log_y - S[k, j])
    return S[:, j] + r.predict(Zc)


def _nnls_ms(S: np.ndarray, costs: np.ndarray, k: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log prediction of HELP-style non-negative least squares in milliseconds: the source
    latencies ``exp(S)`` and the raw ``costs`` as non-negative parts of the K measured ``y``
    (rows ``k``; :func:`_nnls_map`). Floored at a tenth of the least measured latency: a
    linear map can cross zero far from its K points, and a log of ~0 would swamp a mean."""
    F = np.column_stack([np.exp(S), costs])
    w, b = _nnls_map(F[k], y)
    return np.log(np.maximum(F @ w + b, 0.1 * float(np.min(y))))


@functools.cache
def _nb201_source_logs(devs: tuple[str, ...], trim: bool, pairs: bool = False) -> np.ndarray:
    """Log latency predicted by each source device's ridge for all 15,625 cells (cached:
    the protocol asks for the same sources for every target and seed). ``pairs``: the
    ridge also reads the products of pairs of edge one-hots (standardized, as every
    column), its penalty searched higher (1e-1 .. 1e4: ~400 more columns, 720 cells)."""
    from carb.datasets import nb201 as d

    X, lat = _nb201_inputs()
    pool = np.arange(d.HELP_TRAIN_ARCHS.start, d.HELP_TRAIN_ARCHS.stop)
    y_src = {s: lat[s].to_numpy(float)[pool] for s in devs}
    rows = {s: trim_middle(np.arange(len(pool)), v) for s, v in y_src.items()} if trim else None
    F = X.to_numpy(float)
    if pairs:
        onehot = X[[c for c in X.columns if c.startswith("e")]].to_numpy(float)
        i, j = np.triu_indices(onehot.shape[1], 1)
        prod = onehot[:, i] * onehot[:, j]
        F = np.column_stack([F, prod[:, prod[pool].std(axis=0) > 0]])  # same-edge pairs are all zero
    # standardized: the raw costs (FLOPs ~1e8) made the GCV solve ill-conditioned (sources
    # moved by up to 0.35 in log with the column order)
    F = (F - F[pool].mean(axis=0)) / np.where(F[pool].std(axis=0) > 0, F[pool].std(axis=0), 1.0)
    alphas = np.logspace(-1, 4, 11) if pairs else np.logspace(-3, 3, 13)
    out = []
    for s, v in y_src.items():  # a ridge on log latency; penalty by GCV
        keep = pool[rows[s]] if rows is not None else pool
        out.append(RidgeCV(alphas=alphas).fit(F[keep], np.log(lat[s].to_numpy(float)[keep])).predict(F))
    return np.column_stack(out)


def fewshot_help_nb201(device: str, *, samples: int = 10, seed: int = 0, reference: bool = True,
                       sources: Sequence[str] | None = None, method: str = "ensemble") -> dict:
    """HELP's few-shot protocol on NAS-Bench-201 for one device, as HELP's code runs it
    (``loader.py``): the device's latency of the 10 reference cells (when ``reference``) and
    of ``samples`` cells drawn (``seed``) from its trimmed pool (archs 0..899, middle 80% by
    its latency) is all :func:`fewshot_nb201` sees; it is scored on the trimmed test set
    (archs 900..1899, middle 80%). ``device``: a HELP device name or nb201 platform;
    ``method``: the map (:data:`NB201_METHODS`).

    Returns:
        ``device``, ``k``, ``spearman``, ``mape`` (fraction) on the ``test_archs`` scored,
        ``measured_ids``, ``predictions`` (all 15,625 cells) and the map's info.

    Raises:
        ValueError: (one line) unknown device (naming those there are).
    """
    from scipy.stats import spearmanr

    from carb.datasets import nb201 as d

    name = d.help_device(device)
    _, lat = _nb201_inputs()
    if name not in lat.columns:
        raise ValueError(f"device {device!r} not in nb201 (devices: {', '.join(sorted(lat.columns))})")
    if not 1 <= samples <= 700:
        raise ValueError(f"samples: {samples} must be in 1..700 (the trimmed pool has 720 cells)")
    y = lat[name].to_numpy(float)
    pool = np.arange(d.HELP_TRAIN_ARCHS.start, d.HELP_TRAIN_ARCHS.stop)
    test = np.arange(d.HELP_TEST_ARCHS.start, d.HELP_TEST_ARCHS.stop)
    tr, te = trim_middle(pool, y[pool]), trim_middle(test, y[test])
    ref = np.array(d.reference_arch_ids()) if reference else np.array([], int)
    drawn = np.random.default_rng(seed).choice(np.setdiff1d(tr, ref), samples, replace=False)
    ids = np.concatenate([ref, drawn]).astype(int)
    srcs = [s for s in (d.HELP_SOURCE_DEVICES if sources is None else sources) if s != name]
    pred, info = fewshot_nb201(pd.DataFrame({"arch_idx": ids, "latency_ms": y[ids]}), sources=srcs, method=method)
    p = pred["latency_ms"].to_numpy()[te]
    return {"device": name, "k": int(len(ids)), "seed": seed, "test_archs": int(len(te)),
            "spearman": float(spearmanr(p, y[te]).statistic), "mape": float(np.mean(np.abs(p - y[te]) / y[te])),
            "measured_ids": ids.tolist(), "predictions": pred, **info}
