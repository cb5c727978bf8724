"""The targets CARB predicts, and the fitted model of one: an offset, a learner blend, a corrector, an interval."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import conformal
from .conformal import ConformalScale, aux_inputs, gaussian_rescale
from .learners import Learner

__all__ = ["TARGETS", "UNITS", "CASCADE_ORDER", "TargetModel", "member_std"]

#: the targets CARB predicts (columns of a dataset and of :meth:`CARB.predict`)
TARGETS: tuple[str, ...] = ("energy_j", "latency_ms", "memory_mb")
#: units of the targets
UNITS: dict[str, str] = {"energy_j": "J", "latency_ms": "ms", "memory_mb": "MB"}
#: the study's cascade: memory first, then energy (reads memory), then latency (reads both)
CASCADE_ORDER: tuple[str, ...] = ("memory_mb", "energy_j", "latency_ms")


def _forward(transform: str, y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):  # invalid rows are masked by the caller
        return np.log1p(y) if transform == "log1p" else np.log(y)


def _inverse(transform: str, z: np.ndarray) -> np.ndarray:
    return np.maximum(np.expm1(z), 0.0) if transform == "log1p" else np.exp(z)


@dataclass
class TargetModel:
    """Everything that predicts one target (all in the transformed, log space).

    Attributes:
        target: target column, e.g. ``latency_ms``.
        upstream: targets whose predictions are extra inputs (cascade), in order.
        offset: the log-log ridge the learners correct, or ``None``.
        learners: fitted base learners by name (zero-weight ones are not kept).
        weights: blend weight of each learner.
        corrector: residual corrector for rows with ``batch <= corrector_batch_max``, or ``None``.
        corrector_batch_max, corrector_scale: where the corrector applies, and its factor.
        halfwidth: conformal half-width of the interval in log space (``inf`` when too few
            rows): the plain, constant one; bundles without ``interval`` have only this.
        transform: ``log1p`` or ``log``.
        interval: the locally adaptive (normalized, Mondrian-by-batch-regime) conformal
            interval (:class:`carb.model.conformal.ConformalScale`), or ``None``.
    """

    target: str
    upstream: list[str]
    offset: Learner | None
    learners: dict[str, Learner]
    weights: dict[str, float]
    corrector: Learner | None = None
    corrector_batch_max: int = 8
    corrector_scale: float = 0.9
    halfwidth: float = float("inf")
    transform: str = "log"
    info: dict[str, Any] = field(default_factory=dict)
    interval: ConformalScale | None = None

    def halfwidths(
        self, df: pd.DataFrame, pred_log: np.ndarray, coverage: float, nominal: float, spread: np.ndarray | None = None
    ) -> np.ndarray:
        """Return the half-width in log space of each row's ``coverage`` interval.

        Half-width in log space of each row's ``coverage`` interval (``nominal``: the
        coverage ``halfwidth`` was fitted at, for bundles without ``interval``; ``spread``:
        the blend members' spread of the rows from :meth:`predict_log`, for intervals
        that read it).
        """
        if self.interval is not None:
            batch, wide = aux_inputs(df)
            return self.interval.halfwidth(batch, wide, pred_log, coverage, spread=spread)
        hw = self.halfwidth if coverage == nominal else float(gaussian_rescale(self.halfwidth, nominal, coverage))
        return np.full(len(pred_log), hw)

    def prob_within(
        self, df: pd.DataFrame, pred_log: np.ndarray, budget: float, nominal: float, spread: np.ndarray | None = None
    ) -> np.ndarray:
        """Return the chance that each row's true value is within ``budget`` (the target's unit).

        Chance that each row's true value is within ``budget`` (the target's unit), from
        the conformal scores (:meth:`ConformalScale.prob_within`); bundles without them: a
        normal error of the constant half-width (fitted at coverage ``nominal``).
        """
        b = float(_forward(self.transform, np.array([budget]))[0])
        if self.interval is not None:
            batch, wide = aux_inputs(df)
            return self.interval.prob_within(batch, wide, pred_log, b, spread=spread)
        return conformal.chance_within(b - np.asarray(pred_log, float), self.halfwidth, nominal)

    @property
    def reads_spread(self) -> bool:
        """Whether the interval reads the blend members' spread."""
        return self.interval is not None and self.interval.uses_spread

    def predict_log(self, Z: np.ndarray, batch: np.ndarray, spread_out: np.ndarray | None = None) -> np.ndarray:
        """Return the point prediction in log space for inputs ``Z``.

        Point prediction in log space for inputs ``Z`` (base inputs + upstream
        predictions). ``spread_out``: filled with the standard deviation (log space) of the
        blend members' predictions, how much XGBoost and ExtraTrees disagree on a config
        (a difficulty the interval scale reads).
        """
        out = self.offset.predict(Z) if self.offset is not None else np.zeros(len(Z))
        members = []
        for name, learner in self.learners.items():
            members.append(learner.predict(Z))
            out = out + self.weights[name] * members[-1]
        if spread_out is not None:
            spread_out[:] = member_std(np.column_stack(members)) if members else 0.0
        if self.corrector is not None:
            small = batch <= self.corrector_batch_max
            if small.any():
                out[small] += self.corrector_scale * self.corrector.predict(Z[small])
        return out


def member_std(preds: np.ndarray) -> np.ndarray:
    """Row-wise standard deviation of the blend members' predictions (columns)."""
    return np.std(preds, axis=1) if preds.ndim == 2 and preds.shape[1] >= 2 else np.zeros(len(preds))
