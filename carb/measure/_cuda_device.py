"""The GPU backend's device layer: Zeus readings, the few direct NVML calls, and test-only fakes.

Zeus (``zeus.device``) discovers the GPU and reads its energy counter, power and
temperature; :class:`NvmlExtras` is the one place of direct pynvml calls (what Zeus has
no getter for), on the handle Zeus opened. See :mod:`carb.measure.cuda` for whose is what.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

from ._common import one_line

__all__ = ["NvmlExtras", "GpuReadings", "match_gpu", "throttle_reason_names", "zeus_refusal"]

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


def throttle_reason_names(mask: int) -> list[str]:
    """Names of the set bits of an NVML clocks-event (throttle) reasons mask."""
    names = [name for bit, name in _THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(_THROTTLE_BITS)
    if rest:
        names.append(f"0x{rest:x}")
    return names


def zeus_refusal(exc: BaseException) -> str | None:
    """What kind of refusal a Zeus GPU error is.

    ``"no_permission"``, ``"not_supported"``, ``"function_not_found"`` (the driver lacks the
    call), or ``None`` for anything else.
    """
    try:
        from zeus.device.gpu.common import (
            ZeusGPUFunctionNotFoundError,
            ZeusGPUNoPermissionError,
            ZeusGPUNotSupportedError,
        )
    except ImportError:  # pragma: no cover - zeus is a dependency
        return None
    if isinstance(exc, ZeusGPUNoPermissionError):
        return "no_permission"
    if isinstance(exc, ZeusGPUNotSupportedError):
        return "not_supported"
    if isinstance(exc, ZeusGPUFunctionNotFoundError):
        return "function_not_found"
    return None


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
        self._reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

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
        return {
            "sm_clock_mhz": self._q(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "mem_clock_mhz": self._q(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "throttle_mask": self._q(lambda: self._reasons_fn(h)) if self._reasons_fn else None,
        }

    def uuid(self) -> str | None:
        """The GPU's UUID (``GPU-...``)."""
        return self._q(lambda: self.nvml.nvmlDeviceGetUUID(self.handle))

    def facts(self) -> dict[str, Any]:
        """Driver, CUDA driver and NVML versions; applications clocks (MHz)."""
        n, h = self.nvml, self.handle
        return {
            "driver": self._q(lambda: n.nvmlSystemGetDriverVersion()),
            "cuda_driver": self._q(lambda: n.nvmlSystemGetCudaDriverVersion()),
            "nvml": self._q(lambda: n.nvmlSystemGetNVMLVersion()),
            "app_sm_clock_mhz": self._q(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_GRAPHICS)),
            "app_mem_clock_mhz": self._q(lambda: n.nvmlDeviceGetApplicationsClock(h, n.NVML_CLOCK_MEM)),
        }


class GpuReadings:
    """One GPU's readings (worker side).

    Energy and power through Zeus, clocks and throttle reasons through :class:`NvmlExtras`
    where the GPU is NVIDIA's.

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
    """The Zeus GPU object of CUDA device ``index``, its :class:`NvmlExtras` (NVIDIA) and facts about the match."""
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
            return False, (
                "total energy counter not supported on this GPU (Zeus: needs NVIDIA Volta or newer, "
                "or an AMD GPU whose counter Zeus trusts)"
            )
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


class _FakeZeusGPU:
    """TEST-ONLY synthetic Zeus GPU object: the methods of ``zeus.device.gpu.common.GPU`` that carb calls.

    An energy counter that advances at a constant ``power_w`` and
    updates every ``period_s`` seconds, clock setters that record their calls and can be
    made to refuse (``refuse``: method name -> exception to raise). Every reading is
    synthetic.
    """

    def __init__(
        self, power_w: float = 100.0, period_s: float = 0.02, refuse: dict[str, BaseException] | None = None
    ) -> None:
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
