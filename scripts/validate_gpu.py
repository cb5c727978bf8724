#!/usr/bin/env python
"""Check the CUDA measurement backend against the hardware, once, on a GPU machine.

    python scripts/validate_gpu.py --out gpu_check.json

Needs nothing from the network. It measures a small ResNet with
``CudaBackend(lock_clocks=False)`` and checks, printing a table and writing every figure
to a JSON report:

* the worker starts, the NVML energy counter is readable, its update period is observed
  and idle power is plausible (0 < idle <= power limit);
* the measurement is ``ok``: latency > 0, gross energy > 0, 0 < net energy < gross;
* energy is true: the backend's busy power (gross energy / latency) and the counter's
  own average power over a long steady run both agree with the time integral of
  sampled ``nvmlDeviceGetPowerUsage`` (within ``--tolerance``, default 15%);
* latency is not inflated by the energy sampler: within 10% of a plain CUDA-event loop;
* peak memory is sane: at least the weights' bytes, at most ``--max-memory-gb``;
* an impossible batch comes back as status ``oom`` and the worker measures again after;
* clocks are untouched with ``lock_clocks=False``: applications clocks and power limit
  read the same before and after, and the backend reports no lock.

``--try-lock`` also checks that ``lock_clocks=True`` locks and resets the clocks; it
changes device settings while it runs (needs root), so it is off by default.

Exit status: 0 when every check passes, 1 when one fails, 2 when the run could not start.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))


class Report:
    """Checks and facts, printed as a table and saved as JSON."""

    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []
        self.facts: dict[str, Any] = {}

    def check(self, name: str, ok: bool, value: Any, expected: str) -> bool:
        self.checks.append({"check": name, "ok": bool(ok), "value": value, "expected": expected})
        return bool(ok)

    def info(self, key: str, value: Any) -> None:
        self.facts[key] = value

    @property
    def passed(self) -> bool:
        return all(c["ok"] for c in self.checks)

    def table(self) -> str:
        def fmt(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.4g}"
            return str(v)

        rows = [("check", "value", "expected", "result")]
        rows += [(c["check"], fmt(c["value"]), c["expected"], "PASS" if c["ok"] else "FAIL") for c in self.checks]
        widths = [min(60, max(len(r[i]) for r in rows)) for i in range(4)]
        line = "  ".join("-" * w for w in widths)
        out = ["  ".join(r[i][:widths[i]].ljust(widths[i]) for i in range(4)) for r in rows]
        out.insert(1, line)
        n_fail = sum(not c["ok"] for c in self.checks)
        out.append(line)
        out.append(f"{len(self.checks) - n_fail} passed, {n_fail} failed")
        return "\n".join(out)


def _jsonable(obj: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(obj):
        return _jsonable(asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def clock_settings(nvml: Any, handle: Any) -> dict[str, Any]:
    """Settings that a backend must leave alone with lock_clocks=False (MHz, W)."""
    def q(fn: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # a setting this GPU does not report
            return f"n/a ({type(e).__name__})"

    return {
        "app_sm_clock_mhz": q(lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_GRAPHICS)),
        "app_mem_clock_mhz": q(lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_MEM)),
        "power_limit_w": q(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3),
        "max_sm_clock_mhz": q(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
    }


def idle_clocks(nvml: Any, handle: Any, settle_s: float = 3.0) -> dict[str, Any]:
    """Current clocks after ``settle_s`` idle seconds (informational: idle clocks drift)."""
    time.sleep(settle_s)
    return {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)}


def reference_run(config: Any, index: int, nvml: Any, handle: Any, seconds: float, skip_s: float) -> dict[str, Any]:
    """Run the config back to back for ``seconds`` in this process, without the backend:
    CUDA-event latency, the energy counter's average power, and the trapezoid integral of
    ``nvmlDeviceGetPowerUsage`` sampled every 10 ms, both over ``[skip_s, seconds]`` (the
    reported power is averaged by the driver, so the ramp is skipped). Units: ms, W, s."""
    import torch

    from carb.arch import build, dtype_of

    dev = torch.device("cuda", index)
    dtype = dtype_of(config.precision)
    model = build(config).to(dtype).to(dev)
    x = torch.randn(config.batch, 3, config.input_size, config.input_size, dtype=dtype, device=dev)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), nvml.nvmlDeviceGetPowerUsage(handle) / 1e3))
            time.sleep(0.01)

    with torch.inference_mode():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize(dev)
        # latency first, with nothing else running (the sampler-overhead check)
        t_end = time.perf_counter() + 1.0
        n_lat = 0
        s_evt, e_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s_evt.record()
        while time.perf_counter() < t_end:
            model(x)
            n_lat += 1
        e_evt.record()
        e_evt.synchronize()
        latency_ms = s_evt.elapsed_time(e_evt) / n_lat
        # then the long steady run for power and energy
        th = threading.Thread(target=poll, daemon=True)
        t0 = time.perf_counter()
        th.start()
        e_skip = t_skip = None
        iters = 0
        while True:
            model(x)
            iters += 1
            if iters % 4 == 0:
                torch.cuda.synchronize(dev)  # keep the host near the GPU so times line up
                now = time.perf_counter()
                if e_skip is None and now - t0 >= skip_s:
                    e_skip, t_skip = nvml.nvmlDeviceGetTotalEnergyConsumption(handle), now
                if now - t0 >= seconds:
                    break
        torch.cuda.synchronize(dev)
        e_end, t_end = nvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter()
        stop.set()
        th.join(2)
    pts = [(t, p) for t, p in samples if t_skip <= t <= t_end]
    integral_j = sum((t2 - t1) * (p1 + p2) / 2 for (t1, p1), (t2, p2) in zip(pts, pts[1:]))
    span = pts[-1][0] - pts[0][0] if len(pts) > 1 else float("nan")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del model, x
    torch.cuda.empty_cache()
    return {"latency_ms": latency_ms, "latency_iters": n_lat, "power_samples": len(pts),
            "power_integral_w": integral_j / span if span > 0 else float("nan"),
            "counter_power_w": (e_end - e_skip) / 1e3 / (t_end - t_skip), "window_s": t_end - t_skip,
            "weight_bytes": weights}


def rel(a: float | None, b: float | None) -> float:
    if a is None or b is None or not b:
        return float("inf")
    return abs(a - b) / abs(b)


def run(args: argparse.Namespace, rep: Report) -> None:
    import pynvml
    import torch

    from carb.measure import Protocol, get_backend
    from carb.measure.cuda import _open_nvml_device
    from carb.space import Config

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    index = int(args.device.partition(":")[2] or 0)
    nvml, handle, match = _open_nvml_device(index)
    rep.info("nvml_device", match)
    rep.info("gpu_name", pynvml.nvmlDeviceGetName(handle))
    before = clock_settings(nvml, handle)
    rep.info("clock_settings_before", before)
    rep.info("idle_clocks_before", idle_clocks(nvml, handle, 1.0))

    config = Config(family="imagenet", block="basic", depth=18, input_size=224, batch=args.batch)
    rep.info("config", config.to_dict())
    protocol = Protocol(ci_target=0.01, max_time_s=args.max_time_s, timeout_s=300)
    t0 = time.perf_counter()
    with get_backend(args.device, lock_clocks=False, protocol=protocol, calibration_s=2.0) as b:
        rep.info("backend_start_s", time.perf_counter() - t0)
        prov = b.provenance()
        rep.info("provenance", prov)
        period, idle = prov["update_period_s"], prov["idle_power_w"]
        limit = prov.get("power_limit_w") or 2000.0
        rep.check("energy counter readable", prov["energy_sensor"]["available"], prov["energy_sensor"]["reason"]
                  or "yes", "available")
        rep.check("energy counter update period (s)", period is not None and 0 < period <= 1.0, period,
                  "observed, in (0, 1]")
        rep.check("idle power (W)", idle is not None and 0 < idle <= limit, idle, f"in (0, {limit:g}]")
        rep.check("backend reports no clock lock", not prov["clock_lock"]["applied"],
                  prov["clock_lock"].get("reason"), "not applied (lock_clocks=False)")

        m = b.measure(config)
        rep.info("measurement", m.to_dict())
        ok = m.status == "ok"
        rep.check("status", ok, f"{m.status} {m.message}".strip(), "ok")
        if ok:
            lat, gross, net = m.latency_ms.median, m.energy_gross_j, m.energy_j
            rep.check("latency (ms)", lat > 0, lat, "> 0")
            rep.check("latency CI (relative)", m.latency_ms.ci_rel <= 0.05, m.latency_ms.ci_rel, "<= 0.05")
            rep.check("gross energy per forward (J)", gross is not None and gross.median > 0,
                      gross.median if gross else m.energy_missing_reason, "> 0")
            rep.check("net energy per forward (J)", net is not None and 0 < net.median < gross.median,
                      net.median if net else m.energy_missing_reason, "0 < net < gross")
            rep.check("clocks and throttle reasons logged", m.extra.get("sm_clock_mhz") is not None
                      and m.extra.get("throttle_reasons") is not None,
                      f"SM {m.extra.get('sm_clock_mhz')} MHz, mem {m.extra.get('mem_clock_mhz')} MHz, "
                      f"{m.extra.get('power_w')} W, {m.extra.get('temperature_c')} C, "
                      f"{m.extra.get('throttle_reasons')}", "present")

        # an impossible batch: the first convolution's output alone is hundreds of GB
        huge = Config(family="imagenet", block="basic", depth=18, input_size=224, batch=100_000)
        m_oom = b.measure(huge, Protocol(max_time_s=1.0, timeout_s=300))
        rep.info("oom_measurement", m_oom.to_dict())
        rep.check("impossible batch -> oom", m_oom.status == "oom", f"{m_oom.status} {m_oom.message}"[:80], "oom")
        m_after = b.measure(Config(depth=20, batch=8), Protocol(max_time_s=2.0, timeout_s=300))
        rep.check("worker measures again after the oom", m_after.status == "ok",
                  f"{m_after.status} {m_after.message}".strip(), "ok")
        state = prov["clock_lock"]

    ref = reference_run(config, index, nvml, handle, args.reference_s, skip_s=1.5)
    rep.info("reference", ref)
    if ok and m.energy_gross_j is not None:
        busy_w = m.energy_gross_j.median / (m.latency_ms.median / 1e3)
        rep.info("backend_busy_power_w", busy_w)
        rep.check("backend busy power vs power integral", rel(busy_w, ref["power_integral_w"]) <= args.tolerance,
                  f"{busy_w:.1f} W vs {ref['power_integral_w']:.1f} W", f"within {args.tolerance:.0%}")
        rep.check("energy counter vs power integral", rel(ref["counter_power_w"], ref["power_integral_w"])
                  <= args.tolerance, f"{ref['counter_power_w']:.1f} W vs {ref['power_integral_w']:.1f} W",
                  f"within {args.tolerance:.0%}")
        rep.check("latency vs plain event loop (sampler overhead)", rel(m.latency_ms.median, ref["latency_ms"]) <= 0.10,
                  f"{m.latency_ms.median:.3f} ms vs {ref['latency_ms']:.3f} ms", "within 10%")
        mem_bytes = m.memory_mb * 1e6
        rep.check("peak memory (MB)", ref["weight_bytes"] <= mem_bytes <= args.max_memory_gb * 1e9, m.memory_mb,
                  f"in [{ref['weight_bytes'] / 1e6:.1f}, {args.max_memory_gb * 1e3:g}]")

    after = clock_settings(nvml, handle)
    rep.info("clock_settings_after", after)
    rep.info("idle_clocks_after", idle_clocks(nvml, handle, 3.0))
    rep.check("clock settings untouched (lock_clocks=False)", before == after and not state["applied"],
              "same" if before == after else f"{before} -> {after}", "same before and after")

    if args.try_lock:
        with get_backend(args.device, lock_clocks=True, protocol=Protocol(max_time_s=1.0), calibration_s=1.0) as b:
            st = b.provenance()["clock_lock"]
            rep.info("lock_state", st)
            m_l = b.measure(Config(depth=20, batch=64))
            locked_to = st.get("sm_locked_mhz")
            sm = m_l.extra.get("sm_clock_mhz")
            rep.check("lock_clocks=True locks SM (or opts out with a reason)",
                      (st["applied"] and sm is not None and abs(sm - locked_to) <= 0.05 * locked_to)
                      or (not st["applied"] and bool(st.get("reason"))), f"{st} / SM {sm}", "locked or reasoned")
            lock = b.clock_lock
        rep.check("clocks reset after close", lock is None or (not lock.locked and lock.state["restored"] in (True, None)),
                  lock.state if lock else "no lock", "restored")
        rep.check("clock settings as before after the lock", clock_settings(nvml, handle) == before,
                  clock_settings(nvml, handle), "same as before")
    nvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the JSON report")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=32, help="batch of the ResNet-18 (224 px) under test")
    ap.add_argument("--max-time-s", type=float, default=8.0, help="sampling cap of the backend measurement, s")
    ap.add_argument("--reference-s", type=float, default=8.0, help="length of the reference power run, s")
    ap.add_argument("--tolerance", type=float, default=0.15, help="relative tolerance of the energy checks")
    ap.add_argument("--max-memory-gb", type=float, default=4.0, help="upper bound of a sane peak memory, GB")
    ap.add_argument("--try-lock", action="store_true",
                    help="also check lock_clocks=True (changes device clocks while it runs; needs root)")
    args = ap.parse_args(argv)
    rep = Report()
    code = 0
    t0 = time.perf_counter()
    try:
        run(args, rep)
        code = 0 if rep.passed else 1
    except Exception as e:  # the run could not complete: say so, keep what was gathered
        import traceback

        rep.info("error", f"{type(e).__name__}: {e}")
        rep.info("traceback", traceback.format_exc())
        rep.check("run completed", False, f"{type(e).__name__}: {e}"[:120], "no exception")
        code = 2
    rep.info("elapsed_s", time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_jsonable({"passed": code == 0, "checks": rep.checks, "facts": rep.facts}),
                                   indent=2))
    print(rep.table())
    print(f"report: {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
