"""The training domain: the input ranges and categories a prediction may be trusted on.

A prediction outside it keeps its point value; its interval widens to what was measured
about such a step on our own datasets (:data:`STEPS_FILE`, measured by
``benchmarks/bench_machine_kind.py config-steps`` and shipped by ``scripts/ship.py steps``):
beyond the training range of a value (a fit on part of a dataset's range, scored on the
rest), or in a precision the data never held (a fit on fp32 scored on bf16). A family or
block the data never held has no measured step: its interval is unbounded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.model.steps import data_file, half_width, read_steps

__all__ = ["DOMAIN_CATEGORIES", "STEPS_FILE", "training_domain", "outside_kinds", "widen"]

#: The measured steps beyond a config model's domain (under ``carb/data``).
STEPS_FILE = "domain_steps.json"


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


def outside_kinds(domain: dict[str, Any], part: pd.DataFrame, Xb: np.ndarray, cols: list[str]) -> np.ndarray:
    """Per row, how it lies outside the domain (bits, 0: inside).

    1: a value beyond its training range; 2: a precision never seen; 4: another category
    never seen (family or block).
    """
    out = np.zeros(len(part), dtype=np.int8)
    for j, c in enumerate(cols):
        lo_hi = domain["ranges"].get(c)
        if lo_hi is None:
            continue
        lo, hi = lo_hi
        slack = 1e-3 * max(abs(lo), abs(hi), 1e-12)
        with np.errstate(invalid="ignore"):
            out |= (((Xb[:, j] < lo - slack) | (Xb[:, j] > hi + slack)) * 1).astype(np.int8)
    for c, seen in domain["categories"].items():
        if c in part.columns:
            unseen = (part[c].notna() & ~part[c].astype(str).isin(seen)).to_numpy()
            out |= (unseen * (2 if c == "precision" else 4)).astype(np.int8)
    return out


def widen(hw: np.ndarray, kinds: np.ndarray, target: str) -> np.ndarray:
    """Half-widths (log) of the rows outside the domain, widened to the measured step of their kind.

    ``kinds``: :func:`outside_kinds` per row.

    Steps that apply together add in quadrature; a row of an unseen family or block, or a
    step with no measurement for ``target``, gets an infinite half-width.
    """
    if not kinds.any():
        return hw
    steps = read_steps(data_file(STEPS_FILE), "config")
    r, p = half_width(steps, "range", target), half_width(steps, "precision", target)
    # np.where, not a product: a step with no measurement is inf, and 0 * inf is NaN
    s = np.sqrt(np.where((kinds & 1) > 0, r**2, 0.0) + np.where((kinds & 2) > 0, p**2, 0.0))
    s = np.where((kinds & 4) > 0, np.inf, s)
    return np.where(kinds > 0, np.maximum(hw, s), hw)
