"""A light learner for any table: one LightGBM per target on log(target), with a conformal interval.

:class:`GBMRegressor` is the default model of :func:`carb.studies.analyses.transfer` for
data that are not CARB configs (e.g. HELP's FBNet latency).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .estimator import TARGETS

__all__ = ["GBMRegressor", "ok_rows", "positive"]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Return the rows with ``status == ok`` (all rows when there is no status column)."""
    return df[df["status"] == "ok"] if "status" in df.columns else df


def positive(v: Any) -> np.ndarray:
    """Return a mask of the values that are finite and positive (a cost that was measured)."""
    a = np.asarray(v, dtype=np.float64)
    return np.isfinite(a) & (a > 0)


#: dataset columns that identify or describe a row, never a model input
_NOT_FEATURES = (
    "config_id",
    "arch_id",
    "device",
    "status",
    "message",
    "run_id",
    "measured_at",
    "extra",
    "timed_s",
    "wall_s",
    "energy_missing_reason",
    "energy_gross_j",
)


class GBMRegressor:
    """A light model for any table: one LightGBM per target on log(target).

    It reads the numeric columns that are neither targets, their spread columns nor
    identifiers. Same interface as :class:`carb.model.CARB`: ``fit(df)``,
    ``predict(df)`` with ``<target>``, ``_lo``, ``_hi`` (a conformal interval: the
    ``coverage`` quantile of out-of-fold absolute log residuals), ``targets_``.

    Args:
        targets: target columns to model (those with >= ``min_rows`` positive values are).
        features: input columns; default: every numeric non-target, non-id column.
        n_estimators: LightGBM trees.
        num_leaves: LightGBM leaves per tree.
        learning_rate: LightGBM learning rate.
        coverage: nominal coverage of the interval.
        interval_folds: folds of the out-of-fold residuals of the interval; 0: no interval
            (``_lo``/``_hi`` NaN; fitting is then ``interval_folds + 1`` times faster).
        random_state: seed.
        min_rows: fewest labelled rows a target needs.
    """

    def __init__(
        self,
        targets: Sequence[str] = TARGETS,
        features: Sequence[str] | None = None,
        n_estimators: int = 200,
        num_leaves: int = 31,
        learning_rate: float = 0.08,
        coverage: float = 0.9,
        interval_folds: int = 5,
        random_state: int = 0,
        min_rows: int = 20,
    ) -> None:
        """Keep the settings; the arguments are described on the class."""
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
        """Return the input columns: ``features``, or every numeric non-target, non-id column."""
        if self.features is not None:
            return list(self.features)
        tgt_prefixes = tuple(TARGETS) + tuple(self.targets)
        return [
            c
            for c in df.columns
            if c not in _NOT_FEATURES
            and not c.startswith(tgt_prefixes)
            and (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))
        ]

    def _new(self) -> Any:
        """Return a fresh, unfitted LightGBM regressor."""
        import lightgbm as lgb

        return lgb.LGBMRegressor(
            n_estimators=self.n_estimators,
            num_leaves=self.num_leaves,
            learning_rate=self.learning_rate,
            min_child_samples=5,
            random_state=self.random_state,
            n_jobs=1,
            verbose=-1,
        )

    def _halfwidth(self, X: np.ndarray, y: np.ndarray) -> float:
        """Return the interval's half-width (log): the conformal quantile of out-of-fold residuals.

        NaN when ``interval_folds`` < 2 (no interval).
        """
        K = int(self.interval_folds)
        if K < 2:
            return float("nan")
        folds = np.random.default_rng(self.random_state).permutation(len(y)) % K
        oof = np.empty(len(y))
        for k in range(K):
            tr, va = folds != k, folds == k
            oof[va] = self._new().fit(X[tr], y[tr]).predict(X[va])
        r = np.abs(y - oof)
        q = min(1.0, math.ceil((len(r) + 1) * self.coverage) / len(r))
        return float(np.quantile(r, q, method="higher"))

    def fit(self, df: pd.DataFrame) -> "GBMRegressor":
        """Fit one model per target with enough labelled rows (``ok`` rows only).

        Args:
            df: a dataset with the target columns (units: J, ms, MB).

        Returns:
            self.

        Raises:
            ValueError: no target has ``min_rows`` labelled rows.
        """
        df = ok_rows(df).reset_index(drop=True)
        self.features_ = self._columns(df)
        X = df[self.features_].to_numpy(np.float64)
        self.models_: dict[str, Any] = {}
        self.halfwidth_: dict[str, float] = {}
        for t in self.targets:
            if t not in df.columns:
                continue
            ok = positive(df[t])
            if ok.sum() < self.min_rows:
                continue
            y = np.log(df[t].to_numpy(np.float64)[ok])
            Xt = X[ok]
            self.halfwidth_[t] = self._halfwidth(Xt, y)
            self.models_[t] = self._new().fit(Xt, y)
        if not self.models_:
            raise ValueError(f"no target with {self.min_rows} labelled rows to fit")
        self.targets_ = [t for t in self.targets if t in self.models_]
        return self

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """Predict each target (its units) with the interval, one row per row of ``df``."""
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
