"""GPU backend (NVIDIA; AMD through the same path): latency (CUDA events), energy (the
driver's total-energy counter, read through Zeus), peak memory (allocator).

Configs run in one persistent worker process (``spawn``; CUDA initialisation is slow, so
it is paid once), restarted after a crash or a timeout. The parent holds the clock lock
and restores it on every exit path; it never initialises CUDA itself.

Whose is what
-------------
The device layer is Zeus (``zeus.device``, ML.ENERGY), imported lazily (only when a GPU
backend starts), so CPU-only paths never need a GPU library to load:

* **Zeus**: device discovery (``zeus.device.get_gpus()``: NVML on NVIDIA, amdsmi on AMD,
  ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES`` honoured), the total-energy counter
  (``get_total_energy_consumption``, mJ) and whether the GPU has one, power
  (``get_instant_power_usage``, mW), temperature, power limits, supported clocks, clock
  lock and reset (``set_gpu_locked_clocks``/``set_memory_locked_clocks`` and their
  resets, through the ``zeusd`` daemon when ``ZEUSD_SOCK_PATH`` is set, so that a
  non-root user can lock), and the error types of a refusal
  (``ZeusGPUNoPermissionError``, ``ZeusGPUNotSupportedError``).
* **ours** (Zeus has none of it): the tick-aligned energy windows, the idle-power
  subtraction, the counter's update period, the sampler thread, the clock lock's
  exit-path guarantees (close, ``atexit``, SIGINT/SIGTERM) and its ``nvidia-smi``
  fallback, and the throttle telemetry below.
* **direct pynvml, on the handle Zeus opened** (NVIDIA only; :class:`NvmlExtras` is
  the one place): Zeus has no getter for the *current* SM/memory clocks, the
  clock-event (throttle) reasons, the GPU's UUID (to match the CUDA device to the NVML
  device) or the driver/CUDA-driver versions for provenance. On AMD those fields are
  ``None``.

Definitions
-----------
latency_ms
    Per-forward time of the whole batch: CUDA events around a window of ``k`` forwards,
    divided by ``k``, under ``torch.inference_mode()``.
energy_gross_j / energy_j
    The total energy counter (Zeus's ``get_total_energy_consumption``: NVML's
    ``nvmlDeviceGetTotalEnergyConsumption`` on NVIDIA, Volta and newer; amdsmi's energy
    accumulator on AMD) only changes every *update period* ``P`` (measured at start-up
    and recorded). A sampler thread polls it (1 ms) and timestamps each change ("tick").
    A window of ``k`` forwards lasts at least ``max(min_window_s, 10 P,
    Protocol.min_sample_s)`` seconds; its busy power is the counter's increase between
    the first and the last tick inside the window (ignoring the first period after
    launch) divided by the time between them, so both ends are aligned to counter
    updates and lie in busy time. Gross energy per forward = busy power x latency; net =
    gross - idle power x latency, where idle power comes from the same tick method on the
    idle GPU at start-up, at the same (locked or not) clocks. Units: J. Windows with fewer
    than two ticks give no energy sample (counted in ``extra["energy_windows_missed"]``).
    Without the counter (pre-Volta, some vGPUs, AMD parts whose counter Zeus distrusts),
    energy is ``None`` with ``energy_missing_reason``; nothing is estimated.
memory_mb
    ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` taken before the
    (CPU-built, cast) model moves to the GPU: weights, input, activations and workspaces
    of the caching allocator; the CUDA context and allocator slack
    (``max_memory_reserved``, in ``extra``) are not counted. Units: MB (10**6 bytes).

The CI stopping rule of :mod:`carb.measure.protocol` applies to latency and gross energy
(net energy of a small network can be near zero, so its relative CI says little).
``torch.backends.cudnn.benchmark`` is off unless asked for, and recorded in provenance,
as are the TF32 switches.

Clock locking
-------------
With ``lock_clocks=True`` the SM clock is locked through Zeus to ``sm_clock_mhz``
(default: the highest supported graphics clock at the highest memory clock, Zeus's
``get_supported_graphics_clocks``) and the memory clock to ``mem_clock_mhz`` (default:
the highest supported memory clock); on NVIDIA, ``nvidia-smi -lgc/-lmc`` is the fallback
when the driver lacks the calls (``ZeusGPUFunctionNotFoundError``). They are reset by
:meth:`CudaBackend.close`, at exit (``atexit``) and on SIGINT/SIGTERM (handlers restore,
then hand the signal on). Locking needs root (or ``zeusd``): on a refusal
(``ZeusGPUNoPermissionError``, ``ZeusGPUNotSupportedError``) the backend carries on
unlocked and records why (an automatic opt-out). With ``lock_clocks=False``
(``--no-lock-clocks``, e.g. on a lent machine) nothing is set, and every measurement
records the clocks it ran at (``extra["sm_clock_mhz"]``, ``["mem_clock_mhz"]``, min and
max) and the throttle reasons. NVML cannot report whether someone else had locked the
clocks before, so "restore" means "reset to the driver's default".

AMD (ROCm torch + amdsmi through Zeus) takes the same path; it has never run on an AMD
GPU here: untested, as are the ``zeusd`` daemon path and multi-GPU UUID matching.
"""

from __future__ import annotations

import atexit
import bisect
import gc
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

from ._common import FAULTS, builder_of, classify, host_facts, inject_fault, one_line, wait_reply
from .base import Backend, Measurement, Protocol
from .protocol import check_protocol, iters_per_sample, run_samples, warm_up
from carb.families.resnet import Config

__all__ = [
    "CudaBackend",
    "ClockLock",
    "energy_window_s",
    "update_period_from_ticks",
    "power_between_ticks",
    "net_energy_j",
    "throttle_reason_names",
    "default_lock_targets",
    "zeus_refusal",
    "NvmlExtras",
    "MEMORY_DEFINITION",
]

MEMORY_DEFINITION = ("torch.cuda.max_memory_allocated after reset_peak_memory_stats before the model moves "
                     "to the GPU (weights, input, activations, workspaces; no CUDA context); MB = 1e6 bytes")

#: nvmlClocksEventReason* bits (formerly ClocksThrottleReason*), nvml.h.
_THROTTLE_BITS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}


