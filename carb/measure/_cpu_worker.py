"""The CPU backend's worker: one config measured in a fresh process (:mod:`carb.measure.cpu`).

The parent builds a :class:`CpuJob` and starts :func:`_cpu_child` in a process forked from
the forkserver; the child pins its threads, reads its memory baseline, builds the model,
times it (with the paired sentinel in alternation where the job asks for it), reads its
peak memory, and sends one result dict back. Every failure becomes a status in that dict.
See the module docstring of :mod:`carb.measure.cpu` for what each figure means.
"""

from __future__ import annotations

import gc
import importlib
import os
import resource
import statistics
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ._common import classify, inject_fault, input_dims, one_line, send_reply
from ._cpu_process import (
    _cpu_freq_mhz,
    _loadavg,
    _malloc_trim,
    _minor_faults,
    _reset_hwm,
    _retain_freed_memory,
    _rss_kb,
    _status_kb,
    prefault_parent_pages,
)
from ._rapl import Rapl
from .base import ConfigLike, Protocol
from .protocol import SampleRun, iters_per_sample, run_samples, warm_up

if TYPE_CHECKING:
    from .sentinel import Pairing

__all__ = ["CpuJob", "SENTINEL_WARMUP"]

#: warm-up of a paired sentinel (its first calls pay one-off costs)
SENTINEL_WARMUP = Protocol(warmup=3, warmup_s=0.02)


@dataclass(frozen=True)
class CpuJob:
    """What one CPU worker measures and how; built by the parent and pickled to the worker.

    Attributes:
        config: the config to measure, of any registered family.
        protocol: the repeat/stop protocol of this measurement.
        threads: intra-op and inter-op threads the worker pins.
        build: the family's build function (pickled by reference); ``None``: ``arch.build``
            (the ResNets).
        arch: module providing ``build`` and ``dtype_of``, preloaded by the forkserver.
        affinity: CPUs to pin the worker to; ``None`` keeps the parent's.
        allocator: how the worker's C allocator keeps freed memory: ``default`` or ``retain``
            (:data:`carb.measure.cpu.ALLOCATORS`).
        paired: the speed sentinel timed in alternation with the config
            (:class:`~carb.measure.sentinel.Pairing`); ``None``: the config alone.
        paired_build: the sentinel family's build function; ``None``: ``arch.build``.
        rapl: the machine's readable RAPL zones; ``None``: no energy.
        idle_power_w: package + DRAM power of the idle machine, subtracted for net energy.
            Units: W. ``None``: unknown (gross energy only).
        fault: TEST-ONLY: the failure to inject (:data:`carb.measure._common.FAULTS`).
    """

    config: ConfigLike
    protocol: Protocol
    threads: int = 1
    build: Callable[[Any], Any] | None = None
    arch: str = "carb.families.arch"
    affinity: Sequence[int] | None = None
    allocator: str = "default"
    paired: Pairing | None = None
    paired_build: Callable[[Any], Any] | None = None
    rapl: Rapl | None = None
    idle_power_w: float | None = None
    fault: str | None = None


@dataclass
class _Memory:
    """The worker's memory readings around the model. Units: kB."""

    can_reset: bool  # whether VmHWM resets (``/proc/self/clear_refs``)
    baseline_kb: int  # VmRSS after imports, before the model exists
    ru_baseline_kb: int  # ru_maxrss at the same moment (the fallback's baseline)
    model_kb: int = 0  # VmRSS once the model is built and cast
    prefault_kb: int | None = None  # the forkserver's library pages mapped ahead of the baseline (None: not done)


