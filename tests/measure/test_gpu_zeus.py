"""The GPU backend's own logic, tested on the CPU against a synthetic Zeus device.

Everything named ``fake``/``synthetic`` here is made up for the tests (an energy counter
of a constant synthetic power, clock setters that record their calls or refuse with
Zeus's real exception types); no figure from it is a measurement. What is tested is
carb's part (see carb/measure/cuda.py's docstring): the clock lock and its exit paths and
permission fallbacks, the tick-aligned energy windows, the idle-power subtraction, the
telemetry that ``--no-lock-clocks`` records, and that the names we call on Zeus and
pynvml exist. The real-GPU test lives in test_measure.py and skips without a GPU.
"""

from __future__ import annotations

import os
import re
import signal
import sys

import pytest
from zeus.device.gpu.common import (
    GPU,
    ZeusGPUFunctionNotFoundError,
    ZeusGPUNoPermissionError,
    ZeusGPUNotSupportedError,
)

from carb.measure.base import Protocol
from carb.measure.cuda import (
    ClockLock,
    CudaBackend,
    GpuReadings,
    NvmlExtras,
    _FakeNvmlClocks,
    _FakeZeusGPU,
    _HostOps,
    _run_config,
    default_lock_targets,
    match_gpu,
    zeus_refusal,
)
from tests._helpers import ROOT, TINY

# --------------------------------------------------------------------------- clock lock (synthetic device)


def test_zeus_refusal_kinds():
    assert zeus_refusal(ZeusGPUNoPermissionError("x")) == "no_permission"
    assert zeus_refusal(ZeusGPUNotSupportedError("x")) == "not_supported"
    assert zeus_refusal(ZeusGPUFunctionNotFoundError("x")) == "function_not_found"
    assert zeus_refusal(RuntimeError("x")) is None


def test_clock_lock_applies_and_restores_once():
    gpu = _FakeZeusGPU()
    lock = ClockLock(gpu, 1500, 2619)
    state = lock.apply()
    assert state["applied"] and state["method"] == "zeus"
    assert state["sm_locked_mhz"] == 1500 and state["mem_locked_mhz"] == 2619 and lock.locked
    lock.restore()
    lock.restore()  # idempotent
    assert [c[0] for c in gpu.calls] == [
        "set_gpu_locked_clocks",
        "set_memory_locked_clocks",
        "reset_memory_locked_clocks",
        "reset_gpu_locked_clocks",
    ]
    assert gpu.calls[0][1:] == (1500, 1500)
    assert lock.state["restored"] is True and not lock.locked


@pytest.mark.parametrize(
    "exc,word",
    [
        (ZeusGPUNoPermissionError("needs root"), "permitted"),
        (ZeusGPUNotSupportedError("nope"), "supported"),
        (RuntimeError("zeusd socket gone"), "zeusd socket gone"),
    ],
)
def test_clock_lock_opts_out_on_a_refusal(exc, word):
    gpu = _FakeZeusGPU(refuse={"set_gpu_locked_clocks": exc})
    before = signal.getsignal(signal.SIGTERM)
    lock = ClockLock(gpu, 1500, 2619, smi_id="GPU-fake")
    state = lock.apply()
    assert not state["applied"] and word in state["reason"] and state["reason"].startswith("clock locking skipped")
    assert signal.getsignal(signal.SIGTERM) == before  # nothing to restore: no handlers installed
    lock.restore()
    assert [c[0] for c in gpu.calls] == ["set_gpu_locked_clocks"]  # no reset of what was never set


def test_clock_lock_keeps_the_sm_lock_when_memory_is_not_lockable():
    gpu = _FakeZeusGPU(refuse={"set_memory_locked_clocks": ZeusGPUNotSupportedError("HBM")})
    lock = ClockLock(gpu, 1500, 2619)
    state = lock.apply()
    assert state["applied"] and state["mem_locked_mhz"] is None and "supported" in state["mem_reason"]
    lock.restore()
    assert [c[0] for c in gpu.calls] == ["set_gpu_locked_clocks", "set_memory_locked_clocks", "reset_gpu_locked_clocks"]


