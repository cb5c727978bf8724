"""Few-shot maps from a source prediction to a target device's cost.

- :func:`nnls_map`: non-negative weights on standardized cost features, free intercept.
- :func:`single_map`: a weighted average of one-feature lines with positive slope (small K).
- :class:`LogMap` / :func:`fit_log_map`: one source prediction mapped in log space, the map
  chosen by exact leave-one-out error among the identity, a factor, a line and a line with
  a batch term (and, when offered, the additive ``y = s + c`` of :func:`fit_additive`).
- :class:`Reach` / :func:`measure_reach`: the range of the K a map was fitted on, and how fast
  its error grows beyond it, measured by refitting it without the K's ends.

Costs are positive and additive (latency in ms, energy in J, memory in MB); every map
works in the target's own units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import nnls

from .conformal import conformal_quantile

__all__ = [
    "INSIDE",
    "MIN_K_BATCH_TERM",
    "LogMap",
    "Reach",
    "fit_additive",
    "fit_log_map",
    "measure_reach",
    "nnls_map",
    "single_map",
]


def nnls_map(F: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Fit non-negative weights on standardized features plus a free intercept.

    Args:
        F: features, shape (K, n_features); costs that grow with the target.
        y: the K target costs (target units, e.g. ms).

    Returns:
        ``(weights, intercept)`` on the raw features: ``y ~ F @ weights + intercept``.
    """
    mu = F.mean(axis=0)
    sd = F.std(axis=0)
    usable = sd > 1e-12 * (np.abs(mu) + 1.0)  # a feature constant on the K points says nothing
    w = np.zeros(F.shape[1])
    if usable.any():
        Z = (F[:, usable] - mu[usable]) / sd[usable]
        c, _ = nnls(Z, y - y.mean())
        w[usable] = c / sd[usable]
    return w, float(y.mean() - mu @ w)


