"""Closed-form static features of configs, for whole tables at once.

:func:`compute` dispatches each row to its family's ``features`` (:mod:`carb.families`).

The ResNet features (:data:`FEATURE_COLUMNS`, every column's meaning and unit) are
documented in :mod:`carb.families.resnet`; other families add the same columns where they
apply (FBNet: :mod:`carb.families.fbnet`).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from carb import families
from carb.families._base import SpaceError
from carb.families.resnet import (
    ARCH_KEYS,
    FAMILIES,
    FEATURE_COLUMNS,
    PARAMETERS,
    REQUIRED_COLUMNS,
    Config,
    arch_features,
)
from carb.families.resnet import features as _resnet_features

__all__ = ["compute", "FEATURE_COLUMNS", "ARCH_KEYS", "REQUIRED_COLUMNS", "arch_features"]


def _as_frame(configs: pd.DataFrame | Config | Iterable[Config]) -> pd.DataFrame:
    if isinstance(configs, pd.DataFrame):
        return configs  # never modified: compute returns a new frame
    if isinstance(configs, Config):
        configs = [configs]
    cs = list(configs)
    others = [c for c in cs if not isinstance(c, Config)]
    if not others:
        df = pd.DataFrame([c.to_dict() for c in cs], columns=list(PARAMETERS))
        df.insert(0, "config_id", [c.config_id for c in cs])
        return df
    try:
        rows = [families.to_row(c) for c in cs]
    except SpaceError:
        bad = next(c for c in others if not hasattr(c, "config_id"))
        raise TypeError(f"features.compute: expected a DataFrame or Configs, got a {type(bad).__name__}") from None
    df = pd.DataFrame(rows)
    df.insert(0, "config_id", [c.config_id for c in cs])
    return df


def _compute_families(df: pd.DataFrame, other: np.ndarray) -> pd.DataFrame:
    """:func:`compute` of a table with rows of other families.

    Each family's rows go through its own ``features`` (:mod:`carb.families`), in the table's row order.
    """
    pos = np.arange(len(df))
    parts = []
    if (~other).any():
        parts.append(compute(df[~other]).assign(_row=pos[~other]))
    fam = df["family"].to_numpy()
    for name in pd.unique(fam[other]):
        rows = fam == name
        parts.append(families.get(name).features(df[rows]).assign(_row=pos[rows]))
    out = pd.concat(parts).sort_values("_row")
    out.index = df.index
    return out.drop(columns="_row")


def compute(configs: pd.DataFrame | Any | Iterable[Any]) -> pd.DataFrame:
    """A copy of the configs table with the feature columns added.

    The columns are :data:`FEATURE_COLUMNS` for ResNets, and each family's own where rows of other families are
    present.

    Closed form, vectorized: each distinct network is walked once, then batch and precision
    scale its figures per row with numpy (units: FLOP, B, count, channels, px; see
    :mod:`carb.families.resnet`).

    Args:
        configs: a DataFrame with the columns :data:`REQUIRED_COLUMNS` (others are kept;
            ``classes`` may be absent or missing, meaning the family's default), or a
            list of configs (the result then starts with ``config_id`` and the parameter
            columns, as :meth:`carb.families.space.Space.to_frame`).

    Raises:
        ValueError: a required column is missing, or a row is not a valid config (the
            message names the column or the first bad row).
    """
    df = _as_frame(configs)
    if "family" in df.columns and not df["family"].isin(FAMILIES).all():
        # rows of the other registered families; unknown names fall through to the errors below
        other = df["family"].isin([n for n in families.names() if n not in FAMILIES]).to_numpy()
        if other.any():
            return _compute_families(df, other)
    try:
        return _resnet_features(df)
    except ValueError as e:
        raise ValueError(f"features.compute: {str(e).removeprefix('features: ')}") from None
