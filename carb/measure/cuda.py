"""GPU backend (NVIDIA; AMD through the same path): latency, energy and peak memory.

Latency from CUDA events, energy from the driver's total-energy counter (read through
Zeus), peak memory from the allocator.

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

Modules
-------
Here: :class:`CudaBackend` (the parent's side). :mod:`carb.measure._cuda_device`: Zeus
readings, :class:`NvmlExtras`, GPU matching and the test-only fakes;
:mod:`carb.measure._cuda_clocks`: the clock lock; :mod:`carb.measure._cuda_energy`: the
energy windows, the sampler thread and the idle calibration; :mod:`carb.measure._cuda_worker`:
the persistent worker and one config's measurement. Every name stays importable from here.
"""

from __future__ import annotations

import multiprocessing
import re
import time
from typing import Any, Callable

from ._common import FAULTS, builder_of, host_facts, one_line, unguarded_main_script, wait_reply
from ._cuda_clocks import ClockLock, default_lock_targets
from ._cuda_device import (  # noqa: F401 - kept importable from here (tests, scripts)
    GpuReadings,
    NvmlExtras,
    _FakeNvmlClocks,
    _FakeZeusGPU,
    _open_zeus_gpu,
    _zeus_version,
    match_gpu,
    throttle_reason_names,
    zeus_refusal,
)
from ._cuda_energy import energy_window_s, net_energy_j, power_between_ticks, update_period_from_ticks
from ._cuda_worker import _HostOps, _run_config, _worker_main  # noqa: F401 - kept importable from here (tests)
from .base import Backend, ConfigLike, Measurement, Protocol
from .protocol import check_protocol

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
    "GpuReadings",
    "match_gpu",
    "MEMORY_DEFINITION",
]

MEMORY_DEFINITION = (
    "torch.cuda.max_memory_allocated after reset_peak_memory_stats before the model moves "
    "to the GPU (weights, input, activations, workspaces; no CUDA context); MB = 1e6 bytes"
)


