"""The machine's state before a calibration measures: is it quiet enough for K measurements to hold?

A calibration maps a model to this machine from K measurements taken now. Taken on a busy machine, or while its speed
moves between states, the map carries that moment's slowness into every later answer. :func:`check_state` reads the
machine before anything is measured: the load average against the CPUs the worker leaves free, and a few readings of
the speed sentinel (:data:`carb.measure.sentinel.CPU_SENTINEL`): how far they spread and, where a reference reading
exists (an earlier calibration of this machine), how fast the machine runs against it. It returns a
:class:`MachineState` record, kept in the calibration's provenance; a disturbed state raises
:class:`DisturbedMachine` unless ``force`` is given.

Example:
    >>> st = check_state("cpu", threads=1, load=0.3, cpus=2, readings=[(0.61, 0.01), (0.60, 0.01), (0.62, 0.01)])
    >>> st.disturbed, round(st.spread, 3)
    (False, 1.033)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from carb.campaign.rounds import STATE_FACTOR
from carb.measure.sentinel import CPU_SENTINEL
from carb.params import InvalidParameterError

__all__ = [
    "DisturbedMachine",
    "MachineState",
    "READINGS",
    "Thresholds",
    "check_state",
    "pool_rounds_at_median_speed",
    "read_sentinel",
    "state_spread",
]

#: sentinel readings the check takes (each a fresh worker and a 0.25 s burst: a few seconds in all)
READINGS = 5


@dataclass(frozen=True)
class Thresholds:
    """Where a machine's state counts as disturbed.

    Attributes:
        others_per_free_cpu: runnable tasks besides the caller (the 1-minute load average less 1) per CPU the worker's
            threads leave free; above it, other work queues for the worker's cores. 2.0, from measurement on our
            2-core VMs with a 1-thread worker (``experiments/machine_state/README.md``): at load 2.0 (one other busy
            task) five readings lay within x1.05 with 95% CIs of 1-2%; one more busy process made 4 of 5 readings too
            noisy and spread them x2.4; at load 4-5 a calibration cached a x1.64 factor. The load average lags a
            minute behind, so the readings below catch what it has not yet seen.
        spread: the slowest over the fastest sentinel reading of the check; beyond it the readings span two
            speed states of the machine. :data:`carb.campaign.rounds.STATE_FACTOR` (1.25): paired sentinels within
            one state stay within x1.15 of their median.
        slower: the reference reading over the check's median below ``1 / slower``: the machine runs in a slower
            state than the one it was calibrated in (the same :data:`~carb.campaign.rounds.STATE_FACTOR`).
        noisy_share: the share of readings whose 95% CI is wider than the sentinel's ``max_ci_rel`` (5%, or none:
            too few samples in 0.25 s, which happens when other work takes the core) above which the machine is
            too busy to read. 0.5: most readings.
    """

    others_per_free_cpu: float = 2.0
    spread: float = STATE_FACTOR
    slower: float = STATE_FACTOR
    noisy_share: float = 0.5


@dataclass(frozen=True)
class MachineState:
    """What :func:`check_state` read of the machine, and why it is disturbed (empty ``problems``: quiet).

    Attributes:
        device: ``cpu``, ``cuda``, ``cuda:<index>``.
        load_1m: the 1-minute load average (``None``: the system does not say).
        cpus: the machine's CPUs (the load average counts tasks on all of them).
        threads: the worker's threads.
        readings_ms: the sentinel readings (ms) and ``ci_rel``: each one's relative 95% CI half-width.
        spread: slowest over fastest usable reading (``None``: fewer than 2).
        reference_ms: the sentinel of the machine's reference state (an earlier calibration's), or ``None``.
        speed_index: ``reference_ms`` over the median usable reading (1: as fast; < 1: slower), or ``None``.
        thresholds: the :class:`Thresholds` applied.
        problems: one phrase per threshold crossed.
        forced: a disturbed state was accepted with ``force``.
    """

    device: str
    load_1m: float | None
    cpus: int
    threads: int
    readings_ms: tuple[float, ...] = ()
    ci_rel: tuple[float, ...] = ()
    spread: float | None = None
    reference_ms: float | None = None
    speed_index: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    problems: tuple[str, ...] = ()
    forced: bool = False

    @property
    def disturbed(self) -> bool:
        """Whether any threshold was crossed."""
        return bool(self.problems)

    def line(self) -> str:
        """One sentence: what was read and whether the state is disturbed."""
        load = f"load {self.load_1m:.1f} on {self.cpus} CPUs" if self.load_1m is not None else "no load average"
        sent = (
            f"sentinel {np.median(self.readings_ms):.3f} ms over {len(self.readings_ms)} readings"
            + (f" (spread x{self.spread:.2f})" if self.spread is not None else "")
            + (f", speed index {self.speed_index:.2f}" if self.speed_index is not None else "")
            if self.readings_ms
            else "no sentinel readings"
        )
        verdict = "disturbed: " + "; ".join(self.problems) if self.problems else "quiet"
        return f"machine state before measuring: {load}, {sent}; {verdict}" + (" (forced)" if self.forced else "")

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready fields (what a calibration's provenance keeps)."""
        d = asdict(self)
        d["readings_ms"], d["ci_rel"], d["problems"] = list(self.readings_ms), list(self.ci_rel), list(self.problems)
        d["ci_rel"] = [c if np.isfinite(c) else None for c in self.ci_rel]
        d["disturbed"] = self.disturbed
        return d


