"""Few-shot transfer of a cost predictor to an unseen device.

The problem: many configs are measured on some *source* devices; on a new *target*
device only K of them (K = 5 .. 50) are. Predict the target's cost (latency in ms, or
any other positive additive cost such as energy in J) for every config.

The method, chosen on HELP's public FBNet data (validation devices for the choices,
target devices for the report):

1. **Source models** (:class:`SourceModels`), one per source device, learn the cost from
   the config features on all the source measurements. The default is a ridge
   regression (its penalty chosen by generalized cross-validation): on layer-operation
   counts it is a per-layer lookup table, which transfers better than gradient boosting
   (mean Spearman 0.984 against 0.971 on HELP's validation devices, two GPUs at three
   batch sizes and a CPU, 10 reference + 10 random measurements). LightGBM is available
   for costs that are not sums of per-layer costs.
2. **The map** (:class:`FewShotModel`) to the target is fitted on the K measurements. Its
   features are the source models' predictions plus *passthrough* config features that
   are themselves costs (multiply-accumulates, parameters, activation elements, number
   of convolutions). Both are physically non-negative contributions to latency, so:

   - ``"nnls"`` (:func:`carb.model.maps.nnls_map`): non-negative least squares on the
     standardized features with a free intercept. The sign constraint is the
     regularization: no penalty to tune, and a sparse, readable mix (raspi4 from 10 + 10
     measurements: 0.9 ms per million depthwise MACs, 6.6 ms per million parameters,
     1.6 ms per million activations, 0.75 x the 1080 Ti's batch-64 latency, ...).
   - ``"single"`` (:func:`carb.model.maps.single_map`): a weighted average of one-feature
     linear fits (positive slope only), each weighted by ``exp(-(e - e_min) / e_min)``
     with ``e`` its exact leave-one-out squared error. Two parameters per fit, so it
     survives K = 5, where NNLS over a dozen features overfits (mean Spearman 0.945
     against 0.922 on the validation devices).
   - ``"auto"`` (default): ``"single"`` below :data:`AUTO_MIN_K_NNLS` measurements,
     ``"nnls"`` from there (0.985 against 0.983 at K = 20, 0.980 against 0.979 at K = 10).

Ridge maps with the penalty chosen by leave-one-out on the K points, Bayesian ridge,
choosing among maps by leave-one-out (all noisier than NNLS at K <= 20), per-stage
analytic features (they overfit), and a per-target residual ridge on the op counts
(+0.001 at K = 20, nothing at K = 10) do not help on the same data.

Units: the map works in the target's own units (ms for latency); predictions are in
those units. Spearman correlation, the usual few-shot metric, is unaffected by them.

Examples:
    >>> import numpy as np
    >>> X = np.arange(1.0, 21.0).reshape(-1, 1)
    >>> sources = SourceModels().fit(X, {"gpu": 2 * X[:, 0]})
    >>> model = fit_fewshot(None, None, X[:5], 3 * X[:5, 0], sources=sources)
    >>> [round(float(v), 6) for v in model.predict(X[10:12])]
    [33.0, 36.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import RidgeCV
from sklearn.utils.validation import check_is_fitted

from carb.model.maps import fit_log_map, nnls_map, single_map

__all__ = ["AUTO_MIN_K_NNLS", "ArrayLike", "FewShotModel", "ModelSource", "SourceModels", "fit_fewshot"]

#: With fewer target measurements than this, ``method="auto"`` uses ``"single"``.
#: On HELP's validation devices ``"single"`` wins at K = 5, ``"nnls"`` at 10.
AUTO_MIN_K_NNLS = 8

_RIDGE_ALPHAS = np.logspace(-4, 3, 15)

#: a feature matrix: a DataFrame (columns by name) or a 2-D array (columns by index)
ArrayLike = pd.DataFrame | np.ndarray


def _select(X: ArrayLike, columns: Sequence[str] | Sequence[int] | None) -> np.ndarray:
    """Return columns of X as a float matrix; names for a DataFrame, indices for an array."""
    if isinstance(X, pd.DataFrame):
        frame = X if columns is None else X.loc[:, list(columns)]
        return frame.to_numpy(dtype=float)
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D feature matrix, got shape {arr.shape}")
    return arr if columns is None else arr[:, list(columns)]


class SourceModels:
    """One cost model per source device, fitted on that device's measurements.

    Args:
        model: ``"ridge"`` (default; penalty chosen by generalized cross-validation over
            1e-4 .. 1e3) or ``"lgbm"`` (LightGBM, ``n_estimators`` trees).
        columns: feature columns the models use (names for a DataFrame, indices for an
            array); all columns when None.
        log_target: fit log(cost) and predict exp of it. Off by default: a sum of
            per-layer costs is linear in raw units.
        n_estimators: LightGBM trees (ignored for ridge).
        learning_rate: LightGBM learning rate.
        num_leaves: LightGBM leaves per tree.
        n_jobs: LightGBM threads.
        random_state: LightGBM seed.
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
        """Keep the settings; the arguments are described on the class."""
        self.model = model
        self.columns = columns
        self.log_target = log_target
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _new(self):
        """Return a fresh, unfitted model of the kind ``model`` names."""
        if self.model == "ridge":
            return RidgeCV(alphas=_RIDGE_ALPHAS)
        if self.model == "lgbm":
            import lightgbm as lgb  # optional: only this model needs it

            return lgb.LGBMRegressor(
                n_estimators=self.n_estimators,
                learning_rate=self.learning_rate,
                num_leaves=self.num_leaves,
                n_jobs=self.n_jobs,
                random_state=self.random_state,
                verbose=-1,
                # same inputs, same trees, whatever the thread count (LightGBM's documented pair)
                deterministic=True,
                force_row_wise=True,
            )
        raise ValueError(f"unknown source model {self.model!r} (expected 'ridge' or 'lgbm')")

    def fit(
        self, X: ArrayLike, y_sources: Mapping[str, np.ndarray], rows: Mapping[str, np.ndarray] | None = None
    ) -> "SourceModels":
        """Fit one model per device.

        Args:
            X: the source configs' features.
            y_sources: device -> the cost of every row of X on that device (units: as
                measured, e.g. ms), finite and, with ``log_target``, positive.
            rows: device -> positional indices into X that restrict that device's model to
                those rows, e.g. HELP's per-device trimmed pool
                (:func:`carb.studies.help_fbnet.trim_middle`); the costs outside them are
                not read.

        Returns:
            self.

        Raises:
            ValueError: no devices, a cost vector of the wrong length, or bad costs.
        """
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
        """Predict the cost on each source device.

        Args:
            X: configs' features (the columns the models were fitted on).
            devices: a subset to pick and order (all by default).

        Returns:
            Costs, shape (n, devices), in the units of the source measurements.
        """
        F = _select(X, self.columns)
        names = self.devices_ if devices is None else list(devices)
        missing = [d for d in names if d not in self.models_]
        if missing:
            raise ValueError(f"no source model for {missing}")
        out = np.column_stack([self.models_[d].predict(F) for d in names])
        return np.exp(out) if self.log_target else out


