"""Batch scaling of measured costs: the profile of the median architecture, its growth factor and regimes.

The estimate and the definitions of its columns are in the docstring of :mod:`carb.studies.analyses`, which
re-exports :func:`scaling` and :class:`ScalingResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.model import TARGETS
from carb.model.gbm import ok_rows as _ok
from carb.model.gbm import positive as _positive

from ._frames import UNITS, _records, split_devices

#: the columns that identify an architecture at a precision (every parameter but the batch)
ARCH_COLUMNS: tuple[str, ...] = (
    "family",
    "block",
    "depth",
    "width",
    "early_downsample",
    "input_size",
    "precision",
    "classes",
)
#: two-segment slopes closer than this are one regime (no boundary reported)
MIN_REGIME_CONTRAST = 0.2


@dataclass
class ScalingResult:
    """Output of :func:`scaling`.

    Attributes:
        profile: one row per device, target and batch size: ``n_rows`` measured there,
            ``cost`` (target units per forward of the batch) and ``cost_per_image`` of the
            median architecture, ``elasticity``, ``median_measured`` and
            ``median_measured_per_image`` (plain medians of the rows at that batch).
        summary: one row per device and target: ``unit``, ``batch_min``, ``batch_max``,
            ``n_rows``, ``n_archs``, ``n_archs_linked`` (architectures measured at two batch
            sizes or more: they carry the profile), ``factor``, ``per_image_gain``,
            ``boundary_batch``, ``slope_launch``, ``slope_throughput``, ``saturation_batch``,
            ``note`` (why a target was skipped or what limits it).
        definitions: the definitions of the columns, in words.
    """

    profile: pd.DataFrame
    summary: pd.DataFrame
    definitions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"summary": [...], "profile": [...], "definitions": {...}}`` (NaN -> None)."""
        return {
            "summary": _records(self.summary),
            "profile": _records(self.profile),
            "definitions": dict(self.definitions),
        }


_SCALING_DEFINITIONS = {
    "cost": "cost of one forward of the batch for the median architecture: exp(median(a) + b[batch]) of "
    "the least-squares fit log cost = a[architecture] + b[batch]",
    "factor": "cost at the largest batch / cost at the smallest batch",
    "per_image_gain": "per-image cost at the smallest batch / per-image cost at the largest batch",
    "elasticity": "log-log slope of cost against batch from the previous batch size (0: the extra images "
    "are free, launch-bound; 1: cost grows with the images, throughput-bound)",
    "boundary_batch": "breakpoint of a continuous two-segment least-squares line through the profile in "
    f"log-log; NaN when the two slopes differ by less than {MIN_REGIME_CONTRAST}",
    "saturation_batch": "smallest batch whose per-image cost is within flat_tol of the profile's lowest",
}


