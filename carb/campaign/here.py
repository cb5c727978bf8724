"""Measuring a frame of configs on this machine: the small campaign under calibration, the demo and validation.

:func:`measure_frame` is the one loop every on-machine step shares (``carb calibrate``, ``carb predict --calibrate``,
``carb validate --device``, ``carb demo`` and :func:`carb.calibrate` with ``"here"``): the configs of a frame are
visited in rounds with the speed sentinel paired, stored in a DuckDB store, and their stored rows returned.

Example:
    >>> from carb.campaign.here import measure_frame                          # doctest: +SKIP
    >>> rows = measure_frame(frame, "k.duckdb", device="cpu", rounds=2)       # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["CampaignInterrupted", "Progress", "measure_frame", "backend_options"]

#: ``progress(what, store)`` -> a context manager that yields :func:`carb.campaign.run_campaign`'s callbacks
#: (``on_start``, ``on_config``, ``on_visit``, ...) for the step named ``what``; the CLI draws them as a bar.
Progress = Callable[[str, str], AbstractContextManager[Mapping[str, Callable[..., None]]]]


class CampaignInterrupted(KeyboardInterrupt):
    """The campaign was stopped (Ctrl-C or SIGTERM) before it measured every config; its store keeps what it did."""


@contextlib.contextmanager
def _silent(what: str, store: str) -> Iterator[Mapping[str, Callable[..., None]]]:
    yield {}


def backend_options(device: str, threads: int | None, allocator: str = "default") -> dict[str, Any]:
    """The backend options of an on-machine step: the CPU's threads and allocator, or a GPU with its clocks as set.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads of the worker (``None``: 1).
        allocator: the CPU workers' allocator (:data:`carb.measure.cpu.ALLOCATORS`).

    Returns:
        Keyword options for :func:`carb.measure.get_backend`.
    """
    if device == "cpu":
        return {"threads": threads or 1, "allocator": allocator}
    return {"lock_clocks": False}


def measure_frame(
    frame: pd.DataFrame,
    store: str | Path,
    *,
    device: str = "cpu",
    threads: int | None = None,
    max_time_s: float = 1.0,
    rounds: int = 1,
    again: bool = False,
    allocator: str = "default",
    what: str = "measuring",
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Measure the configs of a frame on this machine into a store and return their measured rows.

    Each config is visited ``rounds`` times, the visits spread over the campaign and pooled; the campaign pairs the
    speed sentinel where the device has one (:mod:`carb.campaign.speed`), so every row carries the machine's speed
    at its own moments.

    Args:
        frame: one row per config: the parameter columns of its family (``family`` names non-ResNet families)
            and ``config_id``.
        store: the DuckDB store (created when missing; resumed when it holds some of the configs).
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads of each worker (``None``: 1).
        max_time_s: sampling time of one visit of a config. Units: s.
        rounds: visits per config, pooled.
        again: measure configs the store holds once more, into its ``remeasurements`` table (the first rows
            kept), and return the new rows.
        allocator: the CPU workers' allocator (:data:`carb.measure.cpu.ALLOCATORS`).
        what: the step's name, for ``progress``.
        progress: draws the campaign's progress (:data:`Progress`); ``None``: silent.

    Returns:
        The stored rows of the frame's configs (``status``, ``latency_ms``, ``memory_mb``, ``sentinel_ms``, ...).

    Raises:
        ValueError: (one line) a bad device, option or config row.
        RuntimeError: a device that is absent or whose worker cannot start.
        CampaignInterrupted: stopped by Ctrl-C or SIGTERM; the store keeps the configs measured so far.
    """
    from carb.families.space import configs_from_frame
    from carb.measure import get_backend
    from carb.measure.base import Protocol

    from .runner import run_campaign
    from .store import Store

    configs = configs_from_frame(frame)
    protocol = replace(Protocol.default_for(device), max_time_s=max_time_s)
    backend = get_backend(device, protocol=protocol, **backend_options(device, threads, allocator))
    store_path = Path(store)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with backend, Store(store_path) as st:
        with (progress or _silent)(what, str(store_path)) as callbacks:
            result = run_campaign(configs, backend, st, rounds=rounds, remeasure=again, **dict(callbacks))
        if result.interrupted:
            raise CampaignInterrupted(
                f"stopped after {result.measured} of {len(configs)} configs; {store_path} keeps them"
            )
        if again:
            rows = st.measurements(result.platform, table="remeasurements")
            rows = rows[rows.run_id == result.run_id]
        else:
            rows = st.measurements(result.platform)
    return rows[rows.config_id.isin(set(frame.config_id))].reset_index(drop=True)
