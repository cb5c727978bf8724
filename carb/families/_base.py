"""Primitives every family shares.

The one-line error type, value coercion, precisions, the stable config-id hash, He/BN initialisation, the
:class:`Family` record itself, and the steps of a vectorised ``features`` (column reading, distinct networks, per-row
scaling).

This module is the bottom of CARB's import layers: it imports nothing of CARB.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from carb._safeio import loads_json

__all__ = ["SpaceError", "Family", "PRECISIONS", "BYTES_PER_ELEMENT", "stable_id", "missing"]

#: Numeric precisions of weights and activations.
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
#: Bytes of one element at each precision. Units: B.
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}

#: feature columns every grid family computes, in their order within a family's columns:
#: sizes (bytes, FLOPs, parameters) ...
SIZE_COLUMNS: tuple[str, ...] = (
    "bytes_per_element",
    "flops",
    "flops_per_image",
    "params",
    "weight_bytes",
    "model_bytes",
    "input_bytes",
    "output_bytes",
    "activation_bytes",
    "peak_activation_bytes",
    "live_activation_bytes",
    "largest_activation_bytes",
)
#: ... layer and block counts ...
COUNT_COLUMNS: tuple[str, ...] = (
    "n_conv",
    "n_bn",
    "n_linear",
    "n_layers",
    "n_ops",
    "n_stages",
    "n_blocks",
    "n_projections",
)
#: ... and widths and feature-map sizes
SHAPE_COLUMNS: tuple[str, ...] = (
    "min_channels",
    "max_channels",
    "final_channels",
    "stem_output_size",
    "final_feature_size",
)


class SpaceError(ValueError):
    """A space file or a config is invalid; the message is one line naming where and what."""


def stable_id(canonical: Mapping[str, Any] | str) -> str:
    """Stable 16-hex-digit id: SHA-256 of a config's canonical JSON text (sorted keys, no spaces).

    A mapping is serialised first.
    """
    text = canonical if isinstance(canonical, str) else json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def missing(v: Any) -> bool:
    """``None`` or a float NaN (an empty cell of a table)."""
    return v is None or (isinstance(v, float) and v != v)


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _as_int(name: str, v: Any) -> int:
    v = _py(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise SpaceError(f"{name}: {v!r} is not an integer")  # NaN and infinities included
    return int(v)


def _as_float(name: str, v: Any) -> float:
    v = _py(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpaceError(f"{name}: {v!r} is not a number")
    # NaN and infinities are never a parameter: refused here, when a space or a file is read
    if not math.isfinite(v):
        raise SpaceError(f"{name}: {v!r} is not a finite number")
    return float(v)


#: Upper limits of the run parameters every family shares, checked by each family's
#: ``problem()``: far beyond any real deployment, low enough that every closed-form
#: feature of one image stays inside int64. Batch goes high on purpose: a prediction for
#: batch 10^12 is a legitimate (extrapolated) request; features scale it in float64 when
#: int64 would overflow (see :func:`carb.families.resnet.features`).
MAX_INPUT_SIZE = 8192  # px
MAX_BATCH = 2**50  # images (~1.1e15)
MAX_CLASSES = 1_000_000


def run_limits_problem(input_size: int, batch: int, classes: int) -> str | None:
    """Why ``input_size``/``batch``/``classes`` exceed their limits (one line), or ``None``.

    The limits are :data:`MAX_INPUT_SIZE`, :data:`MAX_BATCH` and :data:`MAX_CLASSES`.
    """
    for name, v, hi in (
        ("input_size", input_size, MAX_INPUT_SIZE),
        ("batch", batch, MAX_BATCH),
        ("classes", classes, MAX_CLASSES),
    ):
        if v > hi:
            return f"{name}: {v} is above the limit {hi:,}"
    return None


def _as_bool(name: str, v: Any) -> bool:
    v = _py(v)
    if isinstance(v, bool):
        return v
    raise SpaceError(f"{name}: {v!r} is not true/false")


def init_weights(model: Any) -> None:
    """Initialise a model as torchvision does: He normal (fan_out) for convolutions, BN at identity.

    Linear keeps PyTorch's default. Shared by the built-in families.
    """
    from torch import nn  # here: importing a family must not import torch

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


@dataclass(frozen=True)
class Family:
    """How CARB handles one family of networks.

    Attributes:
        name: the family's value in the ``family`` column and in its configs' canonical form.
        config_type: the class of its configs: frozen, hashable, with ``config_id``,
            ``label()``, ``to_dict()``, and ``input_size``, ``batch``, ``precision`` (the
            measurement backends feed ``(batch, 3, input_size, input_size)`` inputs).
        from_row: a config from a flat table row (a mapping; other families' columns may
            be present and empty).
        to_row: the flat row of a config, ``family`` included.
        build: the network of a config (a ``torch.nn.Module`` in eval mode, fp32 weights).
        features: a table of this family's rows -> the same rows with the feature columns
            of :data:`carb.families.features.FEATURE_COLUMNS` that apply (same names, same units).
        description: one line for listings.
        parameters: the family's parameter names (the keys of its space grids).
        measured_features: for a family whose features need its network built (user code:
            ``net``), a config -> its features (``{column: value}``), computed once when a
            row is measured and stored with it; ``features`` then reads them from the rows
            and never builds. ``None``: ``features`` computes them from the parameters.
    """

    name: str
    config_type: type
    from_row: Callable[[Mapping[str, Any]], Any]
    to_row: Callable[[Any], dict[str, Any]]
    build: Callable[[Any], Any]
    features: Callable[[pd.DataFrame], pd.DataFrame]
    description: str = ""
    #: the names of the family's parameters (the keys a space grid of this family may set,
    #: ``family`` excluded)
    parameters: tuple[str, ...] = ()
    measured_features: Callable[[Any], dict[str, float]] | None = None
    #: the parameters a row may lack: each takes its default (a dataset written before the parameter existed)
    optional_parameters: tuple[str, ...] = ()


def row_parameters(row: Mapping[str, Any], parameters: tuple[str, ...]) -> dict[str, Any]:
    """A family's non-empty ``parameters`` from a flat row.

    In a store row the family's own parameters are JSON in its ``arch`` column
    (:meth:`carb.campaign.store.Store.measurements`) and are read from there (they win over same-named columns).
    """
    a = row.get("arch")
    if isinstance(a, str) and a.startswith("{"):
        row = {**row, **loads_json(a, "an arch cell")}  # DocumentError (a ValueError): too large or too deep
    return {k: row[k] for k in parameters if k in row and not missing(row[k])}


def own_parameters(
    d: Mapping[str, Any], family: str, parameters: tuple[str, ...], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A family's parameters from a mapping.

    The mapping's ``family``, if present, must be ``family``.

    Raises:
        SpaceError: an unknown key or a missing ``required`` one (one line).
    """
    d = dict(d)
    name = d.pop("family", family)
    if name != family:
        raise SpaceError(f"family: {name!r} is not {family!r}")
    unknown = set(d) - set(parameters)
    if unknown:
        raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(parameters)})")
    for need in required:
        if need not in d:
            raise SpaceError(f"{need}: missing")
    return d