def _two_way(
    arch: np.ndarray, bidx: np.ndarray, y: np.ndarray, n_batch: int, iters: int = 5000, tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """Fit ``y = a[arch] + b[batch]`` by alternating means (exact least squares on a connected design), b[0] = 0."""
    n_arch = int(arch.max()) + 1
    a = np.bincount(arch, weights=y, minlength=n_arch) / np.maximum(np.bincount(arch, minlength=n_arch), 1)
    b = np.zeros(n_batch)
    cnt_a = np.maximum(np.bincount(arch, minlength=n_arch), 1)
    cnt_b = np.maximum(np.bincount(bidx, minlength=n_batch), 1)
    for _ in range(iters):
        b_new = np.bincount(bidx, weights=y - a[arch], minlength=n_batch) / cnt_b
        a_new = np.bincount(arch, weights=y - b_new[bidx], minlength=n_arch) / cnt_a
        done = max(np.max(np.abs(b_new - b)), np.max(np.abs(a_new - a))) < tol
        a, b = a_new, b_new
        if done:
            break
    shift = b[0]
    return a + shift, b - shift


def _largest_component(arch: np.ndarray, bidx: np.ndarray, n_batch: int) -> np.ndarray:
    """Return a mask of the rows in the largest connected architecture-batch component (where batches compare)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n_arch = int(arch.max()) + 1
    n = n_arch + n_batch
    g = coo_matrix((np.ones(len(arch)), (arch, n_arch + bidx)), shape=(n, n))
    _, lab = connected_components(g, directed=False)
    row_lab = lab[arch]
    best = np.bincount(row_lab).argmax()
    return row_lab == best


def _hinge(x: np.ndarray, y: np.ndarray, grid: int = 200) -> tuple[float, float, float]:
    """Fit a continuous two-segment line through (x, y): (breakpoint, slope below, slope above), NaNs below 4 points."""
    if len(x) < 4:
        return float("nan"), float("nan"), float("nan")
    best = None
    # breakpoints strictly inside the data, with at least two points on each side's span
    lo, hi = x[1], x[-2]
    for x0 in np.linspace(lo, hi, grid):
        X = np.column_stack([np.ones_like(x), np.minimum(x, x0) - x0, np.maximum(x, x0) - x0])
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        sse = float(np.sum((y - X @ coef) ** 2))
        if best is None or sse < best[0] - 1e-12:
            best = (sse, float(x0), float(coef[1]), float(coef[2]))
    return best[1], best[2], best[3]


def _scale_target(
    g: pd.DataFrame, t: str, keys: Sequence[str], flat_tol: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Return the batch profile rows and the summary fields of target ``t`` on one group's rows."""
    if t not in g.columns:
        return [], {"note": f"no {t} column"}
    rows = g[_positive(g[t])]
    batches = np.sort(rows["batch"].unique())
    if len(rows) == 0:
        return [], {"n_rows": 0, "note": f"{t} not measured on this device"}
    if len(batches) < 2:
        return [], {
            "n_rows": int(len(rows)),
            "batch_min": float(batches[0]),
            "batch_max": float(batches[0]),
            "note": "one batch size only",
        }
    # missing values (a net row's depth) read as text too
    text = rows[keys].astype(object).fillna("").astype(str)
    arch = pd.factorize(text.agg("|".join, axis=1))[0] if keys else np.zeros(len(rows), dtype=int)
    bidx = np.searchsorted(batches, rows["batch"].to_numpy())
    y = np.log(rows[t].to_numpy(np.float64))
    n_archs = int(arch.max()) + 1
    # architectures measured at 2+ batch sizes (distinct batches, not rows): they carry the profile
    linked = int((pd.Series(bidx).groupby(arch).nunique() >= 2).sum())
    note = ""
    comp = _largest_component(arch, bidx, len(batches))
    if linked and not comp.all() and len(np.unique(bidx[comp])) >= 2:
        note = f"{int((~comp).sum())} rows outside the largest linked set of architectures left out"
        arch = pd.factorize(arch[comp])[0]
        used = np.unique(bidx[comp])
        bidx = np.searchsorted(used, bidx[comp])
        batches, y, rows = batches[used], y[comp], rows[comp]
        comp = np.ones(len(rows), dtype=bool)
    raw = rows.groupby("batch")[t].median().reindex(batches).to_numpy()
    if linked and comp.all():
        a, b = _two_way(arch, bidx, y, len(batches))
        cost = np.exp(float(np.median(a)) + b)
    else:
        # no within-architecture link between batch sizes: the plain medians are all there is
        cost = raw.astype(np.float64)
        note = "no architecture links two batch sizes: plain medians per batch (they mix architectures)"
    per_img = cost / batches
    lb = np.log(batches.astype(np.float64))
    el = np.r_[np.nan, np.diff(np.log(cost)) / np.diff(lb)]
    n_at = np.bincount(bidx, minlength=len(batches))
    profile = [
        {
            "batch": float(bs),
            "n_rows": int(n_at[i]),
            "cost": float(cost[i]),
            "cost_per_image": float(per_img[i]),
            "elasticity": float(el[i]),
            "median_measured": float(raw[i]),
            "median_measured_per_image": float(raw[i] / bs),
        }
        for i, bs in enumerate(batches)
    ]
    x0, s1, s2 = _hinge(lb, np.log(cost))
    boundary = float(np.exp(x0)) if np.isfinite(x0) and abs(s2 - s1) >= MIN_REGIME_CONTRAST else float("nan")
    sat = float(batches[np.flatnonzero(per_img <= per_img.min() * (1 + flat_tol))[0]])
    return profile, {
        "batch_min": float(batches[0]),
        "batch_max": float(batches[-1]),
        "n_rows": int(len(rows)),
        "n_archs": n_archs,
        "n_archs_linked": linked,
        "factor": float(cost[-1] / cost[0]),
        "per_image_gain": float(per_img[0] / per_img[-1]),
        "boundary_batch": boundary,
        "slope_launch": s1,
        "slope_throughput": s2,
        "saturation_batch": sat,
        "note": note,
    }


def scaling(
    df: pd.DataFrame,
    device: str | None = None,
    targets: Sequence[str] = TARGETS,
    flat_tol: float = 0.10,
    by: str | None = None,
) -> ScalingResult:
    """How energy (J), latency (ms) and peak memory (MB) grow with the batch, per device.

    Args:
        df: a dataset (``ok`` rows are used; needs ``batch`` and the architecture columns
            :data:`ARCH_COLUMNS` that it has).
        device: analyse only this device (value of the ``device`` column); default: each.
        targets: target columns to analyse (absent or all-NaN ones get a row with a note).
        flat_tol: tolerance of ``saturation_batch`` (fraction of the lowest per-image cost).
        by: also split by this column (e.g. ``precision`` or ``family``); the outputs then
            have a column of that name after ``device``.

    Returns:
        A :class:`ScalingResult` (definitions in the docstring of :mod:`carb.studies.analyses`).

    Raises:
        ValueError: no ``batch`` column, ``device`` not in the data, or no ``by`` column.
    """
    if "batch" not in df.columns:
        raise ValueError("scaling needs a batch column (this dataset has none)")
    if by is not None and by not in df.columns:
        raise ValueError(f"by: no column {by!r} in the data")
    data = _ok(df)
    if device is not None:
        if "device" not in data.columns or device not in set(data["device"].astype(str)):
            raise ValueError(f"device {device!r} not in the data")
        data = data[data["device"].astype(str) == device]
    groups: dict[tuple[str, Any], pd.DataFrame] = {}
    for dev, g in split_devices(data, name=device or "data").items():
        for val, part in g.groupby(by, sort=True) if by is not None else [(None, g)]:
            groups[(dev, val)] = part
    keys = [c for c in ARCH_COLUMNS if c in data.columns]
    prof_rows: list[dict[str, Any]] = []
    sum_rows: list[dict[str, Any]] = []
    for (dev, val), g in groups.items():
        grp = {by: val} if by is not None else {}
        for t in targets:
            base = {"device": dev, **grp, "target": t, "unit": UNITS.get(t, "")}
            profile, summary = _scale_target(g, t, keys, flat_tol)
            prof_rows += [{"device": dev, **grp, "target": t, **r} for r in profile]
            sum_rows.append({**base, **summary})
    extra = [by] if by is not None else []
    summary_cols = [
        "device",
        *extra,
        "target",
        "unit",
        "batch_min",
        "batch_max",
        "n_rows",
        "n_archs",
        "n_archs_linked",
        "factor",
        "per_image_gain",
        "boundary_batch",
        "slope_launch",
        "slope_throughput",
        "saturation_batch",
        "note",
    ]
    summary = pd.DataFrame(sum_rows).reindex(columns=summary_cols)
    summary["note"] = summary["note"].fillna("")
    profile = pd.DataFrame(
        prof_rows,
        columns=[
            "device",
            *extra,
            "target",
            "batch",
            "n_rows",
            "cost",
            "cost_per_image",
            "elasticity",
            "median_measured",
            "median_measured_per_image",
        ],
    )
    defs = {
        **_SCALING_DEFINITIONS,
        "saturation_batch": _SCALING_DEFINITIONS["saturation_batch"].replace("flat_tol", f"{100 * flat_tol:g}%"),
    }
    return ScalingResult(profile=profile, summary=summary, definitions=defs)