class DisturbedMachine(InvalidParameterError):
    """The machine is in a disturbed state for measuring a calibration; ``force`` takes it anyway.

    Its parameter is ``force`` (the command line says it under ``--force``); ``state`` is the :class:`MachineState`.
    """

    def __init__(self, state: MachineState) -> None:
        self.state = state
        super().__init__(
            "force",
            f"the machine is disturbed ({'; '.join(state.problems)}): a calibration measured now would carry this "
            "moment's speed into every later answer; measure when it is quiet, or force it",
        )


def read_sentinel(
    device: str = "cpu", threads: int | None = None, allocator: str = "default", n: int = READINGS
) -> list[tuple[float, float]]:
    """``n`` readings of the speed sentinel on this machine: ``(sentinel_ms, ci_rel)`` each (none off the CPU).

    Each reading is measured as a campaign's is (:data:`carb.measure.sentinel.CPU_SENTINEL`, its protocol, the
    worker's threads and allocator).
    """
    from carb.measure import get_backend

    from .here import backend_options

    if device != "cpu":
        return []
    out = []
    with get_backend(device, protocol=CPU_SENTINEL.protocol, **backend_options(device, threads, allocator)) as b:
        for _ in range(n):
            r = CPU_SENTINEL.reading([b.measure(CPU_SENTINEL.configs[0], CPU_SENTINEL.protocol)])
            if r is not None:
                out.append((r.sentinel_ms, r.ci_rel))
    return out


def _load_1m() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _cpus() -> int:
    """The machine's CPUs: the load average counts runnable tasks on all of them, whatever this process is pinned to."""
    return os.cpu_count() or 1


def check_state(
    device: str = "cpu",
    threads: int | None = None,
    *,
    allocator: str = "default",
    reference_ms: float | None = None,
    force: bool = False,
    load: float | None = None,
    cpus: int | None = None,
    readings: Sequence[tuple[float, float]] | None = None,
    thresholds: Thresholds = Thresholds(),
) -> MachineState:
    """Read the machine's state before a calibration measures; refuse a disturbed one unless ``force``.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>`` (off the CPU the sentinel is not read and the load not judged:
            a GPU's speed is not the host's).
        threads: the worker's CPU threads (``None``: 1).
        allocator: the worker's allocator, for the sentinel readings.
        reference_ms: the sentinel (ms) of the machine's reference state, e.g. an earlier calibration's median;
            ``None``: no speed index.
        force: return a disturbed state (``forced``) instead of raising.
        load: the 1-minute load average; ``None``: read now.
        cpus: the machine's CPUs (the load average's denominator, not this process's affinity); ``None``: read now.
        readings: the sentinel readings ``(sentinel_ms, ci_rel)``; ``None``: :func:`read_sentinel` now (not where the
            load alone refuses).
        thresholds: see :class:`Thresholds`.

    Returns:
        The :class:`MachineState`.

    Raises:
        DisturbedMachine: (one line, under ``force``) a threshold crossed and ``force`` not given.
    """
    threads = threads or 1
    on_cpu = device == "cpu"
    load = _load_1m() if load is None else float(load)
    cpus = _cpus() if cpus is None else int(cpus)
    problems = []
    free = max(cpus - threads, 0)
    if on_cpu and load is not None and load - 1.0 > thresholds.others_per_free_cpu * free:
        problems.append(
            f"load {load:.1f} on {cpus} CPUs: {max(load - 1.0, 0):.1f} other runnable tasks for the {free} "
            f"CPU{'' if free == 1 else 's'} a {threads}-thread worker leaves"
        )
    if readings is None:
        # the load alone refuses: on a busy machine the readings take tens of seconds (42 s at load 9)
        readings = [] if problems and not force else read_sentinel(device, threads, allocator)
    ms = np.array([r[0] for r in readings], float)
    ci = np.array([r[1] if r[1] is not None else np.nan for r in readings], float)
    usable = ms[np.isfinite(ci) & (ci <= CPU_SENTINEL.max_ci_rel)]
    if len(ms) and np.mean(~(np.isfinite(ci) & (ci <= CPU_SENTINEL.max_ci_rel))) > thresholds.noisy_share:
        problems.append(f"{len(ms) - len(usable)} of {len(ms)} sentinel readings too noisy to use")
    spread = float(usable.max() / usable.min()) if len(usable) >= 2 else None
    if spread is not None and spread > thresholds.spread:
        problems.append(f"sentinel readings x{spread:.2f} apart (beyond x{thresholds.spread:.2f}: two speed states)")
    index = float(reference_ms / np.median(usable)) if reference_ms and len(usable) else None
    if index is not None and index < 1.0 / thresholds.slower:
        problems.append(f"speed index {index:.2f} against the reference sentinel {reference_ms:.3f} ms")
    state = MachineState(
        device=device, load_1m=load, cpus=cpus, threads=threads, readings_ms=tuple(map(float, ms)),
        ci_rel=tuple(map(float, ci)), spread=spread, reference_ms=reference_ms, speed_index=index,
        thresholds=thresholds, problems=tuple(problems), forced=bool(problems) and force,
    )  # fmt: skip
    if problems and not force:
        raise DisturbedMachine(state)
    return state


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == "ok"] if "status" in rows.columns else rows


