"""Primitives every family shares: the one-line error type, value coercion, precisions,
the stable config-id hash, He/BN initialisation, and the :class:`Family` record itself.

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

__all__ = ["SpaceError", "Family", "PRECISIONS", "BYTES_PER_ELEMENT", "stable_id", "missing"]

#: Numeric precisions of weights and activations.
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
#: Bytes of one element at each precision. Units: B.
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}


class SpaceError(ValueError):
    """A space file or a config is invalid; the message is one line naming where and what."""


def stable_id(canonical: Mapping[str, Any] | str) -> str:
    """Stable 16-hex-digit id: SHA-256 of a config's canonical JSON text (sorted keys, no
    spaces). A mapping is serialised first."""
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
    """Why ``input_size``/``batch``/``classes`` exceed :data:`MAX_INPUT_SIZE`,
    :data:`MAX_BATCH` or :data:`MAX_CLASSES` (one line), or ``None``."""
    for name, v, hi in (("input_size", input_size, MAX_INPUT_SIZE), ("batch", batch, MAX_BATCH),
                        ("classes", classes, MAX_CLASSES)):
        if v > hi:
            return f"{name}: {v} is above the limit {hi:,}"
    return None


def _as_bool(name: str, v: Any) -> bool:
    v = _py(v)
    if isinstance(v, bool):
        return v
    raise SpaceError(f"{name}: {v!r} is not true/false")


def init_weights(model: Any) -> None:
    """torchvision's initialisation: He normal (fan_out) for convolutions, BN at identity;
    Linear keeps PyTorch's default. Shared by the built-in families."""
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


def row_parameters(row: Mapping[str, Any], parameters: tuple[str, ...]) -> dict[str, Any]:
    """A family's non-empty ``parameters`` from a flat row; in a store row the family's own
    parameters are JSON in its ``arch`` column (:meth:`carb.campaign.store.Store.measurements`) and
    are read from there (they win over same-named columns)."""
    a = row.get("arch")
    if isinstance(a, str) and a.startswith("{"):
        row = {**row, **json.loads(a)}
    return {k: row[k] for k in parameters if k in row and not missing(row[k])}


def own_parameters(d: Mapping[str, Any], family: str, parameters: tuple[str, ...],
                   required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A family's parameters from a mapping: ``family``, if present, must be ``family``; an
    unknown key or a missing ``required`` one raises a one-line :class:`SpaceError`."""
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