class _Sampling:
    """The timed samples of one visit: the config's forwards, RAPL around them, the paired sentinel's blocks.

    The blocks start once :meth:`pair_with` arms them.
    """

    def __init__(self, model: Any, x: Any, k: int, rapl: Rapl | None, idle_w: float | None) -> None:
        self.model, self.x, self.k, self.rapl, self.idle_w = model, x, k, rapl, idle_w
        self.smodel: Any = None
        self.sx: Any = None
        self.ks = 1  # forwards per sentinel sample
        self.every_s = 0.0  # seconds of config samples per block
        self.block: list[float] = []  # config samples (ms) since the last sentinel sample
        self.block_s = 0.0  # their forwards' time (s)
        self.pair_ms: list[float] = []  # the sentinel's samples (ms per forward)
        self.pair_ratio: list[float] = []  # each block's median config sample over its sentinel sample
        self.pair_time_ns = 0  # time spent in sentinel samples (ns)

    def pair_with(self, smodel: Any, sx: Any, ks: int, every_s: float) -> None:
        """From now on, follow every ``every_s`` seconds of config samples with one sentinel sample."""
        self.smodel, self.sx, self.ks, self.every_s = smodel, sx, ks, every_s

    def sentinel_sample(self) -> None:
        """Time one sentinel sample and close the block of config samples before it."""
        t0 = time.perf_counter_ns()
        for _ in range(self.ks):
            self.smodel(self.sx)
        dt = time.perf_counter_ns() - t0
        self.pair_time_ns += dt
        s_ms = dt / 1e6 / self.ks
        self.pair_ms.append(s_ms)
        self.pair_ratio.append(float(statistics.median(self.block)) / s_ms)
        self.block.clear()
        self.block_s = 0.0

    def sample(self) -> dict[str, float]:
        """One timed sample of ``k`` forwards: latency (ms) and RAPL energies (J) per forward."""
        rapl, k = self.rapl, self.k
        e0 = rapl.read_uj() if rapl else None
        t0 = time.perf_counter_ns()
        for _ in range(k):
            self.model(self.x)
        t1 = time.perf_counter_ns()
        lat_s = (t1 - t0) / 1e9 / k
        if self.smodel is not None:
            self.block.append(lat_s * 1e3)
            self.block_s += lat_s * k
            if self.block_s >= self.every_s:
                self.sentinel_sample()
        out = {"latency_ms": lat_s * 1e3}
        if rapl is not None and e0 is not None:
            pkg_j, dram_j = rapl.delta_j(e0, rapl.read_uj())
            gross = (pkg_j + (dram_j or 0.0)) / k
            out["energy_gross_j"] = gross
            out["energy_pkg_j"] = pkg_j / k
            if dram_j is not None:
                out["energy_dram_j"] = dram_j / k
            if self.idle_w is not None:
                out["energy_j"] = gross - self.idle_w * lat_s
        return out


@dataclass
class _Timing:
    """What the timed phases gave."""

    run: SampleRun  # the config alone: latency, energy
    sampling: _Sampling
    n_warm: int  # warm-up iterations
    faults: int  # minor page faults of the config-alone phase
    hwm_warm_kb: int | None = None  # with the paired sentinel: the peak read before it was built
    paired_run: SampleRun | None = None  # the paired phase (block ratios only)


def _cpu_child(conn: Any, job: CpuJob) -> None:
    """Measure one config in this (fresh) process and send a result dict through ``conn``."""
    t_wall = time.perf_counter()
    extra: dict[str, Any] = {"pid": os.getpid(), "threads": job.threads}
    try:
        torch, cpus = _set_up_process(job, extra)
        arch = importlib.import_module(job.arch)  # preloaded by the forkserver
        dtype = arch.dtype_of(job.config.precision)
        mem = _memory_baseline(job)
        inject_fault(job.fault)
        model, x = _build(job, arch, torch, dtype, mem, extra)
        with torch.inference_mode():
            timing = _time_config(job, arch, torch, model, x, mem)
        memory_kb = _peak_memory_kb(mem, timing.hwm_warm_kb, extra)
        reply = _ok_reply(job, timing, memory_kb, cpus, t_wall, extra)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status row
        reply = {"status": classify(e), "message": one_line(e), "extra": extra}
    send_reply(conn, reply)


def _set_up_process(job: CpuJob, extra: dict[str, Any]) -> tuple[Any, list[int]]:
    """Set the allocator, pin the thread pools and the CPUs; record them. Returns torch and the CPUs."""
    if job.allocator == "retain" and not _retain_freed_memory():
        raise RuntimeError("allocator 'retain': glibc mallopt is not available in this worker")
    extra["allocator"] = job.allocator
    import torch

    # Pin the thread pools before any parallel work exists (interop can be set only then).
    torch.set_num_threads(job.threads)
    try:
        torch.set_num_interop_threads(job.threads)
    except RuntimeError as e:
        extra["interop_threads_error"] = one_line(e)
    if job.affinity:
        os.sched_setaffinity(0, job.affinity)
    cpus = sorted(os.sched_getaffinity(0))
    extra.update(
        interop_threads=torch.get_num_interop_threads(),
        torch_threads=torch.get_num_threads(),
        affinity=cpus,
        loadavg_before=_loadavg(),
    )
    freq, freq_src = _cpu_freq_mhz(cpus)
    extra.update(cpu_freq_mhz_before=freq, cpu_freq_source=freq_src)
    return torch, cpus