def test_clock_lock_falls_back_to_nvidia_smi_only_when_the_driver_lacks_the_call():
    gpu = _FakeZeusGPU(refuse={"set_gpu_locked_clocks": ZeusGPUFunctionNotFoundError("old driver")})
    cmds = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    lock = ClockLock(gpu, 1500, None, smi_id="GPU-fake", run=lambda cmd: cmds.append(cmd) or Done())
    assert lock.apply()["method"] == "smi"
    lock.restore()
    assert cmds == [["nvidia-smi", "-i", "GPU-fake", "-lgc", "1500,1500"], ["nvidia-smi", "-i", "GPU-fake", "-rgc"]]
    # without an nvidia-smi id (AMD) there is no fallback: a recorded opt-out
    lock = ClockLock(_FakeZeusGPU(refuse={"set_gpu_locked_clocks": ZeusGPUFunctionNotFoundError("x")}), 1500, None)
    assert not lock.apply()["applied"]


def test_clock_lock_restores_on_sigterm_then_hands_the_signal_on():
    gpu = _FakeZeusGPU()
    seen = []
    original = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))  # stands in for the program's handler
    try:
        lock = ClockLock(gpu, 1500, None)
        lock.apply()
        assert signal.getsignal(signal.SIGTERM) == lock._on_signal
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]  # the previous handler ran ...
        assert [c[0] for c in gpu.calls] == ["set_gpu_locked_clocks", "reset_gpu_locked_clocks"]  # ... after the reset
        assert signal.getsignal(signal.SIGTERM) != lock._on_signal  # and ours is gone
    finally:
        signal.signal(signal.SIGTERM, original)


def test_clock_lock_restore_survives_a_failing_reset():
    gpu = _FakeZeusGPU(refuse={"reset_gpu_locked_clocks": ZeusGPUNoPermissionError("lost root")})
    lock = ClockLock(gpu, 1500, None)
    lock.apply()
    lock.restore()  # must not raise on an exit path
    assert lock.state["restored"] is False and "lost root" in lock.state["restore_error"]
    lock.restore()
    assert [c[0] for c in gpu.calls].count("reset_gpu_locked_clocks") == 1  # never loops on it


def test_default_lock_targets_from_supported_clocks():
    assert default_lock_targets(_FakeZeusGPU()) == (1980, 2619)

    class Mute(_FakeZeusGPU):
        def get_supported_memory_clocks(self):
            raise ZeusGPUNotSupportedError("no list")

        def get_supported_graphics_clocks(self, memory_clock_mhz=None):
            raise ZeusGPUNotSupportedError("no list")

    assert default_lock_targets(Mute()) == (None, None)
    state = ClockLock(Mute(), None, None).apply()
    assert not state["applied"] and "no SM clock" in state["reason"]


# --------------------------------------------------------------------------- readings (synthetic device)


def test_readings_go_through_zeus_and_the_nvml_extras():
    dev = GpuReadings(_FakeZeusGPU(power_w=250.0), NvmlExtras(_FakeNvmlClocks(), None))
    t = dev.telemetry()
    assert t == {"power_w": 250.0, "temperature_c": 40, "sm_clock_mhz": 1000, "mem_clock_mhz": 2000, "throttle_mask": 0}
    assert dev.energy_mj() >= 0

    class AveragedOnly(_FakeZeusGPU):
        def get_instant_power_usage(self):
            raise ZeusGPUNotSupportedError("no instant power")

        def get_gpu_temperature(self):
            raise ZeusGPUNotSupportedError("no sensor")

    # AMD-like: no NVML extras, so clocks are missing (None), never guessed
    t = GpuReadings(AveragedOnly(power_w=80.0), None).telemetry()
    assert t["power_w"] == 80.0 and t["temperature_c"] is None
    assert t["sm_clock_mhz"] is None and t["throttle_mask"] is None


def test_nvml_extras_only_for_nvidia_gpus():
    assert NvmlExtras.of(_FakeZeusGPU()) is None
    assert NvmlExtras(_FakeNvmlClocks(), None).facts()["driver"] == "fake (synthetic)"
    assert NvmlExtras(_FakeNvmlClocks(), None).facts()["cuda_driver"] is None  # the stand-in lacks it


