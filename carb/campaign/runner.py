"""Running a characterization campaign: measure configs on a backend into a store.

The campaign process is the store's single writer. It skips what the store already holds
for the platform (so re-running the same command resumes), measures the rest one config
at a time, and commits each result at once. A failing config becomes a row with a status;
the campaign goes on. Ctrl-C stops after the config in flight, keeping everything stored.

Rounds: on a shared, drifting machine one long burst per config measures the machine's
mood of that minute. With ``rounds=R`` the campaign visits each config R times, round-robin
over a chunk of configs, each visit a short burst (``max_time_s / R``) in a fresh worker,
and pools the visits (:func:`~carb.campaign.visits.pool_rounds`): latency from all samples
of all visits, memory as the median of the visits' peaks. Every visit is committed to the
store's ``rounds`` table, so a kill loses at most the visit in flight.

By default (``chunk=None``) the rounds span the whole campaign: round 1 visits every
config, then round 2 every config in the reverse order, and so on, so that a config's
visits lie far apart and, with an even number of rounds, every config's visits have the
same mean moment: every pooled value averages over the same drift of the machine.

Speed sentinel (:mod:`carb.measure.sentinel`): at the start, every ``sentinel.every_s``
seconds and at the end, the campaign measures a fixed workload with the same backend,
stores the reading in the store's ``speed_index`` table, and records in every row the
sentinel at its measurement time (the median of the readings within ``sentinel.window_s / 2``
of each visit: one reading is noisy, the level around it is not) and its latency at the
platform's median speed (``latency_ms_norm``). With a backend of this process that supports
it (the CPU backend), the sentinel is also timed *inside* every visit, in alternation with
the config's samples (:class:`~carb.measure.sentinel.Pairing`): such a row's sentinel is
its own, taken at the moments of its samples, which follows the configs' speed more
closely than readings between visits.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from carb.campaign._configs import read_config_file
from carb.campaign._configs import unique_configs as unique_configs
from carb.campaign._sentinels import _auto_sentinel, _sentinel_at, _sentinel_doc, _with_sentinel
from carb.campaign.executor import Executor, Job, LocalExecutor, platform_label
from carb.campaign.rounds import STATE_FACTOR
from carb.campaign.store import Store
from carb.campaign.visits import (
    _campaign_state,
    _repool,
    _retake_plan,
    _retakes_due,
    _stale,
    _visits,
    pool_rounds,
    retake_summary,
)
from carb.measure.base import Backend, ConfigLike, Measurement, Protocol
from carb.measure.sentinel import Sentinel, effective_sentinel_ms, paired_sentinel_ms

__all__ = [
    "Campaign",
    "CampaignResult",
    "Executor",
    "Job",
    "LocalExecutor",
    "run_campaign",
    "platform_label",
    "pool_rounds",
    "read_config_file",
    "retake_summary",
]

#: a progress callback's signatures (see :class:`Campaign`)
OnStart = Callable[[int, int], None]
OnConfig = Callable[[ConfigLike], None]
OnResult = Callable[[ConfigLike, Measurement], None]
OnVisit = Callable[[ConfigLike, Measurement, int], None]


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
        """The result as a JSON-ready dict, with ``overhead`` and ``sentinel_share``."""
        d = asdict(self)
        d["overhead"] = self.overhead
        d["sentinel_share"] = self.sentinel_share
        return d

    @property
    def sentinel_share(self) -> float:
        """Share of the campaign's wall time spent on the speed sentinel (0..1)."""
        return self.sentinel_s / self.wall_s if self.wall_s > 0 else float("nan")


