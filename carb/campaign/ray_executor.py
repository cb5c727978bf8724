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
- A slot that dies (worker killed, node lost) is replaced by a new one and its visit is
  submitted again, up to ``max_retries`` times; after that the config is stored with
  status ``crash`` and the reason, like any other failure. Nothing is stored twice: the
  store is written by the driver only, once per visit.
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
import uuid
from typing import Any, Iterator

from carb.campaign.executor import Executor, Job, _label
from carb.measure.base import Measurement, Protocol

__all__ = ["RayExecutor", "mask_broken_amdsmi"]


def mask_broken_amdsmi() -> str | None:
    """Make ``import amdsmi`` an ImportError here when the binding is installed but unusable.

    Returns why (``None`` when it imports, or is absent).

    Zeus, carb's energy layer, installs AMD's ``amdsmi`` binding; without ROCm's
    ``libamd_smi.so`` its import raises ``KeyError``, and Ray's AMD-GPU probe, which catches
    only ImportError, then fails ``ray.init`` on every machine without ROCm. Masked, Ray
    sees no AMD GPU there, which is the truth. Nodes started with ``ray start`` run Ray's
    own code: there, ``pip uninstall amdsmi`` (README, Ray).
    """
    import sys

    if "amdsmi" in sys.modules:
        return None
    import contextlib
    import io

    try:
        # the binding prints its loader's complaints to stdout: keep them out of our output
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import amdsmi  # noqa: F401
    except ImportError:
        return None
    except Exception as e:  # noqa: BLE001 - KeyError/OSError from a binding without its library
        sys.modules["amdsmi"] = None  # type: ignore[assignment]
        return f"amdsmi unusable here ({type(e).__name__}: {e}); masked for Ray"
    return None


def _import_ray() -> Any:
    mask_broken_amdsmi()
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'carb[ray]'") from None
    return ray