def test_match_gpu_by_uuid_then_by_position():
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    assert match_gpu(uuids, "bbbb", 0) == (1, "uuid")  # CUDA order differs from Zeus's
    assert match_gpu(uuids, "GPU-AAAA", 1) == (0, "uuid")
    assert match_gpu([None, None], None, 1) == (1, "index (unverified)")  # AMD: no UUIDs
    with pytest.raises(RuntimeError, match="none matches"):
        match_gpu(uuids, "cccc", 5)


def _fake_nvidia_gpus(monkeypatch, uuids):
    """Zeus's ``get_gpus`` replaced by synthetic NVIDIAGPU objects (no NVML behind them)
    whose UUIDs pynvml reports as ``uuids``."""
    import pynvml
    import zeus.device
    from zeus.device.gpu.nvidia import NVIDIAGPU

    class SyntheticNvidiaGPU(NVIDIAGPU):
        def __init__(self, i):  # no NVML: only what carb reads
            self.gpu_index, self.handle = i, f"handle-{i}"
            self.calls = []

        def get_supported_memory_clocks(self):
            return [2619]

        def get_supported_graphics_clocks(self, memory_clock_mhz=None):
            return [1980, 1005]

        def set_gpu_locked_clocks(self, lo, hi, block=True):
            self.calls.append(("set_gpu_locked_clocks", lo, hi))

        def set_memory_locked_clocks(self, lo, hi, block=True):
            self.calls.append(("set_memory_locked_clocks", lo, hi))

    class SyntheticGPUs:
        gpus = [SyntheticNvidiaGPU(i) for i in range(len(uuids))]

    gpus = SyntheticGPUs()
    monkeypatch.setattr(zeus.device, "get_gpus", lambda: gpus)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: uuids[int(h.rsplit("-", 1)[1])])
    return gpus


def test_worker_finds_its_gpu_through_zeus_by_uuid(monkeypatch):
    import torch

    from carb.measure.cuda import _open_zeus_gpu

    gpus = _fake_nvidia_gpus(monkeypatch, ["GPU-aaaa", "GPU-bbbb"])

    class Props:  # torch numbers this GPU 0, Zeus (NVML order) 1
        uuid = "bbbb"

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    gpu, extras, facts = _open_zeus_gpu(0)
    assert gpu is gpus.gpus[1] and extras is not None and extras.handle == "handle-1"
    assert facts == {"zeus_index": 1, "nvml_match": "uuid", "uuid": "GPU-bbbb", "vendor": "nvidia"}


def test_parent_opens_the_workers_gpu_and_locks_it_through_zeus(monkeypatch):
    gpus = _fake_nvidia_gpus(monkeypatch, ["GPU-aaaa", "GPU-bbbb"])
    b = CudaBackend.__new__(CudaBackend)  # the parent's part only: no worker, no CUDA
    b._fake, b._gpu, b.hello = False, None, {"zeus_index": 1, "uuid": "GPU-bbbb", "vendor": "nvidia"}
    b._open_parent_gpu()
    assert b._gpu is gpus.gpus[1] and b._extras is not None
    b._lock(None, None)
    assert b.clock_state["applied"] and b.clock_lock.smi_id == "GPU-bbbb"
    assert gpus.gpus[1].calls == [("set_gpu_locked_clocks", 1980, 1980), ("set_memory_locked_clocks", 2619, 2619)]
    b.clock_lock._disarm()  # no reset on this synthetic object; drop the exit hooks


#: the GPU backend's code: carb/measure/cuda.py and its private modules (_cuda_*.py)
GPU_CODE = sorted((ROOT / "carb/measure").glob("*cuda*.py"))


def _past_docstring(text: str) -> str:
    return text[text.index('"""', text.index('"""') + 3) :]


def test_every_name_the_gpu_code_calls_exists_in_zeus_and_pynvml():
    """Guards the paths only a GPU machine runs against misspelt Zeus or NVML calls."""
    import pynvml

    text = "".join(p.read_text() for p in GPU_CODE) + (ROOT / "scripts/validate_gpu.py").read_text()
    zeus_calls = set(re.findall(r"\b(?:gpu|g)\.((?:get|set|reset|supports)_\w+)", text))
    assert {"get_total_energy_consumption", "set_gpu_locked_clocks", "reset_gpu_locked_clocks"} <= zeus_calls
    assert sorted(n for n in zeus_calls if not hasattr(GPU, n)) == []
    nvml_names = set(re.findall(r"(?:\.|\")(nvml[A-Z]\w+|NVML_[A-Z0-9_]+)\b", text))
    assert len(nvml_names) >= 6
    assert sorted(n for n in nvml_names if not hasattr(pynvml, n)) == []


