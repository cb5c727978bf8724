"""Clock locking of the GPU backend: lock SM/memory clocks through Zeus, reset them on every exit path.

:class:`ClockLock` locks through Zeus (``nvidia-smi`` when the driver lacks the calls) and
restores on :meth:`ClockLock.restore`, at exit (``atexit``) and on SIGINT/SIGTERM.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
from typing import Any, Callable

from ._common import one_line
from ._cuda_device import zeus_refusal

__all__ = ["ClockLock", "default_lock_targets"]


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

    def __init__(
        self,
        gpu: Any,
        sm_mhz: int | None,
        mem_mhz: int | None,
        smi_id: str | None = None,
        run: Callable[..., Any] | None = None,
    ) -> None:
        self.gpu = gpu
        self.smi_id = smi_id
        self._run = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=30))
        self.state: dict[str, Any] = {
            "requested": True,
            "applied": False,
            "sm_locked_mhz": None,
            "mem_locked_mhz": None,
            "reason": None,
            "mem_reason": None,
            "method": None,
            "restored": None,
        }
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
                self.state["mem_reason"] = (
                    "not supported (ZeusGPUNotSupportedError)" if zeus_refusal(e) == "not_supported" else one_line(e)
                )
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
