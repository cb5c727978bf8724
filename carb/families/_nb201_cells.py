"""The effective DAG of a NAS-Bench-201 cell: which edges feed the output, and the figures of those edges.

The figures (:func:`cell_features`) are vectorised over many cells; re-exported by :mod:`carb.families.nb201`.
"""

from __future__ import annotations

import numpy as np

from ._nb201_tables import CONV1, CONV3, EDGES, NONE, POOL, SKIP

__all__ = ["CELL_FEATURE_COLUMNS", "cell_features", "effective_edges"]

#: The columns of :func:`cell_features` (counts per cell; the same cell is in all 15 places).
CELL_FEATURE_COLUMNS: tuple[str, ...] = (
    "n_eff_skip_connect",
    "n_eff_nor_conv_1x1",
    "n_eff_nor_conv_3x3",
    "n_eff_avg_pool_3x3",
    "n_eff_edges",
    "eff_path_edges",
    "eff_path_convs",
    "n_dead_convs",
    "n_dead_edges",
)


def effective_edges(codes: np.ndarray) -> np.ndarray:
    """Which edges of each cell are effective (see :func:`cell_features`), shape (n, 6), bool.

    From edge codes of shape (n, 6) (negative codes count as ``none``). Cells with equal codes on their effective
    edges compute the same function (NAS-Bench-201's isomorphic cells, up to the constants a convolution of zeros
    leaves), though not at the same cost: dead edges still run.
    """
    codes = np.asarray(codes)
    present = codes > NONE
    n = len(codes)
    reach_in = np.zeros((n, 4), bool)
    reach_in[:, 0] = True
    for j in (1, 2, 3):
        for k, (dst, src) in enumerate(EDGES):
            if dst == j:
                reach_in[:, j] |= present[:, k] & reach_in[:, src]
    reach_out = np.zeros((n, 4), bool)
    reach_out[:, 3] = True
    for j in (2, 1, 0):
        for k, (dst, src) in enumerate(EDGES):
            if src == j:
                reach_out[:, j] |= present[:, k] & reach_out[:, dst]
    return present & reach_in[:, [s for _, s in EDGES]] & reach_out[:, [d for d, _ in EDGES]]


def cell_features(codes: np.ndarray) -> np.ndarray:
    """Closed-form figures of each cell's effective DAG, vectorized.

    Shape (n, 9), the columns of :data:`CELL_FEATURE_COLUMNS`, float64.

    An edge is *effective* when it is not ``none``, its source node is reached from the
    cell input through edges that are not ``none``, and its target node reaches the cell
    output (node 3) the same way; the other non-``none`` edges are *dead*: they run (the
    network computes them, see :mod:`carb.families.nb201`) but feed nothing or only zeros into
    the output. Columns: effective edges per operation (skip, 1x1 conv, 3x3 conv, pooling)
    and in all; the longest input-to-output path in effective edges and in convolutions
    (0 when the output is zero); dead convolutions; dead edges. These say where a cell's
    operations sit, which its totals (FLOPs, op counts) do not.

    Args:
        codes: operation index (into :data:`OPS`) of the 6 edges, shape (n, 6), as
            :func:`edge_codes` gives; a row with a negative code (a row of another family in
            a mixed table) gets -1 in every column.
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != 6:
        raise ValueError(f"nb201.cell_features: codes of shape (n, 6) expected, got {codes.shape}")
    other = (codes < 0).any(axis=1)
    codes = np.where(other[:, None], NONE, codes).astype(np.int64)
    n = len(codes)
    present = codes != NONE
    eff = effective_edges(codes)
    conv = (codes == CONV1) | (codes == CONV3)
    # longest paths over effective edges (nodes in topological order 0..3); -n: unreached
    path_e = np.full((n, 4), -n - 10, np.int64)
    path_e[:, 0] = 0
    path_c = path_e.copy()
    for j in (1, 2, 3):
        for k, (dst, src) in enumerate(EDGES):
            if dst == j:
                path_e[:, j] = np.where(eff[:, k], np.maximum(path_e[:, j], path_e[:, src] + 1), path_e[:, j])
                path_c[:, j] = np.where(eff[:, k], np.maximum(path_c[:, j], path_c[:, src] + conv[:, k]), path_c[:, j])
    out = np.column_stack(
        [
            *((eff & (codes == op)).sum(axis=1) for op in (SKIP, CONV1, CONV3, POOL)),
            eff.sum(axis=1),
            np.maximum(path_e[:, 3], 0),
            np.maximum(path_c[:, 3], 0),
            (conv & ~eff).sum(axis=1),
            (present & ~eff).sum(axis=1),
        ]
    ).astype(np.float64)
    out[other] = -1.0
    return out