def _memory_baseline(job: CpuJob) -> _Memory:
    """Prepare the config, then read the resident set the model's memory is measured from."""
    prepare = getattr(job.config, "prepare", None)
    if callable(prepare):
        # e.g. a user network's import (carb.families.nets): its library pages load ahead of
        # the memory baseline, so they do not count as the network's inference memory
        prepare()
    prefault_kb = prefault_parent_pages()
    gc.collect()
    _malloc_trim()  # the page map's freed buffers go back to the OS: a build cannot reuse them unseen
    can_reset = _reset_hwm()
    return _Memory(
        can_reset=can_reset,
        baseline_kb=_rss_kb(),
        ru_baseline_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        prefault_kb=prefault_kb,
    )


def _build(job: CpuJob, arch: Any, torch: Any, dtype: Any, mem: _Memory, extra: dict[str, Any]) -> tuple[Any, Any]:
    """Build and cast the model and its input; reset the peak so that it covers the ready model on."""
    config = job.config
    t_build = time.perf_counter()
    model = (job.build or arch.build)(config).to(dtype)
    x = torch.randn(*input_dims(config), dtype=dtype)
    gc.collect()
    _malloc_trim()  # hand the freed fp32 build copy back to the OS ahead of the peak's baseline
    mem.model_kb = _rss_kb()
    if mem.can_reset:
        _reset_hwm()  # peak from here on: the ready model plus inference
    extra["build_s"] = round(time.perf_counter() - t_build, 4)
    return model, x


def _time_config(job: CpuJob, arch: Any, torch: Any, model: Any, x: Any, mem: _Memory) -> _Timing:
    """Warm up, then time the config alone and, with a paired sentinel, in blocks with it."""
    protocol, pair = job.protocol, job.paired
    n_warm, per_iter_s = warm_up(lambda: model(x), protocol)
    sampling = _Sampling(model, x, iters_per_sample(per_iter_s, protocol.min_sample_s), job.rapl, job.idle_power_w)
    faults0 = _minor_faults()
    if not pair:
        run = run_samples(sampling.sample, protocol, targets=("latency_ms",))
        return _Timing(run=run, sampling=sampling, n_warm=n_warm, faults=_minor_faults() - faults0)
    # Two phases. 1: the config alone for (1 - share) of the time, as unpaired, then its peak
    # memory is read: built earlier, the sentinel's first calls would allocate runtime buffers
    # (thread pools, kernel caches) that the config's own first calls pay for unpaired, and
    # later, its forwards would add to the peak. 2: config samples in blocks of ``every_s``,
    # each followed by one sentinel sample, for the rest of the time (no CI stop: blocks are the point).
    run = run_samples(
        sampling.sample, replace(protocol, max_time_s=protocol.max_time_s * (1 - pair.share)), targets=("latency_ms",)
    )
    faults = _minor_faults() - faults0
    hwm_warm_kb = (
        _status_kb("VmHWM").get("VmHWM") if mem.can_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    )
    paired_run = _time_paired_phase(job, arch, torch, sampling)
    return _Timing(
        run=run, sampling=sampling, n_warm=n_warm, faults=faults, hwm_warm_kb=hwm_warm_kb, paired_run=paired_run
    )


def _time_paired_phase(job: CpuJob, arch: Any, torch: Any, sampling: _Sampling) -> SampleRun:
    """Build the paired sentinel, then time config samples in blocks, each followed by a sentinel sample.

    Each block's ratio (median config sample over the sentinel sample) is taken at one
    moment, so the machine's speed then cancels out of it. The config samples of this phase
    feed the ratios only: after each sentinel sample the config starts on caches the sentinel
    used, so the raw latency (and energy) stays the config-alone phase's, as unpaired.
    """
    pair, protocol = job.paired, job.protocol
    assert pair is not None  # only called with a pairing
    sc = pair.config
    sdt = arch.dtype_of(sc.precision)
    smodel = (job.paired_build or arch.build)(sc).to(sdt)
    sx = torch.randn(sc.batch, 3, sc.input_size, sc.input_size, dtype=sdt)
    _, s_iter_s = warm_up(lambda: smodel(sx), SENTINEL_WARMUP)
    sampling.pair_with(smodel, sx, iters_per_sample(s_iter_s, pair.sample_s), pair.every_s)
    run2 = run_samples(
        sampling.sample,
        replace(protocol, max_time_s=protocol.max_time_s * pair.share, ci_target=1e-9, min_repeats=1),
        targets=("latency_ms",),
    )
    if sampling.block:
        sampling.sentinel_sample()  # the last block gets its sentinel too
    return run2