# --- steps of a family's vectorised ``features`` ---------------------------------------

#: A family's integer feature columns per distinct network: column -> (value per network,
#: scaled by batch?, scaled by bytes per element?).
PerNetColumns = dict[str, tuple[np.ndarray, bool, bool]]


def int_values(df: pd.DataFrame, name: str, default: int, where: str) -> np.ndarray:
    """The integer column ``name`` of ``df`` as int64 (``default`` in every row when absent).

    Raises:
        ValueError: a value is not numeric or not an integer (one line starting ``where``,
            naming the row and column).
    """
    if name not in df.columns:
        return np.full(len(df), default, dtype=np.int64)
    col = df[name]
    try:
        values = col.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name}: not numeric") from None
    bad = np.isnan(values) | (values != np.round(values))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{where}: row {i}: {name}: {col.iloc[i]!r} is not an integer")
    return values.astype(np.int64)


def precision_bytes(df: pd.DataFrame, where: str) -> np.ndarray:
    """Bytes per element of each row's ``precision`` (``fp32`` when the column is absent), int64. Units: B.

    Vectorised over the few distinct values.

    Raises:
        ValueError: an unknown or missing precision (one line starting ``where``, naming the row).
    """
    n = len(df)
    if "precision" not in df.columns:
        return np.full(n, BYTES_PER_ELEMENT["fp32"], dtype=np.int64)
    prec = df["precision"]
    pcodes, puniq = pd.factorize(prec, use_na_sentinel=True)
    pbytes = np.array([BYTES_PER_ELEMENT.get(p, 0) if isinstance(p, str) else 0 for p in puniq], dtype=np.int64)
    bpe = pbytes[pcodes] if len(puniq) else np.zeros(n, np.int64)
    bad = (pcodes < 0) | (bpe == 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{where}: row {i}: precision: unknown value {prec.iloc[i]!r} (expected one of {', '.join(PRECISIONS)})"
        )
    return bpe