def _batch(X: ArrayLike) -> np.ndarray:
    """Return the ``batch`` column of X (images per forward), ones where X has none."""
    if isinstance(X, pd.DataFrame) and "batch" in X.columns:
        return X["batch"].to_numpy(float)
    return np.ones(len(X))


class ModelSource:
    """A fitted cost predictor as the one source device of a :class:`FewShotModel`.

    Args:
        model: a fitted predictor (e.g. a CARB model of the source device) whose
            ``predict(X)`` returns a frame with a ``target`` column.
        target: the column it predicts (e.g. ``latency_ms``).
        name: the source device's name in the map's weights.
    """

    def __init__(self, model: object, target: str, name: str = "source") -> None:
        """Keep the predictor; the arguments are described on the class."""
        self.model, self.target, self.devices_ = model, target, [name]

    def predict(self, X: ArrayLike, devices: Sequence[str] | None = None) -> np.ndarray:
        """Return the model's prediction of ``target`` for every row, shape (n, 1)."""
        return self.model.predict(X)[self.target].to_numpy(float)[:, None]  # type: ignore[attr-defined]


class FewShotModel(BaseEstimator, RegressorMixin):
    """Cost on a target device from K measurements there and models of source devices.

    Follows scikit-learn's contract: settings in ``__init__``, learning in :meth:`fit`,
    a pure :meth:`predict`.

    Args:
        sources: fitted :class:`SourceModels` (or a :class:`ModelSource`); fit it once and
            share it across targets and seeds.
        passthrough: config feature columns used directly by the map (names for a
            DataFrame, indices for an array). They should be costs that grow with
            latency: MACs, parameters, activation elements, convolution count.
        source_devices: which source models feed the map (all when None), e.g. to leave
            the target out.
        method: ``"auto"``, ``"nnls"``, ``"single"`` (see the module docstring) or
            ``"log"``: one source prediction mapped in log space
            (:func:`carb.model.maps.fit_log_map`; the batch term reads the ``batch``
            column when X has one). ``carb calibrate`` uses ``"log"`` by default.
        coverage: nominal coverage of the ``log`` map's interval widening (its
            ``log_map_.q``).
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
        """Keep the settings (scikit-learn's contract: nothing is learned here); the arguments are on the class."""
        self.sources = sources
        self.passthrough = passthrough
        self.source_devices = source_devices
        self.method = method
        self.coverage = coverage

    def _features(self, X: ArrayLike) -> np.ndarray:
        """Return the map's inputs: the passthrough columns, then the used sources' predictions."""
        parts = []
        if len(self.passthrough):
            parts.append(_select(X, self.passthrough))
        if self.sources is not None and self.sources_used_:
            parts.append(self.sources.predict(X, self.sources_used_))
        if not parts:
            raise ValueError("the map has no features: give sources and/or passthrough columns")
        return np.column_stack(parts)

    def fit(self, X: ArrayLike, y: np.ndarray) -> "FewShotModel":
        """Fit the map on the K target measurements of the configs in X.

        Args:
            X: the K configs' features.
            y: their K >= 2 finite costs on the target (e.g. ms).

        Returns:
            self.

        Raises:
            ValueError: an unknown method, too few or non-finite measurements.
        """
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
                raise ValueError(
                    f"method 'log' maps one positive source prediction to positive costs (got {F.shape[1]} features)"
                )
            self.log_map_ = fit_log_map(F[:, 0], y, _batch(X), self.coverage)
            self.coef_, self.intercept_ = np.array(self.log_map_.coef), 0.0
            return self
        self.coef_, self.intercept_ = (nnls_map if method == "nnls" else single_map)(F, y)
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predict the cost on the target, shape (n,), in the units of the target measurements."""
        check_is_fitted(self, "coef_")
        if self.method_ == "log":
            return self.log_map_.apply(self._features(X)[:, 0], _batch(X))
        return self._features(X) @ self.coef_ + self.intercept_

    def weights(self) -> dict[str, float]:
        """Return the map's non-zero weights by feature name.

        Weights are per unit of each feature; for ``log``: intercept, slope on log source,
        slope on log batch.
        """
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

    Args:
        X_source: the source configs' features; may be None with a fitted ``sources``.
        y_sources: device -> cost of each source config (e.g. latency in ms); may be None
            with a fitted ``sources`` (fit the sources once, reuse them for every target
            and seed).
        X_target_k: the K configs measured on the target (same columns as ``X_source``).
        y_target_k: their costs on the target (its units, e.g. ms).
        passthrough: cost features the map uses directly (see :class:`FewShotModel`).
        method: the map (see :class:`FewShotModel`).
        source_model: the kind of :class:`SourceModels` to fit.
        source_columns: the feature columns the source models read.
        sources: fitted source models to reuse.
        source_devices: which sources feed the map.

    Returns:
        The fitted :class:`FewShotModel`; ``.predict(X)`` gives the target's cost in its units.

    Raises:
        ValueError: neither source data nor fitted sources, or bad measurements.
    """
    if sources is None:
        if X_source is None or y_sources is None:
            raise ValueError("give X_source and y_sources, or fitted sources")
        sources = SourceModels(source_model, columns=source_columns).fit(X_source, y_sources)
    return FewShotModel(sources, passthrough=passthrough, source_devices=source_devices, method=method).fit(
        X_target_k, y_target_k
    )
