"""Measurement backends: one interface, one repeat/stop protocol, one module per device kind.

The interface is :mod:`carb.measure.base`, the protocol :mod:`carb.measure.protocol`, the
device kinds :mod:`~carb.measure.cpu` and :mod:`~carb.measure.cuda`. Get one with
:func:`get_backend` and use it as a context manager, so that whatever it changed on the
device is restored::

    with get_backend("cuda:0", lock_clocks=False) as backend:
        m = backend.measure(config)

Both backends run configs in worker processes (multiprocessing ``forkserver`` for the
CPU, ``spawn`` for CUDA), so a script that uses them needs the usual
``if __name__ == "__main__":`` guard.

Importing this package is cheap: torch and Zeus (``zeus.device``: GPU discovery, energy
counters, power, clock control; RAPL zones for the CPU) are imported when a backend
starts, so CPU-only use never needs a GPU library to load.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from ._common import classify, cpu_isa, cpu_model, foreign_precisions, host_facts, send_reply
from .base import STATUSES, Backend, ConfigLike, Measurement, Protocol, Stats
from .cpu import CpuBackend
from .cuda import CudaBackend
from .protocol import median_ci, summarize

__all__ = [
    "get_backend",
    "Backend",
    "ConfigLike",
    "Measurement",
    "Protocol",
    "Stats",
    "STATUSES",
    "CpuBackend",
    "CudaBackend",
    "median_ci",
    "summarize",
    "cpu_isa",
    "cpu_model",
    "host_facts",
    "classify",
    "foreign_precisions",
    "send_reply",
]


def _public_options(cls: type) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    return [p for p in params if p not in ("self", "device") and not p.startswith("_")]


def get_backend(device: str, **opts: Any) -> Backend:
    """The measurement backend of a device string.

    Args:
        device: ``cpu``, ``cuda`` (device 0) or ``cuda:<index>``.
        **opts: backend options: for ``cpu``: ``threads``, ``protocol``, ``affinity``,
            ``idle_s``; for ``cuda``: ``lock_clocks``, ``protocol``, ``sm_clock_mhz``,
            ``mem_clock_mhz``, ``cudnn_benchmark``, ``min_window_s``, ``energy_periods``,
            ``calibration_s``.

    Raises:
        ValueError: an unknown device string, or an option the device does not take.
        RuntimeError: a CUDA device that is absent or whose worker cannot start.
    """
    if not isinstance(device, str):
        raise ValueError(f"device {device!r}: expected a string such as 'cpu', 'cuda' or 'cuda:0'")
    d = device.strip().lower()
    if d == "cpu":
        cls: type[Backend] = CpuBackend
    elif re.fullmatch(r"cuda(:\d+)?", d):
        cls = CudaBackend
    else:
        raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:<index>'")
    allowed = _public_options(cls)
    for key in opts:
        if key not in allowed and not key.startswith("_"):
            raise ValueError(f"option {key!r} does not apply to device {d!r} (its options: {', '.join(allowed)})")
    if cls is CpuBackend:
        return CpuBackend(**opts)
    return CudaBackend(d, **opts)
