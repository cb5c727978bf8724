"""CPU backend: latency, peak resident memory and (where RAPL is readable) energy.

Each config runs in a FRESH worker process forked from a ``multiprocessing`` forkserver
that has ``torch`` and :mod:`carb.families.arch` preloaded, so a new process per config costs
milliseconds rather than a torch import, and no config's allocations or thread pools leak
into the next one's figures. The parent only waits: an exception, an out-of-memory, a
timeout (the worker is killed) or a crash (a signal, ``os._exit``) comes back as a
:class:`~carb.measure.base.Measurement` with a non-``ok`` status; :meth:`CpuBackend.measure`
never raises for those.

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
    allocator and kernel-library pages), not the fp32 build of an fp16 model. Units: MB (10**6 bytes). Where ``clear_refs`` is unavailable
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

import gc
import glob
import multiprocessing
import os
import resource
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ._common import FAULTS, builder_of, classify, host_facts, inject_fault, one_line, read_text, wait_reply
from .base import Backend, Measurement, Protocol
from .protocol import check_protocol, iters_per_sample, run_samples, warm_up
from carb.families.resnet import Config

__all__ = ["CpuBackend", "Rapl", "rapl_delta_uj", "MEMORY_DEFINITION"]

MEMORY_DEFINITION = ("peak RSS of a fresh worker process during inference (VmHWM, reset once the model "
                     "is built and cast) minus its VmRSS after imports and before the model exists; MB = 1e6 bytes")

#: warm-up of a paired sentinel (its first calls pay one-off costs)
SENTINEL_WARMUP = Protocol(warmup=3, warmup_s=0.02)

# "__main__" first: the forkserver imports the main script once, so that each worker
# inherits it instead of re-running it (multiprocessing re-imports the main module).
_PRELOAD = ["__main__", "torch", "carb.families.arch", "carb.measure.cpu"]


# --------------------------------------------------------------------------- RAPL


def rapl_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two RAPL ``energy_uj`` readings, handling one wrap-around.

    The counter counts up to ``max_energy_range_uj`` and restarts at 0. Units: uJ.
    """
    if after >= before:
        return after - before
    return after + (max_range_uj - before)