def _peak_memory_kb(mem: _Memory, hwm_warm_kb: int | None, extra: dict[str, Any]) -> int:
    """The peak memory of inference (kB) above the baseline, and how it was read (in ``extra``)."""
    if mem.can_reset:
        hwm_kb = _status_kb("VmHWM").get("VmHWM", mem.model_kb)
        if hwm_warm_kb is not None:
            extra["memory_hwm_end_mb"] = hwm_kb * 1024 / 1e6  # the sentinel's share included
            hwm_kb = hwm_warm_kb
        memory_kb = hwm_kb - mem.baseline_kb
        extra["memory_method"] = (
            "VmHWM (clear_refs reset) - VmRSS baseline"
            + (
                ", the forkserver's library pages mapped before the baseline"
                if mem.prefault_kb is not None
                else ", library pages the forked worker maps included (upper bound)"
            )
            + (", peak read before the paired sentinel was built" if hwm_warm_kb is not None else "")
        )
    else:
        hwm_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if hwm_warm_kb is None else hwm_warm_kb
        memory_kb = hwm_kb - min(mem.baseline_kb, mem.ru_baseline_kb)
        extra["memory_method"] = "ru_maxrss - baseline (no clear_refs: includes the build; upper bound)"
    extra.update(
        memory_prefault_mb=None if mem.prefault_kb is None else mem.prefault_kb * 1024 / 1e6,
        memory_baseline_mb=mem.baseline_kb * 1024 / 1e6,
        memory_model_mb=(mem.model_kb - mem.baseline_kb) * 1024 / 1e6,
        memory_hwm_mb=hwm_kb * 1024 / 1e6,
    )
    return memory_kb


def _ok_reply(
    job: CpuJob, timing: _Timing, memory_kb: int, cpus: list[int], t_wall: float, extra: dict[str, Any]
) -> dict[str, Any]:
    """The result dict of a measured config: its figures, and the telemetry in ``extra``."""
    run, s = timing.run, timing.sampling
    k = s.k
    freq, _ = _cpu_freq_mhz(cpus)
    # page faults per timed forward (the config alone): fresh pages the allocator handed
    # out and the kernel had to map, a cost of the allocator's state
    forwards = max(len(run.samples["latency_ms"]) * k, 1)
    extra["page_faults_per_forward"] = round(timing.faults / forwards, 2)
    extra.update(
        cpu_freq_mhz_after=freq,
        loadavg_after=_loadavg(),
        warmup_iters=timing.n_warm,
        iters_per_sample=k,
        stop_reason=run.stop_reason,
        latency_samples_ms=[round(v, 6) for v in run.samples["latency_ms"]],
    )
    pair = job.paired
    if pair and timing.paired_run is not None:
        run2 = timing.paired_run
        timed_ns = (sum(run.samples["latency_ms"]) + sum(run2.samples.get("latency_ms", []))) * k * 1e6
        extra.update(
            pair_sentinel=pair.config.config_id,
            pair_every_s=pair.every_s,
            pair_iters=s.ks,
            pair_phase_share=pair.share,
            pair_samples=len(run2.samples.get("latency_ms", [])),
            pair_sentinel_ms=[round(v, 6) for v in s.pair_ms],
            pair_ratio=[round(v, 6) for v in s.pair_ratio],
            pair_share=round(s.pair_time_ns / (s.pair_time_ns + timed_ns), 4),
        )
    stats = run.stats()
    for key in ("energy_pkg_j", "energy_dram_j"):  # gross per domain, medians; columns in the store
        extra[key] = stats[key].median if key in stats else None
    return {
        "status": "ok",
        "latency_ms": stats["latency_ms"],
        "energy_j": stats.get("energy_j"),
        "energy_gross_j": stats.get("energy_gross_j"),
        "memory_mb": memory_kb * 1024 / 1e6,
        "timed_s": sum(run.samples["latency_ms"]) * k / 1e3,
        "child_wall_s": time.perf_counter() - t_wall,
        "extra": extra,
    }


def _noop() -> None:
    """A child that does nothing (starts the forkserver's preloaded interpreter)."""