class Campaign:
    """A characterization campaign: configs measured on a backend into a campaign store.

    Settings go to the constructor; :meth:`run` measures the configs the store does not hold
    yet for the platform (so running the same campaign again resumes), one visit at a time,
    committing each result at once, and returns a :class:`CampaignResult`. A failing config
    becomes a row with a status; the campaign goes on. Ctrl-C stops after the visit in
    flight, keeping everything stored. See the module docstring for rounds and the sentinel.

    Example:
        Measure the ``tiny`` space on this CPU, three visits per config::

            from carb.campaign import Campaign, Store
            from carb.families import space
            from carb.measure import get_backend

            if __name__ == "__main__":  # the CPU backend's workers need the guard
                with get_backend("cpu", threads=1) as backend, Store("tiny.duckdb") as store:
                    result = Campaign(list(space.load("tiny")), backend, store, rounds=3).run()
                print(f"{result.measured} measured, {result.skipped} already stored")

    Args:
        configs: what to measure, of any registered family; duplicates are measured once.
        backend: an open measurement backend (measured here, one config at a time) or an
            :class:`~carb.campaign.executor.Executor` (e.g. a Ray cluster's worker slots).
        store: the campaign store (the single writer).
        platform: label the rows are stored under; default
            :func:`~carb.campaign.executor.platform_label`.
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
            campaign's (its sentinel beyond ``state_factor`` of
            :func:`carb.campaign.rounds.machine_state` of every first visit's sentinel) is
            measured again, up to this many times, and the config pooled anew from the visit
            of each round nearest that state (see :func:`~carb.campaign.visits.retake_summary`;
            the first visits stay in the ``rounds`` table). 0: never. Needs ``rounds > 1``
            and a sentinel; a resumed run takes the retakes still due.
        state_factor: see :data:`carb.campaign.rounds.STATE_FACTOR`.
        on_start: ``on_start(todo, skipped)``, called once before measuring.
        on_config: ``on_config(config)``, called when a config's visit starts (is submitted).
        on_result: ``on_result(config, measurement)``, called after each config is stored.
        on_visit: ``on_visit(config, measurement, planned)``, called after each visit comes
            back (each round of a config; its measurement before pooling), with the number
            of visits the campaign plans in all (``rounds`` per config less those stored
            before a resume, less the rounds a failed config will not get): a progress count
            that moves from the start, where ``on_result`` waits for a config's last round.
    """

    def __init__(
        self,
        configs: Sequence[ConfigLike],
        backend: Backend | Executor,
        store: Store,
        *,
        platform: str | None = None,
        command: str = "",
        retry_failed: bool = False,
        remeasure: bool = False,
        rounds: int = 1,
        chunk: int | None = None,
        sentinel: Sentinel | str | None = "auto",
        retakes: int = 0,
        state_factor: float = STATE_FACTOR,
        on_start: OnStart | None = None,
        on_config: OnConfig | None = None,
        on_result: OnResult | None = None,
        on_visit: OnVisit | None = None,
    ) -> None:
        self._configs = configs
        self._executor = backend if isinstance(backend, Executor) else LocalExecutor(backend)
        self._store = store
        self._platform_arg = platform
        self._command = command
        self._retry_failed = retry_failed
        self._remeasure = remeasure
        self._rounds = rounds
        self._chunk_arg = chunk
        self._sentinel_arg = sentinel
        self._retakes = retakes
        self._state_factor = state_factor
        self._on_start, self._on_config, self._on_result, self._on_visit = on_start, on_config, on_result, on_visit

    # -- the run, step by step -------------------------------------------------------------

    def run(self) -> CampaignResult:
        """Measure the configs the store does not hold yet, then take the retakes due.

        Returns:
            What the campaign did; ``interrupted`` when Ctrl-C (or SIGTERM raised as
            KeyboardInterrupt) stopped it, everything measured by then being stored.

        Raises:
            ValueError: settings that do not go together (``rounds < 1``, ``chunk < 1``,
                ``retakes < 0``, retakes without rounds or a sentinel, rounds without a
                protocol, a sentinel that is neither a Sentinel, ``"auto"`` nor ``None``).
        """
        result = self._plan()
        if not self._todo and not (
            self._retakes
            and _retakes_due(self._store, self._platform, self._unique, self._rounds, self._retakes, self._state_factor)
        ):
            self._summarize_retakes()
            return result
        self._count_planned_visits()
        self._check_settings()
        self._begin_run()
        self._measure_all()
        self._summarize_retakes()
        return result

    def _plan(self) -> CampaignResult:
        """Resolve the platform and the configs still to measure, and call ``on_start``."""
        self._platform = self._platform_arg or self._executor.platform()
        self._unique = list(dict.fromkeys(self._configs))
        if self._retry_failed and not self._remeasure:
            self._store.delete_failed(self._platform, (c.config_id for c in self._unique))
        done = set() if self._remeasure else self._store.done_ids(self._platform)
        self._todo = [c for c in self._unique if c.config_id not in done]
        self._result = CampaignResult(
            platform=self._platform, requested=len(self._unique), skipped=len(self._unique) - len(self._todo)
        )
        if self._retakes < 0:
            raise ValueError(f"retakes ({self._retakes}) must be >= 0")
        if self._retakes and (self._rounds < 2 or self._remeasure):
            raise ValueError("retakes need rounds > 1 (every visit kept in the rounds table) and no remeasure")
        if self._on_start:
            self._on_start(len(self._todo), self._result.skipped)
        return self._result

    def _count_planned_visits(self) -> None:
        """The visits still to come back (for ``on_visit``): a failed config gets no more rounds."""
        self._planned = len(self._todo)
        if self._rounds > 1:
            status = (
                {} if self._remeasure else self._store.round_status(self._platform, (c.config_id for c in self._todo))
            )
            dead = {c for (c, r), st in status.items() if r < self._rounds and st != "ok"}
            self._planned = sum(
                0
                if c.config_id in dead
                else self._rounds - sum((c.config_id, r) in status for r in range(self._rounds))
                for c in self._todo
            )

    def _check_settings(self) -> None:
        """Check rounds, chunk, sentinel and protocol, and resolve the defaults of the last three."""
        if self._rounds < 1 or (self._chunk_arg is not None and self._chunk_arg < 1):
            raise ValueError(f"rounds ({self._rounds}) and chunk ({self._chunk_arg}) must be >= 1")
        self._chunk = self._chunk_arg or max(1, len(self._todo))
        sent = _auto_sentinel(self._executor) if self._sentinel_arg == "auto" else self._sentinel_arg
        if isinstance(sent, str):
            raise ValueError(f"sentinel: {sent!r} (expected a Sentinel, 'auto' or None)")
        if self._retakes and sent is None:
            raise ValueError("retakes need a speed sentinel (it says which state of the machine a visit was timed in)")
        self._sent: Sentinel | None = sent
        self._protocol = self._executor.protocol
        if self._rounds > 1 and self._protocol is None:
            raise ValueError("rounds > 1 needs a backend with a protocol")

    def _begin_run(self) -> None:
        """Record the run in the store, load the platform's sentinel readings, and reset the run's state."""
        prot = self._protocol.to_dict() if self._protocol is not None else {}
        settings = {
            **prot,
            "rounds": self._rounds,
            "chunk": self._chunk,
            "retakes": self._retakes,
            "state_factor": self._state_factor if self._retakes else None,
            "sentinel": _sentinel_doc(self._sent),
        }
        self._result.run_id = self._store.begin_run(
            self._platform, self._executor.device, self._executor.provenance(), settings, self._command
        )
        # the platform's sentinel readings so far (earlier runs included): unix time, ms
        known = self._store.speed_readings(self._platform) if self._sent is not None else None
        if known is not None and "used" in known.columns:
            known = known[known["used"].fillna(True).astype(bool)]
        self._read_t: list[float] = [] if known is None else [x.timestamp() for x in known["t"]]
        self._read_ms: list[float] = [] if known is None else [float(v) for v in known["sentinel_ms"]]
        # rows whose sentinel a later reading may still change (a visit within half a window
        # of the last reading), with their visits' samples and moments: refined at each reading
        self._unrefined: list[tuple[ConfigLike, list[tuple[list[float], float]]]] = []
        # pooled rounds: each config's visits by round, and how many of its visits are in flight
        self._open_visits: dict[ConfigLike, dict[int, Measurement]] = {}
        self._in_flight: dict[ConfigLike, int] = {}
        self._last_reading = -math.inf  # monotonic time of the last reading's start
        self._pending: dict[ConfigLike, Measurement] = {}  # the sentinel configs of the reading in progress
        self._retaking: dict[ConfigLike, int] = {}  # retake visits in flight per config
        self._state_ms: float | None = None  # the campaign's state (sentinel, ms), once its first visits are in

    def _measure_all(self) -> None:
        """Run every job through the executor, with the paired sentinel set on the backend meanwhile."""
        backend, pairing = self._paired_backend()
        old_pairing = backend.paired_sentinel if backend is not None else None
        t0 = time.monotonic()
        try:
            if backend is not None:
                backend.paired_sentinel = pairing
            for job, m in self._executor.run(self._jobs()):
                self._measured(job, m)
        except KeyboardInterrupt:
            # everything measured so far is committed; the visits in flight are simply not stored
            self._result.interrupted = True
        finally:
            self._result.wall_s = time.monotonic() - t0
            if backend is not None:
                backend.paired_sentinel = old_pairing

    def _paired_backend(self) -> tuple[Any, Any]:
        """The backend of this process that times the paired sentinel inside every visit, and its pairing.

        ``(None, None)`` without a pairing sentinel or without such a backend (e.g. a cluster).
        """
        pairing = self._sent.pairing() if self._sent is not None else None
        backend = getattr(self._executor, "backend", None)
        if pairing is None or not hasattr(backend, "paired_sentinel"):
            return None, None
        return backend, pairing

    def _summarize_retakes(self) -> None:
        if self._retakes:
            self._result.retakes = retake_summary(
                self._store, self._platform, self._unique, self._rounds, self._state_factor
            )

    # -- the stream of jobs ----------------------------------------------------------------

    def _jobs(self) -> Iterator[Job]:
        """Every job of the run, pulled by the executor when it has a free slot.

        A generator, so a visit is only submitted if no earlier visit of its config failed by then.
        """
        yield from self._readings(force=True)
        yield from self._visit_jobs()
        yield from self._retake_jobs()
        yield from self._readings(force=True)

    def _readings(self, force: bool = False) -> Iterator[Job]:
        """The sentinel's jobs of one reading, when one is due (``force``: now)."""
        sent = self._sent
        if sent is None or not (force or time.monotonic() - self._last_reading >= sent.every_s):
            return
        self._last_reading = time.monotonic()
        for c in sent.configs:
            yield Job(c, -1, sent.protocol, kind="sentinel")

    def _submit(self, cfg: ConfigLike) -> None:
        if self._on_config:
            self._on_config(cfg)

    def _visit_jobs(self) -> Iterator[Job]:
        """The first visits: one per config, or its rounds chunk by chunk."""
        if self._rounds == 1:
            for cfg in self._todo:
                yield from self._readings()
                self._submit(cfg)
                yield Job(cfg)
            return
        visit = self._visit_protocol()
        for i in range(0, len(self._todo), self._chunk):
            part = self._todo[i : i + self._chunk]
            self._load_stored_visits(part)
            yield from self._round_robin(part, visit)

    def _visit_protocol(self) -> Protocol:
        """A visit's protocol: a share of the per-config time, so R rounds cost about one burst."""
        assert self._protocol is not None  # checked by _check_settings when rounds > 1
        return replace(self._protocol, max_time_s=self._protocol.max_time_s / self._rounds)

    def _load_stored_visits(self, part: list[ConfigLike]) -> None:
        """Open the visits of a chunk's configs with those stored before a resume."""
        # remeasure rounds are not kept in the rounds table (it keys the campaign's own)
        stored = {} if self._remeasure else self._store.rounds_of(self._platform, (c.config_id for c in part))
        for c in part:
            self._open_visits[c] = {
                r: self._store.measurement_from_row(stored[(c.config_id, r)])
                for r in range(self._rounds)
                if (c.config_id, r) in stored
            }
            self._in_flight[c] = 0
            if self._complete(c):  # every visit stored before a kill, only the pooling was lost
                self._pool(c)

    def _round_robin(self, part: list[ConfigLike], visit: Protocol) -> Iterator[Job]:
        """The visits of a chunk, round by round; odd rounds run backwards.

        With an even number of rounds every config's visits then have the same mean moment,
        so each pooled value sees the same drift.
        """
        for r in range(self._rounds):
            for cfg in part if r % 2 == 0 else part[::-1]:
                if cfg not in self._open_visits or r in self._open_visits[cfg] or self._failed(cfg):
                    continue  # pooled, stored already, or failed in an earlier round
                yield from self._readings()
                if cfg not in self._open_visits or self._failed(cfg):
                    continue  # pooled or failed while the sentinel was measured
                self._in_flight[cfg] += 1
                self._submit(cfg)
                yield Job(cfg, r, visit)

    def _retake_jobs(self) -> Iterator[Job]:
        """The retakes, a pass per try.

        Each pass plans from the stored visits, so a resumed run takes those still due; a
        config with a retake in flight waits for the next pass.
        """
        if not self._retakes:
            return
        visit = self._visit_protocol()
        store, platform, rounds, factor = self._store, self._platform, self._rounds, self._state_factor
        ref = _campaign_state(_visits(store, platform, self._unique), rounds, factor)
        if ref is None:
            return
        self._state_ms = ref
        for cfg in _stale(
            store, platform, [c for c in self._unique if c not in self._open_visits], rounds, factor, ref
        ):
            _repool(store, cfg, platform, rounds, self._result.run_id, ref)  # a kill came between visit and pooling
        for _ in range(self._retakes):
            free = [c for c in self._unique if c not in self._retaking and c not in self._open_visits]
            due = _retake_plan(store, platform, free, rounds, self._retakes, factor, ref)
            if not due:
                return
            self._planned += len(due)
            for cfg, idx in due:
                yield from self._readings()
                self._retaking[cfg] = self._retaking.get(cfg, 0) + 1
                self._submit(cfg)
                yield Job(cfg, idx, visit)

    # -- what comes back -------------------------------------------------------------------

    def _measured(self, job: Job, m: Measurement) -> None:
        """Take one job's measurement: a sentinel reading, a single visit, a round or a retake."""
        cfg = job.config
        if job.kind == "sentinel":
            self._reading_done(cfg, m)
            return
        if self._sent is not None:
            # the visit's middle moment; its sentinel: the readings known now
            t_visit = time.time() - m.wall_s / 2
            m = replace(m, extra={**m.extra, "visit_t": round(t_visit, 3)})
            m = _with_sentinel(m, self._visit_sentinel(m))
        if self._rounds == 1:
            self._finish(cfg, m)
            if self._on_visit:
                self._on_visit(cfg, m, self._planned)
        elif job.round_ >= self._rounds:
            self._retake_done(cfg, m, job.round_)
        else:
            self._round_done(cfg, m, job.round_)

    def _round_done(self, cfg: ConfigLike, m: Measurement, round_: int) -> None:
        """Store a round's visit; pool the config once its last visit is in (or one failed)."""
        if not self._remeasure:
            self._store.add_round(cfg, self._platform, m, self._result.run_id, round_)
            self._result.visits += 1
        visits = self._open_visits[cfg]
        was_failed = self._failed(cfg)
        visits[round_] = m
        self._in_flight[cfg] -= 1
        if m.status != "ok" and not was_failed:  # its rounds not yet submitted will not be
            self._planned -= self._rounds - len(visits) - self._in_flight[cfg]
        if self._on_visit:
            self._on_visit(cfg, m, self._planned)
        if self._complete(cfg):
            self._pool(cfg)

    def _retake_done(self, cfg: ConfigLike, m: Measurement, idx: int) -> None:
        """Store a retake's visit; pool the config anew once its retakes in flight are in."""
        self._store.add_round(cfg, self._platform, m, self._result.run_id, idx)
        self._result.visits += 1
        self._retaking[cfg] -= 1
        if self._on_visit:
            self._on_visit(cfg, m, self._planned)
        if self._retaking[cfg] == 0:
            del self._retaking[cfg]
            _repool(self._store, cfg, self._platform, self._rounds, self._result.run_id, self._state_ms)

    def _failed(self, cfg: ConfigLike) -> bool:
        return any(v.status != "ok" for v in self._open_visits[cfg].values())

    def _complete(self, cfg: ConfigLike) -> bool:
        return self._in_flight[cfg] == 0 and (len(self._open_visits[cfg]) == self._rounds or self._failed(cfg))

    def _pool(self, cfg: ConfigLike) -> None:
        """Pool a config's visits into its row."""
        v = self._open_visits.pop(cfg)
        self._in_flight.pop(cfg)
        ordered = [v[r] for r in sorted(v)]
        if self._sent is not None:
            # each visit at the sentinel of its own moment, with every reading known by now
            ordered = [_with_sentinel(x, self._visit_sentinel(x)) for x in ordered]
        self._finish(cfg, pool_rounds(ordered), ordered)

    def _finish(self, cfg: ConfigLike, m: Measurement, parts: list[Measurement] | None = None) -> None:
        """Store a config's row, count it, and call ``on_result``."""
        self._store.add(cfg, self._platform, m, self._result.run_id, remeasure=self._remeasure)
        if self._sent is not None and m.status == "ok" and paired_sentinel_ms([m.extra]) is None:
            # (a paired row has its own sentinel: later readings do not change it)
            visits = [
                (list(v.extra.get("latency_samples_ms") or [1.0]), v.extra.get("visit_t")) for v in (parts or [m])
            ]
            if all(isinstance(t, float) for _, t in visits):
                self._unrefined.append((cfg, visits))  # type: ignore[arg-type]
        result = self._result
        result.measured += 1
        result.by_status[m.status] = result.by_status.get(m.status, 0) + 1
        result.timed_s += m.timed_s
        if self._on_result:
            self._on_result(cfg, m)

    # -- the speed sentinel ----------------------------------------------------------------

    def _sentinel_of(self, t: float | None) -> float | None:
        """The sentinel (ms) at unix time ``t`` from the readings known now; ``None`` without any."""
        if not self._read_t or t is None:
            return None
        return _sentinel_at(t, self._read_t, self._read_ms, self._sent.window_s)  # type: ignore[union-attr]

    def _visit_sentinel(self, m: Measurement) -> float | None:
        """A visit's sentinel (ms): its own when timed with the paired sentinel, else the readings around it."""
        own = paired_sentinel_ms([m.extra]) if m.status == "ok" else None
        return own if own is not None else self._sentinel_of(m.extra.get("visit_t"))

    def _reading_done(self, cfg: ConfigLike, m: Measurement) -> None:
        """Take a sentinel config's measurement; with the reading's last one, store the reading."""
        sent = self._sent
        assert sent is not None  # sentinel jobs come from a sentinel
        self._result.sentinel_s += m.wall_s
        self._pending[cfg] = m
        if len(self._pending) < len(sent.configs):
            return
        r = sent.reading([self._pending.pop(c) for c in sent.configs])
        self._pending.clear()
        if r is None:  # a failed sentinel leaves a gap in the index, never a wrong value
            return
        # the reading's moment: the middle of the sentinel's visits, like a config visit's
        t_read = time.time() - r.wall_s / 2
        # a reading less precise than the drift it would correct is kept, and used for nothing
        used = r.ci_rel <= sent.max_ci_rel
        self._store.add_speed_reading(
            self._result.run_id, self._platform, r.sentinel_ms, r.ci_rel, r.wall_s, r.detail, t=t_read, used=used
        )
        self._result.readings += 1
        if not used:
            self._result.noisy_readings += 1
            return
        i = bisect.bisect(self._read_t, t_read)  # in time order, for the interpolation
        self._read_t.insert(i, t_read)
        self._read_ms.insert(i, r.sentinel_ms)
        self._refine(t_read, sent.window_s)

    def _refine(self, t_read: float, window_s: float) -> None:
        """Set the sentinel of the rows a new reading (at unix time ``t_read``) falls near."""
        keep = []
        for c, parts in self._unrefined:
            eff = effective_sentinel_ms([x for x, _ in parts], [self._sentinel_of(t) for _, t in parts])  # type: ignore[misc]
            self._store.set_sentinel(c.config_id, self._platform, self._result.run_id, eff, remeasure=self._remeasure)
            if max(t for _, t in parts) >= t_read - window_s / 2:
                keep.append((c, parts))  # a later reading still falls in its window
        self._unrefined = keep


