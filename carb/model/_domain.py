"""The training domain: the input ranges and categories a prediction may be trusted on."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DOMAIN_CATEGORIES", "training_domain", "outside_domain"]


#: categorical columns whose unseen values make a row extrapolated (their integer codes can
#: fall inside the trained range: fp16 sits between fp32 and bf16)
DOMAIN_CATEGORIES = ("family", "block", "precision")


def training_domain(df: pd.DataFrame, Xb: np.ndarray, cols: list[str]) -> dict[str, Any]:
    """Return the training rows' domain (JSON-ready): every input column's range and the categories seen."""
    ranges = {}
    for j, c in enumerate(cols):
        v = Xb[:, j][np.isfinite(Xb[:, j])]
        if len(v):
            ranges[c] = [float(v.min()), float(v.max())]
    cats = {c: sorted(map(str, df[c].dropna().unique())) for c in DOMAIN_CATEGORIES if c in df.columns}
    return {"ranges": ranges, "categories": cats}


def outside_domain(domain: dict[str, Any], part: pd.DataFrame, Xb: np.ndarray, cols: list[str]) -> np.ndarray:
    """Return, per row, whether a value is beyond its column's training range (0.1% slack) or a category unseen."""
    out = np.zeros(len(part), dtype=bool)
    for j, c in enumerate(cols):
        lo_hi = domain["ranges"].get(c)
        if lo_hi is None:
            continue
        lo, hi = lo_hi
        slack = 1e-3 * max(abs(lo), abs(hi), 1e-12)
        with np.errstate(invalid="ignore"):
            out |= (Xb[:, j] < lo - slack) | (Xb[:, j] > hi + slack)
    for c, seen in domain["categories"].items():
        if c in part.columns:
            out |= (part[c].notna() & ~part[c].astype(str).isin(seen)).to_numpy()
    return out