class _Slot:
    """Ray actor body: one open backend on one device of one node."""

    def __init__(self, device: str, opts: dict[str, Any], pin_dir: str | None, threads: int) -> None:
        import sys

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
        self.backend = get_backend(device, **opts)
        self.backend.__enter__()

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
        import ray

        return {
            "host": self.host,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "affinity": self.affinity,
            "provenance": self.backend.provenance(),
        }

    def measure(self, config: Any, protocol: Protocol | None) -> Measurement:
        m = self.backend.measure(config) if protocol is None else self.backend.measure(config, protocol=protocol)  # type: ignore[call-arg]
        m.extra = {**m.extra, "ray_host": self.host}
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
        workers: use at most this many slots (default: every slot the cluster has).
        max_retries: times a visit is submitted again after its slot died.
        start_timeout_s: how long to wait for the slots to start. Units: s.
        init_kwargs: extra arguments of ``ray.init`` (e.g. ``num_cpus`` for a local
            cluster).
        backend_opts: extra backend options (see :func:`carb.measure.get_backend`).

    Raises:
        RuntimeError: Ray is not installed, the cluster cannot be reached, it has no slot
            for the device, or its slots are different platforms (one campaign measures
            one platform: run one per GPU model).
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
        init_kwargs: dict[str, Any] | None = None,
        backend_opts: dict[str, Any] | None = None,
    ) -> None:
        d = device.strip().lower()
        if d not in ("cpu", "cuda"):
            raise ValueError(
                f"--executor ray measures on 'cpu' or 'cuda' slots, not {device!r} "
                "(Ray assigns each GPU slot its device)"
            )
        if threads < 1 or (workers is not None and workers < 1) or max_retries < 0:
            raise ValueError("threads and workers must be >= 1, max_retries >= 0")
        self.ray = _import_ray()
        self.device, self.protocol, self.threads = d, protocol, threads
        self.max_retries, self.start_timeout_s = max_retries, start_timeout_s
        opts: dict[str, Any] = {"protocol": protocol, **(backend_opts or {})}
        if d == "cpu":
            opts["threads"] = threads
        else:
            opts["lock_clocks"] = lock_clocks
        self._opts = opts
        # per-campaign directory of core-block locks, the same path on every node
        self._pin_dir = os.path.join(tempfile.gettempdir(), f"carb-ray-{uuid.uuid4().hex[:12]}")
        self.retried = 0
        self._slots: list[Any] = []
        self._infos: dict[Any, dict[str, Any]] = {}
        self._started_here = False
        try:
            self._connect(address, init_kwargs or {})
            self.slots_total = self._count_slots()
            n = min(self.slots_total, workers) if workers else self.slots_total
            if n < 1:
                what = "GPU" if d == "cuda" else f"{threads} free CPU(s) on one node"
                raise RuntimeError(f"the Ray cluster has no worker slot with {what}")
            for _ in range(n):
                self._slots.append(self._new_slot())
            self._await_slots(self._slots)
        except BaseException:
            self.close()
            raise
        labels = {_label(d, i["provenance"]) for i in self._infos.values()}
        if len(labels) > 1:
            self.close()
            raise RuntimeError(
                f"the Ray cluster's slots are different platforms ({', '.join(sorted(labels))}): "
                "run one campaign per platform"
            )

    # -- cluster -------------------------------------------------------------------------

    def _connect(self, address: str | None, init_kwargs: dict[str, Any]) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False, **init_kwargs}
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RuntimeError(
                f"cannot reach the Ray cluster at {address or 'RAY_ADDRESS/local'}: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
        self._started_here = True

    def _count_slots(self) -> int:
        """Slots the alive nodes can hold: whole GPUs, or blocks of ``threads`` CPUs per node."""
        total = 0
        for node in self.ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            total += int(res.get("GPU", 0)) if self.device == "cuda" else int(res.get("CPU", 0) // self.threads)
        return total

    def _new_slot(self) -> Any:
        cls = self.ray.remote(_Slot).options(
            num_cpus=self.threads if self.device == "cpu" else 1,
            num_gpus=1 if self.device == "cuda" else 0,
            max_restarts=0,
            max_concurrency=1,
            scheduling_strategy="SPREAD",
        )
        return cls.remote(self.device, self._opts, self._pin_dir, self.threads)

    def _await_slots(self, slots: list[Any]) -> None:
        refs = {s.info.remote(): s for s in slots}
        ready, waiting = self.ray.wait(list(refs), num_returns=len(refs), timeout=self.start_timeout_s)
        if waiting:
            raise RuntimeError(
                f"{len(waiting)} of {len(refs)} Ray worker slots did not start within "
                f"{self.start_timeout_s:.0f} s (not enough free resources?)"
            )
        for ref in ready:
            try:
                self._infos[refs[ref]] = self.ray.get(ref)
            except self.ray.exceptions.RayError as e:
                raise RuntimeError(f"a Ray worker slot failed to start: {_last_line(e)}") from None

    @property
    def workers(self) -> int:
        """Slots in use."""
        return len(self._slots)

    def slot_pids(self) -> list[int]:
        """Process ids of the slots (for tests that kill one)."""
        return [self._infos[s]["pid"] for s in self._slots if s in self._infos]

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
                "gpu_uuid": i["provenance"].get("gpu_uuid"),
            }
            for i in infos
        ]
        return first

    # -- measuring -----------------------------------------------------------------------

    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Measure the jobs on the slots, one in flight per slot, yielding each as it completes."""
        ray = self.ray
        died = (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.LocalRayletDiedError,
        )
        free = list(self._slots)
        in_flight: dict[Any, tuple[Job, Any]] = {}
        again: collections.deque[Job] = collections.deque()
        attempts: collections.Counter[Job] = collections.Counter()
        exhausted = False
        while True:
            while free and (again or not exhausted):
                if again:
                    job = again.popleft()
                else:
                    try:
                        job = next(jobs)
                    except StopIteration:
                        exhausted = True
                        break
                slot = free.pop()
                in_flight[slot.measure.remote(job.config, job.protocol)] = (job, slot)
            if not in_flight:
                if again or not exhausted:  # work left, but every slot died for good
                    raise RuntimeError(
                        "every Ray worker slot died and none could be started again; what was "
                        "measured is stored: run the same command to resume"
                    )
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                job, slot = in_flight.pop(ref)
                try:
                    m = ray.get(ref)
                except died as e:
                    self.retried += 1
                    new = self._replace(slot)
                    if new is not None:
                        free.append(new)
                    attempts[job] += 1
                    if attempts[job] <= self.max_retries:
                        again.append(job)
                        continue
                    m = Measurement(
                        status="crash",
                        message=f"Ray worker died {attempts[job]} times measuring this config: {_last_line(e)}",
                    )
                except ray.exceptions.RayTaskError as e:  # a bug of ours in the slot, not the config's fault
                    free.append(slot)
                    m = Measurement(status="error", message=f"Ray task failed: {_last_line(e)}")
                else:
                    free.append(slot)
                yield job, m

    def _replace(self, dead: Any) -> Any | None:
        """A new slot instead of a dead one, on whatever node has room now.

        ``None`` (and one slot fewer) when none starts within ``start_timeout_s``.
        """
        try:
            self.ray.kill(dead, no_restart=True)
        except Exception:
            pass  # already gone
        self._infos.pop(dead, None)
        i = self._slots.index(dead)
        new = self._new_slot()
        ref = new.info.remote()
        ready, _ = self.ray.wait([ref], timeout=self.start_timeout_s)
        try:
            if not ready:
                raise TimeoutError
            self._infos[new] = self.ray.get(ref)
        except (TimeoutError, self.ray.exceptions.RayError):
            try:
                self.ray.kill(new, no_restart=True)
            except Exception:
                pass
            del self._slots[i]
            return None
        self._slots[i] = new
        return new

    def close(self) -> None:
        """Close every slot's backend (restoring GPU clocks), then leave the cluster."""
        ray = self.ray if hasattr(self, "ray") else None
        if ray is None or not ray.is_initialized():
            return
        closing = []
        for s in self._slots:
            try:
                closing.append(s.close.remote())
            except Exception:
                pass
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        for s in self._slots:
            try:
                ray.kill(s, no_restart=True)
            except Exception:
                pass
        self._slots.clear()
        if self._started_here:
            ray.shutdown()


def _last_line(e: BaseException) -> str:
    # Ray's messages carry the remote traceback first; the cause is on the last line.
    s = str(e).strip()
    return s.splitlines()[-1][:300] if s else type(e).__name__
