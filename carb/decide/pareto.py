"""Pareto fronts, hypervolume and front-recovery metrics over cost objectives.

Objectives are columns of a DataFrame with a direction each (``min`` or ``max``). The
non-dominated filter and the hypervolume are moocore's (exact, C implementations); this
module only orients and normalizes the objectives so that fronts of different sets are
comparable.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import moocore
import numpy as np
import pandas as pd

__all__ = [
    "Objective",
    "parse_objectives",
    "front_mask",
    "hypervolume",
    "bounds_of",
    "pareto_recall",
    "DEFAULT_OBJECTIVES",
    "dominated_by",
    "sampled_front_frequency",
]

#: (column, direction): cheapest energy per image, fastest, smallest, most capacity
DEFAULT_OBJECTIVES: tuple[tuple[str, str], ...] = (
    ("energy_j_per_image", "min"),
    ("latency_ms", "min"),
    ("memory_mb", "min"),
    ("flops_per_image", "max"),
)

Objective = tuple[str, str]


def parse_objectives(specs: Sequence[str]) -> list[Objective]:
    """Parse ``["min:latency_ms", "max:flops_per_image"]`` (or ``latency_ms`` = min)."""
    out: list[Objective] = []
    for s in specs:
        direction, _, col = s.partition(":") if ":" in s else ("min", ":", s)
        if direction not in ("min", "max") or not col:
            raise ValueError(f"objective {s!r}: expected min:COLUMN or max:COLUMN")
        out.append((col, direction))
    return out


def _matrix(df: pd.DataFrame, objectives: Sequence[Objective]) -> np.ndarray:
    missing = [c for c, _ in objectives if c not in df.columns]
    if missing:
        raise ValueError(f"objective column {missing[0]!r} not in the table")
    X = np.column_stack([df[c].to_numpy(dtype=float) * (1.0 if d == "min" else -1.0) for c, d in objectives])
    return X


def front_mask(df: pd.DataFrame, objectives: Sequence[Objective]) -> np.ndarray:
    """Boolean mask of the rows on the Pareto front (rows with a NaN objective are never on it)."""
    X = _matrix(df, objectives)
    ok = np.isfinite(X).all(axis=1)
    mask = np.zeros(len(df), dtype=bool)
    if ok.any():
        mask[np.flatnonzero(ok)] = moocore.is_nondominated(X[ok], keep_weakly=True)  # ties all stay
    return mask


def hypervolume(df: pd.DataFrame, objectives: Sequence[Objective], bounds: Mapping[str, tuple[float, float]]) -> float:
    """Return the hypervolume dominated by the rows, with reference point 1.1.

    Each objective is first scaled to [0, 1] by ``bounds`` (column -> (best, worst) in the column's own units;
    log-scaled when both are positive, since costs span orders of magnitude).
    """
    if df.empty:
        return 0.0
    cols = []
    for c, _ in objectives:
        best, worst = bounds[c]
        v = df[c].to_numpy(dtype=float)
        if best > 0 and worst > 0:
            v, best, worst = np.log(v), np.log(best), np.log(worst)
        # 0 at the best value, 1 at the worst, whatever the direction
        cols.append((v - best) / (worst - best) if worst != best else np.zeros_like(v))
    X = np.column_stack(cols)
    X = X[np.isfinite(X).all(axis=1)]
    X = X[(X < 1.1).all(axis=1)]
    if len(X) == 0:
        return 0.0
    return float(moocore.hypervolume(X, ref=np.full(X.shape[1], 1.1)))


def bounds_of(df: pd.DataFrame, objectives: Sequence[Objective]) -> dict[str, tuple[float, float]]:
    """(best, worst) of each objective over ``df``, for :func:`hypervolume`."""
    out = {}
    for c, d in objectives:
        v = df[c].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        out[c] = (float(v.min()), float(v.max())) if d == "min" else (float(v.max()), float(v.min()))
    return out


def pareto_recall(
    selected_ids: Sequence[str], truth: pd.DataFrame, objectives: Sequence[Objective], id_col: str = "config_id"
) -> float:
    """Share of the true Pareto front (computed on ``truth``, the measured values) that the selected ids contain."""
    true_front = set(truth.loc[front_mask(truth, objectives), id_col])
    if not true_front:
        return float("nan")
    return len(true_front & set(selected_ids)) / len(true_front)


def dominated_by(
    points: pd.DataFrame, others: pd.DataFrame, objectives: Sequence[Objective], chunk: int = 4096
) -> np.ndarray:
    """Return a mask of the rows of ``points`` that some row of ``others`` dominates.

    A row dominates another when it is at least as good in every objective and better in one.

    With ``points`` holding each config's *best plausible* values (the interval's lower
    bounds of costs) and ``others`` the *worst plausible* values of configs surely within
    budget (upper bounds), a dominated row is dominated with high probability: whatever
    its true costs inside its interval, a feasible config beats it. Only the front of
    ``others`` is compared against, in chunks (memory stays bounded for millions of rows).
    """
    P, Q = _matrix(points, objectives), _matrix(others, objectives)
    Q = Q[np.isfinite(Q).all(axis=1)]
    out = np.zeros(len(P), dtype=bool)
    if not len(Q) or not len(P):
        return out
    F = Q[moocore.is_nondominated(Q, keep_weakly=False)]
    for s in range(0, len(P), chunk):
        x = P[s : s + chunk, None, :]
        le = (F[None, :, :] <= x).all(axis=2)
        lt = (F[None, :, :] < x).any(axis=2)
        out[s : s + chunk] = (le & lt).any(axis=1)
    return out


def sampled_front_frequency(samples: Iterable[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Return how often each of ``n`` rows is on the Pareto front, over samples of ``(X, ok)``.

    Each sample holds ``X``, an ``n x d`` matrix of objective values (to minimize), and ``ok``, the rows that exist in
    that sample (e.g. those within budget). Ties all count as on the front.
    """
    count = np.zeros(n)
    m = 0
    for X, ok in samples:
        m += 1
        idx = np.flatnonzero(ok)
        if len(idx):
            count[idx[moocore.is_nondominated(X[idx], keep_weakly=True)]] += 1
    return count / max(m, 1)


def oriented(df: pd.DataFrame, objectives: Sequence[Objective]) -> np.ndarray:
    """The objective columns as a matrix to minimize (``max`` columns negated)."""
    return _matrix(df, objectives)