# --------------------------------------------------------------------------- pure helpers


def energy_window_s(update_period_s: float | None, min_window_s: float = 0.5, periods: float = 10.0,
                    min_sample_s: float = 0.0) -> float:
    """Shortest timed window that the total-energy counter resolves well. Units: s.

    ``max(min_window_s, periods x update_period_s, min_sample_s)``; with an unknown update
    period, ``max(min_window_s, min_sample_s)``.
    """
    w = max(min_window_s, min_sample_s)
    if update_period_s is not None and update_period_s > 0:
        w = max(w, periods * update_period_s)
    return w


def update_period_from_ticks(ticks: Sequence[tuple[float, float]]) -> float | None:
    """Median time between successive counter changes. Units: s.

    ``ticks``: ``(time_s, counter)`` at each observed change, in time order. ``None`` with
    fewer than three ticks (two intervals).
    """
    times = [t for t, _ in ticks]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    if len(gaps) < 2:
        return None
    mid = len(gaps) // 2
    return gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2


def power_between_ticks(ticks: Sequence[tuple[float, float]], t_start: float, t_end: float,
                        ) -> tuple[float, float] | None:
    """Mean power between the first and the last tick inside ``[t_start, t_end]``.

    ``ticks``: ``(time_s, energy_mJ)`` at each observed change of the energy counter.
    Returns ``(power_w, span_s)``, or ``None`` with fewer than two ticks inside.
    Units: W and s.
    """
    times = [t for t, _ in ticks]
    i = bisect.bisect_left(times, t_start)
    j = bisect.bisect_right(times, t_end) - 1
    if j - i < 1:
        return None
    (ta, ea), (tb, eb) = ticks[i], ticks[j]
    span = tb - ta
    if span <= 0:
        return None
    return (eb - ea) / 1e3 / span, span


def net_energy_j(gross_j: float, idle_power_w: float, seconds: float) -> float:
    """Net energy: gross minus what the idle device would have used in ``seconds``.

    Units: J (``idle_power_w`` in W, ``seconds`` in s). May be negative when the work draws
    less than the idle estimate (noise); it is reported as measured.
    """
    return gross_j - idle_power_w * seconds


