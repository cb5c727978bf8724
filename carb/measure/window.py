"""Measure any block of code in this process: :class:`CostMonitor` with ``begin_window`` / ``end_window``.

Zeus's window form, for code that is not a network CARB can build (a pre-processing step, a whole pipeline, a
training step). A window measures, in this process:

- **wall time** and this process's **CPU time** between its two calls (a GPU's queued work is waited for first);
- **peak memory** above the resident set at ``begin_window``: the high-water mark of this process's resident set
  (``VmHWM``, reset at each begin through ``/proc/self/clear_refs``) on a CPU; the peak of torch's allocator on a
  GPU. Nested windows each keep their own peak;
- **energy** where the device has a counter: the CPU package's RAPL zones (gross: the whole package, whatever
  else runs), a GPU's through Zeus (:class:`zeus.monitor.ZeusMonitor`); ``None`` with the reason elsewhere.

A name measured again and again accumulates: :meth:`CostMonitor.summary` gives the median and its 95% interval over
the windows of that name (:func:`carb.measure.median_ci`), the repeat protocol done by hand.

Example:
    >>> from carb.measure.window import CostMonitor
    >>> mon = CostMonitor()
    >>> for _ in range(5):
    ...     mon.begin_window("sum")
    ...     _ = sum(range(10_000))
    ...     w = mon.end_window("sum")
    >>> w.latency_ms > 0 and mon.summary("sum").n == 5
    True
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ._cpu_process import _reset_hwm, _rss_kb, _status_kb
from .protocol import median_ci

__all__ = ["CostMonitor", "Window", "WindowSummary"]


@dataclass(frozen=True)
class Window:
    """One measured window.

    Attributes:
        name: the window's name.
        latency_ms: wall time between begin and end. Units: ms.
        cpu_ms: this process's CPU time meanwhile, every thread (``time.process_time``). Units: ms.
        memory_mb: peak memory above the resident set (CPU) or the allocator's memory (GPU) at begin. Units: MB.
        energy_j: energy meanwhile where a counter is readable (gross on a CPU), else ``None``. Units: J.
        energy_missing_reason: why ``energy_j`` is ``None``.
        memory_method: how ``memory_mb`` was read.
    """

    name: str
    latency_ms: float
    cpu_ms: float
    memory_mb: float | None
    energy_j: float | None
    energy_missing_reason: str | None = None
    memory_method: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The window as a dict."""
        return asdict(self)


@dataclass(frozen=True)
class WindowSummary:
    """The windows of one name, pooled.

    Attributes:
        name: the windows' name.
        n: how many.
        latency_ms: median wall time. Units: ms.
        latency_ms_lo, latency_ms_hi: its 95% interval (``nan`` with too few windows). Units: ms.
        memory_mb: the largest window's peak memory. Units: MB.
        energy_j: median energy, where every window had one. Units: J.
    """

    name: str
    n: int
    latency_ms: float
    latency_ms_lo: float
    latency_ms_hi: float
    memory_mb: float | None
    energy_j: float | None


@dataclass
class _Open:
    t0: float
    cpu0: float
    rss_kb: int
    hwm_kb: int = 0
    energy0: Any = None
    gpu_mem0: int = 0
    gpu_peak: int = 0


