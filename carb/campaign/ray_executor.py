"""Campaigns across the machines of a Ray cluster (``carb characterize --executor ray``).

The campaign process (the *driver*) stays the store's single writer and keeps every rule
of a local campaign (resume, rounds, per-config commits); only the measuring moves out:

- One **slot** per device of the cluster: an actor holding one open measurement backend,
  ``num_gpus=1`` on GPU nodes (Ray sets ``CUDA_VISIBLE_DEVICES``; the CUDA backend finds
  its NVML device by UUID), ``num_cpus=threads`` otherwise. A GPU slot locks its GPU's
  clocks once when it starts and restores them when it closes, not per task. A CPU slot
  pins itself to a block of ``threads`` cores of its node that no other slot of the
  campaign holds (claimed with a file lock that dies with the process), and the CPU
  backend still measures every config in a fresh process, so peak memory is clean.
- One config visit per task, at most one task per slot in flight (a queued task would
  only measure later); results come back to the driver as they complete.
- The slots follow the cluster: every ``poll_s`` seconds the driver counts the slots the
  alive nodes hold and starts new ones, without waiting for them, on a node that joins
  (up to ``workers``). A slot that dies (worker killed, node lost) is dropped and its
  visit submitted again on another slot, up to ``max_retries`` times; after that the
  config is stored with status ``crash`` and the reason, like any other failure. A
  replacement starts where the node is still alive. Nothing is stored twice: the store
  is written by the driver only, once per visit.
- Every row records the node that measured it (``extra``: ``ray_host``, ``ray_node``,
  ``ray_cpu``, and ``ray_gpu_uuid`` on GPUs).
- A driver that dies loses only the visits in flight: the next run resumes from the store.

Every node needs the same ``carb`` (and torch) installed as the driver. Ray is an optional
dependency: ``pip install 'carb[ray]'``.
"""

from __future__ import annotations

import collections
import fcntl
import os
import socket
import tempfile
import time
import uuid
import warnings
from typing import Any, Callable, Iterator

from carb.campaign.executor import Executor, Job, _label
from carb.measure.base import Measurement, Protocol

__all__ = ["RayExecutor"]

#: consecutive slots that fail to start before the campaign stops starting new ones
START_FAILURES = 3
#: how long the other first slots may take to start once one has. Units: s.
FIRST_SLOTS_GRACE_S = 30.0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'carb[ray]'") from None
    except Exception as e:  # noqa: BLE001 - a Ray that cannot start on this machine at all
        from importlib.metadata import version

        raise RuntimeError(
            f"Ray {version('ray')} cannot be imported here ({type(e).__name__}: {e}); "
            "carb's Ray extra pins the releases that can: pip install 'carb[ray]'"
        ) from None
    return ray


