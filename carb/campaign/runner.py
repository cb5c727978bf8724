"""Running a characterization campaign: measure configs on a backend into a store.

The campaign process is the store's single writer. It skips what the store already holds
for the platform (so re-running the same command resumes), measures the rest one config
at a time, and commits each result at once. A failing config becomes a row with a status;
the campaign goes on. Ctrl-C stops after the config in flight, keeping everything stored.

Rounds: on a shared, drifting machine one long burst per config measures the machine's
mood of that minute. With ``rounds=R`` the campaign visits each config R times, round-robin
over a chunk of configs, each visit a short burst (``max_time_s / R``) in a fresh worker,
and pools the visits: latency from all samples of all visits, memory as the median of the
visits' peaks. On our 2-core machines this cut the test-retest difference of latency from
6.8% (one burst) to 2.1% (3 rounds) (../shared/DESIGN.md). Every visit is committed to the
store's ``rounds`` table, so a kill loses at most the visit in flight.

By default (``chunk=None``) the rounds span the whole campaign: round 1 visits every
config, then round 2 every config in the reverse order, and so on, so that a config's
visits lie far apart and, with an even number of rounds, every config's visits have the
same mean moment: every pooled value averages over the same drift of the machine.

Speed sentinel (issue 16, :mod:`carb.measure.sentinel`): at the start, every
``sentinel.every_s`` seconds and at the end, the campaign measures a fixed workload with
the same backend, stores the reading in the store's ``speed_index`` table, and records in
every row the sentinel at its measurement time (the median of the readings within
``sentinel.window_s / 2`` of each visit: one reading is noisy, the level around it is not)
and its latency at the platform's median speed (``latency_ms_norm``). With a backend of
this process that supports it (the CPU backend), the sentinel is also timed *inside* every
visit, in alternation with the config's samples (:class:`~carb.measure.sentinel.Pairing`):
such a row's sentinel is its own, taken at the moments of its samples, which is what
followed the configs' speed on our VMs (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import bisect
import json
import math
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from carb.campaign.rounds import STATE_FACTOR, machine_state
from carb.measure.base import Backend, Measurement, Protocol, Stats
from carb.measure.protocol import summarize
from carb.measure.sentinel import CPU_SENTINEL, Sentinel, effective_sentinel_ms, paired_sentinel_ms
from carb.families.space import Config
from carb.campaign.store import ENERGY_DOMAIN_COLUMNS, Store

__all__ = ["CampaignResult", "Executor", "Job", "LocalExecutor", "run_campaign", "platform_label", "pool_rounds", "read_config_file",
           "retake_summary"]


@dataclass
class CampaignResult:
    """What one campaign invocation did.

    Attributes:
        platform: the platform label the rows are stored under (e.g. ``cpu-1t``).
        requested: configs asked for.
        skipped: configs already in the store (resumed past).
        measured: configs measured now.
        by_status: count of configs measured now, per status.
        wall_s: wall-clock seconds of the campaign. Units: s.
        timed_s: seconds spent inside timed inference. Units: s.
        interrupted: True when stopped by Ctrl-C / SIGTERM before the end.
        run_id: id of the run in the store's ``runs`` table.
        readings: speed sentinel readings stored (0 without a sentinel).
        noisy_readings: of those, too noisy to use (95% CI over the sentinel's ``max_ci_rel``).
        sentinel_s: wall-clock seconds spent measuring the sentinel. Units: s.
        visits: visits of configs stored now (``rounds > 1``: each stored as it ends, so
            that a resumed run keeps them; a config counts as measured once pooled).
        retakes: with ``retakes > 0``, what the retakes of visits timed in another state of
            the machine did (:func:`retake_summary`); ``None`` otherwise.
    """

    platform: str
    requested: int
    skipped: int
    measured: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    timed_s: float = 0.0
    interrupted: bool = False
    run_id: str = ""
    readings: int = 0
    noisy_readings: int = 0
    sentinel_s: float = 0.0
    visits: int = 0
    retakes: dict[str, Any] | None = None

    @property
    def overhead(self) -> float:
        """Campaign wall time divided by time inside timed inference (>= 1; lower is better)."""
        return self.wall_s / self.timed_s if self.timed_s > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overhead"] = self.overhead
        d["sentinel_share"] = self.sentinel_share
        return d

    @property
    def sentinel_share(self) -> float:
        """Share of the campaign's wall time spent on the speed sentinel (0..1)."""
        return self.sentinel_s / self.wall_s if self.wall_s > 0 else float("nan")


def platform_label(backend: Backend) -> str:
    """The default platform label of a backend: ``cpu-<threads>t`` for CPUs (the thread
    count is part of the platform), the device's name slug for GPUs (e.g. ``nvidia-h200``)."""
    return _label(backend.device, backend.provenance())


def _label(device: str, prov: dict[str, Any]) -> str:
    if device == "cpu":
        return f"cpu-{prov.get('threads', '?')}t"
    name = str(prov.get("gpu_name") or prov.get("device_name") or device)
    return "-".join(name.lower().replace("nvidia", "nvidia ").split())


class Executor(ABC):
    """Where a campaign's measurements run: this process's backend (:class:`LocalExecutor`)
    or the worker slots of a cluster (:class:`carb.campaign.ray_executor.RayExecutor`).

    The campaign process stays the store's single writer: an executor only turns a stream
    of jobs into a stream of ``(job, measurement)`` pairs, in completion order.
    """

    device: str
    protocol: Protocol | None

    @abstractmethod
    def provenance(self) -> dict[str, Any]:
        """What the run's ``runs`` row records about the machine(s) measuring."""

    def platform(self) -> str:
        """The default platform label of the rows (see :func:`platform_label`)."""
        return _label(self.device, self.provenance())

    @abstractmethod
    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Measure ``jobs`` (pulled lazily, so later jobs may depend on earlier results)
        and yield each with its measurement as it completes."""

    def close(self) -> None:
        """Release what the executor holds (workers, clusters)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Job:
    """One visit of one config: ``round_`` is its round (0 when rounds are not pooled) and
    ``protocol`` the visit's protocol (``None``: the backend's own). ``kind`` is ``visit``,
    or ``sentinel`` for a speed sentinel reading (measured like a config, never stored as one)."""

    config: Config
    round_: int = 0
    protocol: Protocol | None = None
    kind: str = "visit"


class LocalExecutor(Executor):
    """Measure one job at a time on a backend of this process (the default)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.device = backend.device
        self.protocol = getattr(backend, "protocol", None)

    def provenance(self) -> dict[str, Any]:
        return self.backend.provenance()

    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        for job in jobs:
            m = (self.backend.measure(job.config) if job.protocol is None
                 else self.backend.measure(job.config, protocol=job.protocol))  # type: ignore[call-arg]
            yield job, m


def run_campaign(configs: Sequence[Config], backend: Backend | Executor, store: Store, *,
                 platform: str | None = None, command: str = "", retry_failed: bool = False,
                 remeasure: bool = False, rounds: int = 1, chunk: int | None = None,
                 sentinel: Sentinel | str | None = "auto", retakes: int = 0,
                 state_factor: float = STATE_FACTOR,
                 on_start: Callable[[int, int], None] | None = None,
                 on_config: Callable[[Config], None] | None = None,
                 on_result: Callable[[Config, Measurement], None] | None = None,
                 on_visit: Callable[[Config, Measurement, int], None] | None = None) -> CampaignResult:
    """Measure ``configs`` on ``backend`` into ``store``, resuming past stored ones.

    Args:
        configs: what to measure; duplicates are measured once.
        backend: an open measurement backend (measured here, one config at a time) or an
            :class:`Executor` (e.g. a Ray cluster's worker slots).
        store: the campaign store (the single writer).
        platform: label the rows are stored under; default :func:`platform_label`.
        command: the command line, recorded in the run's provenance.
        retry_failed: delete this platform's non-``ok`` rows among ``configs`` first, so
            that they are measured again.
        remeasure: measure every config again into the ``remeasurements`` table (drift
            checks) instead of resuming.
        rounds: visits per config, pooled (see the module docstring); 1 = one burst.
        chunk: configs visited round-robin together when ``rounds > 1``; ``None`` (the
            default): all of them, so each config's visits spread over the whole campaign.
        sentinel: the speed sentinel timed at regular moments (:mod:`carb.measure.sentinel`);
            ``"auto"``: :data:`~carb.measure.sentinel.CPU_SENTINEL` for the CPU backend or a
            CPU cluster, none otherwise; ``None``: no sentinel.
        retakes: after the rounds, a visit timed in another state of the machine than the
            campaign's (its sentinel beyond ``state_factor`` of :func:`carb.campaign.rounds.machine_state`
            of every first visit's sentinel) is measured again, up to this many times, and the
            config pooled anew from the visit of each round nearest that state (see
            :func:`retake_summary`; the first visits stay in the ``rounds`` table). 0: never.
            Needs ``rounds > 1`` and a sentinel; a resumed run takes the retakes still due.
        state_factor: see :data:`carb.campaign.rounds.STATE_FACTOR`.
        on_start(todo, skipped): called once before measuring.
        on_config(config): called when a config's visit starts (is submitted).
        on_result(config, measurement): called after each config is stored.
        on_visit(config, measurement, planned): called after each visit comes back (each
            round of a config; its measurement before pooling), with the number of visits the
            campaign plans in all (``rounds`` per config less those stored before a resume,
            less the rounds a failed config will not get): a progress count that moves
            from the start, where ``on_result`` waits for a config's last round.
    """
    executor = backend if isinstance(backend, Executor) else LocalExecutor(backend)
    platform = platform or executor.platform()
    unique = list(dict.fromkeys(configs))
    if retry_failed and not remeasure:
        store.delete_failed(platform, (c.config_id for c in unique))
    done = set() if remeasure else store.done_ids(platform)
    todo = [c for c in unique if c.config_id not in done]
    result = CampaignResult(platform=platform, requested=len(unique), skipped=len(unique) - len(todo))
    if retakes < 0:
        raise ValueError(f"retakes ({retakes}) must be >= 0")
    if retakes and (rounds < 2 or remeasure):
        raise ValueError("retakes need rounds > 1 (every visit kept in the rounds table) and no remeasure")
    if on_start:
        on_start(len(todo), result.skipped)
    if not todo and not (retakes and _retakes_due(store, platform, unique, rounds, retakes, state_factor)):
        if retakes:
            result.retakes = retake_summary(store, platform, unique, rounds, state_factor)
        return result
    planned = [len(todo)]  # visits still to come back, for on_visit
    if rounds > 1:
        status = {} if remeasure else store.round_status(platform, (c.config_id for c in todo))
        dead = {c for (c, r), st in status.items() if r < rounds and st != "ok"}
        planned[0] = sum(0 if c.config_id in dead else
                         rounds - sum((c.config_id, r) in status for r in range(rounds)) for c in todo)
    if rounds < 1 or (chunk is not None and chunk < 1):
        raise ValueError(f"rounds ({rounds}) and chunk ({chunk}) must be >= 1")
    chunk = chunk or max(1, len(todo))
    sent = _auto_sentinel(executor) if sentinel == "auto" else sentinel
    if isinstance(sent, str):
        raise ValueError(f"sentinel: {sent!r} (expected a Sentinel, 'auto' or None)")
    if retakes and sent is None:
        raise ValueError("retakes need a speed sentinel (it says which state of the machine a visit was timed in)")
    protocol = executor.protocol
    if rounds > 1 and protocol is None:
        raise ValueError("rounds > 1 needs a backend with a protocol")
    prot = protocol.to_dict() if protocol is not None else {}
    result.run_id = store.begin_run(platform, executor.device, executor.provenance(),
                                    {**prot, "rounds": rounds, "chunk": chunk, "retakes": retakes,
                                     "state_factor": state_factor if retakes else None,
                                     "sentinel": _sentinel_doc(sent)}, command)
    # the platform's sentinel readings so far (earlier runs included): unix time, ms
    known = store.speed_readings(platform) if sent is not None else None
    if known is not None and "used" in known.columns:
        known = known[known["used"].fillna(True).astype(bool)]
    read_t = [] if known is None else [x.timestamp() for x in known["t"]]
    read_ms = [] if known is None else [float(v) for v in known["sentinel_ms"]]

    def sentinel_at(t: float | None) -> float | None:
        if not read_t or t is None:
            return None
        return _sentinel_at(t, read_t, read_ms, sent.window_s)  # type: ignore[union-attr]

    def visit_sentinel(m: Measurement) -> float | None:
        # a visit timed with the paired sentinel carries its own; else the readings around it
        own = paired_sentinel_ms([m.extra]) if m.status == "ok" else None
        return own if own is not None else sentinel_at(m.extra.get("visit_t"))

    # rows whose sentinel a later reading may still change (a visit within half a window of
    # the last reading), with their visits' samples and moments: refined at each reading
    unrefined: list[tuple[Config, list[tuple[list[float], float]]]] = []

    def finish(cfg: Config, m: Measurement, parts: list[Measurement] | None = None) -> None:
        store.add(cfg, platform, m, result.run_id, remeasure=remeasure)
        if sent is not None and m.status == "ok" and paired_sentinel_ms([m.extra]) is None:
            # (a paired row has its own sentinel: later readings do not change it)
            visits_ = [(list(v.extra.get("latency_samples_ms") or [1.0]), v.extra.get("visit_t"))
                       for v in (parts or [m])]
            if all(isinstance(t, float) for _, t in visits_):
                unrefined.append((cfg, visits_))  # type: ignore[arg-type]
        result.measured += 1
        result.by_status[m.status] = result.by_status.get(m.status, 0) + 1
        result.timed_s += m.timed_s
        if on_result:
            on_result(cfg, m)

    # Pooled rounds: each config's visits by round, and how many of its visits are in flight.
    visits: dict[Config, dict[int, Measurement]] = {}
    in_flight: dict[Config, int] = {}

    def failed(cfg: Config) -> bool:
        return any(v.status != "ok" for v in visits[cfg].values())

    def complete(cfg: Config) -> bool:
        return in_flight[cfg] == 0 and (len(visits[cfg]) == rounds or failed(cfg))

    def pool(cfg: Config) -> None:
        v = visits.pop(cfg)
        in_flight.pop(cfg)
        ordered = [v[r] for r in sorted(v)]
        if sent is not None:
            # each visit at the sentinel of its own moment, with every reading known by now
            ordered = [_with_sentinel(x, visit_sentinel(x)) for x in ordered]
        finish(cfg, pool_rounds(ordered), ordered)

    last_reading = [-math.inf]  # monotonic time of the last reading's start

    def readings(force: bool = False) -> Iterator[Job]:
        if sent is None or not (force or time.monotonic() - last_reading[0] >= sent.every_s):
            return
        last_reading[0] = time.monotonic()
        for c in sent.configs:
            yield Job(c, -1, sent.protocol, kind="sentinel")

    def jobs() -> Iterator[Job]:
        yield from readings(force=True)
        yield from visit_jobs()
        yield from retake_jobs()
        yield from readings(force=True)

    # Retakes (a pass per try): each pass plans from the stored visits, so a resumed run takes
    # those still due; a config with a retake in flight waits for the next pass.
    retaking: dict[Config, int] = {}  # retake visits in flight per config

    state: list[float] = []  # the campaign's state (sentinel, ms), once its first visits are in

    def retake_jobs() -> Iterator[Job]:
        if not retakes:
            return
        visit = replace(protocol, max_time_s=protocol.max_time_s / rounds)  # type: ignore[arg-type]
        ref = _campaign_state(_visits(store, platform, unique), rounds, state_factor)
        if ref is None:
            return
        state.append(ref)
        for cfg in _stale(store, platform, [c for c in unique if c not in visits], rounds, state_factor, ref):
            _repool(store, cfg, platform, rounds, result.run_id, ref)  # a kill came between visit and pooling
        for _ in range(retakes):
            due = _retake_plan(store, platform, [c for c in unique if c not in retaking and c not in visits],
                               rounds, retakes, state_factor, ref)
            if not due:
                return
            planned[0] += len(due)
            for cfg, idx in due:
                yield from readings()
                retaking[cfg] = retaking.get(cfg, 0) + 1
                if on_config:
                    on_config(cfg)
                yield Job(cfg, idx, visit)

    def retake_done(cfg: Config, m: Measurement, idx: int) -> None:
        store.add_round(cfg, platform, m, result.run_id, idx)
        result.visits += 1
        retaking[cfg] -= 1
        if on_visit:
            on_visit(cfg, m, planned[0])
        if retaking[cfg] == 0:
            del retaking[cfg]
            _repool(store, cfg, platform, rounds, result.run_id, state[0])

    def visit_jobs() -> Iterator[Job]:
        # A generator, pulled by the executor when it has a free slot: so a visit is only
        # submitted if no earlier visit of its config failed by then.
        if rounds == 1:
            for cfg in todo:
                yield from readings()
                if on_config:
                    on_config(cfg)
                yield Job(cfg)
            return
        # each visit gets a share of the per-config time, so R rounds cost about one burst
        visit = replace(protocol, max_time_s=protocol.max_time_s / rounds)  # type: ignore[arg-type]
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            # remeasure rounds are not kept in the rounds table (it keys the campaign's own)
            stored = {} if remeasure else store.rounds_of(platform, (c.config_id for c in part))
            for c in part:
                visits[c] = {r: store.measurement_from_row(stored[(c.config_id, r)])
                             for r in range(rounds) if (c.config_id, r) in stored}
                in_flight[c] = 0
                if complete(c):  # every visit stored before a kill, only the pooling was lost
                    pool(c)
            for r in range(rounds):
                # odd rounds run backwards: with an even number of rounds every config's
                # visits have the same mean moment, so each pooled value sees the same drift
                for cfg in (part if r % 2 == 0 else part[::-1]):
                    if cfg not in visits or r in visits[cfg] or failed(cfg):
                        continue  # pooled, stored already, or failed in an earlier round
                    yield from readings()
                    if cfg not in visits or failed(cfg):
                        continue  # pooled or failed while the sentinel was measured
                    in_flight[cfg] += 1
                    if on_config:
                        on_config(cfg)
                    yield Job(cfg, r, visit)

    pending: dict[Config, Measurement] = {}  # the sentinel configs of the reading in progress

    def reading_done(cfg: Config, m: Measurement) -> None:
        result.sentinel_s += m.wall_s
        pending[cfg] = m
        if len(pending) < len(sent.configs):  # type: ignore[union-attr]
            return
        r = sent.reading([pending.pop(c) for c in sent.configs])  # type: ignore[union-attr]
        pending.clear()
        if r is None:  # a failed sentinel leaves a gap in the index, never a wrong value
            return
        # the reading's moment: the middle of the sentinel's visits, like a config visit's
        t_read = time.time() - r.wall_s / 2
        # a reading less precise than the drift it would correct is kept, and used for nothing
        used = r.ci_rel <= sent.max_ci_rel  # type: ignore[union-attr]
        store.add_speed_reading(result.run_id, platform, r.sentinel_ms, r.ci_rel, r.wall_s, r.detail, t=t_read,
                                used=used)
        result.readings += 1
        if not used:
            result.noisy_readings += 1
            return
        i = bisect.bisect(read_t, t_read)  # in time order, for the interpolation
        read_t.insert(i, t_read)
        read_ms.insert(i, r.sentinel_ms)
        keep = []
        for c, parts in unrefined:
            eff = effective_sentinel_ms([x for x, _ in parts], [sentinel_at(t) for _, t in parts])  # type: ignore[misc]
            store.set_sentinel(c.config_id, platform, result.run_id, eff, remeasure=remeasure)
            if max(t for _, t in parts) >= t_read - sent.window_s / 2:  # type: ignore[union-attr]
                keep.append((c, parts))  # a later reading still falls in its window
        unrefined[:] = keep

    # the paired sentinel (carb.measure.sentinel.Pairing): timed inside every visit by a
    # backend of this process that supports it; handed back unpaired when the campaign ends
    pairing = sent.pairing() if sent is not None else None
    paired_backend = getattr(executor, "backend", None)
    if pairing is None or not hasattr(paired_backend, "paired_sentinel"):
        paired_backend = None
    old_pairing = paired_backend.paired_sentinel if paired_backend is not None else None
    t0 = time.monotonic()
    try:
        if paired_backend is not None:
            paired_backend.paired_sentinel = pairing
        for job, m in executor.run(jobs()):
            cfg = job.config
            if job.kind == "sentinel":
                reading_done(cfg, m)
                continue
            if sent is not None:
                # the visit's middle moment; its sentinel: the readings known now
                t_visit = time.time() - m.wall_s / 2
                m = replace(m, extra={**m.extra, "visit_t": round(t_visit, 3)})
                m = _with_sentinel(m, visit_sentinel(m))
            if rounds == 1:
                finish(cfg, m)
                if on_visit:
                    on_visit(cfg, m, planned[0])
                continue
            if job.round_ >= rounds:
                retake_done(cfg, m, job.round_)
                continue
            if not remeasure:
                store.add_round(cfg, platform, m, result.run_id, job.round_)
                result.visits += 1
            was_failed = failed(cfg)
            visits[cfg][job.round_] = m
            in_flight[cfg] -= 1
            if m.status != "ok" and not was_failed:  # its rounds not yet submitted will not be
                planned[0] -= rounds - len(visits[cfg]) - in_flight[cfg]
            if on_visit:
                on_visit(cfg, m, planned[0])
            if complete(cfg):
                pool(cfg)
    except KeyboardInterrupt:
        # Everything measured so far is committed; the visits in flight are simply not stored.
        result.interrupted = True
    finally:
        result.wall_s = time.monotonic() - t0
        if paired_backend is not None:
            paired_backend.paired_sentinel = old_pairing
    if retakes:
        result.retakes = retake_summary(store, platform, unique, rounds, state_factor)
    return result


def _visits(store: Store, platform: str, configs: Sequence[Config] | None) -> dict[str, list[tuple[int, str, float]]]:
    """Every stored visit of these configs (``None``: of every config of ``platform``):
    ``{config_id: [(round index, status, sentinel_ms)]}`` (sentinel NaN where unknown), by round index."""
    out: dict[str, list[tuple[int, str, float]]] = {}
    cols = "config_id, round, status, sentinel_ms"
    rows = (store.con.execute(f"SELECT {cols} FROM rounds WHERE platform = ?", [platform]) if configs is None else
            store._rounds(cols, platform, (c.config_id for c in configs))).fetchall()
    for cid, idx, st, s in sorted(rows, key=lambda r: (r[0], r[1])):
        out.setdefault(cid, []).append((int(idx), st, float(s) if s is not None and s == s else math.nan))
    return out


def _campaign_state(visits: dict[str, list[tuple[int, str, float]]], rounds: int, factor: float) -> float | None:
    """The machine's state (sentinel, ms) of a campaign: :func:`carb.campaign.rounds.machine_state` of
    the first visits (round index < ``rounds``): fixed once they are stored, so a resumed run
    judges by the same state."""
    s = [x for v in visits.values() for idx, st, x in v if idx < rounds and st == "ok" and x > 0]
    return machine_state(s, factor) if s else None


def _choose(chain: list[tuple[int, str, float]], ref: float) -> tuple[int, float] | None:
    """The visit of one round to pool: of its first visit and its retakes (``chain``), the ``ok``
    one whose sentinel is nearest ``ref`` in log (the earliest on ties; without any sentinel
    the first visit); ``None`` when none is ``ok``."""
    ok = [(idx, x) for idx, st, x in chain if st == "ok"]
    if not ok:
        return None
    known = [(abs(math.log(x / ref)), idx, x) for idx, x in ok if x > 0]
    if not known:
        return ok[0]
    _, idx, x = min(known)
    return idx, x


def _in_state(sentinel_ms: float, ref: float, factor: float) -> bool:
    """Whether a visit's sentinel (ms) lies within ``factor`` of the state ``ref`` (ms)."""
    return sentinel_ms > 0 and abs(math.log(sentinel_ms / ref)) <= math.log(factor)


def _picks(chains: dict[int, list[tuple[int, str, float]]], ref: float) -> list[int]:
    """The round indices to pool: :func:`_choose`'s visit of each round, in round order."""
    return [p[0] for _, ch in sorted(chains.items()) if (p := _choose(ch, ref)) is not None]


def _chains(v: list[tuple[int, str, float]], rounds: int) -> dict[int, list[tuple[int, str, float]]] | None:
    """A config's visits by the round they stand for (``idx % rounds``); ``None`` unless every
    first visit is stored and ``ok`` (a failed config is not retaken)."""
    first = {idx: st for idx, st, _ in v if idx < rounds}
    if len(first) < rounds or any(st != "ok" for st in first.values()):
        return None
    chains: dict[int, list[tuple[int, str, float]]] = {}
    for x in v:
        chains.setdefault(x[0] % rounds, []).append(x)
    return chains


def _retake_plan(store: Store, platform: str, configs: Sequence[Config], rounds: int, tries: int,
                 factor: float, ref: float | None = None) -> list[tuple[Config, int]]:
    """The retakes due now: ``(config, round index)`` for every round whose chosen visit lies
    beyond ``factor`` of the campaign's state (``ref``, ms; default: that of ``configs``) and
    has had fewer than ``tries`` retakes; the k-th retake of round r is stored as round index
    ``(k + 1) * rounds + r``."""
    visits = _visits(store, platform, configs)
    ref = ref if ref is not None else _campaign_state(visits, rounds, factor)
    if ref is None:
        return []
    due = []
    for cfg in configs:
        chains = _chains(visits.get(cfg.config_id, []), rounds)
        for r, chain in sorted((chains or {}).items()):
            pick = _choose(chain, ref)
            if pick is None or not pick[1] > 0 or _in_state(pick[1], ref, factor):
                continue
            if len(chain) - 1 < tries:
                due.append((cfg, max(idx for idx, _, _ in chain) + rounds))
    return due


def _retakes_due(store: Store, platform: str, configs: Sequence[Config], rounds: int, tries: int,
                 factor: float) -> bool:
    """Whether a resumed run has retakes to make or configs to pool anew (a kill between a
    retake's visit and its pooling)."""
    return bool(_retake_plan(store, platform, configs, rounds, tries, factor)) or \
        bool(_stale(store, platform, configs, rounds, factor))


def _stale(store: Store, platform: str, configs: Sequence[Config], rounds: int, factor: float,
           ref: float | None = None) -> list[Config]:
    """Configs with retakes whose stored row does not pool the visits :func:`_choose` picks (or
    was pooled by code that took memory from the retakes too)."""
    visits = _visits(store, platform, configs)
    retaken = [c for c in configs if any(idx >= rounds for idx, _, _ in visits.get(c.config_id, []))]
    ref = ref if ref is not None else _campaign_state(visits, rounds, factor)
    if not retaken or ref is None:
        return []
    rows = store.measurements(platform)
    # a row pooled before memory stayed the first visits' (no "memory_visits") is stale too
    pooled = {}
    for cid, e in zip(rows["config_id"], rows["extra"]):
        x = json.loads(e) if isinstance(e, str) else {}
        pooled[cid] = x.get("pooled_visits") if "memory_visits" in x else None
    out = []
    for c in retaken:
        chains = _chains(visits[c.config_id], rounds)
        if chains is None:
            continue
        if pooled.get(c.config_id) != _picks(chains, ref):
            out.append(c)
    return out


def _repool(store: Store, cfg: Config, platform: str, rounds: int, run_id: str, ref: float) -> None:
    """Pool ``cfg`` anew from the visit of each round nearest the campaign's state ``ref``
    (sentinel, ms) and replace its row (one transaction); its visits all stay in ``rounds``."""
    visits = _visits(store, platform, [cfg])
    chains = _chains(visits.get(cfg.config_id, []), rounds)
    if chains is None:
        return
    pick = _picks(chains, ref)
    stored = {idx: store.measurement_from_row(row) for (_, idx), row in store.rounds_of(platform, [cfg.config_id]).items()}
    m = pool_rounds([stored[idx] for idx in pick])
    # Memory stays the first visits' median: the two states are speed states (peak memory of
    # the visits in either state agreed, ratio 1.000 over 257 configs of cpu-avx2-2t), while a
    # retake runs minutes later, and 2-thread peaks drifted with time there (retakes 9.5%
    # below their first visits): pooling them added noise, no truth (benchmarks/RESULTS.md).
    mem = [v for r in range(rounds) if (v := stored[r].memory_mb) is not None]
    m = replace(m, memory_mb=float(np.median(mem)) if mem else m.memory_mb,
                extra={**m.extra, "pooled_visits": pick, "memory_visits": list(range(rounds)),
                       "round_memory_mb": mem or m.extra.get("round_memory_mb"),
                       "retakes": sum(idx >= rounds for idx, _, _ in visits[cfg.config_id])})
    store.replace(cfg, platform, m, run_id)


def retake_summary(store: Store, platform: str, configs: Sequence[Config] | None, rounds: int,
                   factor: float = STATE_FACTOR) -> dict[str, Any]:
    """What the retakes of a campaign did, from the store (so a resumed run reports the whole
    campaign; ``configs=None``: every config of ``platform``): ``ref_ms`` the campaign's state (sentinel, ms), ``factor``, ``n`` first visits
    with a sentinel, ``off`` of them timed in another state, ``off_sentinel_ms`` their median
    sentinel, ``visits`` retakes stored, ``back`` off visits whose round now pools a visit in
    the state, ``left`` those still out of it (the same keys as
    :func:`carb.campaign.rounds.retake_off_state`, read by :func:`carb.campaign.rounds.state_line`);
    ``{"note": "no speed index"}`` without sentinels."""
    visits = _visits(store, platform, configs)
    ref = _campaign_state(visits, rounds, factor)
    if ref is None:
        return {"note": "no speed index"}
    n = off = back = retaken = 0
    off_s: list[float] = []
    for v in visits.values():
        retaken += sum(idx >= rounds for idx, _, _ in v)
        chains = _chains(v, rounds)
        for r, chain in sorted((chains or {}).items()):
            s0 = next(x for idx, _, x in chain if idx == r)
            if not s0 > 0:
                continue
            n += 1
            if _in_state(s0, ref, factor):
                continue
            off += 1
            off_s.append(s0)
            pick = _choose(chain, ref)
            back += bool(pick and _in_state(pick[1], ref, factor))
    return {"ref_ms": float(ref), "factor": float(factor), "n": n, "off": off,
            "off_sentinel_ms": float(np.median(off_s)) if off_s else None, "visits": retaken,
            "back": back, "left": off - back}


def _auto_sentinel(executor: Executor) -> Sentinel | None:
    """The default sentinel: the CPU one for the CPU backend or any CPU cluster executor."""
    from carb.measure.cpu import CpuBackend

    if isinstance(executor, LocalExecutor):
        return CPU_SENTINEL if isinstance(executor.backend, CpuBackend) else None
    return CPU_SENTINEL if executor.device == "cpu" else None


def _sentinel_at(t: float, read_t: Sequence[float], read_ms: Sequence[float], window_s: float) -> float:
    """The sentinel (ms) at unix time ``t`` from readings at ``read_t`` (sorted): the median
    of the readings within ``window_s / 2`` of ``t`` (the nearest one when none is), or, for
    ``window_s <= 0``, the readings interpolated linearly in time."""
    ts = np.asarray(read_t, float)
    ms = np.asarray(read_ms, float)
    if window_s <= 0:
        return float(np.interp(t, ts, ms))
    d = np.abs(ts - t)
    near = d <= window_s / 2
    return float(np.median(ms[near])) if near.any() else float(ms[np.argmin(d)])


def _sentinel_doc(sent: Sentinel | None) -> dict[str, Any] | None:
    if sent is None:
        return None
    return {"name": sent.name, "configs": [c.label() for c in sent.configs], "every_s": sent.every_s,
            "window_s": sent.window_s, "protocol": sent.protocol.to_dict(),
            "paired": ({"every_s": sent.pair_every_s, "sample_s": sent.pair_sample_s, "share": sent.pair_share}
                       if sent.pairing() else None)}


def _with_sentinel(m: Measurement, sentinel_ms: float | None) -> Measurement:
    """``m`` with the sentinel of its moment in ``extra["sentinel_ms"]`` (ms)."""
    return replace(m, extra={**m.extra, "sentinel_ms": sentinel_ms})


def pool_rounds(visits: Sequence[Measurement]) -> Measurement:
    """Pool the visits of one config into one measurement.

    Latency: :func:`~carb.measure.protocol.summarize` over the raw samples of every visit
    (``extra["latency_samples_ms"]``). Energy: median of the visits' medians (mean of
    means, min p5, max p95, min of the minima, mean CoV, summed n; no CI). Memory: median of the visits'
    peaks. A failed visit makes the config failed with that visit's status and message.
    Per-domain energy (``extra["energy_pkg_j"]``, ``["energy_dram_j"]``): median of the
    visits' values; ``None`` when any visit lacks it.
    """
    if not visits:
        raise ValueError("pool_rounds: no visits")
    failed = [(i, v) for i, v in enumerate(visits) if v.status != "ok"]
    wall = sum(v.wall_s for v in visits)
    timed = sum(v.timed_s for v in visits)
    if failed:
        i, v = failed[0]
        return Measurement(status=v.status, message=f"round {i + 1}: {v.message}", wall_s=wall, timed_s=timed,
                           energy_missing_reason=v.energy_missing_reason,
                           extra={**v.extra, "rounds": len(visits), "round_statuses": [x.status for x in visits]})
    samples: list[float] = []
    for v in visits:
        s = v.extra.get("latency_samples_ms")
        if not s:
            raise ValueError("pool_rounds: a visit has no raw latency samples to pool")
        samples.extend(float(x) for x in s)
    memory = [v.memory_mb for v in visits if v.memory_mb is not None]
    extra = {**visits[0].extra, "rounds": len(visits), "latency_samples_ms": samples,
             "round_latency_ms": [v.latency_ms.median if v.latency_ms else None for v in visits],
             "round_memory_mb": [v.memory_mb for v in visits]}
    for key in (c for c, _ in ENERGY_DOMAIN_COLUMNS):
        # per-domain energy (RAPL package/DRAM) pooled like energy_j, the median over
        # visits, not the first visit's value carried over by the copy above
        vals = [v.extra.get(key) for v in visits]
        if any(x is not None for x in vals):
            nums = [float(x) for x in vals if isinstance(x, (int, float)) and math.isfinite(x)]
            extra[key] = float(np.median(nums)) if len(nums) == len(vals) else None
    paired = paired_sentinel_ms([v.extra for v in visits])
    if paired is not None:
        # every visit timed with the paired sentinel: the pooled row keeps all its blocks
        extra.update(pair_ratio=[r for v in visits for r in v.extra["pair_ratio"]],
                     pair_sentinel_ms=[r for v in visits for r in v.extra.get("pair_sentinel_ms", [])])
    if any("sentinel_ms" in v.extra for v in visits):
        # drift: every sample at the sentinel of its own visit (carb.measure.sentinel)
        sent = [v.extra.get("sentinel_ms") for v in visits]
        extra.update(round_sentinel_ms=sent, round_visit_t=[v.extra.get("visit_t") for v in visits],
                     sentinel_ms=(paired if paired is not None else
                                  effective_sentinel_ms([v.extra["latency_samples_ms"] for v in visits], sent)
                                  if all(isinstance(x, (int, float)) and x > 0 for x in sent) else None))
        extra.pop("visit_t", None)
    return Measurement(status="ok", latency_ms=summarize(samples), energy_j=_pool_stats([v.energy_j for v in visits]),
                       energy_gross_j=_pool_stats([v.energy_gross_j for v in visits]),
                       memory_mb=float(np.median(memory)) if memory else None,
                       energy_missing_reason=visits[0].energy_missing_reason, timed_s=timed, wall_s=wall, extra=extra)


def _pool_stats(stats: Sequence[Stats | None]) -> Stats | None:
    if not stats or any(s is None for s in stats):
        return None
    return Stats(median=float(np.median([s.median for s in stats])), mean=float(np.mean([s.mean for s in stats])),
                 p5=min(s.p5 for s in stats), p95=max(s.p95 for s in stats),
                 cov=float(np.mean([s.cov for s in stats])), n=int(sum(s.n for s in stats)), ci_rel=math.nan,
                 min=float(np.min([s.min for s in stats])))


def read_config_file(path: str) -> list[Config]:
    """Configs from a Parquet, CSV or JSON-lines file with parameter columns."""
    import pandas as pd

    from carb.families.space import SpaceError, configs_from_frame, missing_columns, with_config_ids

    p = str(path)
    try:
        if p.endswith(".parquet"):
            df = pd.read_parquet(p)
        elif p.endswith(".csv"):
            df = pd.read_csv(p)
        elif p.endswith((".jsonl", ".json")):
            df = pd.read_json(p, lines=p.endswith(".jsonl"))
        else:
            raise SpaceError(f"{p}: unknown config file type (expected .parquet, .csv, .jsonl or .json)")
    except (OSError, ValueError) as e:
        if isinstance(e, SpaceError):
            raise
        raise SpaceError(f"{p}: cannot read configs ({str(e).splitlines()[0]})") from None
    if df.empty:
        raise SpaceError(f"{p}: no configs in the file")
    absent = missing_columns(df)  # never measure a default in place of a missing column
    if absent:
        raise SpaceError(f"{p}: missing column{'s' if len(absent) > 1 else ''} {', '.join(absent)} "
                         "(a config file names every parameter; classes may be left out)")
    try:
        if "config_id" in df.columns:
            with_config_ids(df)  # a user's ids are checked, never trusted
        return configs_from_frame(df)
    except SpaceError as e:
        raise SpaceError(f"{p}: {e}") from None


def unique_configs(configs: Iterable[Config]) -> list[Config]:
    """Configs in first-seen order without duplicates."""
    return list(dict.fromkeys(configs))
