"""The GPU backend's persistent worker: device operations, one config's measurement, the serve loop.

:func:`_worker_main` runs in the worker process (``spawn``): it sets up CUDA and the Zeus
device, then serves ``calibrate`` and ``measure`` requests from :class:`~carb.measure.cuda.CudaBackend`
until told to stop. :func:`_run_config` measures one config; :class:`_HostOps` runs the
same path on the CPU in tests.
"""

from __future__ import annotations

import gc
import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from ._common import classify, inject_fault, input_dims, one_line
from ._cuda_device import GpuReadings, NvmlExtras, _energy_check, _FakeNvmlClocks, _FakeZeusGPU, _open_zeus_gpu
from ._cuda_energy import _calibrate, _Sampler, _summarize_telemetry, energy_window_s, net_energy_j, power_between_ticks
from .base import ConfigLike, Protocol
from .protocol import iters_per_sample, run_samples, warm_up

__all__: list[str] = []


class _CudaOps:
    """The few device operations the measurement needs (a stand-in runs them on CPU in tests)."""

    def __init__(self, index: int) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda", index)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> tuple[int, int]:
        return (self.torch.cuda.max_memory_allocated(self.device), self.torch.cuda.max_memory_reserved(self.device))

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()

    def events(self) -> tuple[Any, Any]:
        return (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))

    def precision_problem(self, precision: str) -> str | None:
        if precision == "bf16" and not self.torch.cuda.is_bf16_supported():
            return "bf16 not supported on this GPU (needs compute capability 8.0+)"
        return None


