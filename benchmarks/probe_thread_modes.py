"""Does a fresh 2-thread worker run at one speed? The sentinel and one real config, each in
its own fresh process, N times (issue 16).

The 2-thread `carb demo` sittings showed the paired sentinel near 0.53 ms in some phases and
near 1.10 ms in others, the validated configs not following it (one sitting: the sentinel
x2.1 between calibration and validation, the configs' raw error 18%, the drift-corrected one
68%). Each process here builds the sentinel (``CPU_SENTINEL``) and a 28 ms CIFAR config,
warms both up, and reports the median of 30 sentinel samples of >= 10 ms and of 5 config
samples of >= 50 ms, with ``--threads`` intra-op threads and no pinning (as the demo's
workers run).

    python benchmarks/probe_thread_modes.py [--n 20] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

CHILD = r"""
import json, sys, time, torch
from carb import arch, space
from carb.measure.sentinel import CPU_SENTINEL
torch.set_num_threads(int(sys.argv[1]))
def sample(mod, inp, min_s):
    n, t0 = 0, time.perf_counter()
    while True:
        mod(inp); n += 1
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return 1e3 * dt / n
c = CPU_SENTINEL.configs[0]
k = [k for k in space.load("cpu").sample(60, seed=3, method="stratified")
     if k.family == "cifar" and k.precision == "fp32" and k.batch >= 8][0]
m, x = arch.build(c).eval(), torch.randn(c.batch, 3, c.input_size, c.input_size)
bm, bx = arch.build(k).eval(), torch.randn(k.batch, 3, k.input_size, k.input_size)
with torch.inference_mode():
    for _ in range(20):
        m(x); bm(bx)
    s = sorted(sample(m, x, 0.01) for _ in range(30))[15]
    b = sorted(sample(bm, bx, 0.05) for _ in range(5))[2]
print(json.dumps({"sentinel_ms": s, "config_ms": b, "config": k.label()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for i in range(a.n):
        out = subprocess.run([sys.executable, "-c", CHILD, str(a.threads)], capture_output=True, text=True, timeout=120)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"process {i + 1:2d}: sentinel {r['sentinel_ms']:.3f} ms, {r['config']} {r['config_ms']:.2f} ms", flush=True)
    s = np.array([r["sentinel_ms"] for r in rows])
    b = np.array([r["config_ms"] for r in rows])
    slow = s > 1.5 * np.median(s)
    print(f"\n{int(slow.sum())} of {len(rows)} processes in the slow mode (sentinel > 1.5x the median)")
    if slow.any() and (~slow).any():
        rs = np.median(s[slow]) / np.median(s[~slow])
        rb = np.median(b[slow]) / np.median(b[~slow])
        print(f"slow / fast mode: sentinel x{rs:.2f}, config x{rb:.2f} (elasticity {np.log(rb) / np.log(rs):.2f})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"argv": sys.argv, "threads": a.threads, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