class _Slot:
    """Ray actor body: one open backend on one device of one node."""

    def __init__(self, device: str, opts: dict[str, Any], pin_dir: str | None, threads: int) -> None:
        import sys

        import ray

        from carb.measure import get_backend

        # The CPU backend's forkserver would run this process's main script (Ray's worker
        # entry point, which imports Ray) in every measurement worker: 0.4 s a visit on
        # our machines (benchmarks/bench_ray.py). The slot needs no main script: drop it.
        main = sys.modules.get("__main__")
        if main is not None and hasattr(main, "__file__"):
            del main.__file__
        self._lock_file: Any = None
        self.affinity = self._claim_cores(pin_dir, threads) if device == "cpu" and pin_dir else None
        if self.affinity:
            opts = {**opts, "affinity": self.affinity}
        self.host = socket.gethostname()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.backend = get_backend(device, **opts)
        self.backend.__enter__()
        prov = self.backend.provenance()
        # what every row measured here records about its node
        self.facts = {
            "ray_host": self.host,
            "ray_node": self.node_id,
            "ray_cpu": prov.get("cpu_model"),
            **({"ray_gpu_uuid": prov.get("gpu_uuid")} if device != "cpu" else {}),
        }

    def _claim_cores(self, pin_dir: str, threads: int) -> list[int] | None:
        """Hold the first block of ``threads`` cores of this node that no other slot holds.

        The claim is an exclusive ``flock`` on one file per block: the kernel drops it
        when this process dies, so a replacement slot can take the block again.
        """
        os.makedirs(pin_dir, exist_ok=True)
        cpus = sorted(os.sched_getaffinity(0))
        for k in range(len(cpus) // threads):
            f = open(os.path.join(pin_dir, f"cores-{k}.lock"), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self._lock_file = f
            return cpus[k * threads : (k + 1) * threads]
        return None  # more slots than core blocks on this node: run unpinned

    def info(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": os.getpid(),
            "node_id": self.node_id,
            "affinity": self.affinity,
            "provenance": self.backend.provenance(),
        }

    def measure(self, config: Any, protocol: Protocol | None) -> Measurement:
        m = self.backend.measure(config) if protocol is None else self.backend.measure(config, protocol=protocol)  # type: ignore[call-arg]
        m.extra = {**m.extra, **self.facts}
        return m

    def close(self) -> None:
        self.backend.close()


class RayExecutor(Executor):
    """Measure a campaign's visits on every worker slot of a Ray cluster.

    Args:
        device: ``cpu`` or ``cuda``; a GPU slot gets one whole GPU (``cuda:<i>`` is
            refused: Ray picks the GPU).
        address: the cluster: ``auto`` (the one this machine belongs to), ``HOST:PORT``,
            ``ray://HOST:PORT``, or ``None`` (``RAY_ADDRESS`` if set, else a new local
            cluster on this machine).
        threads: CPU threads per slot (CPU slots take this many Ray CPUs).
        protocol: the repeat/stop protocol of every slot's backend.
        lock_clocks: GPU slots lock their GPU's clocks (once per slot).
        workers: use at most this many slots (default: every slot the cluster has, nodes
            that join during the campaign included).
        max_retries: times a visit is submitted again after its slot died.
        start_timeout_s: how long to wait for a first slot to start, and how long a
            campaign left without any slot waits for one. Units: s.
        poll_s: how often the cluster's nodes are counted during a campaign. Units: s.
        on_event: called with one line when a slot starts or is lost during a campaign
            (e.g. the progress display's ``print``).
        init_kwargs: extra arguments of ``ray.init`` (e.g. ``num_cpus`` for a local
            cluster).
        backend_opts: extra backend options (see :func:`carb.measure.get_backend`).

    Raises:
        RuntimeError: Ray is not installed or cannot be imported, the cluster cannot be
            reached, it has no slot for the device, or its slots are different platforms
            (one campaign measures one platform: run one per GPU model).
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        address: str | None = None,
        threads: int = 1,
        protocol: Protocol | None = None,
        lock_clocks: bool = True,
        workers: int | None = None,
        max_retries: int = 2,
        start_timeout_s: float = 300.0,
        poll_s: float = 2.0,
        on_event: Callable[[str], None] | None = None,
        init_kwargs: dict[str, Any] | None = None,
        backend_opts: dict[str, Any] | None = None,
    ) -> None:
        d = device.strip().lower()
        if d not in ("cpu", "cuda"):
            raise ValueError(
                f"--executor ray measures on 'cpu' or 'cuda' slots, not {device!r} "
                "(Ray assigns each GPU slot its device)"
            )
        if threads < 1 or (workers is not None and workers < 1) or max_retries < 0 or poll_s <= 0:
            raise ValueError("threads and workers must be >= 1, max_retries >= 0, poll_s > 0")
        self.ray = _import_ray()
        self.device, self.protocol, self.threads = d, protocol, threads
        self.max_retries, self.start_timeout_s, self.poll_s = max_retries, start_timeout_s, poll_s
        self.on_event = on_event
        opts: dict[str, Any] = {"protocol": protocol, **(backend_opts or {})}
        if d == "cpu":
            opts["threads"] = threads
        else:
            opts["lock_clocks"] = lock_clocks
        self._opts = opts
        # per-campaign directory of core-block locks, the same path on every node
        self._pin_dir = os.path.join(tempfile.gettempdir(), f"carb-ray-{uuid.uuid4().hex[:12]}")
        self._cap = workers
        self.retried = 0
        self.slots_total = 0
        #: visits measured per node id (this executor's lifetime)
        self.visits_by_node: collections.Counter[str] = collections.Counter()
        self._slots: list[Any] = []  # started slots, in start order
        self._pending: dict[Any, Any] = {}  # info ref -> a slot still starting
        self._infos: dict[Any, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}  # alive node id -> {"host", "ip", "slots"}
        self._refused: set[str] = set()  # nodes of another platform
        self._start_failures = 0
        self._label: str | None = None
        self._started_here = False
        try:
            self._connect(address, init_kwargs or {})
            self._adjust([])
            if not self._pending:
                what = "GPU" if d == "cuda" else f"{threads} free CPU(s) on one node"
                raise RuntimeError(f"the Ray cluster has no worker slot with {what}")
            self._await_first_slots()
        except BaseException:
            self.close()
            raise

    # -- cluster -------------------------------------------------------------------------

    def _connect(self, address: str | None, init_kwargs: dict[str, Any]) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False, **init_kwargs}
        try:
            with warnings.catch_warnings():
                # Ray's notice that it sets CUDA_VISIBLE_DEVICES="" in num_gpus=0 actors: what
                # CPU slots want (they never see a GPU), nothing for the user to act on
                warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
                ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RuntimeError(
                f"cannot reach the Ray cluster at {address or 'RAY_ADDRESS/local'}: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
        self._started_here = True

    def _count_slots(self) -> int:
        """Read the alive nodes; the slots they hold: whole GPUs, or blocks of ``threads`` CPUs per node."""
        nodes = {}
        for node in self.ray.nodes():
            if not node.get("Alive") or node["NodeID"] in self._refused:
                continue
            res = node.get("Resources", {})
            n = int(res.get("GPU", 0)) if self.device == "cuda" else int(res.get("CPU", 0) // self.threads)
            nodes[node["NodeID"]] = {
                "host": node.get("NodeManagerHostname", "?"),
                "ip": node.get("NodeManagerAddress", "?"),
                "slots": n,
            }
        self._nodes = nodes
        self.slots_total = sum(n["slots"] for n in nodes.values())
        return self.slots_total

    def _adjust(self, free: list[Any]) -> None:
        """Follow the cluster: drop the slots of dead nodes, start slots up to what the nodes hold.

        Slots still starting beyond that (their node died before they started) are cancelled.
        """
        try:
            total = self._count_slots()
        except Exception as e:  # noqa: BLE001 - the head is gone: nothing more can run
            raise RuntimeError(
                f"lost the Ray cluster ({_last_line(e)}); what was measured is stored: run the same command to resume"
            ) from None
        for slot in [s for s in self._slots if self._infos[s]["node_id"] not in self._nodes]:
            self._drop(slot, free, "its node left the cluster")
        wanted = min(total, self._cap) if self._cap else total
        while len(self._slots) + len(self._pending) > wanted and self._pending:
            ref, slot = self._pending.popitem()
            self._kill(slot)
        if self._start_failures >= START_FAILURES:
            return  # slots keep failing to start (e.g. a node without carb): stop trying
        while len(self._slots) + len(self._pending) < wanted:
            slot = self._new_slot()
            self._pending[slot.info.remote()] = slot

    def _new_slot(self) -> Any:
        cls = self.ray.remote(_Slot).options(
            num_cpus=self.threads if self.device == "cpu" else 1,
            num_gpus=1 if self.device == "cuda" else 0,
            max_restarts=0,
            max_concurrency=1,
            scheduling_strategy="SPREAD",
        )
        return cls.remote(self.device, self._opts, self._pin_dir, self.threads)

    def _await_first_slots(self) -> None:
        """Wait for a first slot, then the others a while; refuse a cluster of mixed platforms.

        A slot still starting after :data:`FIRST_SLOTS_GRACE_S` (its node busy, or dead but
        not yet known to be) joins during the campaign, or is cancelled with its node; one
        that fails to start is dropped, unless none starts.
        """
        ray, deadline, errors = self.ray, time.monotonic() + self.start_timeout_s, []
        waiting = list(self._pending)
        while waiting and not self._slots:
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            self._first_started(ready[0], errors)
        if not self._slots:
            raise RuntimeError(
                errors[-1]
                if errors
                else f"no Ray worker slot started within {self.start_timeout_s:.0f} s (not enough free resources?)"
            )
        more, _ = ray.wait(waiting, num_returns=len(waiting), timeout=FIRST_SLOTS_GRACE_S) if waiting else ([], [])
        for ref in more:
            self._first_started(ref, errors)
        labels = {_label(self.device, i["provenance"]) for i in self._infos.values()}
        if len(labels) > 1:
            raise RuntimeError(
                f"the Ray cluster's slots are different platforms ({', '.join(sorted(labels))}): "
                "run one campaign per platform"
            )
        self._label = labels.pop()

    def _first_started(self, ref: Any, errors: list[str]) -> None:
        slot = self._pending.pop(ref)
        try:
            self._infos[slot] = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            self._kill(slot)
            errors.append(f"a Ray worker slot failed to start: {_last_line(e)}")
            return
        self._slots.append(slot)

    def _slot_started(self, ref: Any, free: list[Any]) -> None:
        """A slot started during the campaign joins the free ones (one of another platform is refused)."""
        slot = self._pending.pop(ref)
        try:
            info = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            self._start_failures += 1
            self._kill(slot)
            self._event(f"ray: a new slot failed to start: {_last_line(e)}")
            return
        self._start_failures = 0
        label = _label(self.device, info["provenance"])
        if label != self._label:
            self._refused.add(info["node_id"])
            self._kill(slot)
            self._event(f"ray: node {_short(info['node_id'])} is {label}, not {self._label}: not used")
            return
        self._infos[slot] = info
        self._slots.append(slot)
        free.append(slot)
        self._event(f"ray: +1 slot on {self._where(info)}; {len(self._slots)} slot(s)")

    def _drop(self, slot: Any, free: list[Any], why: str) -> None:
        """Forget a dead slot; its visit in flight, if any, comes back as an error and is retried."""
        if slot not in self._slots:
            return
        self._slots.remove(slot)
        if slot in free:
            free.remove(slot)
        info = self._infos.pop(slot, None)
        self._kill(slot)
        where = self._where(info) if info else "a node"
        self._event(f"ray: lost the slot on {where} ({why}); {len(self._slots)} slot(s) left")

    def _kill(self, slot: Any) -> None:
        try:
            self.ray.kill(slot, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _event(self, line: str) -> None:
        if self.on_event is not None:
            self.on_event(line)

    def _where(self, info: dict[str, Any]) -> str:
        node = self._nodes.get(info["node_id"], {})
        cores = f", cores {','.join(map(str, info['affinity']))}" if info.get("affinity") else ""
        return f"node {_short(info['node_id'])} ({info['host']}, {node.get('ip', '?')}{cores})"

    # -- what is in use ------------------------------------------------------------------

    @property
    def workers(self) -> int:
        """Slots in use."""
        return len(self._slots)

    @property
    def starting(self) -> int:
        """Slots still starting (they join when they have)."""
        return len(self._pending)

    def slot_pids(self) -> list[int]:
        """Process ids of the slots (for tests that kill one)."""
        return [self._infos[s]["pid"] for s in self._slots if s in self._infos]

    def slot_lines(self) -> list[str]:
        """One line per node in use: its id, host, address, slots and their cores."""
        by_node: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for s in self._slots:
            by_node[self._infos[s]["node_id"]].append(self._infos[s])
        lines = []
        for node_id, infos in by_node.items():
            node = self._nodes.get(node_id, {})
            cores = [",".join(map(str, i["affinity"])) for i in infos if i.get("affinity")]
            lines.append(
                f"node {_short(node_id)} {infos[0]['host']} ({node.get('ip', '?')}): {len(infos)} slot(s)"
                + (f", cores {' | '.join(cores)}" if cores else "")
            )
        return lines

    def provenance(self) -> dict[str, Any]:
        """The first slot's provenance, with the executor, Ray's version and every slot's host."""
        infos = [self._infos[s] for s in self._slots if s in self._infos]
        first = dict(infos[0]["provenance"]) if infos else {}
        first["executor"] = "ray"
        first["ray_version"] = self.ray.__version__
        first["ray_slots"] = [
            {
                "host": i["host"],
                "node_id": i["node_id"],
                "affinity": i["affinity"],
                "cpu_model": i["provenance"].get("cpu_model"),
                "gpu_uuid": i["provenance"].get("gpu_uuid"),
            }
            for i in infos
        ]
        return first

    # -- measuring -----------------------------------------------------------------------

    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Measure the jobs on the slots, one in flight per slot, yielding each as it completes."""
        free = list(self._slots)
        in_flight: dict[Any, tuple[Job, Any]] = {}
        again: collections.deque[Job] = collections.deque()
        attempts: collections.Counter[Job] = collections.Counter()
        exhausted, next_poll, slotless_since = False, time.monotonic() + self.poll_s, None
        while True:
            if time.monotonic() >= next_poll:
                self._adjust(free)
                next_poll = time.monotonic() + self.poll_s
            while free and (again or not exhausted):
                job = again.popleft() if again else next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                slot = free.pop()
                in_flight[slot.measure.remote(job.config, job.protocol)] = (job, slot)
            if not in_flight and exhausted and not again:
                return
            slotless_since = self._check_slotless(in_flight, slotless_since)
            waitable = [*in_flight, *self._pending]
            if not waitable:
                time.sleep(self.poll_s)
                continue
            ready, _ = self.ray.wait(waitable, num_returns=1, timeout=self.poll_s)
            for ref in ready:
                if ref in self._pending:
                    self._slot_started(ref, free)
                    continue
                job, slot = in_flight.pop(ref)
                m = self._result(ref, job, slot, free, attempts)
                if m is None:
                    again.append(job)
                else:
                    yield job, m

    def _check_slotless(self, in_flight: dict[Any, Any], since: float | None) -> float | None:
        """When the campaign has no slot and work left: since when; an error past ``start_timeout_s``."""
        if self._slots or in_flight:
            return None
        now = time.monotonic()
        if since is not None and now - since > self.start_timeout_s:
            raise RuntimeError(
                f"no Ray worker slot for {self.start_timeout_s:.0f} s (every node lost?); what was "
                "measured is stored: run the same command to resume"
            )
        return now if since is None else since

    def _result(
        self, ref: Any, job: Job, slot: Any, free: list[Any], attempts: collections.Counter[Job]
    ) -> Measurement | None:
        """A visit's measurement, or ``None`` when its slot died and it is to be submitted again."""
        ray = self.ray
        died = (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.LocalRayletDiedError,
        )
        try:
            m = ray.get(ref)
        except died as e:
            self.retried += 1
            self._drop(slot, free, f"{type(e).__name__}: its worker or node died")
            self._adjust(free)  # a replacement where the node is still alive
            attempts[job] += 1
            if attempts[job] <= self.max_retries:
                return None
            return Measurement(
                status="crash",
                message=f"Ray worker died {attempts[job]} times measuring this config: {_last_line(e)}",
            )
        except ray.exceptions.RayTaskError as e:  # a bug of ours in the slot, not the config's fault
            m = Measurement(status="error", message=f"Ray task failed: {_last_line(e)}")
        if slot in self._slots:
            free.append(slot)
            self.visits_by_node[self._infos[slot]["node_id"]] += 1
        return m

    def close(self) -> None:
        """Close every slot's backend (restoring GPU clocks), then leave the cluster."""
        ray = self.ray if hasattr(self, "ray") else None
        if ray is None or not ray.is_initialized():
            return
        closing = []
        for s in self._slots:
            try:
                closing.append(s.close.remote())
            except Exception:  # noqa: BLE001 - a dead slot has nothing to close
                pass
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        for s in [*self._slots, *self._pending.values()]:
            self._kill(s)
        self._slots.clear()
        self._pending.clear()
        if self._started_here:
            ray.shutdown()


def _short(node_id: str) -> str:
    return node_id[:8]


def _last_line(e: BaseException) -> str:
    # Ray's messages carry the remote traceback first; the cause is on the last line.
    s = str(e).strip()
    return s.splitlines()[-1][:300] if s else type(e).__name__
