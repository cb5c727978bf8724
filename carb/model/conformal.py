"""Conformal prediction intervals that are right where decisions are made.

Plain CV conformal gives one half-width for every config: the ``coverage`` quantile of the
absolute out-of-fold residuals (log space). Measured on cpu-2t (device model out-of-fold by
architecture), its 90% intervals covered 83% of the batch-1 latencies and 97% of the
batch-16 ones, and 76% of the batch-32 memories against 99% of the batch-2 ones: the error
of a config depends on its batch (and precision, and size), so one width is too narrow for
some regimes and too wide for others.

:class:`ConformalScale` is a **normalized, Mondrian** CV-conformal interval:

* a small *scale model* ``log sigma(x) = coef . basis(x)`` is fitted to ``log |r|`` of
  the out-of-fold residuals ``r`` (least squares, or a quantile regression: below); the basis is ``1``,
  ``log2 batch`` and its square, a full-width (4-byte) precision flag alone and times both batch terms (on
  cpu-2t, 90% memory intervals of one width covered 100% of batch-1 bf16 configs but 80%
  of batch-1 fp32 ones, and the other way round at batch 8), and the (centred) log
  prediction and its square (relative memory errors are largest for the smallest and
  the largest configs) plus hinges ``max(0, log prediction - k)`` at its 10/25/50/75/90%
  training quantiles (a quadratic alone overstated the relative memory error of small
  configs: 90% intervals covered 94-96% of the memories within 10% of the lower budgets
  and 82% on the true fronts; with the hinges 90-93% and 92%, the intervals 9% narrower;
  ``benchmarks/bench_decisions.py``), and, when the blend has two or more members, the log of their
  spread (the standard deviation of the members' predictions: where XGBoost and
  ExtraTrees disagree, the config is hard), each clipped to the training range so that
  the scale never extrapolates. The coefficients are fitted by least squares (the mean
  of ``log |r|``: the typical size of the error) unless ``fit(tail=)`` (the CARB
  estimator's ``interval_tail``) asks for a **quantile regression** of ``log |r|`` (e.g. at 0.9: the
  local tail of the error). Where the share of large errors changes and their typical
  size does not, only the quantile scale follows: out of fold on the NAS-Bench-201
  Jetson pair it brought the latencies within 10% of the 50/75% budgets from 92.7/93.2%
  to 91.9/91.6% and, on cpu-2t, the b 4-8 latency regime from 92.3% to 90.5% and the
  memories near the 10% budget from 92.8% to 91.4%. It is not the default: its widths
  vary more from config to config (cpu-2t latency: standard deviation of the log width
  0.22 against 0.19), and ``carb.transfer.calibrate`` reads the source's widths as a config's
  relative difficulty on the new device (new width = source width x the conformal
  quantile of K = 20 map errors in its units): with it, the calibrated K = 20 latency
  intervals covered 98.7% (95.3%) and the decided share at the median budget fell from
  74% to 66%; device-model false accepts rose 0.2 points at the budgets where its
  intervals narrowed (``experiments/screening/coverage_near_budget.py``,
  ``benchmarks/bench_decisions.py``);
* the conformal scores are ``|r| / sigma(x)``, and their quantile is taken **per batch
  regime** (Mondrian: ``batch <= 2``, ``<= 8``, larger; a regime with fewer than
  :data:`MIN_REGIME_ROWS` scores uses the pooled ones), so coverage holds within each
  regime, not only on average;
* the half-width of a config at coverage ``c`` is ``sigma(x) * q_regime(c)``, with
  ``q(c)`` the ``ceil((n + 1) c)``-th smallest score of the ``n`` in the regime; the
  sorted scores are kept, so any coverage can be asked for at prediction time.

The scale model sees the same residuals the scores are computed from (8-14 numbers fitted
on thousands of rows: the optimism is small; the out-of-fold benchmark
``benchmarks/bench_decisions.py`` measures coverage on configs no part of the model saw).
Everything is plain numbers, saved as JSON in the bundle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

__all__ = [
    "ConformalScale",
    "REGIME_EDGES",
    "MIN_REGIME_ROWS",
    "gaussian_rescale",
    "chance_within",
    "conformal_quantile",
    "aux_inputs",
    "quantile_lstsq",
]

#: upper batch bound of each Mondrian regime but the last (launch-bound, middle, throughput-bound)
REGIME_EDGES: tuple[int, ...] = (2, 8)
#: fewest scores a regime needs for its own quantile (else the pooled scores are used)
MIN_REGIME_ROWS = 100
#: fewest rows to fit a scale model (else the scale is constant: plain CV conformal)
MIN_SCALE_ROWS = 100
#: columns of the scale model's basis (one more with the members' spread)
N_BASIS = 8
#: floor of the members' spread (log space) before its log is taken
SPREAD_FLOOR = 1e-4
#: training quantiles of the log prediction where the scale's hinge terms bend
KNOT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: iterations of the reweighted least squares that fit the quantile scale, and the floor of
#: its weights' residuals (log space)
SCALE_ITERATIONS, SCALE_EPS = 100, 1e-4


def quantile_lstsq(B: np.ndarray, u: np.ndarray, tau: float, penalty: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Return the coefficients ``c`` minimizing the pinball loss of ``u - B c`` at quantile ``tau`` plus a ridge.

    The ridge is ``c . penalty c`` (scaled like the weights). The fit is by iteratively reweighted least squares from
    ``start`` (each row weighted ``tau`` or ``1 - tau`` over its absolute residual, floored at :data:`SCALE_EPS`). A
    step that is not finite stops the iterations (the last finite coefficients are returned).
    """
    c = np.asarray(start, float)
    for _ in range(SCALE_ITERATIONS):
        e = u - B @ c
        w = np.where(e >= 0, tau, 1 - tau) / np.maximum(np.abs(e), SCALE_EPS)
        Bw = B * w[:, None]
        try:
            nxt = np.linalg.solve(Bw.T @ B + float(w.mean()) * penalty, Bw.T @ u)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(nxt)):
            break
        done = float(np.max(np.abs(nxt - c))) < 1e-7
        c = nxt
        if done:
            break
    return c