@dataclass
class CostMonitor:
    """Measures named windows of code on one device of this process.

    Args:
        device: ``cpu``, or ``cuda`` / ``cuda:<index>`` (torch's allocator peak and, through Zeus, energy).

    Attributes:
        windows: every ended window, in order.
    """

    device: str = "cpu"
    windows: list[Window] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.device = self.device.strip().lower()
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device: unknown value {self.device!r} (expected cpu, cuda or cuda:<index>)")
        self._open: dict[str, _Open] = {}
        self._can_reset = os.path.exists("/proc/self/clear_refs")
        self._energy, self._energy_reason = self._energy_counter()

    def _energy_counter(self) -> tuple[Any, str | None]:
        if self.device == "cpu":
            from ._rapl import Rapl

            rapl = Rapl.discover()
            return (rapl, None) if rapl.available else (None, rapl.reason)
        try:
            from zeus.monitor import ZeusMonitor

            index = int(self.device.partition(":")[2] or 0)
            return ZeusMonitor(gpu_indices=[index], approx_instant_energy=True), None
        except Exception as e:  # noqa: BLE001 - no GPU, no NVML, no Zeus: energy is missing, not an error
            return None, f"no GPU energy counter ({type(e).__name__}: {str(e)[:100]})"

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def begin_window(self, name: str) -> None:
        """Start measuring the window ``name``.

        Raises:
            ValueError: a window of that name is open already.
        """
        if name in self._open:
            raise ValueError(f"window {name!r} is open already")
        self._sync()
        if self.device == "cpu":
            # the peak so far belongs to every open window: fold it in before resetting it for this one
            hwm = _status_kb("VmHWM").get("VmHWM", 0)
            for w in self._open.values():
                w.hwm_kb = max(w.hwm_kb, hwm)
            if self._can_reset:
                _reset_hwm()
            op = _Open(time.perf_counter(), time.process_time(), _rss_kb())
        else:
            import torch

            for w in self._open.values():
                w.gpu_peak = max(w.gpu_peak, torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
            op = _Open(time.perf_counter(), time.process_time(), 0, gpu_mem0=torch.cuda.memory_allocated(self.device))
        if self._energy is not None:
            if self.device == "cpu":
                op.energy0 = self._energy.read_uj()
            else:
                self._energy.begin_window(f"carb-{name}", sync_execution=False)
        op.t0 = time.perf_counter()
        self._open[name] = op

    def end_window(self, name: str) -> Window:
        """Stop measuring the window ``name`` and return what it cost.

        Raises:
            ValueError: no window of that name is open.
        """
        if name not in self._open:
            raise ValueError(f"window {name!r} is not open (begin_window first)")
        self._sync()
        t1, cpu1 = time.perf_counter(), time.process_time()
        op = self._open.pop(name)
        energy = None
        if self._energy is not None:
            if self.device == "cpu":
                pkg, dram = self._energy.delta_j(op.energy0, self._energy.read_uj())
                energy = pkg + (dram or 0.0)
            else:
                energy = float(self._energy.end_window(f"carb-{name}", sync_execution=False).total_energy)
        if self.device == "cpu":
            hwm = max(op.hwm_kb, _status_kb("VmHWM").get("VmHWM", 0))
            memory = max(hwm - op.rss_kb, 0) * 1024 / 1e6
            method = (
                "VmHWM (clear_refs reset at begin) - VmRSS at begin"
                if self._can_reset
                else "VmHWM - VmRSS at begin (no clear_refs: a peak before the window can show)"
            )
        else:
            import torch

            peak = max(op.gpu_peak, torch.cuda.max_memory_allocated(self.device))
            memory = max(peak - op.gpu_mem0, 0) / 1e6
            method = "torch.cuda.max_memory_allocated - memory_allocated at begin"
        w = Window(
            name=name,
            latency_ms=(t1 - op.t0) * 1e3,
            cpu_ms=(cpu1 - op.cpu0) * 1e3,
            memory_mb=memory,
            energy_j=energy,
            energy_missing_reason=None if energy is not None else self._energy_reason,
            memory_method=method,
        )
        self.windows.append(w)
        return w

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[list[Window]]:
        """``with mon.window(name) as w:`` measures the block; ``w[0]`` is its :class:`Window` afterwards."""
        out: list[Window] = []
        self.begin_window(name)
        try:
            yield out
        finally:
            out.append(self.end_window(name))

    def summary(self, name: str) -> WindowSummary:
        """The windows named ``name``, pooled: median latency with its 95% interval, peak memory, median energy.

        Raises:
            ValueError: no window of that name has ended.
        """
        import statistics

        ws = [w for w in self.windows if w.name == name]
        if not ws:
            raise ValueError(f"no window named {name!r} has ended")
        lat = [w.latency_ms for w in ws]
        med = statistics.median(lat)
        lo, hi = median_ci(lat)
        mems = [w.memory_mb for w in ws if w.memory_mb is not None]
        ens = [w.energy_j for w in ws]
        return WindowSummary(
            name=name,
            n=len(ws),
            latency_ms=float(med),
            latency_ms_lo=float(lo),
            latency_ms_hi=float(hi),
            memory_mb=max(mems) if mems else None,
            energy_j=statistics.median(ens) if all(e is not None for e in ens) else None,  # type: ignore[type-var]
        )