def run_campaign(
    configs: Sequence[ConfigLike],
    backend: Backend | Executor,
    store: Store,
    *,
    platform: str | None = None,
    command: str = "",
    retry_failed: bool = False,
    remeasure: bool = False,
    rounds: int = 1,
    chunk: int | None = None,
    sentinel: Sentinel | str | None = "auto",
    retakes: int = 0,
    state_factor: float = STATE_FACTOR,
    on_start: OnStart | None = None,
    on_config: OnConfig | None = None,
    on_result: OnResult | None = None,
    on_visit: OnVisit | None = None,
) -> CampaignResult:
    """Measure ``configs`` on ``backend`` into ``store``, resuming past stored ones.

    The function form of :class:`Campaign` (``Campaign(configs, backend, store, ...).run()``),
    whose docstring describes every argument.

    Returns:
        What the campaign did.

    Raises:
        ValueError: settings that do not go together (see :meth:`Campaign.run`).
    """
    return Campaign(
        configs,
        backend,
        store,
        platform=platform,
        command=command,
        retry_failed=retry_failed,
        remeasure=remeasure,
        rounds=rounds,
        chunk=chunk,
        sentinel=sentinel,
        retakes=retakes,
        state_factor=state_factor,
        on_start=on_start,
        on_config=on_config,
        on_result=on_result,
        on_visit=on_visit,
    ).run()