def test_no_direct_nvml_outside_the_documented_place():
    """pynvml is called only through NvmlExtras (what Zeus has no getter for)."""
    body = "".join(_past_docstring(p.read_text()) for p in GPU_CODE)  # past each module docstring
    extras = body[body.index("class NvmlExtras:") : body.index("class GpuReadings:")]
    rest = body.replace(extras, "")
    assert "class NvmlExtras:" in extras and re.search(r"\.nvml[A-Z]", extras)
    assert re.findall(r"\.nvml[A-Z]\w*|import pynvml", rest) == []
    assert "nvmlInit" not in body and "nvmlShutdown" not in body  # Zeus owns NVML's lifetime


# --------------------------------------------------------------------------- energy windows (in-process, synthetic)


def _job(protocol: Protocol, energy_ok: bool = True) -> dict:
    return {
        "config": TINY,
        "build": None,
        "protocol": protocol,
        "arch": "carb.families.arch",
        "fault": None,
        "min_window_s": 0.1,
        "energy_ok": energy_ok,
    }


@pytest.mark.slow  # alone: its synthetic counter runs on the wall clock, and a descheduled poll moves a window's power
def test_tick_aligned_windows_and_idle_subtraction_on_a_synthetic_counter(monkeypatch):
    """A synthetic 250 W counter updating every 10 ms, idle calibrated at 100 W: every
    window's busy power is 250 W (tick-aligned, so no partial period is counted), gross
    = busy power x latency and net = gross - 100 W x latency, sample by sample."""
    cuda = sys.modules[_run_config.__module__]  # where _run_config looks its helpers up

    seen = []
    real = cuda.run_samples

    def recording(sample, protocol, targets):
        def wrapped():
            out = sample()
            seen.append(out)
            return out

        return real(wrapped, protocol, targets=targets)

    monkeypatch.setattr(cuda, "run_samples", recording)
    dev = GpuReadings(_FakeZeusGPU(power_w=250.0, period_s=0.01), NvmlExtras(_FakeNvmlClocks(), None))
    p = Protocol(ci_target=0.01, min_repeats=3, max_repeats=5, max_time_s=1.0, warmup=1, warmup_s=0.0, timeout_s=60)
    # windows of >= 0.3 s: a descheduled poll on a loaded 2-core machine (tens of ms) stays within the 10% below
    r = _run_config({**_job(p), "min_window_s": 0.3}, _HostOps(), dev, {"update_period_s": 0.01, "idle_power_w": 100.0})
    assert r["status"] == "ok" and r["energy_missing_reason"] is None
    assert r["extra"]["energy_windows"] >= 1 and r["extra"]["window_s"] >= 0.3
    windows = [s for s in seen if "energy_gross_j" in s]
    assert len(windows) == r["extra"]["energy_windows"] >= 1
    for s in windows:
        lat_s = s["latency_ms"] / 1e3
        # tick timestamps carry the poll jitter (1 ms) of a loaded CPU over >= 0.1 s spans
        assert s["energy_gross_j"] / lat_s == pytest.approx(250.0, rel=0.1)
        assert s["energy_j"] == pytest.approx(s["energy_gross_j"] - 100.0 * lat_s, rel=1e-9)
    assert r["extra"]["sm_clock_mhz"] == 1000 and r["extra"]["throttle_reasons"] == []


def _record_windows(monkeypatch) -> tuple[list[tuple[float, float]], list[float]]:
    """Record each energy window's span (t_start, t_end) and its busy power (W) as the
    worker computes them: lists the caller reads (and clears) between configs."""
    cuda = sys.modules[_run_config.__module__]  # where _run_config looks its helpers up

    real = cuda.power_between_ticks
    spans: list[tuple[float, float]] = []
    powers: list[float] = []

    def recording(ticks, t_start, t_end):
        spans.append((t_start, t_end))
        pw = real(ticks, t_start, t_end)
        if pw is not None:
            powers.append(pw[0])
        return pw

    monkeypatch.setattr(cuda, "power_between_ticks", recording)
    return spans, powers