def _within_sd(rows: pd.DataFrame, col: str) -> tuple[float | None, int]:
    """The pooled within-config standard deviation of ``log(col)`` over the rounds, and its degrees of freedom."""
    if col not in rows.columns:
        return None, 0
    v = pd.to_numeric(rows[col], errors="coerce").to_numpy(float)
    keep = np.isfinite(v) & (v > 0)
    lv = pd.Series(np.log(v[keep]), index=rows.index[keep])
    by = rows.loc[keep, "config_id"]
    dev = lv - lv.groupby(by).transform("mean")
    dof = int((lv.groupby(by).size() - 1).clip(lower=0).sum())
    return (float(np.sqrt(np.sum(dev.to_numpy() ** 2) / dof)) if dof > 0 else None), dof


def state_spread(rounds: Sequence[pd.DataFrame]) -> dict[str, Any]:
    """The machine's state spread over a calibration's rounds: how far one visit of a sample lies from its others.

    Per sample visited ok in several rounds, the deviations of ``log latency_ms`` (raw: what a later wall-clock
    measurement sees) and of ``log sentinel_ms`` (its paired sentinel) from that sample's mean over its rounds, pooled
    over the samples into a standard deviation each (the samples' own levels drop out, and with them the paired
    sentinel's differences from config to config).

    Args:
        rounds: each round's measured rows (``config_id``, ``status``, ``latency_ms``, ``sentinel_ms``), round 1 first.

    Returns:
        ``rounds``, ``round_sd`` (log, of the latency; ``None``: no sample visited twice), ``sentinel_sd`` (log;
        ``None``: no sentinel), ``dof`` (their degrees of freedom), and ``state_sd``, the larger of the two (0 where
        neither is measured).
    """
    rows = pd.concat([_ok(r) for r in rounds], ignore_index=True) if rounds else pd.DataFrame()
    if rows.empty or "config_id" not in rows.columns:
        return {"rounds": len(rounds), "round_sd": None, "sentinel_sd": None, "dof": 0, "state_sd": 0.0}
    lat, dof = _within_sd(rows, "latency_ms")
    sent, _ = _within_sd(rows, "sentinel_ms")
    return {
        "rounds": len(rounds),
        "round_sd": lat,
        "sentinel_sd": sent,
        "dof": dof,
        "state_sd": float(max(v for v in (lat, sent, 0.0) if v is not None)),
    }


def pool_rounds_at_median_speed(
    first: pd.DataFrame, rounds: Sequence[pd.DataFrame]
) -> tuple[pd.DataFrame, float | None]:
    """The rows of round 1 (``first``) with each sample's rounds pooled: its median latency and memory.

    Where every ``ok`` visit has a sentinel, each visit's latency is first put at the calibration's median sentinel
    speed (``latency_ms * ref / sentinel_ms``, :func:`carb.campaign.speed.at_median_speed` over all the rounds) and
    the raw median is kept as ``latency_ms_raw``; that median (ms) is returned, else ``None`` and raw medians.
    One round gives :func:`carb.campaign.speed.at_median_speed` of ``first``.
    """
    from carb.campaign.speed import at_median_speed

    visits = pd.concat([_ok(r) for r in rounds], ignore_index=True)
    normed, ref = at_median_speed(visits)
    out = first.copy()
    by = normed.groupby("config_id")
    cols = ["latency_ms", "memory_mb"] + (["latency_ms_raw"] if ref is not None else [])
    for c in (c for c in cols if c in normed.columns):
        med = pd.to_numeric(normed[c], errors="coerce").groupby(normed["config_id"]).median()
        out[c] = out["config_id"].map(med).where(out["config_id"].isin(by.groups), out.get(c))
    return out, ref
