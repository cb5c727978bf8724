"""carb.CostMonitor: any block of code measured in this process (wall and CPU time, peak memory, energy)."""

from __future__ import annotations

import mmap

import pytest

from carb.measure.window import CostMonitor


def test_nested_windows_each_keep_their_own_peak() -> None:
    # anonymous maps, touched page by page and unmapped: what RSS does with them does not depend on
    # what malloc kept from earlier tests in this process (its mmap threshold moves with history)
    mon = CostMonitor()
    mon.begin_window("outer")
    a = _touched(64_000_000)  # 64 MB, unmapped before the inner window
    a.close()
    mon.begin_window("inner")
    b = _touched(8_000_000)  # 8 MB
    inner = mon.end_window("inner")
    outer = mon.end_window("outer")
    if not inner.memory_method.startswith("VmHWM (clear_refs"):
        pytest.skip("no /proc/self/clear_refs: the peak cannot be reset per window here")
    assert 6 < inner.memory_mb < 30  # the 8 MB block, not the 64 MB one freed before it began
    assert outer.memory_mb > 60  # the 64 MB block, seen although the inner window reset the peak
    assert outer.latency_ms >= inner.latency_ms > 0 and outer.cpu_ms > 0
    b.close()


def _touched(nbytes: int) -> mmap.mmap:
    """An anonymous private map of ``nbytes`` with every page written (resident)."""
    m = mmap.mmap(-1, nbytes)
    for off in range(0, nbytes, mmap.PAGESIZE):
        m[off] = 1
    return m


def test_repeated_windows_pool_into_a_median_with_its_interval() -> None:
    mon = CostMonitor()
    for _ in range(12):
        with mon.window("sum") as w:
            sum(range(20_000))
        assert w[0].name == "sum"
    s = mon.summary("sum")
    assert s.n == 12 and s.latency_ms_lo <= s.latency_ms <= s.latency_ms_hi
    if mon.windows[0].energy_j is None:
        assert s.energy_j is None and mon.windows[0].energy_missing_reason


def test_window_misuse_is_a_value_error() -> None:
    mon = CostMonitor()
    with pytest.raises(ValueError, match="not open"):
        mon.end_window("x")
    mon.begin_window("x")
    with pytest.raises(ValueError, match="open already"):
        mon.begin_window("x")
    with pytest.raises(ValueError, match="no window named"):
        mon.summary("y")
    with pytest.raises(ValueError, match="unknown value"):
        CostMonitor(device="tpu")
