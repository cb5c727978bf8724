"""HELP's few-shot protocol, shared by its FBNet and NAS-Bench-201 studies: per-device trimming."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["HELP_TRIM", "trim_middle"]

#: HELP's outlier trimming (its ``loader.py``, ``remove_outlier=True``, as in all its
#: published runs): per device, the training pool and the test set are each cut to the
#: sorted positions ``[int(0.1 n), int(0.9 n))`` of that device's latency, the middle 80%.
HELP_TRIM: tuple[float, float] = (0.1, 0.9)


def trim_middle(ids: Sequence[int] | np.ndarray, cost: np.ndarray, keep: tuple[float, float] = HELP_TRIM) -> np.ndarray:
    """Keep the middle of one set of architectures by one device's cost (HELP's trimming).

    The ids are sorted by cost and the sorted positions ``[int(keep[0] n), int(keep[1] n))``
    are kept: 4,000 -> 3,200 (positions 400..3599), 1,000 -> 800. As in HELP's loader the
    cost is compared in float32; ties at a cut (whole-millisecond phone latencies) are
    broken by the ids' given order (a stable sort), so the sets are the same on every
    machine (HELP's loader used numpy's default sort, whose order among ties depends on the
    numpy version and the CPU).

    On the trimmed protocol the target's K random measurements come from its trimmed pool,
    the test set is its trimmed test set, and each source model learns from its own
    device's trimmed pool (:meth:`carb.transfer.SourceModels.fit` ``rows``;
    :func:`carb.studies.help_fbnet.fewshot_help_fbnet` with ``trim=True``).

    Args:
        ids: the architectures.
        cost: one device's cost (e.g. latency in ms) of each of ``ids``.
        keep: the fractions of the sorted positions kept, ``(lo, hi)``.

    Returns:
        The kept ids in their given order.

    Raises:
        ValueError: ``cost`` and ``ids`` differ in shape, or ``keep`` is not ``0 <= lo < hi <= 1``.

    Example:
        >>> trim_middle([10, 11, 12, 13, 14], [5.0, 1.0, 3.0, 4.0, 2.0], keep=(0.2, 0.8))
        array([12, 13, 14])
    """
    ids = np.asarray(ids)
    cost = np.asarray(cost, dtype=np.float32)
    if cost.shape != ids.shape:
        raise ValueError(f"{len(cost)} costs for {len(ids)} ids")
    lo, hi = keep
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"keep {keep}: expected 0 <= lo < hi <= 1")
    n = len(ids)
    # stable: ties keep their given order. numpy's default sort hands float32 to a SIMD
    # kernel chosen by the CPU (AVX-512 or AVX2), which breaks ties differently on each, and
    # tied devices (pixel2: 33 distinct latencies in 900 cells) would trim differently
    kept = np.argsort(cost, kind="stable")[int(n * lo) : int(n * hi)]
    return ids[np.sort(kept)]
