"""Model inputs: configs (and their analytic features) as a numeric matrix.

Two feature sets:

``paper``
    The config parameters (categoricals as fixed integer codes) plus every column of
    :data:`carb.features.FEATURE_COLUMNS`: what the study's models saw.
``extended``
    ``paper`` plus roofline-style ratios and sums that a tree cannot form by itself from
    single-feature splits (see :data:`EXTRA_COLUMNS`).

Codes of the categorical parameters are fixed here (never learned from data), so that a
saved bundle reads the same columns the same way on any machine.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from carb.features import FEATURE_COLUMNS, REQUIRED_COLUMNS, compute
from carb.space import PARAMETERS, Config, Space

__all__ = ["CODES", "PARAM_COLUMNS", "EXTRA_COLUMNS", "BATCH_SCALED", "input_columns", "config_frame",
           "with_features", "matrix"]

#: fixed integer codes of the categorical parameters
CODES: dict[str, dict[str, int]] = {
    "family": {"cifar": 0, "imagenet": 1},
    "block": {"basic": 0, "bottleneck": 1},
    "precision": {"fp32": 0, "fp16": 1, "bf16": 2},
}
#: the config parameters as model inputs (``classes`` filled with the family default)
PARAM_COLUMNS: list[str] = ["family", "block", "depth", "width", "early_downsample", "input_size",
                            "batch", "precision", "classes"]
#: extra inputs of the ``extended`` set, with units:
#: ``mem_estimate_bytes`` (B) = model + input + live activation bytes, the closed-form
#: memory peak; ``bytes_moved`` (B) = weight + input + activation bytes, the traffic of an
#: unfused forward; ``flops_per_op`` (FLOP) and ``bytes_per_op`` (B): work per operator
#: call (large kernels run near peak, small ones are launch-bound);
#: ``activation_bytes_per_image`` (B); ``weight_fraction`` (fraction): weights' share of
#: the bytes moved (weight-bound vs activation-bound); ``half_precision`` (0/1).
EXTRA_COLUMNS: list[str] = ["mem_estimate_bytes", "bytes_moved", "flops_per_op", "bytes_per_op",
                            "activation_bytes_per_image", "weight_fraction", "half_precision"]
#: inputs that grow with the batch at a fixed network and precision: the model may be
#: constrained to be non-decreasing in them (cost does not fall as the batch grows)
BATCH_SCALED: frozenset[str] = frozenset({
    "batch", "flops", "input_bytes", "output_bytes", "activation_bytes", "peak_activation_bytes",
    "live_activation_bytes", "largest_activation_bytes", "mem_estimate_bytes", "bytes_moved",
    "bytes_per_op",
})


def input_columns(feature_set: str) -> list[str]:
    """The input columns of a feature set (``paper`` or ``extended``), in order."""
    if feature_set == "paper":
        return PARAM_COLUMNS + list(FEATURE_COLUMNS)
    if feature_set == "extended":
        return PARAM_COLUMNS + list(FEATURE_COLUMNS) + EXTRA_COLUMNS
    raise ValueError(f"unknown feature set {feature_set!r} (expected paper or extended)")


def config_frame(configs: pd.DataFrame | Space | Config | Iterable[Config]) -> pd.DataFrame:
    """A DataFrame of configs from a DataFrame (returned as is), a Space, a Config or Configs."""
    if isinstance(configs, pd.DataFrame):
        return configs
    if isinstance(configs, Space):
        return configs.to_frame()
    if isinstance(configs, Config):
        configs = [configs]
    cs = list(configs)
    if not all(isinstance(c, Config) for c in cs):
        raise TypeError("configs: expected a DataFrame, a Space or Configs")
    df = pd.DataFrame([c.to_dict() for c in cs], columns=list(PARAMETERS))
    df.insert(0, "config_id", [c.config_id for c in cs])
    return df


def with_features(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the analytic features, computed only when a column is absent."""
    if all(c in df.columns for c in FEATURE_COLUMNS):
        return df
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"configs: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(a config table needs {', '.join(REQUIRED_COLUMNS)})")
    return compute(df)


def _codes(col: pd.Series, name: str, first_row: int = 0) -> np.ndarray:
    mapping = CODES[name]
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    table = np.array([mapping.get(u, -1) for u in uniq], dtype=np.float64)
    out = table[codes] if len(uniq) else np.zeros(len(col))
    bad = (codes < 0) | (out < 0) if len(uniq) else np.zeros(len(col), bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"configs: row {first_row + i}: {name}: unknown value {col.iloc[i]!r} "
                         f"(expected one of {', '.join(mapping)})")
    return out


def matrix(df: pd.DataFrame, feature_set: str, first_row: int = 0) -> tuple[np.ndarray, list[str]]:
    """The input matrix (rows x columns, float64) of a config table with its features.

    ``df`` must hold the parameters and :data:`carb.features.FEATURE_COLUMNS` (see
    :func:`with_features`). Returns the matrix and its column names. ``first_row``: position
    of ``df``'s first row in the caller's table, for error messages.
    """
    cols = input_columns(feature_set)
    n = len(df)
    # columns gathered first, stacked once at the end (much faster than strided writes)
    col: dict[str, np.ndarray] = {}
    for c in ("family", "block", "precision"):
        col[c] = _codes(df[c], c, first_row)
    for c in ("depth", "width", "input_size", "batch", "early_downsample"):
        col[c] = df[c].to_numpy(dtype=np.float64)
    default = np.where(col["family"] == CODES["family"]["imagenet"], 1000.0, 10.0)
    if "classes" in df.columns:  # absent or missing: the family's default, as carb.features does
        given = df["classes"].to_numpy(dtype=np.float64, na_value=np.nan)
        col["classes"] = np.where(np.isnan(given), default, given)
    else:
        col["classes"] = default
    for c in FEATURE_COLUMNS:
        col[c] = df[c].to_numpy(dtype=np.float64)
    if feature_set == "extended":
        moved = col["weight_bytes"] + col["input_bytes"] + col["activation_bytes"]
        ops = np.maximum(col["n_ops"], 1.0)
        col["mem_estimate_bytes"] = col["model_bytes"] + col["input_bytes"] + col["live_activation_bytes"]
        col["bytes_moved"] = moved
        col["flops_per_op"] = col["flops"] / ops
        col["bytes_per_op"] = col["activation_bytes"] / ops
        col["activation_bytes_per_image"] = col["activation_bytes"] / col["batch"]
        col["weight_fraction"] = col["weight_bytes"] / np.maximum(moved, 1.0)
        col["half_precision"] = (col["bytes_per_element"] == 2).astype(np.float64)
    out = np.column_stack([col[c] for c in cols]) if n else np.zeros((0, len(cols)))
    if n and not np.isfinite(out).all():
        r, c = np.argwhere(~np.isfinite(out))[0]
        raise ValueError(f"configs: row {first_row + int(r)}: {cols[int(c)]} is not a finite number")
    return out, cols
