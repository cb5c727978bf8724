"""Probe (issue 16): does a bigger sentinel (same net at batch B2) track the 3-14 ms configs
better than the 0.5 ms one?

    taskset -c 1 python benchmarks/probe_sentinel_ladder.py --json F

Each config alternates: config chunk, small-sentinel chunk,
big-sentinel chunk (each >= chunk_ms). Two passes gap-min apart; per config B/A of: raw,
ratio to small, ratio to big, ratio to matched (big if raw > split ms)."""

import argparse
import json
import sys
import time
from dataclasses import replace

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from probe_paired_sentinel import built, iters_for


def one_pass(configs, s1, s2, a):
    import torch

    out = {}
    for c in configs:
        model, x = built(c)
        with torch.inference_mode():
            fns = [(lambda: model(x)), (lambda: s1[0](s1[1])), (lambda: s2[0](s2[1]))]
            t_end = time.perf_counter() + 0.2
            while time.perf_counter() < t_end:
                for f in fns:
                    f()
            ks = [iters_for(f, a.chunk_ms) for f in fns]
            ts = [[], [], []]
            t_end = time.perf_counter() + a.seconds
            while time.perf_counter() < t_end or len(ts[0]) < 5:
                for j, (f, k) in enumerate(zip(fns, ks)):
                    t0 = time.perf_counter_ns()
                    for _ in range(k):
                        f()
                    ts[j].append((time.perf_counter_ns() - t0) / 1e6 / k)
        c_, a_, b_ = (np.array(v) for v in ts)
        out[c.config_id] = {
            "raw": float(np.median(c_)),
            "s1": float(np.median(a_)),
            "s2": float(np.median(b_)),
            "r1": float(np.median(c_ / a_)),
            "r2": float(np.median(c_ / b_)),
        }
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--gap-min", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--chunk-ms", type=float, default=10.0)
    ap.add_argument("--batch2", type=int, default=16)
    ap.add_argument("--split-ms", type=float, default=3.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch

    from carb.families import space
    from carb.measure.sentinel import CPU_SENTINEL

    torch.set_num_threads(1)
    configs = [c for c in space.load("cpu").sample(200, seed=a.seed, method="stratified") if c.family == "cifar"][: a.n]
    s1 = built(CPU_SENTINEL.configs[0])
    s2 = built(replace(CPU_SENTINEL.configs[0], batch=a.batch2))
    t0 = time.monotonic()
    A = one_pass(configs, s1, s2, a)
    print(f"pass A {time.monotonic() - t0:.0f} s", flush=True)
    w = t0 + 60 * a.gap_min - time.monotonic()
    if w > 0:
        time.sleep(w)
    B = one_pass(configs, s1, s2, a)
    print(f"pass B {(time.monotonic() - t0) / 60:.1f} min after A", flush=True)
    keys = sorted(A, key=lambda k: A[k]["raw"])

    def m(d):
        return d["r2"] if d["raw"] > a.split_ms else d["r1"]

    for name, f in (
        ("raw", lambda d: d["raw"]),
        ("small", lambda d: d["r1"]),
        ("big", lambda d: d["r2"]),
        ("matched", m),
    ):
        r = np.array([f(B[k]) / f(A[k]) for k in keys])
        big = np.array([A[k]["raw"] > a.split_ms for k in keys])
        print(
            f"{name:8s} mean|diff| {100 * np.mean(abs(r - 1)):.1f}%  (configs > {a.split_ms} ms: {100 * np.mean(abs(r[big] - 1)):.1f}%, n={big.sum()}; others {100 * np.mean(abs(r[~big] - 1)):.1f}%)"
        )
    print(
        "per config raw ms: small/big/raw %:",
        " ".join(
            f"{A[k]['raw']:.1f}:{100 * (B[k]['r1'] / A[k]['r1'] - 1):+.0f}/{100 * (B[k]['r2'] / A[k]['r2'] - 1):+.0f}/{100 * (B[k]['raw'] / A[k]['raw'] - 1):+.0f}"
            for k in keys
        ),
    )
    print(
        f"sentinels: small {np.median([A[k]['s1'] for k in keys]):.2f} ms, big {np.median([A[k]['s2'] for k in keys]):.2f} ms"
    )
    if a.json:
        json.dump({"argv": sys.argv, "A": A, "B": B}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