def single_map(F: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Fit a weighted average of one-feature least-squares lines with positive slope.

    Each line is weighted by ``exp(-(e - e_min) / e_min)``, ``e`` its exact leave-one-out
    squared error. Being linear, the average is again one weight per feature and an intercept.

    Args:
        F: features, shape (K, n_features).
        y: the K target costs (target units, e.g. ms).

    Returns:
        ``(weights, intercept)`` on the raw features.
    """
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
    """A map in log space from one source prediction ``s`` to the target.

    ``log y = coef[0] + coef[1] log s (+ coef[2] log batch)``; ``q`` is the quantile of
    its leave-one-out residuals (log) that widens intervals; ``n`` the K it was fitted on.
    """

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
    #: instead of carrying its fitted slope on: a slope learnt between 2 and 600 ms says
    #: nothing about 0.4 ms configs, and the 2-thread / 1-thread cpu ratio flattens at both
    #: ends. ``None``: no limit.
    s_range: tuple[float, float] | None = None
    #: a constant added after the log map, in the target's units (``0``: none). Fitted only
    #: where :func:`fit_log_map` is offered the additive form (``y = s + add``): a device
    #: that holds a fixed amount more or less than the source, such as the memory of a
    #: second thread's runtime buffers, which no multiplicative map expresses.
    add: float = 0.0

    def to_dict(self) -> dict:
        """The map as JSON-ready fields (what :meth:`from_dict` reads back)."""
        return {
            "coef": self.coef,
            "q": self.q,
            "n": self.n,
            "scale_q": self.scale_q,
            "s_range": None if self.s_range is None else list(self.s_range),
            "add": self.add,
        }

    @classmethod
    def from_dict(cls, m: dict) -> "LogMap":
        """Read a map from :meth:`to_dict`'s fields.

        Absent optional fields read as no scale, no range (the map carries its slope on)
        and no constant.
        """
        return cls(
            coef=[float(c) for c in m["coef"]],
            q=float(m["q"]),
            n=int(m["n"]),
            scale_q=None if m.get("scale_q") is None else float(m["scale_q"]),
            s_range=None if m.get("s_range") is None else (float(m["s_range"][0]), float(m["s_range"][1])),
            add=float(m.get("add", 0.0)),
        )

    def design(self, log_s: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Return the map's design matrix: a constant, ``log s`` and, with three coefficients, ``log batch``."""
        cols = [np.ones_like(log_s), log_s]
        if len(self.coef) == 3:
            cols.append(np.log(batch))
        return np.column_stack(cols)

    def apply(self, s: np.ndarray, batch: np.ndarray, widen: float = 0.0) -> np.ndarray:
        """Map source predictions to the target: ``exp(map(log s) + widen) + add``.

        Args:
            s: source predictions (target units, e.g. ms).
            batch: images per forward pass of each row.
            widen: added in log space (an interval's half-width; 0 for the point prediction).

        Returns:
            Target costs in the target's units; outside ``s_range``, the ratio at its nearer
            end times ``s``.
        """
        s = np.maximum(np.asarray(s, float), 1e-12)
        inside = s if self.s_range is None else np.clip(s, *self.s_range)
        z = self.design(np.log(inside), np.asarray(batch, float))
        out = np.exp(z @ np.asarray(self.coef) + widen) * (s / inside)
        # a negative constant must not take a cost to or below zero far from the K points
        return np.maximum(out + self.add, 1e-3 * out) if self.add else out


def fit_additive(s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray] | None:
    """Fit the additive map ``y = s + c``.

    Args:
        s: source predictions (positive; units of ``y``, e.g. MB).
        y: the K target costs.

    Returns:
        ``(c, loo)``: ``c`` the median of ``y - s`` (units of ``y``) and its exact
        leave-one-out residuals in log, ``log y_i - log(s_i + c_-i)``; ``None`` when a
        left-out ``s_i + c_-i`` is not positive (no log residual).
    """
    s, y = np.asarray(s, float), np.asarray(y, float)
    n = len(y)
    keep = ~np.eye(n, dtype=bool)
    c_loo = np.array([np.median((y - s)[keep[i]]) for i in range(n)])
    if not (s + c_loo > 0).all():
        return None
    return float(np.median(y - s)), np.log(y) - np.log(s + c_loo)


def fit_log_map(
    s: np.ndarray, y: np.ndarray, batch: np.ndarray, coverage: float = 0.9, additive: bool = False, max_terms: int = 3
) -> LogMap:
    """Fit the log-space map with the least leave-one-out error.

    The candidates (exact leave-one-out by the hat matrix, median absolute residual):
    the identity (``log y = log s``), a device factor alone (``log y = a + log s``), a
    line (``a + b log s``), and, from :data:`MIN_K_BATCH_TERM` measurements, a line plus
    ``c log batch``. With few or noisy measurements the simpler maps win: they cannot
    overfit. The map keeps the range of ``s`` (:attr:`LogMap.s_range`): outside it, it
    holds its ratio.

    Args:
        s: source predictions, positive (e.g. ms).
        y: the K target costs, positive (same units).
        batch: images per forward pass of each measurement.
        coverage: nominal coverage of the interval widening ``q``.
        additive: also offer :func:`fit_additive` (``y = s + c``, its leave-one-out
            residuals in log like the others'): a device that holds a fixed amount more or
            less than the source (:attr:`LogMap.add`).
        max_terms: the most coefficients a candidate may fit (1: the identity or the factor
            only; 2: also the line).

    Returns:
        The chosen :class:`LogMap`.

    Example:
        >>> import numpy as np
        >>> m = fit_log_map(np.array([1.0, 2.0, 4.0]), np.array([2.0, 4.0, 8.0]), np.ones(3))
        >>> round(float(m.apply(np.array([3.0]), np.ones(1))[0]), 6)
        6.0
    """
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
    return LogMap(
        coef=coef_list,
        q=q,
        n=n,
        loo=[float(v) for v in loo],
        s_range=(float(np.exp(log_s.min())), float(np.exp(log_s.max()))),
        add=add,
    )


@dataclass
class Reach:
    """The range one target's map was measured over, and how fast its error grows beyond it.

    A config beyond the K (its source prediction below the smallest or above the largest of
    theirs, or its batch outside theirs) is predicted by extrapolating the map: it is
    flagged ``extrapolated`` and its interval's half-width (log) grows by ``rate`` per unit
    of log distance beyond the range (:meth:`beyond`). ``rate`` is measured on the K
    themselves (:func:`measure_reach`): the map refitted without its lowest, highest,
    smallest-batch or largest-batch points, the error of its predictions of those points
    beyond the in-range interval, per unit of their distance, at the intervals' coverage.
    """

    #: least and greatest source prediction of the K (target units, e.g. ms)
    s_range: tuple[float, float]
    #: least and greatest batch of the K (images per forward)
    batch_range: tuple[float, float]
    #: log half-width added per unit of log distance beyond the range; ``None``: too few K to measure it
    rate: float | None
    #: leave-out extrapolation errors ``rate`` was read from
    n: int = 0

    def beyond(self, s: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Return each row's log distance beyond the K's range: of its source prediction plus its batch (0 inside)."""
        return _distance(
            np.log(np.maximum(np.asarray(s, float), 1e-12)),
            np.log(np.asarray(batch, float)),
            np.log(self.s_range),
            np.log(self.batch_range),
        )

    def to_dict(self) -> dict:
        """The reach as JSON-ready fields (what :meth:`from_dict` reads back)."""
        return {"s_range": list(self.s_range), "batch_range": list(self.batch_range), "rate": self.rate, "n": self.n}

    @classmethod
    def from_dict(cls, d: dict) -> "Reach":
        """Read a reach from :meth:`to_dict`'s fields."""
        return cls(
            s_range=(float(d["s_range"][0]), float(d["s_range"][1])),
            batch_range=(float(d["batch_range"][0]), float(d["batch_range"][1])),
            rate=None if d.get("rate") is None else float(d["rate"]),
            n=int(d.get("n", 0)),
        )


#: log distance below which a config counts as inside the K's range (floating-point ties)
INSIDE = 1e-9


def _distance(ls: np.ndarray, lb: np.ndarray, s_lim: Any, b_lim: Any) -> np.ndarray:
    """Return the log distance of ``(log s, log batch)`` beyond the limits ``(lo, hi)`` of each, summed."""
    return (
        np.maximum(s_lim[0] - ls, 0.0)
        + np.maximum(ls - s_lim[1], 0.0)
        + np.maximum(b_lim[0] - lb, 0.0)
        + np.maximum(lb - b_lim[1], 0.0)
    )


def _leave_out_sets(ls: np.ndarray, lb: np.ndarray) -> list[np.ndarray]:
    """Return the K's subsets to leave out when measuring extrapolation: their ends in source prediction and batch.

    The ``m`` lowest and ``m`` highest source predictions, and the ``m`` smallest and
    largest batch levels, for every ``m`` that keeps at least two thirds of the K (and 2) to
    fit on; each as a boolean mask, no mask twice.
    """
    n = len(ls)
    keep = max(math.ceil(2 * n / 3), 2)
    order = np.argsort(ls, kind="stable")
    levels = np.unique(lb)
    sets: dict[bytes, np.ndarray] = {}
    for m in range(1, n - keep + 1):
        for idx in (order[:m], order[-m:]):
            mask = np.zeros(n, bool)
            mask[idx] = True
            sets.setdefault(mask.tobytes(), mask)
    for j in range(1, len(levels)):
        for mask in (lb <= levels[j - 1], lb >= levels[-j]):
            if mask.sum() <= n - keep:
                sets.setdefault(mask.tobytes(), mask)
    return list(sets.values())


def measure_reach(
    refit: Any, s: np.ndarray, y: np.ndarray, batch: np.ndarray, hw_in: np.ndarray, coverage: float
) -> Reach:
    """Measure how a target's map errs beyond the K it was fitted on.

    For each subset of :func:`_leave_out_sets`, the map is refitted on the other K points
    (``refit(rest, out)`` returns its predictions of the left-out points, target units) and
    each left-out point beyond the rest's range scores its error in excess of the in-range
    half-width ``hw_in`` (log) per unit of its log distance beyond. ``rate`` is the
    split-conformal quantile of the scores at ``coverage`` (their largest when there are too
    few for it).
    """
    ls, lb, ly = np.log(s), np.log(batch), np.log(y)
    scores: list[float] = []
    for out in _leave_out_sets(ls, lb):
        rest = ~out
        d = _distance(ls[out], lb[out], (ls[rest].min(), ls[rest].max()), (lb[rest].min(), lb[rest].max()))
        far = d > INSIDE
        if not far.any():
            continue
        r = np.abs(ly[out] - np.log(np.maximum(np.asarray(refit(rest, out), float), 1e-12)))
        scores.extend((np.maximum(r - hw_in[out], 0.0)[far] / d[far]).tolist())
    rate = None
    if scores:
        q = conformal_quantile(np.sort(scores), coverage)
        rate = float(q) if np.isfinite(q) else float(max(scores))
    return Reach(
        s_range=(float(s.min()), float(s.max())),
        batch_range=(float(batch.min()), float(batch.max())),
        rate=rate,
        n=len(scores),
    )