def throttle_reason_names(mask: int) -> list[str]:
    """Names of the set bits of an NVML clocks-event (throttle) reasons mask."""
    names = [name for bit, name in _THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(_THROTTLE_BITS)
    if rest:
        names.append(f"0x{rest:x}")
    return names


def zeus_refusal(exc: BaseException) -> str | None:
    """What kind of refusal a Zeus GPU error is: ``"no_permission"``, ``"not_supported"``,
    ``"function_not_found"`` (the driver lacks the call), or ``None`` for anything else."""
    try:
        from zeus.device.gpu.common import (ZeusGPUFunctionNotFoundError, ZeusGPUNoPermissionError,
                                            ZeusGPUNotSupportedError)
    except ImportError:  # pragma: no cover - zeus is a dependency
        return None
    if isinstance(exc, ZeusGPUNoPermissionError):
        return "no_permission"
    if isinstance(exc, ZeusGPUNotSupportedError):
        return "not_supported"
    if isinstance(exc, ZeusGPUFunctionNotFoundError):
        return "function_not_found"
    return None


# --------------------------------------------------------------------------- clock locking


def default_lock_targets(gpu: Any) -> tuple[int | None, int | None]:
    """Clocks to lock to by default: ``(sm_mhz, mem_mhz)``. Units: MHz.

    ``gpu``: a Zeus GPU object (``zeus.device.gpu.common.GPU``). Memory: the highest
    supported memory clock; SM: the highest supported graphics clock at that memory
    clock. ``None`` where the device cannot say.
    """
    try:
        mem = max(int(c) for c in gpu.get_supported_memory_clocks())
    except Exception:  # noqa: BLE001 - not supported / empty list: no memory target
        mem = None
    try:
        sm = max(int(c) for c in gpu.get_supported_graphics_clocks(mem))
    except Exception:  # noqa: BLE001
        sm = None
    return sm or None, mem or None


class ClockLock:
    """Locks a GPU's SM/memory clocks and guarantees they are reset on every exit path.

    Args:
        gpu: a Zeus GPU object (``zeus.device.gpu.common.GPU``; a synthetic stand-in in
            tests): its ``set_gpu_locked_clocks``/``set_memory_locked_clocks`` lock and
            its ``reset_*`` methods restore.
        sm_mhz, mem_mhz: clocks to lock to (``None``: leave that domain alone). Units: MHz.
        smi_id: ``nvidia-smi -i`` id (UUID) for the fallback when the driver lacks the
            calls (NVIDIA only; ``None`` disables the fallback, e.g. on AMD).
        run: how to run the fallback command (for tests); default ``subprocess.run``.

    :attr:`state` records what was requested, applied, and why not.
    """

    def __init__(self, gpu: Any, sm_mhz: int | None, mem_mhz: int | None,
                 smi_id: str | None = None, run: Callable[..., Any] | None = None) -> None:
        self.gpu = gpu
        self.smi_id = smi_id
        self._run = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=30))
        self.state: dict[str, Any] = {"requested": True, "applied": False, "sm_locked_mhz": None,
                                      "mem_locked_mhz": None, "reason": None, "mem_reason": None,
                                      "method": None, "restored": None}
        self._want = (sm_mhz, mem_mhz)
        self._locked = {"sm": None, "mem": None}  # method used per domain: "zeus" | "smi"
        self._prev_handlers: dict[int, Any] = {}
        self._atexit = False

    # -- locking
    def _set(self, domain: str, mhz: int) -> str:
        fn = self.gpu.set_gpu_locked_clocks if domain == "sm" else self.gpu.set_memory_locked_clocks
        try:
            fn(mhz, mhz)
            return "zeus"
        except Exception as e:
            # only a driver without the call falls back to nvidia-smi; a refusal is final
            if zeus_refusal(e) != "function_not_found" or self.smi_id is None:
                raise
        return self._smi(["-lgc" if domain == "sm" else "-lmc", f"{mhz},{mhz}"])

    def _smi(self, args: list[str]) -> str:
        cmd = ["nvidia-smi"] + (["-i", self.smi_id] if self.smi_id else []) + args
        try:
            r = self._run(cmd)
        except (OSError, subprocess.SubprocessError) as e:
            raise RuntimeError(f"nvidia-smi unavailable ({one_line(e)})") from None
        if getattr(r, "returncode", 1) != 0:
            out = " ".join(((getattr(r, "stdout", "") or "") + (getattr(r, "stderr", "") or "")).split())
            raise RuntimeError(f"{' '.join(cmd)} failed: {out[:200]}")
        return "smi"

    def apply(self) -> dict[str, Any]:
        """Lock the clocks. Never raises: a refusal becomes a recorded opt-out."""
        sm, mem = self._want
        if sm is None:
            self.state["reason"] = "clock locking skipped: no SM clock to lock to (the device reported none)"
            return self.state
        try:
            self._locked["sm"] = self._set("sm", sm)
            self.state.update(applied=True, sm_locked_mhz=sm, method=self._locked["sm"])
        except Exception as e:
            kind = zeus_refusal(e)
            if kind == "no_permission":
                why = "not permitted (ZeusGPUNoPermissionError: needs root/SYS_ADMIN or a zeusd daemon)"
            elif kind == "not_supported":
                why = "not supported on this GPU (ZeusGPUNotSupportedError)"
            else:
                why = one_line(e)
            self.state["reason"] = f"clock locking skipped: {why}"
            return self.state
        # Only now can anything need restoring: arm the exit paths before the memory lock.
        self._arm()
        if mem is not None:
            try:
                self._locked["mem"] = self._set("mem", mem)
                self.state["mem_locked_mhz"] = mem
            except Exception as e:  # e.g. HBM parts: memory clock not lockable
                self.state["mem_reason"] = ("not supported (ZeusGPUNotSupportedError)"
                                            if zeus_refusal(e) == "not_supported" else one_line(e))
        return self.state

    def restore(self) -> None:
        """Reset every clock this object locked. Idempotent; never raises."""
        errors = []
        for domain in ("mem", "sm"):
            how = self._locked[domain]
            if how is None:
                continue
            self._locked[domain] = None  # once, even if the reset fails: never loop on it
            try:
                if how == "zeus":
                    (self.gpu.reset_gpu_locked_clocks if domain == "sm" else self.gpu.reset_memory_locked_clocks)()
                else:
                    self._smi(["-rgc" if domain == "sm" else "-rmc"])
            except Exception as e:  # noqa: BLE001 - restoring must not raise on an exit path
                errors.append(f"{domain}: {one_line(e)}")
        if self.state["applied"] and self.state["restored"] is None:
            self.state["restored"] = not errors
            if errors:
                self.state["restore_error"] = "; ".join(errors)
        self._disarm()

    @property
    def locked(self) -> bool:
        """Whether any clock is currently locked by this object."""
        return any(v is not None for v in self._locked.values())

    # -- exit paths
    def _arm(self) -> None:
        if not self._atexit:
            atexit.register(self.restore)
            self._atexit = True
        if threading.current_thread() is not threading.main_thread():
            self.state["signal_handlers"] = "not installed (not the main thread); atexit only"
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._prev_handlers[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # pragma: no cover - exotic embedding
                pass
        self.state["signal_handlers"] = "SIGINT, SIGTERM"

    def _disarm(self) -> None:
        for sig, prev in list(self._prev_handlers.items()):
            try:
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            except (ValueError, OSError):  # pragma: no cover - not the main thread
                pass
        self._prev_handlers.clear()
        if self._atexit:
            atexit.unregister(self.restore)
            self._atexit = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        """Restore the clocks, then let the signal do what it would have done."""
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        self.restore()  # also puts the previous handlers back
        if callable(prev):
            prev(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt
        elif prev == signal.SIG_IGN:
            return
        else:  # SIG_DFL: re-deliver, so the process ends the way the sender meant
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


# --------------------------------------------------------------------------- worker side


class NvmlExtras:
    """The only direct pynvml calls of carb, on the NVML handle Zeus opened (NVIDIA only).

    Zeus (0.16) has no getter for these, so they stay ours: the current SM/memory clocks
    and the clock-event (throttle) reasons (per-measurement telemetry), the UUID (to match
    the CUDA device torch uses to the NVML device), and driver/CUDA-driver/NVML versions
    and applications clocks (provenance). Every getter returns ``None`` for what the GPU
    does not report.

    Args:
        nvml: the ``pynvml`` module (a synthetic stand-in in tests).
        handle: the NVML device handle (Zeus's ``NVIDIAGPU.handle``).
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self._reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                            or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))

    @classmethod
    def of(cls, gpu: Any) -> "NvmlExtras | None":
        """The extras of a Zeus GPU object: an instance for an NVIDIA GPU, ``None`` otherwise."""
        try:
            from zeus.device.gpu.nvidia import NVIDIAGPU
        except ImportError:  # pragma: no cover - zeus is a dependency
            return None
        if not isinstance(gpu, NVIDIAGPU):
            return None
        import pynvml

        return cls(pynvml, gpu.handle)

    def _q(self, fn: Callable[[], Any]) -> Any:
        try:
            v = fn()
            return v.decode() if isinstance(v, bytes) else v
        except Exception:  # noqa: BLE001 - a reading this GPU lacks: missing, not fatal
            return None

    def clocks(self) -> dict[str, int | None]:
        """Current SM and memory clocks (MHz) and the clock-event (throttle) reasons mask."""
        n, h = self.nvml, self.handle
        return {"sm_clock_mhz": self._q(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                "mem_clock_mhz": self._q(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                "throttle_mask": self._q(lambda: self._reasons_fn(h)) if self._reasons_fn else None}

    def uuid(self) -> str | None:
        """The GPU's UUID (``GPU-...``)."""
        return self._q(lambda: self.nvml.nvmlDeviceGetUUID(self.handle))

    def facts(self) -> dict[str, Any]:
        """Driver, CUDA driver and NVML versions; applications clocks (MHz)."""
        n, h = self.nvml, self.handle
        return {"driver": self._q(lambda: n.nvmlSystemGetDriverVersion()),
                "cuda_driver": self._q(lambda: n.nvmlSystemGetCudaDriverVersion()),
                "nvml": self._q(lambda: n.nvmlSystemGetNVMLVersion()),
                "app_sm_clock_mhz": self._q(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_GRAPHICS)),
                "app_mem_clock_mhz": self._q(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_MEM))}


