"""Shared helpers of the analyses: target units, one frame per device, config labels, JSON-ready records."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: the units of the targets analysed (:data:`carb.model.TARGETS`) and of derived columns
UNITS: dict[str, str] = {
    "energy_j": "J",
    "latency_ms": "ms",
    "memory_mb": "MB",
    "energy_j_per_image": "J",
    "flops_per_image": "FLOP",
}


def split_devices(df: pd.DataFrame, name: str = "data") -> dict[str, pd.DataFrame]:
    """One frame per value of the ``device`` column (``{name: df}`` without one)."""
    if "device" not in df.columns or df["device"].nunique(dropna=True) == 0:
        return {name: df}
    return {str(d): g.reset_index(drop=True) for d, g in df.groupby("device", sort=True)}


def config_label(df: pd.DataFrame) -> pd.Series:
    """Return a short label per row: ``cifar basic d20 w0.5 ds 32px b8 bf16``, ``arch 123`` or the ``config_id``."""
    if df.empty:  # empty columns may have any dtype; string concatenation would fail on them
        return pd.Series([], index=df.index, dtype=object)
    if all(c in df.columns for c in ("family", "block", "depth", "width", "input_size", "batch", "precision")):
        ds = (
            df["early_downsample"].map(lambda v: " ds" if v is True or (pd.notna(v) and bool(v)) else "")
            if "early_downsample" in df.columns
            else ""
        )
        return (
            df["family"].astype(str)
            + " "
            + df["block"].astype(str)
            + " d"
            + df["depth"].astype(str)
            + " w"
            + df["width"].map(lambda w: f"{float(w):g}")
            + ds
            + " "
            + df["input_size"].astype(str)
            + "px b"
            + df["batch"].astype(str)
            + " "
            + df["precision"].astype(str)
        )
    if "arch_id" in df.columns:
        return "arch " + df["arch_id"].astype(str)
    if "config_id" in df.columns:
        return df["config_id"].astype(str)
    return pd.Series([f"row {i}" for i in range(len(df))], index=df.index)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for r in df.to_dict(orient="records"):
        out.append({k: _jsonable(v) for k, v in r.items()})
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if v is pd.NA or v is pd.NaT:
        return None
    return v
