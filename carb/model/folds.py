"""Folds and hold-outs that keep a config's repeated rows together, so no figure is scored on a copy it learned.

A dataset may hold a config more than once (two campaigns, a remeasurement): split row by row, a config's copy in
the test side is a config the model learned, and the figure is inflated. Every split here draws whole configs
(:func:`config_groups`); on data without repeats each one is the same as its row-by-row form.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["config_groups", "cv_folds", "duplicate_rows", "holdout", "rows_in_order", "take_groups"]


def config_groups(df: pd.DataFrame) -> np.ndarray:
    """The group of each row: one per config (``config_id``, and ``device`` where present).

    Groups are numbered in order of first appearance; every row is its own group where the table has no
    ``config_id``.
    """
    keys = [c for c in ("config_id", "device") if c in df.columns]
    if "config_id" not in keys:
        return np.arange(len(df))
    if len(keys) == 1:
        return pd.factorize(df["config_id"])[0]
    return df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()


def duplicate_rows(df: pd.DataFrame) -> int:
    """How many rows repeat a config already in ``df`` (see :func:`config_groups`): 0 where each config is once."""
    groups = config_groups(df)
    return int(len(groups) - len(np.unique(groups))) if len(groups) else 0


def cv_folds(df: pd.DataFrame, k: int, seed: int) -> np.ndarray:
    """The cross-validation fold (0 .. ``k`` - 1) of each row, configs drawn at random, a config's copies together.

    Without repeated configs this is ``permutation(len(df)) % k`` of ``default_rng(seed)``.
    """
    groups = config_groups(df)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    return np.random.default_rng(seed).permutation(n_groups)[groups] % k


def take_groups(order: np.ndarray, sizes: np.ndarray, n_rows: int) -> np.ndarray:
    """The first groups of ``order`` whose rows (``sizes``) add up to ``n_rows`` or just over (none for 0)."""
    if n_rows <= 0 or not len(order):
        return order[:0]
    reached = np.cumsum(sizes[order]) >= n_rows
    stop = int(np.argmax(reached)) + 1 if reached.any() else len(order)
    return order[:stop]


def holdout(df: pd.DataFrame, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The positional rows kept for training, and those held out: about ``fraction`` of the rows, whole configs.

    The configs are drawn at random and a config's copies stay on one side; both sides come in the order drawn.
    Without repeated configs the held-out rows are ``perm[:k]`` and the training rows ``perm[k:]``, with ``perm =
    default_rng(seed).permutation(len(df))`` and ``k = round(fraction * len(df))``.
    """
    groups = config_groups(df)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    order = np.random.default_rng(seed).permutation(n_groups)
    out = take_groups(order, np.bincount(groups, minlength=n_groups), int(round(fraction * len(df))))
    return rows_in_order(groups, order[len(out) :]), rows_in_order(groups, out)


def rows_in_order(groups: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The rows of the ``chosen`` groups, group by group in the order chosen (rows of a group in table order)."""
    if not len(chosen):
        return np.zeros(0, dtype=np.int64)
    rank = np.full(int(groups.max()) + 1, -1)
    rank[chosen] = np.arange(len(chosen))
    r = rank[groups]
    rows = np.flatnonzero(r >= 0)
    return rows[np.argsort(r[rows], kind="stable")]
