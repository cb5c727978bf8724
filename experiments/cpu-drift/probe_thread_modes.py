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

With ``--series S``, one process instead, for S seconds: about every second it times, at 2
threads and then at 1, the sentinel (median of 9 samples of >= 10 ms), a 200,000-element
``torch.add`` (9 samples, per call, us) and the 28 ms config (3 samples of >= 50 ms): does the
state change inside a process, and what does it slow?

    python benchmarks/probe_thread_modes.py --series 100 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

# both child scripts: the sentinel and the 28 ms config built, and a timer of forwards
PRELUDE = r"""
import json, sys, time, torch
from carb.families import arch
from carb.families import space
from carb.measure.sentinel import CPU_SENTINEL
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
"""

CHILD = (
    PRELUDE
    + r"""
torch.set_num_threads(int(sys.argv[1]))
with torch.inference_mode():
    for _ in range(20):
        m(x); bm(bx)
    s = sorted(sample(m, x, 0.01) for _ in range(30))[15]
    b = sorted(sample(bm, bx, 0.05) for _ in range(5))[2]
print(json.dumps({"sentinel_ms": s, "config_ms": b, "config": k.label()}))
"""
)

SERIES = (
    PRELUDE
    + r"""
def med(f, k):
    return sorted(f() for _ in range(k))[k // 2]
t = torch.randn(200000)
add = lambda _: torch.add(t, 1.0)
T, t_start = float(sys.argv[1]), time.time()
with torch.inference_mode():
    for _ in range(20):
        m(x); bm(bx)
    while time.time() - t_start < T:
        r = {"t": round(time.time() - t_start, 1)}
        for th in (2, 1):
            torch.set_num_threads(th)
            r[f"sentinel_ms_{th}t"] = med(lambda: sample(m, x, 0.01), 9)
            r[f"add_us_{th}t"] = 1e3 * med(lambda: sample(add, None, 0.01), 9)
            r[f"config_ms_{th}t"] = med(lambda: sample(bm, bx, 0.05), 3)
        print(json.dumps(r), flush=True)
"""
)


def series(seconds: float, out: str | None) -> None:
    """``--series``: one process, the state over time (see the module docstring)."""
    p = subprocess.run(
        [sys.executable, "-c", SERIES, str(seconds)], capture_output=True, text=True, timeout=seconds + 120
    )
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    s2 = np.array([r["sentinel_ms_2t"] for r in rows])
    slow = s2 > 1.5 * np.min(s2)
    changes = int(np.sum(slow[1:] != slow[:-1]))
    print(
        f"{len(rows)} points over {rows[-1]['t'] if rows else 0:.0f} s; 2-thread sentinel slow (> 1.5x its fastest) "
        f"in {int(slow.sum())} of them, {changes} change(s) of state"
    )
    for key in ("sentinel_ms_2t", "add_us_2t", "config_ms_2t", "sentinel_ms_1t", "add_us_1t", "config_ms_1t"):
        v = np.array([r[key] for r in rows])
        fast_m = float(np.median(v[~slow])) if (~slow).any() else float("nan")
        slow_m = float(np.median(v[slow])) if slow.any() else float("nan")
        print(f"  {key:15s} fast state {fast_m:8.3f}  slow state {slow_m:8.3f}  ratio {slow_m / fast_m:5.2f}")
    if out:
        with open(out, "w") as fh:
            json.dump({"argv": sys.argv, "rows": rows}, fh, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--series", type=float, help="one process for this many seconds instead (see above)")
    a = ap.parse_args()
    if a.series:
        series(a.series, a.json)
        return
    rows = []
    for i in range(a.n):
        out = subprocess.run([sys.executable, "-c", CHILD, str(a.threads)], capture_output=True, text=True, timeout=120)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(
            f"process {i + 1:2d}: sentinel {r['sentinel_ms']:.3f} ms, {r['config']} {r['config_ms']:.2f} ms", flush=True
        )
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