def conformal_quantile(sorted_scores: np.ndarray, coverage: float) -> float:
    """Return the split-conformal quantile of sorted scores, with its finite-sample correction.

    It is the ``ceil((n + 1) coverage)``-th smallest of ``n`` sorted scores (``inf`` when that exceeds ``n``).
    """
    n = len(sorted_scores)
    k = math.ceil((n + 1) * float(coverage))
    return float(sorted_scores[k - 1]) if 0 < k <= n else float("inf")


def gaussian_rescale(halfwidth: np.ndarray | float, from_coverage: float, to_coverage: float) -> Any:
    """Rescale a half-width at ``from_coverage`` to ``to_coverage``, assuming a normal error (log space).

    It serves intervals whose scores were not kept (old bundles, other predictors).
    """
    return np.asarray(halfwidth) * (norm.ppf((1 + to_coverage) / 2) / norm.ppf((1 + from_coverage) / 2))


def chance_within(
    d: np.ndarray | float, halfwidth: np.ndarray | float, coverage: float, tail_df: float | None = None
) -> np.ndarray:
    """Chance that a true value is within its budget, read off a ``coverage`` interval alone.

    For intervals whose conformal scores were not kept (old bundles, other predictors): the
    log-space error is taken as symmetric, normal or Student t, with the interval as its
    central ``coverage`` interval.

    Args:
        d: log of the budget over the point prediction, per config.
        halfwidth: the interval's half-width in log space (per config, or one for all).
        coverage: the interval's coverage, in (0, 1).
        tail_df: degrees of freedom of a Student-t error; ``None``: a normal error.

    Returns:
        The chance per config: ``d >= 0`` (0 or 1) where the width is 0, 0.5 (no call)
        where it is not finite.
    """
    from scipy.stats import t as student

    d, halfwidth = np.asarray(d, float), np.asarray(halfwidth, float)
    if tail_df is None:
        cdf, q = norm.cdf, norm.ppf((1 + coverage) / 2)
    else:
        cdf, q = (lambda z: student.cdf(z, tail_df)), float(student.ppf((1 + coverage) / 2, tail_df))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = d / (halfwidth / q)
        chance = cdf(z)
    return np.where(halfwidth == 0, (d >= 0).astype(float), np.where(np.isfinite(halfwidth), chance, 0.5))


