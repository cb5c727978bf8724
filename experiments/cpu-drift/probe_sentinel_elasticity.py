"""Does a config slow down as much as the speed sentinel when the machine slows?

The drift correction (``latency_ms_norm = latency_ms * ref / sentinel_ms``) assumes every
config's time moves in proportion to the sentinel's: an elasticity of 1 in
``config ratio = sentinel ratio ** beta``. On the AVX-512 kind (benchmarks/RESULTS.md,
issue 16, run 15) configs under 2.3 ms followed the sentinel (beta 0.92-1.04) and 8-22 ms
ones only partly (beta 0.28-1.0). This probe measures beta per config under a slow-down we
make ourselves: a second process streams a large array through memory (or, with
``--stress cache``, thrashes a buffer the size of a shared cache) on the other core, the
shared caches and memory being what slows these VMs. Each config and the sentinel
(:data:`carb.measure.sentinel.CPU_SENTINEL`) are timed in alternation (blocks of >= 20 ms of
single forwards, then one >= 10 ms sentinel sample, as the paired sentinel does), first
with the stressor off, then on, then off again, in ``--cycles`` cycles. Both run on one
thread, pinned.

    python benchmarks/probe_sentinel_elasticity.py --json OUT.json     # ~4 min

Printed and written per config: median forward time off / on (ms), its ratio, the
sentinel's ratio in the same blocks, and beta = log(config ratio) / log(sentinel ratio).
A synthetic slow-down of one kind: it says whether configs of different sizes feel memory
contention alike, not how a host's other tenants load it.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

CONFIGS = (  # cifar ResNets of increasing time per forward (fp32, one thread)
    dict(family="cifar", block="basic", depth=8, width=0.25, early_downsample=False, input_size=32, batch=1),
    dict(family="cifar", block="basic", depth=20, width=1.0, early_downsample=False, input_size=32, batch=1),
    dict(family="cifar", block="basic", depth=20, width=1.0, early_downsample=False, input_size=64, batch=2),
    dict(family="cifar", block="bottleneck", depth=29, width=1.0, early_downsample=False, input_size=64, batch=4),
    dict(family="cifar", block="basic", depth=32, width=1.5, early_downsample=False, input_size=64, batch=8),
)


def _stress(kind: str, core: int, stop: mp.Event) -> None:
    os.sched_setaffinity(0, {core})
    n = (256 << 20) // 8 if kind == "memory" else (32 << 20) // 8  # 256 MB stream / 32 MB thrash
    a = np.ones(n)
    while not stop.is_set():
        a += 1.0  # reads and writes the whole buffer


def _timed(fn, min_s: float) -> float:
    """Median seconds per call of ``fn`` over one sample of >= ``min_s`` seconds."""
    k, t0 = 0, time.perf_counter()
    while True:
        fn()
        k += 1
        el = time.perf_counter() - t0
        if el >= min_s:
            return el / k


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--core", type=int, default=1, help="core of the measurement (the stressor takes the other)")
    ap.add_argument("--stress", choices=("memory", "cache"), default="memory")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--phase-s", type=float, default=4.0, help="seconds per config and phase")
    a = ap.parse_args()
    import torch

    from carb.families import arch
    from carb.measure.sentinel import CPU_SENTINEL

    os.sched_setaffinity(0, {a.core})
    torch.set_num_threads(1)
    other = next(c for c in os.sched_getaffinity(0) | set(range(os.cpu_count() or 2)) if c != a.core)
    sent_cfg = CPU_SENTINEL.configs[0]
    sent = arch.build(sent_cfg)
    xs = torch.randn(1, 3, sent_cfg.input_size, sent_cfg.input_size)

    def run_sent():
        with torch.inference_mode():
            sent(xs)

    nets = []
    for c in CONFIGS:
        m = arch.build(dict(c, precision="fp32", classes=10))
        x = torch.randn(c["batch"], 3, c["input_size"], c["input_size"])
        nets.append((c, m, x))
    phases = ["off", "on", "off"] * a.cycles
    res = {
        f"{c['block']}{c['depth']}-w{c['width']}-i{c['input_size']}-b{c['batch']}": {
            "off": [],
            "on": [],
            "s_off": [],
            "s_on": [],
        }
        for c, _, _ in nets
    }
    stop = mp.Event()
    proc = None
    t_all = time.perf_counter()
    for ph in phases:
        if ph == "on" and proc is None:
            stop.clear()
            proc = mp.Process(target=_stress, args=(a.stress, other, stop), daemon=True)
            proc.start()
            time.sleep(0.5)
        if ph == "off" and proc is not None:
            stop.set()
            proc.join()
            proc = None
            time.sleep(0.5)
        for (c, m, x), key in zip(nets, res):

            def run():
                with torch.inference_mode():
                    m(x)

            run()
            t_end = time.perf_counter() + a.phase_s
            while time.perf_counter() < t_end:
                res[key][ph].append(_timed(run, 0.02) * 1e3)
                res[key][f"s_{ph}"].append(_timed(run_sent, 0.01) * 1e3)
    if proc is not None:
        stop.set()
        proc.join()
    rows = {}
    print(f"stress {a.stress} on core {other}, measuring on core {a.core}; {time.perf_counter() - t_all:.0f} s")
    print(f"{'config':34s} {'off ms':>8s} {'on ms':>8s} {'ratio':>6s} {'sentinel':>8s} {'beta':>5s}")
    for key, r in res.items():
        off, on = float(np.median(r["off"])), float(np.median(r["on"]))
        s_off, s_on = float(np.median(r["s_off"])), float(np.median(r["s_on"]))
        ratio, s_ratio = on / off, s_on / s_off
        beta = math.log(ratio) / math.log(s_ratio) if abs(math.log(s_ratio)) > 1e-3 else float("nan")
        rows[key] = {
            "off_ms": off,
            "on_ms": on,
            "ratio": ratio,
            "sentinel_off_ms": s_off,
            "sentinel_on_ms": s_on,
            "sentinel_ratio": s_ratio,
            "beta": beta,
            "samples_off": len(r["off"]),
            "samples_on": len(r["on"]),
        }
        print(f"{key:34s} {off:8.3f} {on:8.3f} {ratio:6.3f} {s_ratio:8.3f} {beta:5.2f}")
    Path(a.json).write_text(json.dumps({"argv": vars(a), "per_config": rows}, indent=1))


if __name__ == "__main__":
    main()
