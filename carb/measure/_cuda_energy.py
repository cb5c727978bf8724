"""Energy of the GPU backend: the counter's tick-aligned windows, the sampler thread, idle calibration.

The total-energy counter only changes every update period; a sampler thread timestamps
each change (a "tick"), and a window's busy power is the counter's increase between the
first and the last tick inside it. See :mod:`carb.measure.cuda` for the definitions.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from typing import Any, Sequence

from ._common import one_line
from ._cuda_device import throttle_reason_names

__all__ = ["energy_window_s", "update_period_from_ticks", "power_between_ticks", "net_energy_j"]


def energy_window_s(
    update_period_s: float | None, min_window_s: float = 0.5, periods: float = 10.0, min_sample_s: float = 0.0
) -> float:
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


def power_between_ticks(
    ticks: Sequence[tuple[float, float]],
    t_start: float,
    t_end: float,
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


class _Sampler:
    """Background thread: timestamps every change of the energy counter and samples telemetry.

    The counter is polled every ``poll_s``, the telemetry read every ``telemetry_s``. Units: s, mJ.
    """

    def __init__(self, dev: Any, poll_s: float = 0.001, telemetry_s: float | None = 0.1, energy: bool = True) -> None:
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


def _calibrate(dev: Any, energy_ok: bool, seconds: float) -> dict[str, Any]:
    """Measure the counter's update period (s) and the idle power (W) on the idle GPU.

    The idle power comes from the same tick method as the measurement.
    """
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