@pytest.mark.parametrize("periods, window", [(10.0, 0.5), (4.0, 0.2), (None, 0.5)])
def test_window_spans_energy_periods_counter_updates(periods, window, monkeypatch):
    """SYNTHETIC counter updating every 50 ms: a window lasts `energy_periods` updates
    (default 10), and its busy power is still the counter's (tick-aligned either way)."""
    _, powers = _record_windows(monkeypatch)
    dev = GpuReadings(_FakeZeusGPU(power_w=250.0, period_s=0.05), NvmlExtras(_FakeNvmlClocks(), None))
    p = Protocol(ci_target=0.0, min_repeats=1, max_repeats=2, max_time_s=0.5, warmup=1, warmup_s=0.0, timeout_s=60)
    job = _job(p)
    if periods is not None:
        job["energy_periods"] = periods
    r = _run_config(job, _HostOps(), dev, {"update_period_s": 0.05, "idle_power_w": 100.0})
    assert r["status"] == "ok" and r["extra"]["window_s"] == pytest.approx(window)
    # the counter's power read between ticks (the tick test above checks it window by window)
    assert powers and min(abs(w - 250.0) for w in powers) <= 25.0


def test_window_guard_first_skips_the_first_period_in_the_first_window_only(monkeypatch):
    """SYNTHETIC counter updating every 50 ms, 0.25 s windows: by default every window's
    energy span starts one period (50 ms) after the previous window ended; with the
    experiment's window_guard "first", the later windows' spans start where the window
    starts, right after the previous one; busy power stays the counter's either way."""
    import statistics

    spans, powers = _record_windows(monkeypatch)
    dev = GpuReadings(_FakeZeusGPU(power_w=250.0, period_s=0.05), NvmlExtras(_FakeNvmlClocks(), None))
    p = Protocol(ci_target=0.0, min_repeats=5, max_repeats=5, max_time_s=20.0, warmup=1, warmup_s=0.0, timeout_s=60)
    gaps = {}
    for guard in ("every", "first"):
        spans.clear()
        powers.clear()
        job = {**_job(p), "energy_periods": 5.0, "window_guard": guard}
        r = _run_config(job, _HostOps(), dev, {"update_period_s": 0.05, "idle_power_w": 100.0})
        assert r["status"] == "ok" and r["extra"]["window_guard"] == guard
        # each window's busy power (medians of products would mix in the CPU's latency jitter)
        assert statistics.median(powers) == pytest.approx(250.0, rel=0.1)
        # from the end of one window's span to the start of the next one's
        gaps[guard] = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    # every: the guard, min(50 ms, a quarter of the window), plus the time between windows;
    # first: only the time between windows (a few ms of bookkeeping)
    assert gaps["every"] and gaps["first"] and statistics.median(gaps["every"]) >= 0.03
    assert statistics.median(gaps["first"]) < 0.015


@pytest.mark.parametrize("bad", [2.9, 0, -1, float("nan"), "4"])
def test_energy_periods_below_three_or_not_a_number_is_refused(bad):
    with pytest.raises(ValueError, match="energy_periods"):
        CudaBackend("cuda:0", _fake=True, energy_periods=bad)


def test_energy_periods_reaches_the_worker_and_the_provenance():
    with CudaBackend("cuda:0", _fake=True, lock_clocks=False, calibration_s=0.2, energy_periods=4, protocol=FAST) as b:
        m = b.measure(TINY)
        assert m.status == "ok" and b.provenance()["energy_periods"] == 4.0
        period = m.extra["update_period_s"]
        assert m.extra["window_s"] == pytest.approx(max(b.min_window_s, 4 * period))


