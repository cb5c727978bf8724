"""Model inputs: configs (and their analytic features) as a numeric matrix.

Two feature sets:

``paper``
    The config parameters (categoricals as fixed integer codes) plus every column of
    :data:`carb.families.features.FEATURE_COLUMNS`: what the study's models saw.
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

from carb.families import fbnet as _fbnet
from carb.families import nb201 as _nb201
from carb.families.features import FEATURE_COLUMNS, REQUIRED_COLUMNS, compute
from carb.families.space import PARAMETERS, Config, Space

__all__ = [
    "CODES",
    "PARAM_COLUMNS",
    "EXTRA_COLUMNS",
    "BATCH_SCALED",
    "FAMILY_COLUMNS",
    "ARCH_COLUMNS",
    "input_columns",
    "families_of",
    "arch_keys",
    "config_frame",
    "with_features",
    "matrix",
]

#: fixed integer codes of the categorical parameters
CODES: dict[str, dict[str, int]] = {
    "family": {"cifar": 0, "imagenet": 1, "fbnet": 2, "nb201": 3},
    "block": {"basic": 0, "bottleneck": 1},
    "precision": {"fp32": 0, "fp16": 1, "bf16": 2},
}
#: the config parameters as model inputs (``classes`` filled with the family default)
PARAM_COLUMNS: list[str] = [
    "family",
    "block",
    "depth",
    "width",
    "early_downsample",
    "input_size",
    "batch",
    "precision",
    "classes",
]
#: extra inputs of the ``extended`` set, with units:
#: ``mem_estimate_bytes`` (B) = model + input + live activation bytes, the closed-form
#: memory peak; ``bytes_moved`` (B) = weight + input + activation bytes, the traffic of an
#: unfused forward; ``flops_per_op`` (FLOP) and ``bytes_per_op`` (B): work per operator
#: call (large kernels run near peak, small ones are launch-bound);
#: ``activation_bytes_per_image`` (B); ``weight_fraction`` (fraction): weights' share of
#: the bytes moved (weight-bound vs activation-bound); ``half_precision`` (0/1).
EXTRA_COLUMNS: list[str] = [
    "mem_estimate_bytes",
    "bytes_moved",
    "flops_per_op",
    "bytes_per_op",
    "activation_bytes_per_image",
    "weight_fraction",
    "half_precision",
]
#: inputs that grow with the batch at a fixed network and precision: the model may be
#: constrained to be non-decreasing in them (cost does not fall as the batch grows)
BATCH_SCALED: frozenset[str] = frozenset(
    {
        "batch",
        "flops",
        "input_bytes",
        "output_bytes",
        "activation_bytes",
        "peak_activation_bytes",
        "live_activation_bytes",
        "largest_activation_bytes",
        "mem_estimate_bytes",
        "bytes_moved",
        "bytes_per_op",
    }
)


#: per family whose networks are not set by the ResNet parameters: its own parameter
#: columns (operation names) and their categories, read as fixed integer codes (the index
#: of the operation in the family's list; -1 on rows of other families). A model trained on
#: rows of such a family reads them after the feature-set columns: where a cell's operations
#: sit changes latency beyond what the totals say (nb201 on the Jetson TX2, grouped split:
#: LightGBM on the features alone 18% energy MAPE, with the six edge codes 2.3%).
FAMILY_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "nb201": (tuple(_nb201.EDGE_COLUMNS), tuple(_nb201.OPS)),
    "fbnet": (tuple(_fbnet.LAYER_COLUMNS), tuple(_fbnet.OPS)),
}
#: the columns that name one architecture (every batch, input size, precision of it shares
#: them): the key of grouped folds and splits; those absent from a table are skipped
ARCH_COLUMNS: tuple[str, ...] = (
    "family",
    "block",
    "depth",
    "width",
    "early_downsample",
    *(c for cols, _ in FAMILY_COLUMNS.values() for c in cols),
)


def input_columns(feature_set: str, families: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Return the input columns of a feature set, in order.

    The input columns of a feature set (``paper`` or ``extended``), in order, then the
    parameter columns of each family in ``families`` (:data:`FAMILY_COLUMNS`).
    """
    extra = [c for f in families for c in FAMILY_COLUMNS[f][0]]
    if feature_set == "paper":
        return PARAM_COLUMNS + list(FEATURE_COLUMNS) + extra
    if feature_set == "extended":
        return PARAM_COLUMNS + list(FEATURE_COLUMNS) + EXTRA_COLUMNS + extra
    raise ValueError(f"unknown feature set {feature_set!r} (expected paper or extended)")