class GpuReadings:
    """One GPU's readings (worker side): energy and power through Zeus, clocks and
    throttle reasons through :class:`NvmlExtras` where the GPU is NVIDIA's.

    Args:
        gpu: a Zeus GPU object (``zeus.device.gpu.common.GPU``).
        extras: its :class:`NvmlExtras`, or ``None`` (AMD: clocks read as missing).
    """

    def __init__(self, gpu: Any, extras: NvmlExtras | None = None) -> None:
        self.gpu, self.extras = gpu, extras

    def energy_mj(self) -> int:
        """Total energy since the driver loaded (Zeus ``get_total_energy_consumption``). Units: mJ."""
        return int(self.gpu.get_total_energy_consumption())

    def power_w(self) -> float:
        """Current power draw: Zeus's instant power, else its average power. Units: W."""
        try:
            return self.gpu.get_instant_power_usage() / 1e3
        except Exception:  # noqa: BLE001 - older GPUs report only the averaged reading
            return self.gpu.get_average_power_usage() / 1e3

    def telemetry(self) -> dict[str, float | int | None]:
        """Power (W), SM and memory clocks (MHz), temperature (C), throttle-reasons mask."""
        out: dict[str, float | int | None] = {}
        for key, fn in (("power_w", self.power_w), ("temperature_c", self.gpu.get_gpu_temperature)):
            try:
                out[key] = fn()
            except Exception:  # noqa: BLE001 - a sensor this GPU lacks: missing, not fatal
                out[key] = None
        clocks = self.extras.clocks() if self.extras is not None else {}
        for key in ("sm_clock_mhz", "mem_clock_mhz", "throttle_mask"):
            out[key] = clocks.get(key)
        return out


class _FakeZeusGPU:
    """TEST-ONLY synthetic Zeus GPU object (the methods of ``zeus.device.gpu.common.GPU``
    that carb calls): an energy counter that advances at a constant ``power_w`` and
    updates every ``period_s`` seconds, clock setters that record their calls and can be
    made to refuse (``refuse``: method name -> exception to raise). Every reading is
    synthetic."""

    def __init__(self, power_w: float = 100.0, period_s: float = 0.02,
                 refuse: dict[str, BaseException] | None = None) -> None:
        self.power_w, self.period_s = power_w, period_s
        self.refuse = dict(refuse or {})
        self.calls: list[tuple[Any, ...]] = []
        self.t0 = time.perf_counter()

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.refuse:
            raise self.refuse[name]

    def get_name(self) -> str:
        return "fake GPU (synthetic, test-only)"

    def supports_get_total_energy_consumption(self) -> bool:
        return True

    def get_total_energy_consumption(self) -> int:  # mJ
        steps = math.floor((time.perf_counter() - self.t0) / self.period_s)
        return int(steps * self.period_s * self.power_w * 1e3)

    def get_instant_power_usage(self) -> int:  # mW
        return int(self.power_w * 1e3)

    def get_average_power_usage(self) -> int:  # mW
        return int(self.power_w * 1e3)

    def get_gpu_temperature(self) -> int:  # C
        return 40

    def get_power_management_limit(self) -> int:  # mW
        return 700_000

    def get_power_management_limit_constraints(self) -> tuple[int, int]:  # mW
        return 200_000, 700_000

    def get_persistence_mode(self) -> bool:
        return True

    def get_supported_memory_clocks(self) -> list[int]:  # MHz
        return [2619, 1593]

    def get_supported_graphics_clocks(self, memory_clock_mhz: int | None = None) -> list[int]:  # MHz
        return [1980, 1500, 1005]

    def set_gpu_locked_clocks(self, min_clock_mhz: int, max_clock_mhz: int, block: bool = True) -> None:
        self._call("set_gpu_locked_clocks", min_clock_mhz, max_clock_mhz)

    def set_memory_locked_clocks(self, min_clock_mhz: int, max_clock_mhz: int, block: bool = True) -> None:
        self._call("set_memory_locked_clocks", min_clock_mhz, max_clock_mhz)

    def reset_gpu_locked_clocks(self, block: bool = True) -> None:
        self._call("reset_gpu_locked_clocks")

    def reset_memory_locked_clocks(self, block: bool = True) -> None:
        self._call("reset_memory_locked_clocks")

    def set_power_management_limit(self, power_limit_mw: int, block: bool = True) -> None:
        self._call("set_power_management_limit", power_limit_mw)