def test_characterize_refuses_energy_periods_on_the_cpu(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "carb.cli",
            "characterize",
            "--space",
            "tiny",
            "--store",
            str(tmp_path / "s.duckdb"),
            "--energy-periods",
            "4",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip() == "error: --energy-periods applies to --device cuda only"
    assert not (tmp_path / "s.duckdb").exists()


def test_no_counter_and_unknown_idle_power_give_missing_reasons_not_estimates():
    dev = GpuReadings(_FakeZeusGPU(power_w=250.0, period_s=0.01), None)
    p = Protocol(min_repeats=2, max_repeats=2, max_time_s=0.5, warmup=1, warmup_s=0.0, timeout_s=60)
    r = _run_config(_job(p, energy_ok=False), _HostOps(), dev, {})
    assert r["status"] == "ok" and r["energy_gross_j"] is None and r["energy_j"] is None
    r = _run_config(_job(p), _HostOps(), dev, {"update_period_s": 0.01, "idle_power_w": None})
    assert r["energy_gross_j"] is not None and r["energy_j"] is None
    assert "idle power unknown" in r["energy_missing_reason"]


# --------------------------------------------------------------------------- the backend's exit paths (synthetic)


FAST = Protocol(ci_target=0.05, min_repeats=2, max_repeats=3, max_time_s=0.3, warmup=1, warmup_s=0.0, timeout_s=60)


@pytest.mark.slow
@pytest.mark.shares_cpu  # the clock calls and statuses of a synthetic device: no timing is checked
def test_backend_locks_and_restores_and_no_lock_clocks_records_the_clocks():
    gpu = _FakeZeusGPU()
    with CudaBackend("cuda:0", _fake=True, _gpu=gpu, calibration_s=0.2, min_window_s=0.05, protocol=FAST) as b:
        assert b.clock_state["applied"] and b.clock_state["sm_locked_mhz"] == 1980
        assert b.measure(TINY).extra["clock_locked"] is True
    assert [c[0] for c in gpu.calls][-2:] == ["reset_memory_locked_clocks", "reset_gpu_locked_clocks"]
    assert b.clock_state["restored"] is True

    untouched = _FakeZeusGPU()
    with CudaBackend(
        "cuda:0", _fake=True, _gpu=untouched, lock_clocks=False, calibration_s=0.2, min_window_s=0.05, protocol=FAST
    ) as b:
        m = b.measure(TINY)
        prov = b.provenance()
    assert untouched.calls == []  # --no-lock-clocks: nothing set, nothing reset
    assert m.status == "ok" and m.extra["clock_locked"] is False
    assert m.extra["sm_clock_mhz"] == 1000 and m.extra["mem_clock_mhz"] == 2000  # the clocks it ran at
    assert prov["clock_lock"]["applied"] is False and "opt-out" in prov["clock_lock"]["reason"]
    assert prov["power_limit_w"] == 700.0 and prov["max_sm_clock_mhz"] == 1980


@pytest.mark.slow
@pytest.mark.shares_cpu  # the clock calls and statuses of a synthetic device: no timing is checked
def test_backend_carries_on_unlocked_without_permission():
    gpu = _FakeZeusGPU(refuse={"set_gpu_locked_clocks": ZeusGPUNoPermissionError("needs root")})
    with CudaBackend("cuda:0", _fake=True, _gpu=gpu, calibration_s=0.2, min_window_s=0.05, protocol=FAST) as b:
        assert b.measure(TINY).status == "ok"
        assert not b.clock_state["applied"] and "permitted" in b.clock_state["reason"]
    assert [c[0] for c in gpu.calls] == ["set_gpu_locked_clocks"]


@pytest.mark.slow
@pytest.mark.shares_cpu  # the clock calls and statuses of a synthetic device: no timing is checked
def test_backend_restores_the_clocks_when_its_start_fails(monkeypatch):
    def broken(self, msg, timeout_s):
        return None, ("crash", "synthetic calibration failure")

    monkeypatch.setattr(CudaBackend, "_request", broken)
    gpu = _FakeZeusGPU()
    with pytest.raises(RuntimeError, match="calibration failed"):
        CudaBackend("cuda:0", _fake=True, _gpu=gpu, calibration_s=0.2, protocol=FAST)
    assert [c[0] for c in gpu.calls] == [
        "set_gpu_locked_clocks",
        "set_memory_locked_clocks",
        "reset_memory_locked_clocks",
        "reset_gpu_locked_clocks",
    ]


# --------------------------------------------------------------------------- scripts/gpu_run.sh (CPU rehearsal)

GPU_RUN = ROOT / "scripts" / "gpu_run.sh"


def _gpu_run(*args, **kw):
    import subprocess

    return subprocess.run(["bash", str(GPU_RUN), *args], capture_output=True, text=True, **kw)


def test_gpu_run_argument_handling():
    r = _gpu_run("--help")
    assert r.returncode == 0 and "time-boxed" in r.stdout
    for bad, word in (
        (["--device", "tpu"], "--device"),
        (["--budget-s", "8m"], "whole number"),
        (["--budget-s", "30", "--reserve-s", "45"], "must exceed"),
        (["--frobnicate"], "unknown argument"),
        (["--platform", "a/b"], "--platform"),
        (["--space"], "needs a value"),
        (["--batches", "1,x"], "--batches"),
        (["--batches", "0,8"], "--batches"),
        (["--energy-periods", "2"], ">= 3"),
    ):
        r = _gpu_run(*bad)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and word in r.stderr, (bad, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1  # one line, no traceback
    r = _gpu_run("--dry-run", "--device", "cpu", "--space", "tiny")
    assert r.returncode == 0 and "device=cpu space=tiny" in r.stdout and "platform=cpu-rehearsal" in r.stdout
    r = _gpu_run("--dry-run")
    assert "device=cuda space=screening" in r.stdout and "budget_s=480" in r.stdout and "platform=h200" in r.stdout
    assert "batches=1,8,32,128,256" in r.stdout and "energy_periods=4" in r.stdout


def test_gpu_run_stops_before_validating_when_the_cli_cannot_run(tmp_path):
    """The preflight: a Python whose carb CLI fails (here a wrapper that fails `-m carb.cli`
    the way a missing package does) ends the run with exit 1 and a one-line reason, before
    the validation and the campaign spend device time."""
    import sys

    fake = tmp_path / "python"
    fake.write_text(f"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "carb.cli" ]; then echo "ModuleNotFoundError: No module named 'pydantic'" >&2; exit 1; fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    out = tmp_path / "out"
    r = _gpu_run("--device", "cpu", "--space", "tiny", "--out", str(out), "--python", str(fake), timeout=120)
    assert r.returncode == 1 and "the carb CLI does not run here" in r.stdout and "pydantic" in r.stdout
    assert "== validate" not in r.stdout and not (out / "validate.json").exists()


@pytest.mark.slow
@pytest.mark.shares_cpu  # files, statuses and a 240 s budget: no timing is checked
def test_gpu_run_rehearsal_on_the_cpu(tmp_path):
    """The whole script on the CPU: validate_gpu.py's synthetic rehearsal, a sample of the
    tiny space, the campaign, the export and the summary (figures: real CPU latency and
    memory; the validation's are synthetic)."""
    import json
    import sys

    out = tmp_path / "out"
    # the GPU default's design: whole architectures, each at every batch (tiny: 4 archs x batch 1, 4)
    r = _gpu_run(
        "--device",
        "cpu",
        "--space",
        "tiny",
        "--samples",
        "4",
        "--batches",
        "1,4",
        "--budget-s",
        "240",
        "--min-configs",
        "0",
        "--out",
        str(out),
        "--python",
        sys.executable,
        timeout=400,
    )
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "cpu-rehearsal.duckdb",
        "cpu-rehearsal.parquet",
        "env.json",
        "run.log",
        "summary.json",
        "validate.json",
    ], (files, r.stdout[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["configs_by_status"] == {"ok": 4} and summary["characterize_exit"] == 0
    assert summary["validate_synthetic"] is True
    validate = json.loads((out / "validate.json").read_text())
    assert validate["synthetic"] is True and len(validate["checks"]) >= 10
    assert r.returncode == (0 if summary["validate_passed"] else 1)
    import pandas as pd

    df = pd.read_parquet(out / "cpu-rehearsal.parquet")
    assert len(df) == 4 and {"energy_pkg_j", "energy_dram_j", "latency_ms", "memory_mb"} <= set(df.columns)
    # two whole architectures, each at both batches: linked for the batch-scaling analysis
    assert sorted(df.groupby(["depth", "width"]).batch.apply(sorted).tolist()) == [[1, 4], [1, 4]]
    assert {"latency_ms", "memory_mb"} <= {row["target"] for row in summary["batch_scaling"] if row.get("factor")}