def families_of(df: pd.DataFrame) -> list[str]:
    """The families of :data:`FAMILY_COLUMNS` that have rows in ``df``, sorted."""
    if "family" not in df.columns:
        return []
    present = set(map(str, pd.unique(df["family"].dropna())))
    return sorted(f for f in FAMILY_COLUMNS if f in present)


def arch_keys(df: pd.DataFrame) -> np.ndarray:
    """Return one integer per row naming its architecture.

    One integer per row naming its architecture (:data:`ARCH_COLUMNS`): rows that differ
    only in batch, input size, classes or precision share it.
    """
    cols = [c for c in ARCH_COLUMNS if c in df.columns]
    if not cols:
        return np.zeros(len(df), np.int64)
    # missing values (NA of a nullable column, e.g. a net row's depth) read as text too
    key = df[cols].astype(object).fillna("").astype(str)
    key = key.agg("|".join, axis=1) if len(cols) > 1 else key[cols[0]]
    return pd.factorize(key)[0]


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
    # rows of other families: each family's own columns (carb.families.features says what is missing)
    if families_of(df):
        return compute(df)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"configs: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(a config table needs {', '.join(REQUIRED_COLUMNS)})"
        )
    return compute(df)


def _codes(col: pd.Series, name: str, first_row: int = 0) -> np.ndarray:
    mapping = CODES[name]
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    table = np.array([mapping.get(u, -1) for u in uniq], dtype=np.float64)
    out = table[codes] if len(uniq) else np.zeros(len(col))
    bad = (codes < 0) | (out < 0) if len(uniq) else np.zeros(len(col), bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"configs: row {first_row + i}: {name}: unknown value {col.iloc[i]!r} "
            f"(expected one of {', '.join(mapping)})"
        )
    return out


def matrix(
    df: pd.DataFrame, feature_set: str, first_row: int = 0, families: tuple[str, ...] | list[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """The input matrix (rows x columns, float64) of a config table with its features.

    ``df`` must hold the parameters and :data:`carb.families.features.FEATURE_COLUMNS` (see
    :func:`with_features`). Returns the matrix and its column names. ``first_row``: position
    of ``df``'s first row in the caller's table, for error messages. ``families``: whose
    parameter columns to add (:func:`input_columns`; default: those with rows in ``df``).
    Rows of other families than ResNets have ``block``, ``depth``, ``width`` and
    ``early_downsample`` -1 (they do not apply).
    """
    fams = families_of(df) if families is None else list(families)
    cols = input_columns(feature_set, fams)
    n = len(df)
    # columns gathered first, stacked once at the end (much faster than strided writes)
    col: dict[str, np.ndarray] = {}
    col["family"] = _codes(df["family"], "family", first_row) if "family" in df.columns else np.zeros(n)
    resnet = col["family"] <= CODES["family"]["imagenet"]
    for c in ("block", "precision"):
        if c == "block" and not resnet.all():
            col[c] = np.full(n, -1.0)
            if resnet.any():
                col[c][resnet] = _codes(df[c][resnet], c, first_row)
        else:
            col[c] = _codes(df[c], c, first_row)
    for c in ("depth", "width", "input_size", "batch", "early_downsample"):
        if c in ("input_size", "batch") or resnet.all():
            col[c] = df[c].to_numpy(dtype=np.float64)
        else:
            col[c] = np.where(
                resnet, df[c].to_numpy(dtype=np.float64, na_value=np.nan) if c in df.columns else np.nan, -1.0
            )
    for f in fams:
        names, cats = FAMILY_COLUMNS[f]
        index = pd.Index(cats)
        for c in names:
            if c not in df.columns:
                col[c] = np.full(n, -1.0)
                continue
            values = df[c].to_numpy(dtype=object)
            codes = index.get_indexer(values).astype(np.float64)
            mine = (df["family"] == f).to_numpy()
            bad = mine & (codes < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"configs: row {first_row + i}: {c}: unknown value {values[i]!r} "
                    f"(expected one of {', '.join(cats)})"
                )
            col[c] = np.where(mine, codes, -1.0)
    default = np.where(col["family"] == CODES["family"]["imagenet"], 1000.0, 10.0)
    if "classes" in df.columns:  # absent or missing: the family's default, as carb.families.features does
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