class _FakeNvmlClocks:
    """TEST-ONLY synthetic stand-in for the pynvml calls of :class:`NvmlExtras`."""

    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:
        return {1: 1000, 2: 2000}[kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return "GPU-00000000-fake-synthetic"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "fake (synthetic)"


class _Sampler:
    """Background thread: timestamps every change of the energy counter (polled every
    ``poll_s``) and samples telemetry every ``telemetry_s``. Units: s, mJ."""

    def __init__(self, dev: Any, poll_s: float = 0.001, telemetry_s: float | None = 0.1,
                 energy: bool = True) -> None:
        self.dev, self.poll_s, self.telemetry_s, self.energy = dev, poll_s, telemetry_s, energy
        self.times: list[float] = []
        self.ticks: list[tuple[float, int]] = []
        self.telemetry: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.reads = 0
        self.read_s = 0.0

    @property
    def read_ms(self) -> float | None:
        """Mean duration of one energy-counter read. Units: ms."""
        return self.read_s / self.reads * 1e3 if self.reads else None

    def __enter__(self) -> "_Sampler":
        self._thread = threading.Thread(target=self._loop, name="carb-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        try:
            last = self.dev.energy_mj() if self.energy else None
            next_tel = time.perf_counter()
            while not self._stop.is_set():
                now = time.perf_counter()
                if self.energy:
                    e = self.dev.energy_mj()
                    t = time.perf_counter()
                    self.reads += 1
                    self.read_s += t - now
                    t = (now + t) / 2  # the reading happened somewhere inside the call
                    if e != last:
                        last = e
                        self.ticks.append((t, e))
                        self.times.append(t)
                if self.telemetry_s is not None and now >= next_tel:
                    rec = self.dev.telemetry()
                    rec["t"] = now
                    self.telemetry.append(rec)
                    next_tel = now + self.telemetry_s
                time.sleep(self.poll_s)
        except Exception as e:  # noqa: BLE001 - reported, never kills the worker
            self.error = one_line(e)

    def ticks_between(self, t_start: float, t_end: float) -> list[tuple[float, int]]:
        """Ticks with ``t_start <= t <= t_end`` (a consistent snapshot)."""
        n = len(self.ticks)
        times = self.times[:n]
        i = bisect.bisect_left(times, t_start)
        j = bisect.bisect_right(times, t_end)
        return self.ticks[i:j]


def _summarize_telemetry(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median/min/max of each telemetry field and the OR of the throttle masks."""
    out: dict[str, Any] = {"telemetry_samples": len(recs)}
    for key in ("power_w", "sm_clock_mhz", "mem_clock_mhz", "temperature_c"):
        vals = sorted(float(r[key]) for r in recs if r.get(key) is not None)
        if vals:
            out[key] = vals[len(vals) // 2]
            out[f"{key}_min"], out[f"{key}_max"] = vals[0], vals[-1]
        else:
            out[key] = None
    masks = [int(r["throttle_mask"]) for r in recs if r.get("throttle_mask") is not None]
    if masks:
        m = 0
        for v in masks:
            m |= v
        out["throttle_mask"] = m
        out["throttle_reasons"] = throttle_reason_names(m)
    else:
        out["throttle_mask"] = None
        out["throttle_reasons"] = None
    return out


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
        return (self.torch.cuda.max_memory_allocated(self.device),
                self.torch.cuda.max_memory_reserved(self.device))

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


def _calibrate(dev: Any, energy_ok: bool, seconds: float) -> dict[str, Any]:
    """On the idle GPU: the counter's update period and the idle power (same tick method
    as the measurement). Units: s, W."""
    out: dict[str, Any] = {"calibration_s": seconds}
    t0 = time.perf_counter()
    with _Sampler(dev, poll_s=0.0005, telemetry_s=0.25, energy=energy_ok) as s:
        time.sleep(seconds)
        # a slow counter: wait for at least 4 ticks, up to 3x the planned time
        while energy_ok and len(s.ticks) < 4 and time.perf_counter() - t0 < 3 * seconds:
            time.sleep(0.05)
    ticks = list(s.ticks)
    out["update_period_s"] = update_period_from_ticks(ticks) if energy_ok else None
    out["calibration_ticks"] = len(ticks)
    out["energy_read_ms"] = s.read_ms
    pw = power_between_ticks(ticks, -math.inf, math.inf) if energy_ok else None
    tel = _summarize_telemetry(s.telemetry)
    if pw is not None:
        out["idle_power_w"], out["idle_power_source"] = pw[0], "energy counter ticks"
    elif tel.get("power_w") is not None:
        out["idle_power_w"], out["idle_power_source"] = tel["power_w"], "zeus get_instant_power_usage"
    else:
        out["idle_power_w"], out["idle_power_source"] = None, None
    out["idle_telemetry"] = tel
    if s.error:
        out["sampler_error"] = s.error
    return out


def _run_config(job: dict[str, Any], ops: Any, dev: Any, calib: dict[str, Any]) -> dict[str, Any]:
    """Measure one config in the worker (raises on failure; the caller classifies)."""
    import importlib

    torch = ops.torch
    config: Config = job["config"]
    protocol: Protocol = job["protocol"]
    extra: dict[str, Any] = {}
    problem = ops.precision_problem(config.precision)
    if problem:
        return {"status": "unsupported", "message": problem, "extra": extra}
    arch = importlib.import_module(job["arch"])
    dtype = arch.dtype_of(config.precision)
    energy_ok = bool(job["energy_ok"])
    period = calib.get("update_period_s")
    idle_w = calib.get("idle_power_w")
    guard_s = period or 0.0
    # "every" (the default): each window skips the counter's first period after its start;
    # "first": only the first does, the later ones follow a busy window of the same config
    # with no idle in between (an experiment for a GPU session: scripts/validate_gpu.py
    # measures both; shorter windows would then do)
    guard_first_only = job.get("window_guard", "every") == "first"
    window_s = (energy_window_s(period, job["min_window_s"], job.get("energy_periods", 10.0), protocol.min_sample_s)
                if energy_ok
                else max(protocol.min_sample_s, 0.05))

    ops.empty_cache()
    inject_fault(job.get("fault"))
    t_build = time.perf_counter()
    model = (job.get("build") or arch.build)(config).to(dtype)  # built and cast on the host: no fp32 copy on the GPU
    ops.sync()
    ops.reset_peak()
    model = model.to(ops.device)
    x = torch.randn(config.batch, 3, config.input_size, config.input_size, dtype=dtype, device=ops.device)
    ops.sync()
    extra["build_s"] = round(time.perf_counter() - t_build, 4)

    start, end = ops.events()
    with torch.inference_mode():
        def step() -> None:
            model(x)
            ops.sync()

        n_warm, per_iter_s = warm_up(step, protocol)
        k = k_first = iters_per_sample(per_iter_s, window_s)
        missed = 0
        timed_s = 0.0
        windows_done = 0

        with _Sampler(dev, energy=energy_ok) as sampler:
            def sample() -> dict[str, float]:
                nonlocal missed, k, timed_s, windows_done
                ta = time.perf_counter()
                start.record()
                for _ in range(k):
                    model(x)
                end.record()
                end.synchronize()
                tb = time.perf_counter()
                lat_s = start.elapsed_time(end) / 1e3 / k
                timed_s += lat_s * k
                out = {"latency_ms": lat_s * 1e3}
                # the warm-up timed synchronised forwards; pipelined ones can be faster, so
                # grow the window if it fell short of what the energy counter needs
                if tb - ta < 0.9 * window_s:
                    k = max(k + 1, math.ceil(k * window_s / max(tb - ta, 1e-9)))
                if energy_ok:
                    # skip one update period after the launch: the counter may report with
                    # a lag, and its first busy tick could still hold idle time
                    guard = guard_s if (windows_done == 0 or not guard_first_only) else 0.0
                    windows_done += 1
                    t0 = ta + min(guard, (tb - ta) / 4)
                    pw = power_between_ticks(sampler.ticks_between(t0, tb), t0, tb)
                    if pw is None:
                        missed += 1
                    else:
                        gross = pw[0] * lat_s
                        out["energy_gross_j"] = gross
                        if idle_w is not None:
                            out["energy_j"] = net_energy_j(gross, idle_w, lat_s)
                return out

            run = run_samples(sample, protocol, targets=("latency_ms", "energy_gross_j"))
        tel = _summarize_telemetry(sampler.telemetry)
        extra["energy_read_ms"] = sampler.read_ms
        if sampler.error:
            extra["sampler_error"] = sampler.error

    peak, reserved = ops.peak_bytes()
    stats = run.stats()
    extra.update(tel)
    extra.update(warmup_iters=n_warm, iters_per_sample=k, iters_per_sample_first=k_first, window_s=window_s, stop_reason=run.stop_reason,
                 update_period_s=period, idle_power_w=idle_w, energy_windows=len(run.samples.get("energy_gross_j", [])),
                 energy_windows_missed=missed, memory_reserved_mb=reserved / 1e6,
                 window_guard="first" if guard_first_only else "every",
                 latency_samples_ms=[round(v, 6) for v in run.samples["latency_ms"]])
    reason = None
    if energy_ok and "energy_gross_j" not in stats:
        reason = "no window spanned two energy-counter updates"
    elif energy_ok and idle_w is None:
        reason = "idle power unknown: net energy not computed"
    return {"status": "ok", "latency_ms": stats["latency_ms"], "energy_gross_j": stats.get("energy_gross_j"),
            "energy_j": stats.get("energy_j"), "memory_mb": peak / 1e6, "energy_missing_reason": reason,
            "timed_s": timed_s, "extra": extra}


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


def match_gpu(uuids: Sequence[str | None], torch_uuid: str | None, index: int) -> tuple[int, str]:
    """Which of Zeus's GPUs is CUDA device ``index``: ``(position, how)``.

    ``uuids``: the UUID of each GPU Zeus tracks (``None`` where unknown, e.g. AMD);
    ``torch_uuid``: torch's UUID of the CUDA device. Matched by UUID (``GPU-``/``MIG-``
    prefixes ignored), else by position (Zeus lists the visible devices in the order
    CUDA/HIP number them unless ``CUDA_DEVICE_ORDER`` differs), flagged unverified.

    Raises:
        RuntimeError: no GPU at that position.
    """
    def bare(u: str) -> str:
        return u.removeprefix("GPU-").removeprefix("MIG-").lower()

    if torch_uuid:
        for i, u in enumerate(uuids):
            if u and bare(u) == bare(torch_uuid):
                return i, "uuid"
    if 0 <= index < len(uuids):
        return index, "index (unverified)"
    raise RuntimeError(f"cuda:{index}: Zeus sees {len(uuids)} GPU(s); none matches")


def _open_zeus_gpu(index: int) -> tuple[Any, NvmlExtras | None, dict[str, Any]]:
    """The Zeus GPU object of CUDA device ``index``, its :class:`NvmlExtras` (NVIDIA) and
    facts about the match."""
    import torch
    from zeus.device import get_gpus

    gpus = get_gpus()  # NVML, else amdsmi; raises ZeusGPUInitError when neither works
    extras = [NvmlExtras.of(g) for g in gpus.gpus]
    uuids = [e.uuid() if e is not None else None for e in extras]
    props = torch.cuda.get_device_properties(index)
    i, how = match_gpu(uuids, str(getattr(props, "uuid", "") or "") or None, index)
    vendor = "nvidia" if extras[i] is not None else type(gpus.gpus[i]).__name__.removesuffix("GPU").lower()
    return gpus.gpus[i], extras[i], {"zeus_index": i, "nvml_match": how, "uuid": uuids[i], "vendor": vendor}


def _energy_check(dev: GpuReadings) -> tuple[bool, str | None]:
    """Whether the total-energy counter is readable, and why not."""
    try:
        if not dev.gpu.supports_get_total_energy_consumption():
            return False, ("total energy counter not supported on this GPU (Zeus: needs NVIDIA Volta or newer, "
                           "or an AMD GPU whose counter Zeus trusts)")
        dev.energy_mj()
        return True, None
    except Exception as e:  # noqa: BLE001
        if zeus_refusal(e) == "not_supported":
            return False, f"total energy counter not supported on this GPU ({one_line(e)})"
        return False, f"energy counter unreadable through Zeus: {one_line(e)}"


def _zeus_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("zeus")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return None


def _worker_main(conn: Any, opts: dict[str, Any]) -> None:
    """The persistent worker: set up CUDA and the Zeus device, then serve requests until told to stop."""
    sys.setswitchinterval(0.0005)  # so the sampler thread gets the GIL promptly (tick timing)
    try:
        import torch

        if opts["fake"]:
            ops: Any = _HostOps()
            dev = GpuReadings(_FakeZeusGPU(period_s=opts.get("fake_period_s", 0.02)),
                              NvmlExtras(_FakeNvmlClocks(), None))
            hello = {"name": "fake GPU (synthetic, test-only)", "uuid": None, "nvml_match": None,
                     "zeus_index": 0, "vendor": "fake",
                     "torch_cuda": None, "cudnn": None, "capability": None, "total_memory_mb": None}
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
            hello = dict(facts, name=props.name, capability=f"{props.major}.{props.minor}",
                         total_memory_mb=props.total_memory / 1e6, torch_cuda=torch.version.cuda,
                         torch_hip=getattr(torch.version, "hip", None),
                         cudnn=torch.backends.cudnn.version(),
                         cudnn_benchmark=torch.backends.cudnn.benchmark,
                         allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                         allow_tf32_cudnn=torch.backends.cudnn.allow_tf32)
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


# --------------------------------------------------------------------------- backend


class CudaBackend(Backend):
    """Measures configs on one GPU: NVIDIA, or AMD through the same Zeus path (untested);
    see the module docstring for definitions and for which part is Zeus's.

    Args:
        device: ``cuda`` or ``cuda:<index>``.
        lock_clocks: lock SM/memory clocks for the backend's lifetime (reset on close,
            exit and SIGINT/SIGTERM); ``False`` leaves them to the driver. Without
            permission it carries on unlocked and records why.
        sm_clock_mhz, mem_clock_mhz: clocks to lock to (default: see
            :func:`default_lock_targets`). Units: MHz.
        protocol: the repeat/stop protocol; default ``Protocol.default_for("cuda")``.
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` in the worker (default off:
            autotuning makes latency depend on the tuner's choice; recorded).
        min_window_s: floor of a timed window, seconds. A window also lasts at least
            ``energy_periods`` update periods of the energy counter
            (:func:`energy_window_s`), which dominates wherever the counter updates every
            10 ms or slower; 0.1 s keeps six windows (the fewest that give a median CI)
            near a second per config.
        energy_periods: a timed window lasts at least this many update periods of the
            energy counter (default 10). Fewer make each config faster to measure where
            the counter is slow (an H200's updates every 100 ms: 10 periods are 1 s a
            window, 6 s a config): the window's energy is taken between counter updates
            either way, so fewer periods only widen each window's share of the tick-time
            jitter (about one counter read, a few ms). At least 3 (the first period after
            launch is skipped, and a window needs two ticks after it).
        calibration_s: idle seconds at start-up to measure the counter's update period and
            the idle power. Units: s.
        start_timeout_s: how long the worker may take to start (CUDA init). Units: s.
        _fault: TEST-ONLY: makes the worker fail (see :class:`~carb.measure.cpu.CpuBackend`).
        _fake: TEST-ONLY: run the whole path on the CPU against a synthetic Zeus device
            (an energy counter of a constant synthetic power), so the plumbing is testable
            without a GPU. Its figures are synthetic.
        _gpu: TEST-ONLY: the Zeus-like GPU object the parent locks clocks on and reads
            provenance from when ``_fake`` (default: a fresh synthetic one).
        _arch: TEST-ONLY: module providing ``build`` and ``dtype_of``.
    """

    def __init__(self, device: str = "cuda:0", *, lock_clocks: bool = True, sm_clock_mhz: int | None = None,
                 mem_clock_mhz: int | None = None, protocol: Protocol | None = None,
                 cudnn_benchmark: bool = False, min_window_s: float = 0.1, energy_periods: float = 10.0,
                 calibration_s: float = 2.0,
                 start_timeout_s: float = 180.0, _fault: str | None = None, _fake: bool = False,
                 _gpu: Any = None, _arch: str = "carb.families.arch") -> None:
        m = re.fullmatch(r"cuda(?::(\d+))?", device.strip().lower())
        if not m:
            raise ValueError(f"device {device!r}: expected 'cuda' or 'cuda:<index>'")
        self.index = int(m.group(1) or 0)
        self.device = f"cuda:{self.index}"
        if _fault is not None and _fault not in FAULTS:
            raise ValueError(f"_fault: {_fault!r} not one of {', '.join(FAULTS)}")
        if not _fake:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(f"{self.device}: no CUDA device available (torch {torch.__version__}, "
                                   f"torch.cuda.is_available() is False)")
            if self.index >= torch.cuda.device_count():
                raise ValueError(f"{self.device}: only {torch.cuda.device_count()} CUDA device(s) visible")
        self.protocol = check_protocol(protocol or Protocol.default_for("cuda"))
        self.lock_clocks = bool(lock_clocks)
        self.cudnn_benchmark = bool(cudnn_benchmark)
        self.min_window_s = float(min_window_s)
        if not (isinstance(energy_periods, (int, float)) and 3 <= energy_periods <= 1000):
            raise ValueError(f"energy_periods {energy_periods!r}: expected a number of counter updates in [3, 1000]")
        self.energy_periods = float(energy_periods)
        self._window_guard = "every"  # EXPERIMENT-ONLY ("first"): see _run_config and validate_gpu.py
        self.calibration_s = float(calibration_s)
        self.start_timeout_s = float(start_timeout_s)
        self._fault, self._fake, self._arch = _fault, _fake, _arch
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.hello: dict[str, Any] = {}
        self.calibration: dict[str, Any] = {}
        self.worker_restarts = 0
        self._gpu: Any = _gpu  # Zeus GPU object of the parent (clock lock, provenance)
        self._extras: NvmlExtras | None = None
        self.clock_lock: ClockLock | None = None
        self.clock_state: dict[str, Any] = {"requested": self.lock_clocks, "applied": False,
                                            "reason": None if self.lock_clocks else "lock_clocks=False (opt-out)"}
        self._closed = False
        try:
            self._start_worker()
            self._open_parent_gpu()
            if self.lock_clocks:
                self._lock(sm_clock_mhz, mem_clock_mhz)
            reply, failure = self._request(("calibrate", {"seconds": self.calibration_s}),
                                           self.start_timeout_s + 10 * self.calibration_s)
            if failure is not None:
                raise RuntimeError(f"{self.device}: calibration failed: {failure[1]}")
            self.calibration = reply
        except BaseException:
            self.close()
            raise

    # -- worker management
    def _start_worker(self) -> None:
        recv_end, send_end = self._ctx.Pipe(duplex=True)
        opts = {"index": self.index, "cudnn_benchmark": self.cudnn_benchmark, "fake": self._fake,
                "calib": self.calibration}
        proc = self._ctx.Process(target=_worker_main, args=(send_end, opts), daemon=True,
                                 name=f"carb-cuda-{self.index}")
        proc.start()
        send_end.close()
        self._proc, self._conn = proc, recv_end
        hello, failure = wait_reply(proc, recv_end, time.perf_counter() + self.start_timeout_s)
        if failure is not None or hello.get("status") != "ready":
            msg = failure[1] if failure else hello.get("message", "unknown")
            self._stop_worker()
            raise RuntimeError(f"{self.device}: worker did not start: {msg}")
        self.hello = hello

    def _stop_worker(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        try:
            if proc.is_alive():
                conn.send(("stop", None))
                proc.join(10)
        except (OSError, ValueError, BrokenPipeError):
            pass
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        try:
            conn.close()
        except OSError:
            pass

    def _request(self, msg: tuple[str, Any], timeout_s: float) -> tuple[Any, tuple[str, str] | None]:
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as e:
            return None, ("crash", f"worker unreachable ({one_line(e)})")
        return wait_reply(self._proc, self._conn, time.perf_counter() + timeout_s)

    # -- Zeus in the parent: clock lock and provenance
    def _open_parent_gpu(self) -> None:
        if self._fake:
            self._gpu = self._gpu if self._gpu is not None else _FakeZeusGPU()
            return
        from zeus.device import get_gpus

        # same environment as the worker, so Zeus lists the same GPUs in the same order
        self._gpu = get_gpus().gpus[self.hello["zeus_index"]]
        self._extras = NvmlExtras.of(self._gpu)

    def _lock(self, sm: int | None, mem: int | None) -> None:
        dsm, dmem = default_lock_targets(self._gpu)
        smi_id = self.hello.get("uuid") if self.hello.get("vendor") == "nvidia" else None
        self.clock_lock = ClockLock(self._gpu, sm or dsm, mem or dmem, smi_id=smi_id)
        self.clock_state = self.clock_lock.apply()

    def provenance(self) -> dict[str, Any]:
        """Device, driver, software, clocks, power limits, sensor and protocol facts."""
        facts = host_facts()
        h = self.hello
        facts.update(device=self.device, device_name=h.get("name"), gpu_name=h.get("name"), gpu_uuid=h.get("uuid"),
                     nvml_match=h.get("nvml_match"), zeus_index=h.get("zeus_index"), gpu_vendor=h.get("vendor"),
                     compute_capability=h.get("capability"), torch_hip=h.get("torch_hip"),
                     total_memory_mb=h.get("total_memory_mb"), cuda_torch=h.get("torch_cuda"),
                     cudnn=h.get("cudnn"), cudnn_benchmark=self.cudnn_benchmark,
                     allow_tf32_matmul=h.get("allow_tf32_matmul"), allow_tf32_cudnn=h.get("allow_tf32_cudnn"),
                     clock_lock=dict(self.clock_state),
                     energy_sensor={"kind": "zeus get_total_energy_consumption", "available": bool(h.get("energy_ok")),
                                    "reason": h.get("energy_reason")},
                     update_period_s=self.calibration.get("update_period_s"),
                     energy_read_ms=self.calibration.get("energy_read_ms"),
                     idle_power_w=self.calibration.get("idle_power_w"),
                     idle_power_source=self.calibration.get("idle_power_source"),
                     idle_telemetry=self.calibration.get("idle_telemetry"),
                     min_window_s=self.min_window_s, energy_periods=self.energy_periods,
                     memory_definition=MEMORY_DEFINITION,
                     protocol=self.protocol.to_dict(), ci_method="distribution-free binomial order statistics, 95%",
                     worker_restarts=self.worker_restarts, fake=self._fake or None)
        facts["zeus"] = _zeus_version()
        if self._gpu is not None:
            g = self._gpu

            def q(fn: Callable[[], Any]) -> Any:
                try:
                    return fn()
                except Exception:  # noqa: BLE001 - a fact this GPU does not report
                    return None

            graphics = q(lambda: g.get_supported_graphics_clocks(max(g.get_supported_memory_clocks())))
            mems = q(g.get_supported_memory_clocks)
            limits = q(g.get_power_management_limit_constraints)
            facts.update(
                power_limit_w=q(lambda: g.get_power_management_limit() / 1e3),
                power_limit_range_w=[v / 1e3 for v in limits] if limits else None,
                max_sm_clock_mhz=max(graphics) if graphics else None,
                max_mem_clock_mhz=max(mems) if mems else None,
                persistence_mode=q(g.get_persistence_mode),
            )
        if self._extras is not None:
            facts.update(self._extras.facts())
        return facts

    # -- measuring
    def measure(self, config: Config, protocol: Protocol | None = None) -> Measurement:
        """Measure one config in the persistent worker. Never raises for config-level
        failures; a worker that crashed or timed out is replaced before the next config."""
        protocol = check_protocol(protocol) if protocol is not None else self.protocol
        t0 = time.perf_counter()
        if self._closed:
            raise RuntimeError(f"{self.device}: backend is closed")
        if self._proc is None or not self._proc.is_alive():
            try:
                self._stop_worker()
                self._start_worker()
                self.worker_restarts += 1
            except Exception as e:
                return Measurement(status="error", message=f"worker restart failed: {one_line(e)}",
                                   wall_s=time.perf_counter() - t0)
        job = {"config": config, "build": builder_of(config), "protocol": protocol, "arch": self._arch,
               "fault": self._fault,
               "min_window_s": self.min_window_s, "energy_periods": self.energy_periods,
               "window_guard": self._window_guard}
        reply, failure = self._request(("measure", job), protocol.timeout_s)
        wall = time.perf_counter() - t0
        reason = self.hello.get("energy_reason")
        if failure is not None:
            status, message = failure
            if status == "timeout":
                message = f"no result within timeout_s={protocol.timeout_s:g} s; worker killed"
            self._stop_worker()  # a fresh one is started on the next call
            return Measurement(status=status, message=message, wall_s=wall, energy_missing_reason=reason)
        if reply.get("restart"):
            self._stop_worker()
        extra = dict(reply.get("extra") or {})
        extra["clock_locked"] = bool(self.clock_lock and self.clock_lock.locked)
        if reply["status"] != "ok":
            return Measurement(status=reply["status"], message=reply.get("message", ""), wall_s=wall,
                               energy_missing_reason=reason, extra=extra)
        return Measurement(status="ok", latency_ms=reply["latency_ms"], energy_j=reply["energy_j"],
                           energy_gross_j=reply["energy_gross_j"], memory_mb=reply["memory_mb"],
                           energy_missing_reason=reason or reply.get("energy_missing_reason"),
                           timed_s=reply["timed_s"], wall_s=wall, extra=extra)

    def close(self) -> None:
        """Stop the worker and reset any clock this backend locked. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop_worker()
        finally:
            if self.clock_lock is not None:
                self.clock_lock.restore()
                self.clock_state = dict(self.clock_lock.state)
            # Zeus's GPUs object is a process-wide singleton that owns NVML: not shut down here
