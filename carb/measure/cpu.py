"""CPU backend: latency, peak resident memory and (where RAPL is readable) energy.

Each config runs in a FRESH worker process forked from a ``multiprocessing`` forkserver
that has ``torch`` and :mod:`carb.families.arch` preloaded, so a new process per config costs
milliseconds rather than a torch import, and no config's allocations or thread pools leak
into the next one's figures. The parent only waits: an exception, an out-of-memory, a
timeout (the worker is killed) or a crash (a signal, ``os._exit``) comes back as a
:class:`~carb.measure.base.Measurement` with a non-``ok`` status; :meth:`CpuBackend.measure`
never raises for those.

Here: the backend (the parent's side). The worker's side, a typed job
(:class:`~carb.measure._cpu_worker.CpuJob`) and its steps, lives in
:mod:`carb.measure._cpu_worker` (a config run by ONNX Runtime, in :mod:`carb.measure._onnx_worker`);
the process facts it reads, in :mod:`carb.measure._cpu_process`; the RAPL zones, in
:mod:`carb.measure._rapl`. Every name stays importable from here.

Definitions
-----------
latency_ms
    Per-forward wall time of the whole batch, from ``time.perf_counter_ns`` around a timed
    sample of ``k`` forwards (``k`` from ``Protocol.min_sample_s``), divided by ``k``, under
    ``torch.inference_mode()`` with ``threads`` intra-op and inter-op threads pinned in the
    worker. The sampling follows :mod:`carb.measure.protocol`; the CI stopping rule applies
    to latency only (RAPL counts the whole package, other tenants included, so its spread
    says little about this config).
memory_mb
    Peak resident set of inference: ``VmHWM - baseline``, where ``baseline`` is the
    worker's ``VmRSS`` after imports and before the model exists, and the high-water mark
    is reset (``/proc/self/clear_refs`` <- ``5``, Linux >= 4.0) once the model is built and
    cast to its precision (freed heap handed back with glibc ``malloc_trim``), so the peak
    covers the ready model's weights plus everything inference touches (activations,
    allocator and kernel-library pages), not the fp32 build of an fp16 model. The worker is
    forked, and Linux copies no page-table entries of file mappings at ``fork``: the
    library pages its parent had mapped would count again as the worker touches them
    (several MB a network). So before the baseline the worker maps the pages its parent
    has mapped (``/proc/<ppid>/pagemap``, ``madvise(MADV_POPULATE_READ)``), and the peak is
    what the network adds to a process that imported torch, as a fresh process measures it;
    ``extra["memory_prefault_mb"]`` is that mapping, ``None`` where the parent's page map
    cannot be read (then those pages count: an upper bound). Units: MB
    (10**6 bytes). Where ``clear_refs`` is unavailable
    it falls back to ``ru_maxrss`` (which cannot be reset, so it includes the build and
    is an upper bound); ``extra["memory_method"]`` says which.
energy_j, energy_gross_j, energy_pkg_j, energy_dram_j
    From RAPL (Intel, and AMD Zen through the same ``intel-rapl`` powercap driver): the
    zones are found through Zeus (``zeus.device.cpu``: the package zone of each socket
    and its ``dram`` sub-zone where the platform has one), and their ``energy_uj``
    counters are read around each timed sample, wrap-around handled with
    ``max_energy_range_uj`` (:func:`rapl_delta_uj`). Per forward: ``energy_pkg_j`` =
    package delta / k, ``energy_dram_j`` = DRAM delta / k (``None`` without a DRAM zone),
    both gross and kept in ``extra`` (the store makes columns of them); ``energy_gross_j``
    = package + DRAM (what inference costs the CPU side, memory traffic included);
    ``energy_j`` = gross - idle power (package + DRAM, measured at start-up) x latency.
    Units: J. Where RAPL is absent or unreadable (VMs, non-root since Linux 5.10), energy
    is ``None`` and ``energy_missing_reason`` says why; nothing is estimated.

    Whose is what: Zeus finds the zones, their names, ranges and permission errors
    (``RAPLCPU``/``get_cpus``, incl. the container mount ``/zeus_sys``); the reads are
    ours, because Zeus's ``RAPLFile.read`` starts a spawned wrap-around polling process
    per counter on first use, which would run on the CPU being measured and once in every
    fresh worker. Our windows (seconds) are far shorter than a counter's wrap period
    (minutes at hundreds of watts), so one wrap at most happens and is handled
    arithmetically. The ``zeusd`` daemon path (RAPL without root) is not supported here.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any, Sequence

from ._common import FAULTS, builder_of, host_facts, one_line, read_text, unguarded_main_script, wait_reply
from ._cpu_process import (
    ALLOCATORS,
    THP_PATH,
    _cpu_freq_mhz,
    _glibc,
    _retain_freed_memory,  # noqa: F401 - kept importable from here (benchmarks)
    thp_mode,
)
from ._cpu_worker import CpuJob, _cpu_child, _noop  # noqa: F401 - _cpu_child kept importable from here (tests)
from ._onnx_worker import child_of, runtime_version
from ._rapl import Rapl, rapl_delta_uj
from .base import Backend, ConfigLike, Measurement, Protocol
from .protocol import check_protocol

__all__ = [
    "CpuBackend",
    "CpuJob",
    "Rapl",
    "rapl_delta_uj",
    "MEMORY_DEFINITION",
    "MEMORY_BASELINE",
    "KERNEL_ENV",
    "ALLOCATORS",
    "THP_PATH",
    "thp_mode",
]

#: how a worker's memory baseline is taken, recorded in the ``meta`` of models fitted on its
#: measurements: the forkserver's mapped library pages mapped into the worker first
MEMORY_BASELINE = "parent pages mapped"
MEMORY_DEFINITION = (
    "peak RSS of a fresh worker process during inference (VmHWM, reset once the model "
    "is built and cast) minus its VmRSS after imports and before the model exists, the "
    "forkserver's mapped library pages mapped into the worker before that baseline "
    "(what the network adds to a process that imported torch); MB = 1e6 bytes"
)

#: environment variables that cap the kernels torch and oneDNN dispatch to (an AVX-512 CPU run on
#: AVX2 kernels): recorded with every run, as the kernels a row was measured with depend on them
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")

# "__main__" first: the forkserver imports the main script once, so that each worker
# inherits it instead of re-running it (multiprocessing re-imports the main module).
# carb.measure.cpu brings the worker (carb.measure._cpu_worker) along.
_PRELOAD = ["__main__", "torch", "carb.families.arch", "carb.measure.cpu"]


# --------------------------------------------------------------------------- backend


class CpuBackend(Backend):
    """Measures configs on this machine's CPU, one fresh worker process per config.

    Args:
        threads: intra-op and inter-op threads of the worker (``torch.set_num_threads``,
            ``torch.set_num_interop_threads``); recorded per config and in provenance.
        protocol: the repeat/stop protocol; default ``Protocol.default_for("cpu")``.
        affinity: CPUs to pin the worker to (``os.sched_setaffinity``); ``None`` keeps
            the parent's.
        idle_s: seconds of idle RAPL sampling at start-up for the idle package power
            (only when RAPL is readable). Units: s.
        allocator: how the worker's C allocator keeps freed memory (:data:`ALLOCATORS`):
            ``default`` (glibc's rules) or ``retain`` (no page faults after the first
            forward); recorded per config and in provenance.
        _fault: TEST-ONLY. Makes every worker fail: ``raise``, ``oom``, ``unsupported``,
            ``exit`` (``os._exit(3)``), ``kill`` (SIGKILL), ``segv`` (SIGSEGV) or ``sleep``
            (to hit the timeout). Never set it outside tests.
        _arch: TEST-ONLY. Module providing ``build`` and ``dtype_of`` (default ``carb.families.arch``).

    See the module docstring for the definitions of latency, memory and energy.
    """

    device = "cpu"

    def __init__(
        self,
        threads: int = 1,
        protocol: Protocol | None = None,
        affinity: Sequence[int] | None = None,
        idle_s: float = 1.0,
        allocator: str = "default",
        _fault: str | None = None,
        _arch: str = "carb.families.arch",
    ) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads: {threads!r} must be an integer >= 1")
        if _fault is not None and _fault not in FAULTS:
            raise ValueError(f"_fault: {_fault!r} not one of {', '.join(FAULTS)}")
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator: unknown value {allocator!r} (expected {' or '.join(ALLOCATORS)})")
        if allocator == "retain" and not _glibc():
            raise ValueError("allocator 'retain' needs glibc (mallopt); this Python's C library is not glibc")
        problem = unguarded_main_script()  # before the idle power is read: no machine work for a script refused
        if problem:
            raise RuntimeError(problem)
        self.allocator = allocator
        self.threads = threads
        self.protocol = check_protocol(protocol or Protocol.default_for("cpu"))
        self.affinity = sorted(int(c) for c in affinity) if affinity else None
        self._fault = _fault
        self._arch = _arch
        #: a :class:`~carb.measure.sentinel.Pairing` to time in alternation with every config
        #: (set by a campaign whose speed sentinel pairs); ``None``: configs alone
        self.paired_sentinel: Any = None
        self.rapl = Rapl.discover()
        self.idle_power_w: float | None = None
        self.idle_power_by_domain_w: dict[str, float | None] = {}
        if self.rapl.available:
            self.idle_power_w = self._idle_power(idle_s)
        self._ctx = multiprocessing.get_context("forkserver")
        # Preloading makes each fork a fresh process with torch already imported; it only
        # takes effect if this program has not started the forkserver yet.
        self._ctx.set_forkserver_preload(_PRELOAD)
        from multiprocessing import forkserver

        forkserver.ensure_running()
        # ensure_running returns before the preload finishes: one no-op child waits for it,
        # so the torch import is paid here and not inside the first config's timeout
        p = self._ctx.Process(target=_noop, daemon=True)
        p.start()
        p.join(120)

    def _idle_power(self, seconds: float) -> float | None:
        """Package + DRAM power with nothing of ours running. Units: W."""
        try:
            e0, t0 = self.rapl.read_uj(), time.perf_counter()
            time.sleep(max(seconds, 0.1))
            e1, t1 = self.rapl.read_uj(), time.perf_counter()
            pkg_j, dram_j = self.rapl.delta_j(e0, e1)
            self.idle_power_by_domain_w = {
                "package": pkg_j / (t1 - t0),
                "dram": None if dram_j is None else dram_j / (t1 - t0),
            }
            return (pkg_j + (dram_j or 0.0)) / (t1 - t0)
        except OSError as e:
            self.rapl = Rapl(reason=f"RAPL read failed ({one_line(e)})")
            return None

    def provenance(self) -> dict[str, Any]:
        """Device, software and protocol facts (JSON-serialisable)."""
        import torch

        facts = host_facts()
        facts.update(
            device="cpu",
            device_name=facts["cpu_model"],
            threads=self.threads,
            interop_threads=self.threads,
            affinity=self.affinity or sorted(os.sched_getaffinity(0)),
            # library lines only: the thread counts in parallel_info() are the parent's
            torch_parallel=[
                ln.strip()
                for ln in torch.__config__.parallel_info().splitlines()
                if ln.strip() and "get_num" not in ln and "get_max_threads" not in ln
            ][:6],
            mkldnn=bool(torch.backends.mkldnn.is_available()),
            onnxruntime_version=runtime_version(),  # the runtime of onnx rows (carb.measure._onnx_worker)
            energy_sensor={
                "kind": "rapl (zones found through zeus.device.cpu)",
                "available": self.rapl.available,
                "reason": self.rapl.reason,
                "domains": list(self.rapl.domains),
                "dram_domains": [d for d in self.rapl.dram if d is not None],
                "energy_j": "package + dram (where a dram zone exists), net of idle",
            },
            idle_power_w=self.idle_power_w,
            idle_power_by_domain_w=self.idle_power_by_domain_w or None,
            memory_definition=MEMORY_DEFINITION,
            memory_method=("clear_refs" if os.path.exists("/proc/self/clear_refs") else "ru_maxrss"),
            transparent_hugepage=thp_mode(),
            allocator=self.allocator,
            malloc_env={
                k: v for k, v in os.environ.items() if k.startswith(("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD"))
            },
            kernel_env={k: v for k, v in os.environ.items() if k in KERNEL_ENV},
            protocol=self.protocol.to_dict(),
            ci_method="distribution-free binomial order statistics, 95%",
        )
        freq, src = _cpu_freq_mhz(self.affinity or sorted(os.sched_getaffinity(0)))
        facts.update(
            cpu_freq_mhz=freq,
            cpu_freq_source=src,
            cpu_governor=read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        )
        return facts

    def measure(self, config: ConfigLike, protocol: Protocol | None = None) -> Measurement:
        """Measure one config of any registered family in a fresh worker (see :meth:`Backend.measure`)."""
        protocol = check_protocol(protocol) if protocol is not None else self.protocol
        t0 = time.perf_counter()
        job = self._job(config, protocol)
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=child_of(config), args=(send, job), daemon=True, name=f"carb-cpu-{config.config_id}"
        )
        try:
            proc.start()
        except Exception as e:  # e.g. fork failing for lack of memory
            recv.close()
            send.close()
            return Measurement(
                status="error",
                message=f"could not start worker: {one_line(e)}",
                wall_s=time.perf_counter() - t0,
                extra={"threads": self.threads},
            )
        send.close()  # our copy: EOF on recv once the child's copy closes too
        result, failure = _wait(proc, recv, deadline=t0 + protocol.timeout_s)
        recv.close()
        wall = time.perf_counter() - t0
        if failure is not None:
            status, message = failure
            if status == "timeout":
                message = f"no result within timeout_s={protocol.timeout_s:g} s; worker killed"
            return Measurement(
                status=status,
                message=message,
                wall_s=wall,
                energy_missing_reason=self.rapl.reason,
                extra={"threads": self.threads},
            )
        return self._to_measurement(result, wall)

    def _job(self, config: ConfigLike, protocol: Protocol) -> CpuJob:
        """The worker's job: the config, with the paired sentinel unless it is the sentinel itself."""
        paired = (
            self.paired_sentinel if self.paired_sentinel is not None and config != self.paired_sentinel.config else None
        )
        return CpuJob(
            config=config,
            protocol=protocol,
            threads=self.threads,
            build=builder_of(config),
            arch=self._arch,
            affinity=self.affinity,
            allocator=self.allocator,
            paired=paired,
            paired_build=None if paired is None else builder_of(paired.config),
            rapl=self.rapl if self.rapl.available else None,
            idle_power_w=self.idle_power_w,
            fault=self._fault,
        )

    def _to_measurement(self, r: dict[str, Any], wall: float) -> Measurement:
        extra = dict(r.get("extra") or {})
        if r["status"] != "ok":
            return Measurement(
                status=r["status"],
                message=r.get("message", ""),
                wall_s=wall,
                energy_missing_reason=self.rapl.reason,
                extra=extra,
            )
        energy, gross = r.get("energy_j"), r.get("energy_gross_j")
        reason = None
        if energy is None:
            reason = self.rapl.reason or (
                "idle power unknown: net energy not computed" if gross else "RAPL gave no reading"
            )
        return Measurement(
            status="ok",
            latency_ms=r["latency_ms"],
            energy_j=energy,
            energy_gross_j=gross,
            memory_mb=r["memory_mb"],
            energy_missing_reason=reason,
            timed_s=r["timed_s"],
            wall_s=wall,
            extra=extra,
        )

    def close(self) -> None:
        """Nothing to restore: each worker ends with its config."""


def _wait(proc: Any, conn: Any, deadline: float) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """Wait for the worker's result until ``deadline`` (perf_counter seconds).

    Returns ``(result, None)`` or ``(None, (status, message))`` for a timeout or a crash;
    the worker is killed on timeout and always reaped.
    """
    try:
        return wait_reply(proc, conn, deadline)
    finally:
        proc.join(5)
        if proc.is_alive():  # a result arrived but the worker hangs on exit
            proc.kill()
            proc.join(5)