class _HostEvent:
    """CUDA-event stand-in on the host clock (TEST-ONLY fake device)."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end.t - self.t) * 1e3


class _HostOps:
    """TEST-ONLY: runs the GPU measurement path on the CPU (memory reads as 0)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cpu")

    def sync(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_bytes(self) -> tuple[int, int]:
        return 0, 0

    def empty_cache(self) -> None:
        pass

    def events(self) -> tuple[Any, Any]:
        return _HostEvent(), _HostEvent()

    def precision_problem(self, precision: str) -> str | None:
        return None


@dataclass(frozen=True)
class _WindowPlan:
    """How the timed windows of one config last and how their energy is read."""

    energy_ok: bool  # the total-energy counter is readable
    period_s: float | None  # the counter's update period (s), from the calibration
    idle_w: float | None  # the idle GPU's power (W), from the calibration
    window_s: float  # the shortest window (s)
    guard_first_only: bool  # only the first window skips the counter's first period

    @classmethod
    def of(cls, job: dict[str, Any], calib: dict[str, Any], protocol: Protocol) -> "_WindowPlan":
        """The plan of a job from the worker's calibration."""
        energy_ok = bool(job["energy_ok"])
        period = calib.get("update_period_s")
        # "every" (the default): each window skips the counter's first period after its start;
        # "first": only the first does, the later ones follow a busy window of the same config
        # with no idle in between (an experiment for a GPU session: scripts/validate_gpu.py
        # measures both; shorter windows would then do)
        guard_first_only = job.get("window_guard", "every") == "first"
        window_s = (
            energy_window_s(period, job["min_window_s"], job.get("energy_periods", 10.0), protocol.min_sample_s)
            if energy_ok
            else max(protocol.min_sample_s, 0.05)
        )
        return cls(
            energy_ok=energy_ok,
            period_s=period,
            idle_w=calib.get("idle_power_w"),
            window_s=window_s,
            guard_first_only=guard_first_only,
        )


class _Windows:
    """The timed windows of one config: ``k`` forwards between CUDA events, and their busy power.

    The busy power is the energy counter's, between its ticks inside each window.
    """

    def __init__(
        self, model: Any, x: Any, events: tuple[Any, Any], sampler: _Sampler, plan: _WindowPlan, k: int
    ) -> None:
        self.model, self.x, self.sampler, self.plan = model, x, sampler, plan
        self.start, self.end = events
        self.k = k  # forwards per window: grows when a window falls short of ``window_s``
        self.missed = 0  # windows with fewer than two ticks: no energy sample
        self.timed_s = 0.0  # time inside timed forwards (s)
        self.done = 0  # energy windows taken

    def sample(self) -> dict[str, float]:
        """One window: latency (ms) and, where the counter ticked twice in it, energy (J) per forward."""
        plan, k = self.plan, self.k
        ta = time.perf_counter()
        self.start.record()
        for _ in range(k):
            self.model(self.x)
        self.end.record()
        self.end.synchronize()
        tb = time.perf_counter()
        lat_s = self.start.elapsed_time(self.end) / 1e3 / k
        self.timed_s += lat_s * k
        out = {"latency_ms": lat_s * 1e3}
        # the warm-up timed synchronised forwards; pipelined ones can be faster, so
        # grow the window if it fell short of what the energy counter needs
        if tb - ta < 0.9 * plan.window_s:
            self.k = max(k + 1, math.ceil(k * plan.window_s / max(tb - ta, 1e-9)))
        if plan.energy_ok:
            # skip one update period after the launch: the counter may report with
            # a lag, and its first busy tick could still hold idle time
            guard = (plan.period_s or 0.0) if (self.done == 0 or not plan.guard_first_only) else 0.0
            self.done += 1
            t0 = ta + min(guard, (tb - ta) / 4)
            pw = power_between_ticks(self.sampler.ticks_between(t0, tb), t0, tb)
            if pw is None:
                self.missed += 1
            else:
                gross = pw[0] * lat_s
                out["energy_gross_j"] = gross
                if plan.idle_w is not None:
                    out["energy_j"] = net_energy_j(gross, plan.idle_w, lat_s)
        return out


def _run_config(job: dict[str, Any], ops: Any, dev: Any, calib: dict[str, Any]) -> dict[str, Any]:
    """Measure one config in the worker (raises on failure; the caller classifies)."""
    config: ConfigLike = job["config"]
    protocol: Protocol = job["protocol"]
    extra: dict[str, Any] = {}
    problem = ops.precision_problem(config.precision)
    if problem:
        return {"status": "unsupported", "message": problem, "extra": extra}
    arch = importlib.import_module(job["arch"])
    dtype = arch.dtype_of(config.precision)
    plan = _WindowPlan.of(job, calib, protocol)
    model, x = _build_on_device(job, arch, ops, dtype, extra)
    return _time_windows(model, x, ops, dev, protocol, plan, extra)


def _build_on_device(job: dict[str, Any], arch: Any, ops: Any, dtype: Any, extra: dict[str, Any]) -> tuple[Any, Any]:
    """Build and cast the model on the host, then move it to the device with the peak reset."""
    config = job["config"]
    ops.empty_cache()
    inject_fault(job.get("fault"))
    t_build = time.perf_counter()
    model = (job.get("build") or arch.build)(config).to(dtype)  # built and cast on the host: no fp32 copy on the GPU
    ops.sync()
    ops.reset_peak()
    model = model.to(ops.device)
    x = ops.torch.randn(*input_dims(config), dtype=dtype, device=ops.device)
    ops.sync()
    extra["build_s"] = round(time.perf_counter() - t_build, 4)
    return model, x


def _time_windows(
    model: Any, x: Any, ops: Any, dev: Any, protocol: Protocol, plan: _WindowPlan, extra: dict[str, Any]
) -> dict[str, Any]:
    """Warm up, time the windows with the sampler thread running, and make the result dict."""
    events = ops.events()
    with ops.torch.inference_mode():

        def step() -> None:
            model(x)
            ops.sync()

        n_warm, per_iter_s = warm_up(step, protocol)
        k_first = iters_per_sample(per_iter_s, plan.window_s)
        with _Sampler(dev, energy=plan.energy_ok) as sampler:
            windows = _Windows(model, x, events, sampler, plan, k_first)
            run = run_samples(windows.sample, protocol, targets=("latency_ms", "energy_gross_j"))
        tel = _summarize_telemetry(sampler.telemetry)
        extra["energy_read_ms"] = sampler.read_ms
        if sampler.error:
            extra["sampler_error"] = sampler.error

    peak, reserved = ops.peak_bytes()
    stats = run.stats()
    extra.update(tel)
    extra.update(
        warmup_iters=n_warm,
        iters_per_sample=windows.k,
        iters_per_sample_first=k_first,
        window_s=plan.window_s,
        stop_reason=run.stop_reason,
        update_period_s=plan.period_s,
        idle_power_w=plan.idle_w,
        energy_windows=len(run.samples.get("energy_gross_j", [])),
        energy_windows_missed=windows.missed,
        memory_reserved_mb=reserved / 1e6,
        window_guard="first" if plan.guard_first_only else "every",
        latency_samples_ms=[round(v, 6) for v in run.samples["latency_ms"]],
    )
    reason = None
    if plan.energy_ok and "energy_gross_j" not in stats:
        reason = "no window spanned two energy-counter updates"
    elif plan.energy_ok and plan.idle_w is None:
        reason = "idle power unknown: net energy not computed"
    return {
        "status": "ok",
        "latency_ms": stats["latency_ms"],
        "energy_gross_j": stats.get("energy_gross_j"),
        "energy_j": stats.get("energy_j"),
        "memory_mb": peak / 1e6,
        "energy_missing_reason": reason,
        "timed_s": windows.timed_s,
        "extra": extra,
    }


def _measure_job(job: dict[str, Any], ops: Any, dev: Any, calib: dict[str, Any]) -> dict[str, Any]:
    """:func:`_run_config`, with every failure turned into a status dict."""
    try:
        result = _run_config(job, ops, dev, calib)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status row
        status = classify(e)
        result = {"status": status, "message": one_line(e), "extra": {}}
        text = str(e)
        # A CUDA error other than OOM can leave the context unusable: ask for a new worker.
        if status != "oom" and ("CUDA error" in text or type(e).__name__ == "AcceleratorError"):
            result["restart"] = True
        del e
    # the failed frame is gone now: free what it held so the next config starts clean
    gc.collect()
    ops.empty_cache()
    return result


def _worker_main(conn: Any, opts: dict[str, Any]) -> None:
    """The persistent worker: set up CUDA and the Zeus device, then serve requests until told to stop."""
    sys.setswitchinterval(0.0005)  # so the sampler thread gets the GIL promptly (tick timing)
    try:
        import torch

        if opts["fake"]:
            ops: Any = _HostOps()
            dev = GpuReadings(
                _FakeZeusGPU(period_s=opts.get("fake_period_s", 0.02)), NvmlExtras(_FakeNvmlClocks(), None)
            )
            hello = {
                "name": "fake GPU (synthetic, test-only)",
                "uuid": None,
                "nvml_match": None,
                "zeus_index": 0,
                "vendor": "fake",
                "torch_cuda": None,
                "cudnn": None,
                "capability": None,
                "total_memory_mb": None,
            }
            energy_ok, energy_reason = _energy_check(dev)
        else:
            index = opts["index"]
            torch.cuda.set_device(index)
            torch.cuda.init()
            torch.backends.cudnn.benchmark = bool(opts["cudnn_benchmark"])
            ops = _CudaOps(index)
            props = torch.cuda.get_device_properties(index)
            gpu, extras, facts = _open_zeus_gpu(index)
            dev = GpuReadings(gpu, extras)
            hello = dict(
                facts,
                name=props.name,
                capability=f"{props.major}.{props.minor}",
                total_memory_mb=props.total_memory / 1e6,
                torch_cuda=torch.version.cuda,
                torch_hip=getattr(torch.version, "hip", None),
                cudnn=torch.backends.cudnn.version(),
                cudnn_benchmark=torch.backends.cudnn.benchmark,
                allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                allow_tf32_cudnn=torch.backends.cudnn.allow_tf32,
            )
            energy_ok, energy_reason = _energy_check(dev)
        hello.update(status="ready", pid=os.getpid(), energy_ok=energy_ok, energy_reason=energy_reason)
        conn.send(hello)
    except BaseException as e:  # noqa: BLE001
        conn.send({"status": "error", "message": f"worker start-up failed: {one_line(e)}"})
        return
    calib: dict[str, Any] = dict(opts.get("calib") or {})
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if kind == "stop":
            return
        if kind == "calibrate":
            ops.sync()
            time.sleep(payload.get("settle_s", 0.5))  # let the GPU fall to idle first
            calib = _calibrate(dev, energy_ok, payload["seconds"])
            conn.send(calib)
        elif kind == "measure":
            payload["energy_ok"] = energy_ok
            conn.send(_measure_job(payload, ops, dev, calib))
