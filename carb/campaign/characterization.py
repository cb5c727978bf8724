"""Characterizing: which configs to measure, the backend to measure them on, and the campaign run into a store.

What ``carb characterize`` does, as functions: :func:`select_configs` picks the configs (a file's, a space's or a
sample of it), :func:`check_options` refuses options that do not apply to the device or the executor,
:func:`open_backend` opens this machine's backend or a Ray cluster's slots, and :func:`characterize` runs the
campaign and returns a :class:`Characterization` (this run's rows, the store's summary, the retakes, how a
``remeasure`` repeats the first measurements).

Messages name the parameters as Python passes them (``device=cpu``); the command line says them as its flags.

Example:
    >>> from carb.campaign.characterization import characterize, select_configs    # doctest: +SKIP
    >>> run = characterize(select_configs(space="tiny"), "tiny.duckdb")         # doctest: +SKIP
    >>> run.result.measured, run.summary                                        # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from .runner import CampaignResult

__all__ = [
    "METHODS",
    "Characterization",
    "characterize",
    "check_options",
    "default_retakes",
    "open_backend",
    "protocol_for",
    "select_configs",
]

#: how a space is sampled: space-filling or uniform
METHODS = ("stratified", "uniform")


def select_configs(
    space: str | None = None,
    configs: str | Path | None = None,
    samples: int | None = None,
    seed: int = 0,
    method: str = "stratified",
) -> list:
    """The configs to measure: a file's, a space's, or a sample of a space's.

    Args:
        space: a built-in space's name or a TOML file.
        configs: a Parquet/CSV/JSONL file of configs (net rows name modules that measuring imports).
        samples: measure a sample of this many configs of ``space`` (``None``: all of them).
        seed: the sample's seed.
        method: ``stratified`` (space-filling) or ``uniform``.

    Raises:
        ValueError: not exactly one of ``space`` and ``configs``, an unknown method, or more samples than the space
            holds (never fewer configs measured than asked without a word).
    """
    from carb.families import space as spaces

    from .runner import read_config_file

    if (space is None) == (configs is None):
        raise ValueError("give exactly one of space= or configs=")
    if method not in METHODS:
        raise ValueError(f"method: unknown value {method!r} (expected {' or '.join(METHODS)})")
    if configs is not None:
        cfgs = read_config_file(str(configs))
        if samples is not None:
            raise ValueError("samples works with space=, not configs=")
        return cfgs
    sp = spaces.load(space)
    if samples is not None:
        listed = sp.size_bound() <= spaces.MAX_CONFIGS
        most = len(sp) if listed else min(sp.size_bound(), spaces.MAX_CONFIGS)
        if samples > most:
            held = f"holds {most:,} configs" if listed else f"is sampled {most:,} configs at most"
            raise ValueError(f"samples {samples}: the space {sp.name} {held}; give that many or fewer")
    return sp.sample(samples, seed=seed, method=method) if samples else list(sp)


def protocol_for(
    device: str, ci_target: float | None = None, max_time_s: float | None = None, timeout_s: float | None = None
) -> Any:
    """The device's default :class:`~carb.measure.base.Protocol` with the settings given (``None``: the default).

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        ci_target: stop repeating at this relative 95% CI of the median.
        max_time_s: cap on the sampling time per config. Units: s.
        timeout_s: wall-clock limit per config. Units: s.
    """
    from carb.measure.base import Protocol

    given = {"ci_target": ci_target, "max_time_s": max_time_s, "timeout_s": timeout_s}
    return replace(Protocol.default_for(device), **{k: v for k, v in given.items() if v is not None})


def check_options(
    device: str = "cpu",
    threads: int | None = None,
    executor: str = "local",
    address: str | None = None,
    workers: int | None = None,
    allocator: str | None = None,
    energy_periods: float | None = None,
) -> None:
    """Refuse the options that do not apply to the device or the executor.

    Raises:
        ValueError: threads or an allocator off the CPU, energy periods on it, an unknown executor or allocator, a
            cluster's address or workers without ``executor=ray``.
    """
    if device != "cpu" and threads is not None:
        raise ValueError("threads applies to device=cpu only")
    if executor not in ("local", "ray"):
        raise ValueError(f"executor: unknown value {executor!r} (expected local or ray)")
    if executor == "local" and (address is not None or workers is not None):
        raise ValueError("address= and workers= apply to executor=ray only")
    if allocator is not None:
        from carb.measure.cpu import ALLOCATORS

        if device != "cpu":
            raise ValueError("allocator applies to device=cpu only")
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator: unknown value {allocator!r} (expected {' or '.join(ALLOCATORS)})")
    if device == "cpu" and energy_periods is not None:
        raise ValueError("energy_periods applies to device=cuda only")


def default_retakes(
    retakes: int | None, device: str, threads: int | None, sentinel: bool, rounds: int, remeasure: bool
) -> int:
    """``retakes`` checked, or its default: the two speed states show on a CPU with 2+ threads, never with 1.

    Raises:
        ValueError: retakes asked of a campaign that cannot take them (they retake stored visits by their paired
            speed sentinel).
    """
    if retakes is None:
        from .rounds import RETAKES

        return RETAKES if device == "cpu" and (threads or 1) > 1 and sentinel and rounds > 1 and not remeasure else 0
    if retakes and (rounds < 2 or remeasure or not sentinel or device != "cpu"):
        raise ValueError(
            "retakes needs a CPU campaign with rounds= > 1, the sentinel and no remeasure= "
            "(it retakes stored visits by their paired speed sentinel)"
        )
    return retakes


def open_backend(
    device: str = "cpu",
    protocol: Any = None,
    *,
    executor: str = "local",
    address: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    lock_clocks: bool = True,
    energy_periods: float | None = None,
    allocator: str | None = None,
) -> Any:
    """This machine's measurement backend, or (``executor="ray"``) a Ray cluster's worker slots.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        protocol: the repeat/stop protocol (``None``: the device's default).
        executor: ``local`` or ``ray``.
        address: the Ray cluster (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``; ``None``: ``RAY_ADDRESS``, else a
            local cluster).
        workers: use at most this many worker slots (``None``: all).
        threads: CPU threads of each worker (``None``: 1).
        lock_clocks: GPU: lock the clocks, restored after.
        energy_periods: GPU: updates of the energy counter a timed window lasts at least.
        allocator: CPU: the workers' allocator (:data:`carb.measure.cpu.ALLOCATORS`).

    Raises:
        ValueError: options that do not apply (:func:`check_options`), an unknown device.
        RuntimeError: no such device here, no Ray cluster.
    """
    from carb.measure import get_backend

    check_options(device, threads, executor, address, workers, allocator, energy_periods)
    protocol = protocol if protocol is not None else protocol_for(device)
    opts: dict[str, Any] = {"threads": threads or 1} if device == "cpu" else {"lock_clocks": lock_clocks}
    extra = {k: v for k, v in (("energy_periods", energy_periods), ("allocator", allocator)) if v is not None}
    if executor == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(
            device,
            address=address,
            workers=workers,
            protocol=protocol,
            threads=threads or 1,
            lock_clocks=lock_clocks,
            backend_opts=extra,
        )
    return get_backend(device, protocol=protocol, **opts, **extra)


@dataclass
class Characterization:
    """What a characterizing campaign did.

    Attributes:
        result: the campaign's own account (configs measured, skipped, wall time, retakes, interrupted).
        store: the store's path.
        summary: the store's summary per platform and status.
        rows: this run's rows of the measurements table (none with ``remeasure``: its rows go to the
            remeasurements table).
        repeat: with ``remeasure``, how this run repeats the first measurements (raw, drift-corrected, fastest
            sample); else ``None``.
        repeat_lines: ``repeat`` said in lines.
        fresh: with ``remeasure``, the configs that had no first measurement to compare with.
        visits_by_node: on a Ray cluster, the visits each node measured, most first.
        machine_state: the machine's state read before a campaign on this machine's CPU
            (:class:`carb.campaign.state.MachineState`: the load; the campaign's own sentinel reads its speed);
            ``None`` elsewhere.
    """

    result: CampaignResult
    store: Path
    summary: pd.DataFrame
    rows: pd.DataFrame
    repeat: dict[str, Any] | None = None
    repeat_lines: list[str] = field(default_factory=list)
    fresh: int = 0
    visits_by_node: Mapping[str, int] = field(default_factory=dict)
    machine_state: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The result, the store and its summary (and the repeat figures with ``remeasure``) as JSON-ready data."""
        return {
            **self.result.to_dict(),
            "store": str(self.store),
            "machine_state": None if self.machine_state is None else self.machine_state.to_dict(),
            "summary": json.loads(self.summary.to_json(orient="records")),
            **({"remeasure": self.repeat} if self.repeat is not None else {}),
        }

    def slowest_rows(self, limit: int = 30) -> tuple[str, list[tuple[str, ...]]]:
        """This run's configs, slowest first (failed ones before), as a title and rows of text.

        Each row: the config's label, its status, latency (ms), the relative 95% CI of the median, memory (MB) and
        energy (J); ``—`` where there is no value.
        """
        from carb.families.space import configs_from_frame

        rows = self.rows.sort_values("latency_ms", ascending=False, na_position="first")
        title = f"measured now ({len(rows)} configs" + (f", slowest {limit} shown)" if len(rows) > limit else ")")
        out = []
        for cfg, r in zip(configs_from_frame(rows.head(limit)), rows.head(limit).itertuples(index=False)):
            ok = r.status == "ok"
            out.append(
                (
                    cfg.label(),
                    r.status,
                    f"{r.latency_ms:.3f}" if ok else "—",
                    f"{100 * r.latency_ms_ci_rel:.1f}%" if ok and r.latency_ms_ci_rel == r.latency_ms_ci_rel else "—",
                    f"{r.memory_mb:.1f}" if ok else "—",
                    f"{r.energy_j:.4f}" if ok and r.energy_j == r.energy_j and r.energy_j is not None else "—",
                )
            )
        return title, out

    def state_line(self) -> str:
        """What the retakes did, or that every visit was timed in one state of the machine (empty: no retakes)."""
        from .rounds import state_line

        retakes = self.result.retakes
        if not retakes:
            return ""
        line = state_line(retakes, "campaign")
        if retakes.get("ref_ms"):
            return line or f"machine state: every visit timed in one state (speed sentinel {retakes['ref_ms']:.3f} ms)"
        return f"retakes: {retakes.get('note')}"


def characterize(
    configs: list,
    store: str | Path,
    *,
    backend: Any = None,
    device: str = "cpu",
    threads: int | None = None,
    platform: str | None = None,
    rounds: int | None = None,
    chunk: int | None = None,
    sentinel: bool = True,
    retakes: int | None = None,
    retry_failed: bool = False,
    remeasure: bool = False,
    command: str = "",
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    **backend_options: Any,
) -> Characterization:
    """Measure ``configs`` into a campaign store, resuming past the configs it holds.

    Args:
        configs: the configs (:func:`select_configs`).
        store: the DuckDB store (created when missing).
        backend: an open backend or executor (:func:`open_backend`); ``None``: one opened here from ``device``,
            ``threads`` and ``backend_options`` and closed after.
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads of each worker (``None``: 1).
        platform: the label rows are stored under (``None``: ``cpu-<T>t`` or the GPU's name).
        rounds: visits per config at different moments, pooled (``None``: 3 on CPU, 1 on GPU).
        chunk: configs visited round-robin together (``None``: all).
        sentinel: time the speed sentinel (CPU).
        retakes: visits timed in another state of the machine measured again, up to this many times
            (``None``: :func:`default_retakes`).
        retry_failed: measure again the configs stored with a failure status.
        remeasure: measure again into the remeasurements table (a drift check).
        command: the command line recorded with the run.
        callbacks: :func:`~carb.campaign.runner.run_campaign`'s progress callbacks; ``on_event`` is given the
            messages of a cluster's slots that start or are lost.
        **backend_options: :func:`open_backend`'s options (``executor``, ``lock_clocks``, ``allocator``, ...).

    Raises:
        ValueError: options that do not go together.
        RuntimeError: no such device; every Ray worker slot lost.
    """
    from .executor import Executor, LocalExecutor
    from .runner import run_campaign
    from .store import Store

    n_rounds = rounds or (3 if device == "cpu" else 1)
    retakes = default_retakes(retakes, device, threads, sentinel, n_rounds, remeasure)
    opened = backend is None
    if opened:
        backend = open_backend(device, threads=threads, **backend_options)
    callbacks = dict(callbacks or {})
    state = _state_before(backend, device, threads, callbacks.get("on_event"))
    if "on_event" in callbacks and hasattr(backend, "on_event"):
        backend.on_event = callbacks["on_event"]
    callbacks.pop("on_event", None)
    with backend if opened else contextlib.nullcontext(), Store(store) as st:
        done_before: set = set()
        if remeasure:  # to say afterwards which configs had a first measurement to compare with
            ex = backend if isinstance(backend, Executor) else LocalExecutor(backend)
            done_before = st.done_ids(platform or ex.platform())
        result = run_campaign(
            configs,
            backend,
            st,
            platform=platform,
            command=command,
            retry_failed=retry_failed,
            remeasure=remeasure,
            rounds=n_rounds,
            chunk=chunk,
            sentinel="auto" if sentinel else None,
            retakes=retakes,
            **callbacks,
        )
        run = _account(st, Path(store), result, remeasure)
    run.fresh = sum(c.config_id not in done_before for c in dict.fromkeys(configs)) if remeasure else 0
    run.visits_by_node = dict((getattr(backend, "visits_by_node", None) or Counter()).most_common())
    run.machine_state = state
    return run


def _state_before(backend: Any, device: str, threads: int | None, say: Callable[..., Any] | None) -> Any:
    """This machine's load before a campaign on its CPU, said where disturbed (``None``: a GPU or a cluster).

    A campaign is not refused on a busy machine, as a calibration to be kept is: it reads the speed
    sentinel through the run, pairs it with every visit and measures a visit taken in another state
    again (retakes), and its rows carry the speed index.
    """
    from .executor import Executor, LocalExecutor
    from .state import check_state

    if device != "cpu" or (isinstance(backend, Executor) and not isinstance(backend, LocalExecutor)):
        return None
    state = replace(check_state(device, threads, readings=(), force=True), forced=False)  # read, never refused
    if state.disturbed and say is not None:
        say(
            f"{state.line()}; the campaign goes on: its speed sentinel pairs every visit, "
            "and visits taken in another state are measured again where retakes are on"
        )
    return state


def _account(st: Any, store: Path, result: CampaignResult, remeasure: bool) -> Characterization:
    """The store's summary, this run's rows, and with ``remeasure`` how they repeat the first measurements."""
    rows = st.measurements(result.platform)
    repeat, repeat_lines = None, []
    if remeasure:
        from . import speed

        again = st.measurements(result.platform, table="remeasurements")
        repeat = speed.remeasure_figures(rows, again[again.run_id == result.run_id])
        repeat_lines = speed.remeasure_lines(repeat)
    return Characterization(
        result=result,
        store=store,
        summary=st.summary(),
        rows=rows[rows.run_id == result.run_id],
        repeat=repeat,
        repeat_lines=repeat_lines,
    )