@dataclass
class Rapl:
    """The RAPL energy zones of this machine (absent hardware is an object too).

    Attributes:
        domains: sysfs directories of the package zones, one per socket (Zeus's
            ``RAPLCPU``; a ``psys`` platform zone is left out: it contains the packages).
        max_range_uj: each package zone's ``max_energy_range_uj``. Units: uJ.
        dram: each package's ``dram`` sub-zone directory, or ``None`` where it has none.
        dram_max_range_uj: the DRAM zones' ranges (``None`` where absent). Units: uJ.
        reason: why energy is unavailable (``None`` when readable).
    """

    domains: tuple[str, ...] = ()
    max_range_uj: tuple[int, ...] = ()
    dram: tuple[str | None, ...] = ()
    dram_max_range_uj: tuple[int | None, ...] = ()
    reason: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.domains) and self.reason is None

    @property
    def has_dram(self) -> bool:
        return any(d is not None for d in self.dram)

    @classmethod
    def discover(cls, root: str | None = None) -> "Rapl":
        """Find the readable zones through Zeus.

        Args:
            root: a powercap ``intel-rapl`` directory to read instead of the machine's
                (tests use a fake tree); ``None``: ``zeus.device.cpu.get_cpus()``.
        """
        try:
            from zeus.device.cpu.common import ZeusCPUInitError, ZeusCPUNoPermissionError
            from zeus.device.cpu.rapl import RAPLCPU
        except ImportError as e:  # pragma: no cover - zeus is a dependency
            return cls(reason=f"zeus not importable ({one_line(e)})")
        try:
            if root is None:
                from zeus.device.cpu import get_cpus

                cpus = list(get_cpus().cpus)
            else:
                if not os.path.isdir(root):
                    return cls(reason=f"no {root} (RAPL powercap driver absent)")
                idx = sorted(int(os.path.basename(d).split(":")[1]) for d in glob.glob(os.path.join(root, "intel-rapl:*"))
                             if os.path.basename(d).count(":") == 1)
                cpus = [RAPLCPU(i, root) for i in idx]
        except ZeusCPUNoPermissionError:
            return cls(reason="RAPL energy_uj not readable (root only since Linux 5.10)")
        except ZeusCPUInitError:
            return cls(reason="no RAPL powercap zones (/sys/class/powercap/intel-rapl absent: "
                              "a VM, a non-Linux host, or the driver is not loaded)")
        except Exception as e:  # noqa: BLE001 - a malformed zone: unreadable, never fatal
            return cls(reason=f"RAPL zones unreadable ({one_line(e)})")
        pkgs = [c for c in cpus if getattr(c, "rapl_file", None) is not None
                and not c.rapl_file.name.startswith("psys")]
        if not pkgs:
            why = ("RAPL through the zeusd daemon is not supported by carb's per-sample reads"
                   if cpus else "no RAPL package zone")
            return cls(reason=why)
        return cls(domains=tuple(c.rapl_file.path for c in pkgs),
                   max_range_uj=tuple(int(c.rapl_file.max_energy_range_uj) for c in pkgs),
                   dram=tuple(c.dram.path if c.dram is not None else None for c in pkgs),
                   dram_max_range_uj=tuple(int(c.dram.max_energy_range_uj) if c.dram is not None else None
                                           for c in pkgs))

    def _zones(self) -> list[tuple[str, int]]:
        zones = list(zip(self.domains, self.max_range_uj))
        zones += [(d, int(m)) for d, m in zip(self.dram, self.dram_max_range_uj) if d is not None and m is not None]
        return zones

    def read_uj(self) -> list[int]:
        """Current counter of each package zone, then of each DRAM zone. Units: uJ."""
        out = []
        for z, _ in self._zones():
            with open(os.path.join(z, "energy_uj")) as f:
                out.append(int(f.read()))
        return out

    def delta_j(self, before: Sequence[int], after: Sequence[int]) -> tuple[float, float | None]:
        """Energy between two :meth:`read_uj` readings: ``(package_j, dram_j)``, summed over
        sockets; ``dram_j`` is ``None`` without DRAM zones. Units: J."""
        ranges = [m for _, m in self._zones()]
        d = [rapl_delta_uj(b, a, m) / 1e6 for b, a, m in zip(before, after, ranges)]
        n = len(self.domains)
        return sum(d[:n]), (sum(d[n:]) if len(d) > n else None)


# --------------------------------------------------------------------------- process facts


def _status_kb(*keys: str) -> dict[str, int]:
    """Fields of /proc/self/status in kB (missing ones omitted)."""
    out: dict[str, int] = {}
    text = read_text("/proc/self/status") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in keys:
            out[key] = int(value.split()[0])
    return out


def _reset_hwm() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0). True on success."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_kb() -> int:
    """Current resident set. Units: kB."""
    kb = _status_kb("VmRSS").get("VmRSS")
    if kb is not None:
        return kb
    statm = read_text("/proc/self/statm")
    if statm:
        return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux; best we have


