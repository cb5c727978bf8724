"""Probe (issue 16) that led to the paired sentinel (carb.measure.sentinel.Pairing): is a
config's latency over the sentinel, timed in alternation in one process at the same moments,
steadier between two passes minutes apart than the raw latency?

Each pass builds every config in this process, warms it and the sentinel for 0.2 s, then
alternates a config sample (>= --chunk-ms of forwards; 0 = one forward) and a sentinel sample
(>= --sent-chunk-ms, default the same) for --seconds. Printed per method: median B/A, mean and
max |B/A - 1|, share within 5%; the sentinel's share of sampling time.

    taskset -c 1 python benchmarks/probe_paired_sentinel.py --gap-min 5 [--chunk-ms 10] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def built(config):
    """The config's network and a random input (this process, 1 thread)."""
    import torch

    from carb.families import arch

    dtype = arch.dtype_of(config.precision)
    model = arch.build(config).to(dtype).eval()
    return model, torch.randn(config.batch, 3, config.input_size, config.input_size, dtype=dtype)


def iters_for(step, ms: float) -> int:
    """Forwards per sample so that one sample lasts about ``ms`` (at least 1)."""
    t0 = time.perf_counter()
    step()
    return max(1, int(ms / 1e3 / max(time.perf_counter() - t0, 1e-6)))


def one_pass(configs, sentinel, a) -> dict[str, dict[str, float]]:
    """Per config: raw median (ms), the sentinel's median (ms), the median paired ratio."""
    import torch

    out = {}
    smodel, sx = sentinel
    for c in configs:
        model, x = built(c)
        with torch.inference_mode():
            fc, fs = (lambda: model(x)), (lambda: smodel(sx))
            t_end = time.perf_counter() + 0.2
            while time.perf_counter() < t_end:
                fc()
                fs()
            kc = iters_for(fc, a.chunk_ms)
            ks = iters_for(fs, a.chunk_ms if a.sent_chunk_ms is None else a.sent_chunk_ms)
            tc, ts = [], []
            t_end = time.perf_counter() + a.seconds
            while time.perf_counter() < t_end or len(tc) < 5:
                t0 = time.perf_counter_ns()
                for _ in range(kc):
                    fc()
                t1 = time.perf_counter_ns()
                for _ in range(ks):
                    fs()
                t2 = time.perf_counter_ns()
                tc.append((t1 - t0) / 1e6 / kc)
                ts.append((t2 - t1) / 1e6 / ks)
        tc, ts = np.array(tc), np.array(ts)
        out[c.config_id] = {
            "raw": float(np.median(tc)),
            "sent": float(np.median(ts)),
            "ratio_med": float(np.median(tc / ts)),
            "n": len(tc),
            "sent_share": float(ts.sum() * ks / (ts.sum() * ks + tc.sum() * kc)),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--gap-min", type=float, default=5.0, help="minutes from pass A's start to pass B's")
    ap.add_argument("--seconds", type=float, default=1.0, help="sampling seconds per config")
    ap.add_argument("--chunk-ms", type=float, default=10.0)
    ap.add_argument("--sent-chunk-ms", type=float, default=None)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch

    from carb.families import space
    from carb.measure.sentinel import CPU_SENTINEL

    torch.set_num_threads(1)
    configs = [c for c in space.load("cpu").sample(200, seed=a.seed, method="stratified") if c.family == "cifar"][: a.n]
    sentinel = built(CPU_SENTINEL.configs[0])
    print(f"command: python {' '.join(sys.argv)}", flush=True)
    t0 = time.monotonic()
    A = one_pass(configs, sentinel, a)
    print(f"pass A {time.monotonic() - t0:.0f} s", flush=True)
    wait = t0 + 60 * a.gap_min - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    B = one_pass(configs, sentinel, a)
    print(f"pass B, {(time.monotonic() - t0) / 60:.1f} min after A's start", flush=True)
    res = {}
    for key, f in [
        ("raw", lambda d: d["raw"]),
        ("ratio of medians", lambda d: d["raw"] / d["sent"]),
        ("median of paired ratios", lambda d: d["ratio_med"]),
    ]:
        r = np.array([f(B[i]) / f(A[i]) for i in A])
        res[key] = {
            "median_ratio": float(np.median(r)),
            "mean_abs_diff": float(np.mean(abs(r - 1))),
            "max_abs_diff": float(np.max(abs(r - 1))),
            "within_5pct": float(np.mean(abs(r - 1) <= 0.05)),
        }
        print(
            f"{key:28s} median B/A {np.median(r):.3f} mean|diff| {100 * np.mean(abs(r - 1)):.1f}% "
            f"max {100 * np.max(abs(r - 1)):.1f}% within5% {100 * np.mean(abs(r - 1) <= 0.05):.0f}%"
        )
    sA = np.array([A[i]["sent"] for i in A])
    sB = np.array([B[i]["sent"] for i in A])
    print(f"sentinel share of sampling time: median {100 * np.median([A[i]['sent_share'] for i in A]):.0f}%")
    print(
        f"sentinel per pass (median over configs): A {np.median(sA):.3f} ms, B {np.median(sB):.3f} ms; "
        f"within-pass p90/p10 A {np.percentile(sA, 90) / np.percentile(sA, 10):.2f} "
        f"B {np.percentile(sB, 90) / np.percentile(sB, 10):.2f}"
    )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"argv": sys.argv, "methods": res, "A": A, "B": B}, fh, indent=1)


if __name__ == "__main__":
    main()