def distinct_networks(codes: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``codes`` (n, k) with the per-row ``columns`` appended, and each row's index into them.

    Returns:
        ``(networks (g, k + len(columns)), group (n,))``, int64.
    """
    width = codes.shape[1] + len(columns)
    key = np.column_stack([codes, *columns]) if len(codes) else np.zeros((0, width), np.int64)
    nets, group = np.unique(key, axis=0, return_inverse=True)
    return nets, group.reshape(-1)


def _scaled_rows(
    per_net: PerNetColumns, group: np.ndarray, batch: np.ndarray, bpe: np.ndarray, widen: bool
) -> np.ndarray:
    """The per-network values gathered to the rows and scaled by batch and bytes per element.

    With ``widen``, float64 for the whole table where a value would overflow int64.
    """
    g = len(next(iter(per_net.values()))[0])
    rows = np.stack([v for v, _, _ in per_net.values()], axis=1)[group] if g else np.zeros((0, len(per_net)), np.int64)
    if widen:  # a huge batch is a legitimate what-if; int64 would wrap around silently
        for k, (_, by_batch, by_bpe) in enumerate(per_net.values()):
            if rows.dtype == np.int64 and (by_batch or by_bpe) and len(rows):
                scaled = rows[:, k].astype(np.float64) * (batch if by_batch else 1) * (bpe if by_bpe else 1)
                if scaled.max() >= 2.0**62:
                    rows = rows.astype(np.float64)
    for k, (_, by_batch, by_bpe) in enumerate(per_net.values()):
        if by_batch:
            rows[:, k] *= batch
        if by_bpe:
            rows[:, k] *= bpe
    return rows


def per_row_features(
    per_net: PerNetColumns,
    group: np.ndarray,
    batch: np.ndarray,
    bpe: np.ndarray,
    n_bn: np.ndarray,
    index: pd.Index,
    *,
    widen: bool = True,
) -> pd.DataFrame:
    """The integer feature columns of every row, then ``arithmetic_intensity``.

    Args:
        per_net: the columns per distinct network (:data:`PerNetColumns`), ``model_bytes``
            among them without the BNs' counters.
        group: each row's network (index into the per-network values).
        batch: each row's batch. Units: images.
        bpe: each row's bytes per element. Units: B.
        n_bn: BNs per network; each adds its 8-byte ``num_batches_tracked`` to ``model_bytes``.
        index: the index of the result.
        widen: float64 integer columns for the whole table where int64 would overflow.

    Returns:
        A DataFrame of the ``per_net`` columns (int64, or float64 when widened) and
        ``arithmetic_intensity`` (``flops / (weight_bytes + activation_bytes)``, FLOP/B).
    """
    int_cols = list(per_net)
    rows = _scaled_rows(per_net, group, batch, bpe, widen)
    rows[:, int_cols.index("model_bytes")] += 8 * n_bn[group]
    col = {c: rows[:, k] for k, c in enumerate(int_cols)}
    feats = pd.DataFrame(rows, columns=int_cols, index=index, copy=False)
    moved = (col["weight_bytes"] + col["activation_bytes"]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        feats["arithmetic_intensity"] = col["flops"] / moved
    return feats


def flop_fraction(part: np.ndarray, flops: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each row's share ``part / flops`` of its network's FLOPs (NaN where ``flops`` is 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (part / flops.astype(np.float64))[group]
