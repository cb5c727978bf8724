"""The speed sentinel's readings as the campaign uses them: the default sentinel, its value at a moment, its record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from carb.campaign.executor import Executor, LocalExecutor
from carb.measure.base import Measurement
from carb.measure.sentinel import CPU_SENTINEL, Sentinel


def _auto_sentinel(executor: Executor) -> Sentinel | None:
    """The default sentinel: the CPU one for the CPU backend or any CPU cluster executor."""
    from carb.measure.cpu import CpuBackend

    if isinstance(executor, LocalExecutor):
        return CPU_SENTINEL if isinstance(executor.backend, CpuBackend) else None
    return CPU_SENTINEL if executor.device == "cpu" else None


def _sentinel_at(t: float, read_t: Sequence[float], read_ms: Sequence[float], window_s: float) -> float:
    """The sentinel (ms) at unix time ``t`` from readings at ``read_t`` (sorted).

    The median of the readings within ``window_s / 2`` of ``t`` (the nearest one when none
    is), or, for ``window_s <= 0``, the readings interpolated linearly in time.
    """
    ts = np.asarray(read_t, float)
    ms = np.asarray(read_ms, float)
    if window_s <= 0:
        return float(np.interp(t, ts, ms))
    d = np.abs(ts - t)
    near = d <= window_s / 2
    return float(np.median(ms[near])) if near.any() else float(ms[np.argmin(d)])


def _sentinel_doc(sent: Sentinel | None) -> dict[str, Any] | None:
    """What the run's settings record of the sentinel (``None`` without one)."""
    if sent is None:
        return None
    return {
        "name": sent.name,
        "configs": [c.label() for c in sent.configs],
        "every_s": sent.every_s,
        "window_s": sent.window_s,
        "protocol": sent.protocol.to_dict(),
        "paired": (
            {"every_s": sent.pair_every_s, "sample_s": sent.pair_sample_s, "share": sent.pair_share}
            if sent.pairing()
            else None
        ),
    }


def _with_sentinel(m: Measurement, sentinel_ms: float | None) -> Measurement:
    """``m`` with the sentinel of its moment in ``extra["sentinel_ms"]`` (ms)."""
    return replace(m, extra={**m.extra, "sentinel_ms": sentinel_ms})