class CudaBackend(Backend):
    """Measures configs on one GPU: NVIDIA, or AMD through the same Zeus path (untested).

    See the module docstring for definitions and for which part is Zeus's.

    Args:
        device: ``cuda`` or ``cuda:<index>``.
        lock_clocks: lock SM/memory clocks for the backend's lifetime (reset on close,
            exit and SIGINT/SIGTERM); ``False`` leaves them to the driver. Without
            permission it carries on unlocked and records why.
        sm_clock_mhz: SM clock to lock to (default: see :func:`default_lock_targets`). Units: MHz.
        mem_clock_mhz: memory clock to lock to (default: see :func:`default_lock_targets`). Units: MHz.
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

    def __init__(
        self,
        device: str = "cuda:0",
        *,
        lock_clocks: bool = True,
        sm_clock_mhz: int | None = None,
        mem_clock_mhz: int | None = None,
        protocol: Protocol | None = None,
        cudnn_benchmark: bool = False,
        min_window_s: float = 0.1,
        energy_periods: float = 10.0,
        calibration_s: float = 2.0,
        start_timeout_s: float = 180.0,
        _fault: str | None = None,
        _fake: bool = False,
        _gpu: Any = None,
        _arch: str = "carb.families.arch",
    ) -> None:
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
                raise RuntimeError(
                    f"{self.device}: no CUDA device available (torch {torch.__version__}, "
                    f"torch.cuda.is_available() is False)"
                )
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
        problem = unguarded_main_script()
        if problem:
            raise RuntimeError(problem)
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self.hello: dict[str, Any] = {}
        self.calibration: dict[str, Any] = {}
        self.worker_restarts = 0
        self._gpu: Any = _gpu  # Zeus GPU object of the parent (clock lock, provenance)
        self._extras: NvmlExtras | None = None
        self.clock_lock: ClockLock | None = None
        self.clock_state: dict[str, Any] = {
            "requested": self.lock_clocks,
            "applied": False,
            "reason": None if self.lock_clocks else "lock_clocks=False (opt-out)",
        }
        self._closed = False
        try:
            self._start_worker()
            self._open_parent_gpu()
            if self.lock_clocks:
                self._lock(sm_clock_mhz, mem_clock_mhz)
            reply, failure = self._request(
                ("calibrate", {"seconds": self.calibration_s}), self.start_timeout_s + 10 * self.calibration_s
            )
            if failure is not None:
                raise RuntimeError(f"{self.device}: calibration failed: {failure[1]}")
            self.calibration = reply
        except BaseException:
            self.close()
            raise

    # -- worker management
    def _start_worker(self) -> None:
        recv_end, send_end = self._ctx.Pipe(duplex=True)
        opts = {
            "index": self.index,
            "cudnn_benchmark": self.cudnn_benchmark,
            "fake": self._fake,
            "calib": self.calibration,
        }
        proc = self._ctx.Process(
            target=_worker_main, args=(send_end, opts), daemon=True, name=f"carb-cuda-{self.index}"
        )
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
        facts.update(
            device=self.device,
            device_name=h.get("name"),
            gpu_name=h.get("name"),
            gpu_uuid=h.get("uuid"),
            nvml_match=h.get("nvml_match"),
            zeus_index=h.get("zeus_index"),
            gpu_vendor=h.get("vendor"),
            compute_capability=h.get("capability"),
            torch_hip=h.get("torch_hip"),
            total_memory_mb=h.get("total_memory_mb"),
            cuda_torch=h.get("torch_cuda"),
            cudnn=h.get("cudnn"),
            cudnn_benchmark=self.cudnn_benchmark,
            allow_tf32_matmul=h.get("allow_tf32_matmul"),
            allow_tf32_cudnn=h.get("allow_tf32_cudnn"),
            clock_lock=dict(self.clock_state),
            energy_sensor={
                "kind": "zeus get_total_energy_consumption",
                "available": bool(h.get("energy_ok")),
                "reason": h.get("energy_reason"),
            },
            update_period_s=self.calibration.get("update_period_s"),
            energy_read_ms=self.calibration.get("energy_read_ms"),
            idle_power_w=self.calibration.get("idle_power_w"),
            idle_power_source=self.calibration.get("idle_power_source"),
            idle_telemetry=self.calibration.get("idle_telemetry"),
            min_window_s=self.min_window_s,
            energy_periods=self.energy_periods,
            memory_definition=MEMORY_DEFINITION,
            protocol=self.protocol.to_dict(),
            ci_method="distribution-free binomial order statistics, 95%",
            worker_restarts=self.worker_restarts,
            fake=self._fake or None,
        )
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
    def measure(self, config: ConfigLike, protocol: Protocol | None = None) -> Measurement:
        """Measure one config of any registered family in the persistent worker (see :meth:`Backend.measure`).

        A worker that crashed or timed out is replaced ahead of the next config.

        Raises:
            RuntimeError: the backend is closed.
        """
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
                return Measurement(
                    status="error", message=f"worker restart failed: {one_line(e)}", wall_s=time.perf_counter() - t0
                )
        job = {
            "config": config,
            "build": builder_of(config),
            "protocol": protocol,
            "arch": self._arch,
            "fault": self._fault,
            "min_window_s": self.min_window_s,
            "energy_periods": self.energy_periods,
            "window_guard": self._window_guard,
        }
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
            return Measurement(
                status=reply["status"],
                message=reply.get("message", ""),
                wall_s=wall,
                energy_missing_reason=reason,
                extra=extra,
            )
        return Measurement(
            status="ok",
            latency_ms=reply["latency_ms"],
            energy_j=reply["energy_j"],
            energy_gross_j=reply["energy_gross_j"],
            memory_mb=reply["memory_mb"],
            energy_missing_reason=reason or reply.get("energy_missing_reason"),
            timed_s=reply["timed_s"],
            wall_s=wall,
            extra=extra,
        )

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