#: where Linux says how transparent huge pages are used
THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_PATH) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``: the
    bracketed word of ``path``), or ``None`` where it cannot be read. Recorded because a
    process's resident-set peaks depend on it (a huge page makes 2 MB resident at once): one
    2-thread campaign's memory carried an offset that its later re-measurement lacked, with no
    recorded cause (benchmarks/RESULTS.md, issue 18)."""
    text = read_text(path)
    if not text:
        return None
    words = [w[1:-1] for w in text.split() if w.startswith("[") and w.endswith("]")]
    return words[0] if words else None


def _cpu_freq_mhz(cpus: Sequence[int]) -> tuple[float | None, str | None]:
    """Mean current frequency of ``cpus`` and its source (cpufreq sysfs or /proc/cpuinfo).

    Units: MHz. ``(None, None)`` when neither is readable.
    """
    vals = []
    for c in cpus:
        v = read_text(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq")
        if v and v.isdigit():
            vals.append(int(v) / 1000.0)
    if vals:
        return sum(vals) / len(vals), "cpufreq"
    text = read_text("/proc/cpuinfo") or ""
    mhz = {}
    cpu = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            cpu = int(value)
        elif key == "cpu MHz" and cpu is not None:
            mhz[cpu] = float(value)
    vals = [mhz[c] for c in cpus if c in mhz]
    if vals:
        return sum(vals) / len(vals), "/proc/cpuinfo"
    return None, None


def _libc() -> Any:
    """This process's C library through ctypes (glibc's ``malloc_trim``, ``mallopt``), or
    ``None`` where it cannot be loaded."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _malloc_trim() -> bool:
    """Return freed heap memory to the OS (glibc ``malloc_trim``); False where unavailable."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None and hasattr(libc, "malloc_trim") else False


#: How a CPU worker's C allocator (glibc malloc) keeps freed memory. ``default``: glibc's
#: own rules: blocks over a dynamic threshold (128 KiB, rising with what was freed) are
#: mapped and unmapped per call and the heap top is trimmed, so a forward can touch fresh
#: pages every time, and each page fault costs (a zoo network took a median 1.25x, up to
#: 1.69x, of its fault-free latency on our 2-core VMs; benchmarks/RESULTS.md, issue 15).
#: How many faults a forward takes depends on what the process allocated before, so one
#: layer timed alone and the same layer inside a network pay differently. ``retain``:
#: freed memory stays with the process (``mallopt``: no trimming, no mapping below 1 GiB),
#: the steady state of a long-running server (and of caching allocators such as jemalloc
#: or tcmalloc): no page fault after the first forward, whatever ran before.
ALLOCATORS = ("default", "retain")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
_RETAIN_BYTES = 1 << 30


def _retain_freed_memory() -> bool:
    """Make this process keep freed memory (glibc ``mallopt``, see :data:`ALLOCATORS`).
    False where it cannot (not glibc)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, _RETAIN_BYTES)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, _RETAIN_BYTES))


def _glibc() -> bool:
    """Whether this Python runs on glibc (where ``mallopt`` tunes malloc)."""
    import platform

    return platform.libc_ver()[0] == "glibc"


