"""The calibration sampler: which K configs of a space to measure on a new device.

First the corners decisions land in (per precision, the smallest-batch config of least predicted
memory, and a config of the largest batch), then one config per quantile bin of the source
model's predicted cost, each the farthest from those already chosen in the parameters' level
ranks. :mod:`carb.transfer.calibrate` maps the source model on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["choose_samples"]


def choose_samples(
    candidates: pd.DataFrame, source: Any, k: int, seed: int = 0, target: str = "latency_ms", corners: bool = True
) -> pd.DataFrame:
    """Pick ``k`` configs to measure: the corners decisions land in, then a spread over cost and space.

    First the corners (:func:`_corner_picks`, at most ``k // 2``): per precision, the config
    of the smallest batch with the least predicted memory (a shortlist under budgets
    favours that corner, and a map extrapolates below its K), and a config of the largest
    batch. Then one config per quantile bin of the source model's predicted ``target``, each
    the farthest (maximin over the parameters' level ranks) from those already chosen, so
    that the K span the precisions, the batches and the sizes; a corner takes the place of
    its bin's pick (:func:`_bins_taken`), so the K stay ``k`` and spread as without them.

    Args:
        candidates: configs to choose from (a space's frame).
        source: a fitted predictor of ``target`` (and of ``memory_mb`` for the corners,
            when it predicts it).
        k: how many to pick (at least 2; all candidates when ``k`` is not below their count).
        seed: seed of the ties and of the first pick.
        target: the predicted column the bins split (e.g. ``latency_ms``).
        corners: take the corners first (default); ``False``: one config per bin only (an ablation).

    Returns:
        The chosen rows of ``candidates``, in their order.

    Raises:
        ValueError: ``k`` < 2.
    """
    if k < 2:
        raise ValueError(f"samples: {k} is too few to calibrate (at least 2)")
    if k >= len(candidates):
        return candidates.copy()
    predicted = source.predict(candidates)
    pred = np.log(predicted[target].to_numpy(float))
    rng = np.random.default_rng(seed)
    levels = _level_ranks(candidates)
    picks = _corner_picks(candidates, predicted, target, k // 2) if corners else []
    order = np.argsort(pred + rng.uniform(0, 1e-9, len(pred)))
    bins = np.array_split(order, k)
    taken = _bins_taken(bins, picks)
    chosen = list(picks)
    drawn = False
    for i, b in enumerate(bins):
        if i in taken:
            continue
        if not drawn:  # the seed's draw: the K differ from seed to seed
            chosen.append(int(rng.choice(b)))
            drawn = True
            continue
        d = np.min(((levels[b][:, None, :] - levels[chosen][None, :, :]) ** 2).sum(-1), axis=1)
        chosen.append(int(b[np.argmax(d + rng.uniform(0, 1e-9, len(d)))]))
    return candidates.iloc[sorted(chosen)].copy()


def _bins_taken(bins: list[np.ndarray], corners: list[int]) -> set[int]:
    """Return the quantile bins whose pick a corner takes: its own, or the nearest free one when that is taken.

    So the K keep one config per bin, the same design with or without the corners.
    """
    bin_of = np.empty(sum(len(b) for b in bins), int)
    for i, b in enumerate(bins):
        bin_of[b] = i
    taken: set[int] = set()
    for c in corners:
        free = [j for j in range(len(bins)) if j not in taken]
        taken.add(min(free, key=lambda j: (abs(j - int(bin_of[c])), j)))
    return taken


def _corner_picks(candidates: pd.DataFrame, predicted: pd.DataFrame, target: str, most: int) -> list[int]:
    """Return the positions of the corners the K must reach (at most ``most``).

    Per precision, its smallest-batch config of least predicted memory: that low-memory,
    small-batch corner is where a shortlist under budgets lies, and without a K there every
    such config is predicted by extrapolating the map below its K (``target`` picks it
    where the source does not predict memory). Then the largest batch's config of median
    predicted ``target``: without a K at the largest batch, every config there lies beyond
    the K's batches.
    """
    col = "memory_mb" if "memory_mb" in predicted.columns and predicted["memory_mb"].notna().all() else target
    cost = predicted[col].to_numpy(float)
    batch = candidates["batch"].to_numpy(float) if "batch" in candidates.columns else np.ones(len(candidates))
    prec = candidates["precision"].astype(str).to_numpy() if "precision" in candidates.columns else None
    groups = [np.ones(len(candidates), bool)] if prec is None else [prec == p for p in sorted(set(prec))]
    picks: list[int] = []
    for g in groups:
        rows = np.flatnonzero(g & (batch == batch[g].min()))
        picks.append(int(rows[np.argmin(cost[rows])]))
    top = np.flatnonzero(batch == batch.max())
    if batch.max() > batch.min():
        tcost = predicted[target].to_numpy(float)[top]
        picks.append(int(top[np.argsort(tcost, kind="stable")[len(top) // 2]]))
    return picks[:most]


def _level_ranks(df: pd.DataFrame) -> np.ndarray:
    """Return each config parameter's level rank, scaled to 0..1, as one matrix column per parameter."""
    from carb.families.space import PARAMETERS

    cols = []
    for p in PARAMETERS:
        if p not in df.columns:
            continue
        codes = pd.factorize(df[p].astype(str), sort=True)[0].astype(float)
        cols.append(codes / max(codes.max(), 1.0))
    return np.column_stack(cols)