def aux_inputs(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(batch, wide)`` of a config frame.

    ``batch`` is the images per forward (1 when absent); ``wide`` is whether the precision is 4 bytes wide (from
    ``bytes_per_element`` or ``precision``; 1 when absent).
    """
    n = len(df)
    batch = df["batch"].to_numpy(float) if "batch" in df.columns else np.ones(n)
    if "bytes_per_element" in df.columns:
        wide = (df["bytes_per_element"].to_numpy(float) >= 4).astype(float)
    elif "precision" in df.columns:
        wide = (df["precision"].astype(str).to_numpy() == "fp32").astype(float)
    else:
        wide = np.ones(n)
    return batch, wide


def _regimes(batch: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    return np.searchsorted(np.asarray(edges, float), batch, side="left")


@dataclass
class ConformalScale:
    """Normalized, Mondrian-by-batch-regime CV-conformal half-widths in log space (see the module docstring).

    Build with :meth:`fit`; :meth:`halfwidth` gives per-config widths.
    """

    coef: list[float]
    ranges: list[list[float]]  # clip range of log2 batch and of the log prediction
    center: float  # mean training log prediction
    edges: list[int]
    scores: dict[str, list[float]] = field(default_factory=dict)  # regime ("all", "0", "1" ...) -> sorted scores
    knots: list[float] = field(default_factory=list)  # hinge points of the centred log prediction
    # with a third clip range: the scale also reads log(members' spread) (halfwidth's ``spread``)

    @property
    def uses_spread(self) -> bool:
        """Whether the scale reads the blend members' spread (``halfwidth(..., spread=)``)."""
        return len(self.ranges) == 3

    # -- fitting ----------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        resid: np.ndarray,
        batch: np.ndarray,
        wide: np.ndarray,
        pred_log: np.ndarray,
        edges: tuple[int, ...] = REGIME_EDGES,
        spread: np.ndarray | None = None,
        tail: float | None = None,
    ) -> "ConformalScale":
        """Fit the scale model and the conformal scores from out-of-fold residuals.

        Args:
            resid: out-of-fold residuals (log space) of the configs.
            batch: the configs' batch sizes.
            wide: the configs' precision flags (1 when 4 bytes wide).
            pred_log: out-of-fold predictions (log space).
            edges: the batch regimes' upper edges.
            spread: the out-of-fold standard deviation of the blend members' predictions (log space), or ``None``
                (one member: not used).
            tail: the quantile of ``log |r|`` the scale is fitted to, in (0, 1); ``None``: least squares (the
                mean of ``log |r|``; see the module docstring for why it is the default).
        """
        if tail is not None and not 0 < float(tail) < 1:
            raise ValueError(f"tail: {tail!r} must be in (0, 1) or None")
        r = np.abs(np.asarray(resid, float))
        lb = np.log2(np.maximum(np.asarray(batch, float), 1.0))
        pl = np.asarray(pred_log, float)
        ranges = [[float(lb.min()), float(lb.max())], [float(pl.min()), float(pl.max())]]
        if spread is not None:
            ls = np.log(np.maximum(np.asarray(spread, float), SPREAD_FLOOR))
            ranges.append([float(ls.min()), float(ls.max())])
        center = float(pl.mean())
        knots = (
            sorted(set(float(k) - center for k in np.quantile(pl, KNOT_QUANTILES))) if len(r) >= MIN_SCALE_ROWS else []
        )
        self = cls(coef=[0.0] * N_BASIS, ranges=ranges, center=center, edges=list(edges), knots=knots)
        B = self._basis(lb, np.asarray(wide, float), pl, spread)
        nb = B.shape[1]
        self.coef = [0.0] * nb
        if len(r) >= MIN_SCALE_ROWS:
            # log |r| is floored: a residual of exactly 0 would pull the fit to -inf
            u = np.log(np.maximum(r, max(float(np.quantile(r, 0.05)), 1e-9)))
            # a light ridge keeps constant columns (one batch, one precision) harmless
            lam = 1e-3 * len(r)
            penalty = lam * np.diag([0.0] + [1.0] * (nb - 1))
            coef = np.linalg.solve(B.T @ B + penalty, B.T @ u)
            if tail is not None:  # the local tail of the errors, not their typical size
                # a thousandth of the ridge only keeps constant columns solvable: the full
                # one shrank the hinges (NB201 Jetson energy, one fold: pinball loss 0.1621
                # against 0.1609, hinge coefficients a third as large)
                coef = quantile_lstsq(B, u, float(tail), 1e-3 * penalty, coef)
            self.coef = [float(c) for c in coef]
        else:
            self.coef = [float(np.log(max(float(np.median(r)) if len(r) else 1.0, 1e-9)))] + [0.0] * (nb - 1)
        s = r / self._sigma(B)
        reg = _regimes(np.asarray(batch, float), tuple(edges))
        self.scores = {"all": sorted(map(float, s))}
        for g in np.unique(reg):
            if (reg == g).sum() >= MIN_REGIME_ROWS:
                self.scores[str(int(g))] = sorted(map(float, s[reg == g]))
        return self

    # -- prediction -------------------------------------------------------------------------

    def _basis(self, lb: np.ndarray, wide: np.ndarray, pl: np.ndarray, spread: np.ndarray | None = None) -> np.ndarray:
        lb = np.clip(lb, *self.ranges[0])
        pl = np.clip(pl, *self.ranges[1]) - self.center
        cols = [np.ones(len(lb)), lb, lb**2, wide, wide * lb, wide * lb**2, pl, pl**2]
        cols += [np.maximum(pl - k, 0.0) for k in self.knots]
        if self.uses_spread:
            if spread is None:
                raise ValueError("these intervals read the blend members' spread: pass spread=")
            cols.append(np.clip(np.log(np.maximum(np.asarray(spread, float), SPREAD_FLOOR)), *self.ranges[2]))
        return np.column_stack(cols)

    def _sigma(self, B: np.ndarray) -> np.ndarray:
        return np.exp(B @ np.asarray(self.coef))

    def halfwidth(
        self,
        batch: np.ndarray,
        wide: np.ndarray,
        pred_log: np.ndarray,
        coverage: float,
        spread: np.ndarray | None = None,
    ) -> np.ndarray:
        """Return the half-width in log space of each config's ``coverage`` interval.

        ``spread``: the blend members' spread, required when :attr:`uses_spread`.
        """
        batch = np.asarray(batch, float)
        sigma = self._sigma(
            self._basis(np.log2(np.maximum(batch, 1.0)), np.asarray(wide, float), np.asarray(pred_log, float), spread)
        )
        reg = _regimes(batch, tuple(self.edges))
        q = np.full(len(batch), conformal_quantile(np.asarray(self.scores["all"]), coverage))
        for g in np.unique(reg):
            key = str(int(g))
            if key in self.scores:
                q[reg == g] = conformal_quantile(np.asarray(self.scores[key]), coverage)
        return sigma * q

    def prob_within(
        self,
        batch: np.ndarray,
        wide: np.ndarray,
        pred_log: np.ndarray,
        budget_log: np.ndarray | float,
        spread: np.ndarray | None = None,
    ) -> np.ndarray:
        """Return the chance that each config's true value (log space) is at most ``budget_log``.

        The chance is read off the kept scores of its regime: with ``d = budget_log - pred_log`` and ``F`` the
        count of the ``n`` scores at most ``|d| / sigma`` over ``n + 1`` (the conformal
        guarantee: a fresh score is at most the k-th smallest with chance >= k / (n + 1)),
        ``(1 + F) / 2`` when ``d >= 0`` and ``(1 - F) / 2`` otherwise (the scores
        are of absolute residuals: errors taken as symmetric). Conservative both ways: a
        chance near 1 (or 0) is claimed only as far as the scores support it.
        """
        batch = np.asarray(batch, float)
        pred_log = np.asarray(pred_log, float)
        sigma = self._sigma(self._basis(np.log2(np.maximum(batch, 1.0)), np.asarray(wide, float), pred_log, spread))
        d = np.asarray(budget_log, float) - pred_log
        s = np.abs(d) / sigma
        reg = _regimes(batch, tuple(self.edges))
        F = np.empty(len(batch))
        for g in np.unique(reg):
            sc = np.asarray(self.scores.get(str(int(g)), self.scores["all"]))
            m = reg == g
            F[m] = np.searchsorted(sc, s[m], side="right") / (len(sc) + 1)
        return np.where(d >= 0, (1 + F) / 2, (1 - F) / 2)

    # -- persistence (plain JSON numbers) ----------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The scale as plain JSON numbers, every one kept exact: a reloaded model predicts the same."""
        return {
            "kind": "normalized-mondrian",
            "coef": self.coef,
            "ranges": self.ranges,
            "center": self.center,
            "edges": self.edges,
            "knots": self.knots,
            "scores": {k: list(s) for k, s in self.scores.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ConformalScale":
        """The scale :meth:`to_json` wrote (``ValueError`` on another kind of interval)."""
        if d.get("kind") != "normalized-mondrian":
            raise ValueError(f"unknown interval kind {d.get('kind')!r}")
        coef = [float(c) for c in d["coef"]]
        ranges = [[float(a), float(b)] for a, b in d["ranges"]]
        knots = [float(k) for k in d.get("knots", [])]  # absent in bundles written before the hinges
        if len(ranges) not in (2, 3) or len(coef) != N_BASIS + len(ranges) - 2 + len(knots):
            raise ValueError("malformed interval parameters")
        scores = {str(k): sorted(float(v) for v in s) for k, s in d["scores"].items()}
        if "all" not in scores or not scores["all"]:
            raise ValueError("interval parameters without scores")
        return cls(
            coef=coef,
            ranges=ranges,
            center=float(d["center"]),
            edges=[int(e) for e in d["edges"]],
            scores=scores,
            knots=knots,
        )