def _minor_faults() -> int:
    """Minor page faults of this process so far (``getrusage``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# --------------------------------------------------------------------------- worker


def _cpu_child(conn: Any, job: dict[str, Any]) -> None:
    """Measure one config in this (fresh) process and send a result dict through ``conn``."""
    t_wall = time.perf_counter()
    extra: dict[str, Any] = {"pid": os.getpid(), "threads": job["threads"]}
    try:
        allocator = job.get("allocator", "default")
        if allocator == "retain" and not _retain_freed_memory():
            raise RuntimeError("allocator 'retain': glibc mallopt is not available in this worker")
        extra["allocator"] = allocator
        import torch

        # Pin the thread pools before any parallel work exists (interop can be set only then).
        torch.set_num_threads(job["threads"])
        try:
            torch.set_num_interop_threads(job["threads"])
        except RuntimeError as e:
            extra["interop_threads_error"] = one_line(e)
        if job["affinity"]:
            os.sched_setaffinity(0, job["affinity"])
        cpus = sorted(os.sched_getaffinity(0))
        extra.update(interop_threads=torch.get_num_interop_threads(), torch_threads=torch.get_num_threads(),
                     affinity=cpus, loadavg_before=_loadavg())
        freq, freq_src = _cpu_freq_mhz(cpus)
        extra.update(cpu_freq_mhz_before=freq, cpu_freq_source=freq_src)

        import importlib

        arch = importlib.import_module(job["arch"])  # preloaded by the forkserver
        config: Config = job["config"]
        protocol: Protocol = job["protocol"]
        dtype = arch.dtype_of(config.precision)

        pair = job.get("paired")  # a Pairing: the speed sentinel timed in alternation with the config
        prepare = getattr(config, "prepare", None)
        if callable(prepare):
            # e.g. a user network's import (carb.families.nets): its library pages are loaded before
            # the memory baseline, so they do not count as the network's inference memory
            prepare()
        gc.collect()
        can_reset = _reset_hwm()
        baseline_kb = _rss_kb()
        ru_baseline_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        inject_fault(job.get("fault"))

        t_build = time.perf_counter()
        model = (job.get("build") or arch.build)(config).to(dtype)
        x = torch.randn(config.batch, 3, config.input_size, config.input_size, dtype=dtype)
        gc.collect()
        _malloc_trim()  # hand the freed fp32 build copy back to the OS before the baseline of the peak
        model_kb = _rss_kb()
        if can_reset:
            _reset_hwm()  # peak from here on: the ready model plus inference
        extra["build_s"] = round(time.perf_counter() - t_build, 4)

        rapl = job["rapl"]  # a readable Rapl, or None
        idle_w = job["idle_power_w"]

        with torch.inference_mode():
            n_warm, per_iter_s = warm_up(lambda: model(x), protocol)
            k = iters_per_sample(per_iter_s, protocol.min_sample_s)
            hwm_warm_kb = None
            smodel = sx = None
            ks = 1
            # paired sentinel: after every ``every_s`` of config samples, one sentinel sample;
            # each block's ratio (median config sample / sentinel sample) is taken at one
            # moment, so the machine's speed then cancels out of it (issue 16)
            block: list[float] = []  # config samples (ms) since the last sentinel sample
            block_s = 0.0  # their forwards' time (s)
            pair_ms: list[float] = []
            pair_ratio: list[float] = []
            pair_time_ns = 0

            def sentinel_sample() -> None:
                nonlocal block_s, pair_time_ns
                t0 = time.perf_counter_ns()
                for _ in range(ks):
                    smodel(sx)
                dt = time.perf_counter_ns() - t0
                pair_time_ns += dt
                s_ms = dt / 1e6 / ks
                pair_ms.append(s_ms)
                pair_ratio.append(float(statistics.median(block)) / s_ms)
                block.clear()
                block_s = 0.0

            def sample() -> dict[str, float]:
                nonlocal block_s
                e0 = rapl.read_uj() if rapl else None
                t0 = time.perf_counter_ns()
                for _ in range(k):
                    model(x)
                t1 = time.perf_counter_ns()
                lat_s = (t1 - t0) / 1e9 / k
                if smodel is not None:
                    block.append(lat_s * 1e3)
                    block_s += lat_s * k
                    if block_s >= pair.every_s:
                        sentinel_sample()
                out = {"latency_ms": lat_s * 1e3}
                if rapl is not None and e0 is not None:
                    pkg_j, dram_j = rapl.delta_j(e0, rapl.read_uj())
                    gross = (pkg_j + (dram_j or 0.0)) / k
                    out["energy_gross_j"] = gross
                    out["energy_pkg_j"] = pkg_j / k
                    if dram_j is not None:
                        out["energy_dram_j"] = dram_j / k
                    if idle_w is not None:
                        out["energy_j"] = gross - idle_w * lat_s
                return out

            faults0 = _minor_faults()
            if not pair:
                run = run_samples(sample, protocol, targets=("latency_ms",))
                faults1 = _minor_faults()
            else:
                # Two phases. 1: the config alone for (1 - share) of the time, as unpaired,
                # then its peak memory is read: built before, the sentinel's first calls would
                # allocate runtime buffers (thread pools, kernel caches: ~17 MB here) that the
                # config's own first calls pay for unpaired, and after, its forwards would add
                # to the peak. 2: config samples in blocks of ``every_s``, each followed by one
                # sentinel sample, for the rest of the time (no CI stop: blocks are the point).
                run = run_samples(sample, replace(protocol, max_time_s=protocol.max_time_s * (1 - pair.share)),
                                  targets=("latency_ms",))
                faults1 = _minor_faults()
                hwm_warm_kb = _status_kb("VmHWM").get("VmHWM") if can_reset else \
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                sc = pair.config
                sdt = arch.dtype_of(sc.precision)
                smodel = (job.get("paired_build") or arch.build)(sc).to(sdt)
                sx = torch.randn(sc.batch, 3, sc.input_size, sc.input_size, dtype=sdt)
                _, s_iter_s = warm_up(lambda: smodel(sx), SENTINEL_WARMUP)
                ks = iters_per_sample(s_iter_s, pair.sample_s)
                run2 = run_samples(sample, replace(protocol, max_time_s=protocol.max_time_s * pair.share,
                                                   ci_target=1e-9, min_repeats=1), targets=("latency_ms",))
                if block:
                    sentinel_sample()  # the last block gets its sentinel too
                # phase 2's config samples feed the block ratios only: after each sentinel
                # sample the config starts on caches the sentinel used, so the raw
                # latency (and energy) stays phase 1's, exactly what it means unpaired
                pair_n = len(run2.samples.get("latency_ms", []))

        if can_reset:
            hwm_kb = _status_kb("VmHWM").get("VmHWM", model_kb)
            if hwm_warm_kb is not None:
                extra["memory_hwm_end_mb"] = hwm_kb * 1024 / 1e6  # the sentinel's share included
                hwm_kb = hwm_warm_kb
            memory_kb = hwm_kb - baseline_kb
            extra["memory_method"] = "VmHWM (clear_refs reset) - VmRSS baseline" + (
                ", peak read before the paired sentinel was built" if hwm_warm_kb is not None else "")
        else:
            hwm_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if hwm_warm_kb is None else hwm_warm_kb
            memory_kb = hwm_kb - min(baseline_kb, ru_baseline_kb)
            extra["memory_method"] = "ru_maxrss - baseline (no clear_refs: includes the build; upper bound)"
        extra.update(memory_baseline_mb=baseline_kb * 1024 / 1e6, memory_model_mb=(model_kb - baseline_kb) * 1024 / 1e6,
                     memory_hwm_mb=hwm_kb * 1024 / 1e6)
        freq, _ = _cpu_freq_mhz(cpus)
        # page faults per timed forward (phase 1: the config alone): fresh pages the
        # allocator handed out and the kernel had to map, a cost of the allocator's state
        forwards = max(len(run.samples["latency_ms"]) * k, 1)
        extra["page_faults_per_forward"] = round((faults1 - faults0) / forwards, 2)
        extra.update(cpu_freq_mhz_after=freq, loadavg_after=_loadavg(), warmup_iters=n_warm,
                     iters_per_sample=k, stop_reason=run.stop_reason,
                     latency_samples_ms=[round(v, 6) for v in run.samples["latency_ms"]])
        if pair:
            timed_ns = (sum(run.samples["latency_ms"]) + sum(run2.samples.get("latency_ms", []))) * k * 1e6
            extra.update(pair_sentinel=pair.config.config_id, pair_every_s=pair.every_s, pair_iters=ks,
                         pair_phase_share=pair.share, pair_samples=pair_n,
                         pair_sentinel_ms=[round(v, 6) for v in pair_ms], pair_ratio=[round(v, 6) for v in pair_ratio],
                         pair_share=round(pair_time_ns / (pair_time_ns + timed_ns), 4))
        stats = run.stats()
        for key in ("energy_pkg_j", "energy_dram_j"):  # gross per domain, medians; columns in the store
            extra[key] = stats[key].median if key in stats else None
        timed_s = sum(run.samples["latency_ms"]) * k / 1e3
        conn.send({
            "status": "ok",
            "latency_ms": stats["latency_ms"],
            "energy_j": stats.get("energy_j"),
            "energy_gross_j": stats.get("energy_gross_j"),
            "memory_mb": memory_kb * 1024 / 1e6,
            "timed_s": timed_s,
            "child_wall_s": time.perf_counter() - t_wall,
            "extra": extra,
        })
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status row
        conn.send({"status": classify(e), "message": one_line(e), "extra": extra})
    finally:
        conn.close()


def _noop() -> None:
    """A child that does nothing (starts the forkserver's preloaded interpreter)."""


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

    def __init__(self, threads: int = 1, protocol: Protocol | None = None,
                 affinity: Sequence[int] | None = None, idle_s: float = 1.0, allocator: str = "default",
                 _fault: str | None = None, _arch: str = "carb.families.arch") -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads: {threads!r} must be an integer >= 1")
        if _fault is not None and _fault not in FAULTS:
            raise ValueError(f"_fault: {_fault!r} not one of {', '.join(FAULTS)}")
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator: unknown value {allocator!r} (expected {' or '.join(ALLOCATORS)})")
        if allocator == "retain" and not _glibc():
            raise ValueError("allocator 'retain' needs glibc (mallopt); this Python's C library is not glibc")
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
            self.idle_power_by_domain_w = {"package": pkg_j / (t1 - t0),
                                           "dram": None if dram_j is None else dram_j / (t1 - t0)}
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
            torch_parallel=[ln.strip() for ln in torch.__config__.parallel_info().splitlines()
                            if ln.strip() and "get_num" not in ln and "get_max_threads" not in ln][:6],
            mkldnn=bool(torch.backends.mkldnn.is_available()),
            energy_sensor={"kind": "rapl (zones found through zeus.device.cpu)", "available": self.rapl.available,
                           "reason": self.rapl.reason, "domains": list(self.rapl.domains),
                           "dram_domains": [d for d in self.rapl.dram if d is not None],
                           "energy_j": "package + dram (where a dram zone exists), net of idle"},
            idle_power_w=self.idle_power_w,
            idle_power_by_domain_w=self.idle_power_by_domain_w or None,
            memory_definition=MEMORY_DEFINITION,
            memory_method=("clear_refs" if os.path.exists("/proc/self/clear_refs") else "ru_maxrss"),
            transparent_hugepage=thp_mode(),
            allocator=self.allocator,
            malloc_env={k: v for k, v in os.environ.items() if k.startswith(("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD"))},
            protocol=self.protocol.to_dict(),
            ci_method="distribution-free binomial order statistics, 95%",
        )
        freq, src = _cpu_freq_mhz(self.affinity or sorted(os.sched_getaffinity(0)))
        facts.update(cpu_freq_mhz=freq, cpu_freq_source=src,
                     cpu_governor=read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
        return facts

    def measure(self, config: Config, protocol: Protocol | None = None) -> Measurement:
        """Measure one config in a fresh worker. Never raises for config-level failures.

        ``protocol`` overrides the backend's for this call.
        """
        protocol = check_protocol(protocol) if protocol is not None else self.protocol
        t0 = time.perf_counter()
        paired = self.paired_sentinel if self.paired_sentinel is not None and config != self.paired_sentinel.config \
            else None
        job = {
            "config": config, "build": builder_of(config), "protocol": protocol, "threads": self.threads,
            "paired": paired,  # a carb.measure.sentinel.Pairing (picklable) or None
            "paired_build": None if paired is None else builder_of(paired.config),
            "affinity": self.affinity, "allocator": self.allocator,
            "arch": self._arch, "fault": self._fault,
            "rapl": self.rapl if self.rapl.available else None, "idle_power_w": self.idle_power_w,
        }
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_cpu_child, args=(send, job), daemon=True,
                                 name=f"carb-cpu-{config.config_id}")
        try:
            proc.start()
        except Exception as e:  # e.g. fork failing for lack of memory
            recv.close()
            send.close()
            return Measurement(status="error", message=f"could not start worker: {one_line(e)}",
                               wall_s=time.perf_counter() - t0, extra={"threads": self.threads})
        send.close()  # our copy: EOF on recv once the child's copy closes too
        result, failure = _wait(proc, recv, deadline=t0 + protocol.timeout_s)
        recv.close()
        wall = time.perf_counter() - t0
        if failure is not None:
            status, message = failure
            if status == "timeout":
                message = f"no result within timeout_s={protocol.timeout_s:g} s; worker killed"
            return Measurement(status=status, message=message, wall_s=wall,
                               energy_missing_reason=self.rapl.reason, extra={"threads": self.threads})
        return self._to_measurement(result, wall)

    def _to_measurement(self, r: dict[str, Any], wall: float) -> Measurement:
        extra = dict(r.get("extra") or {})
        if r["status"] != "ok":
            return Measurement(status=r["status"], message=r.get("message", ""), wall_s=wall,
                               energy_missing_reason=self.rapl.reason, extra=extra)
        energy, gross = r.get("energy_j"), r.get("energy_gross_j")
        reason = None
        if energy is None:
            reason = self.rapl.reason or ("idle power unknown: net energy not computed" if gross else
                                          "RAPL gave no reading")
        return Measurement(status="ok", latency_ms=r["latency_ms"], energy_j=energy, energy_gross_j=gross,
                           memory_mb=r["memory_mb"], energy_missing_reason=reason, timed_s=r["timed_s"],
                           wall_s=wall, extra=extra)

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
