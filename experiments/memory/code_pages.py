"""How much of a fresh process's peak is library code first touched by the forward.

CARB's worker maps the libraries' pages before its memory baseline (its memory is the tensors,
the allocator's and the kernels' working memory); a fresh process that imports torch, builds a
network and runs it also faults in the code of every kernel its forward reaches for the first
time, and ``VmHWM`` counts those file-backed pages. This measures both parts per network of
``benchmarks/nets/deployed_nets.py``, each in a fresh process pinned to ``--core``, with
bench_deployed's harness (1 thread, allocator ``retain``, the peak reset once the network is
built): ``memory_mb`` (``VmHWM`` above the ``VmRSS`` after the imports, the harness's truth),
``file_mb`` (``RssFile`` after the forwards above ``RssFile`` once the network is built: code and
other file pages the forward faulted in) and ``anon_mb`` (``RssAnon`` after the forwards above
the baseline's), and prints them beside a network model's uncalibrated memory and, with ``--worker``,
CARB's own worker's measurement of the same network (``carb.measure_cost``, allocator ``retain``): whether
the worker's definition and the fresh process's agree, so that a network model's miss against the fresh
process is the model's, not the definitions'.

    taskset -c 1 python experiments/memory/code_pages.py --core 1 --worker \
        --json experiments/memory/results/code_pages.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _status_kb() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[k] = int(v.split()[0])
    return out


def one(name: str, core: int) -> dict:
    """One network in this (fresh) process: the harness's peak and its file and anonymous parts (MB)."""
    import ctypes
    import gc
    import importlib.util

    if core >= 0:
        os.sched_setaffinity(0, {core})
    libc = ctypes.CDLL("libc.so.6")
    for k in (-1, -3):  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD: the model's allocator (retain)
        libc.mallopt(k, 1 << 30)
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    spec_ = importlib.util.spec_from_file_location("deployed_nets", ROOT / "benchmarks" / "nets" / "deployed_nets.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    spec = mod.NETWORKS[name]
    gc.collect()
    libc.malloc_trim(0)
    base = _status_kb()
    model = spec.build().eval()
    x = torch.randn(*spec.input)
    gc.collect()
    libc.malloc_trim(0)
    built = _status_kb()
    Path("/proc/self/clear_refs").write_text("5")
    with torch.inference_mode():
        t0 = time.perf_counter()
        n = 0
        while n < 5 or time.perf_counter() - t0 < 1.0:
            model(x)
            n += 1
    end = _status_kb()
    mb = 1024 / 1e6
    return {
        "network": name,
        "memory_mb": (end["VmHWM"] - base["VmRSS"]) * mb,
        "file_mb": (end["RssFile"] - built["RssFile"]) * mb,
        "anon_mb": (end["RssAnon"] - base["RssAnon"]) * mb,
        "model_mb": (built["VmRSS"] - base["VmRSS"]) * mb,
        "forwards": n,
    }


def main(argv: list[str] | None = None) -> int:
    """Every network in its own fresh process; a table and ``--json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--predictions", default=str(ROOT / "benchmarks/results/deployed_epyc512_native.json"))
    ap.add_argument("--worker", action="store_true", help="also measure each network in CARB's worker")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one, a.core)))
        return 0
    pred = {r["network"]: r for r in json.loads(Path(a.predictions).read_text())["per_network"]}
    rows = []
    for name in pred:
        p = subprocess.run(
            [sys.executable, __file__, "--one", name, "--core", str(a.core)], capture_output=True, text=True, check=True
        )
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["predicted_mb"] = pred[name]["shipped, uncalibrated"]["memory_mb"][0]
        r["harness_truth_mb"] = pred[name]["memory_mb"]
        worker = ""
        if a.worker:
            r["worker_mb"] = _worker_mb(name, pred[name]["input"])
            worker = f"  worker {r['worker_mb']:6.1f} ({r['worker_mb'] / r['memory_mb']:.3f} of the fresh process)"
        rows.append(r)
        print(
            f"{name:20s} fresh {r['memory_mb']:6.1f} (file pages {r['file_mb']:5.1f})  model "
            f"{r['predicted_mb']:6.1f} ({r['predicted_mb'] / r['memory_mb'] - 1:+6.1%}){worker}",
            flush=True,
        )
    if a.json:
        doc = {"networks": rows, "predictions": a.predictions, "command": "python " + " ".join(sys.argv)}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def _worker_mb(name: str, shape: list[int]) -> float:
    """The network's memory as CARB's worker measures it (MB): ``carb.measure_cost``, allocator retain."""
    import carb

    spec = f"{ROOT / 'benchmarks' / 'nets' / 'deployed_nets.py'}:{name}"
    m = carb.measure_cost(spec, tuple(shape), allocator="retain", max_time_s=1.0, sentinel=False)
    if not m.ok:
        raise RuntimeError(f"{name}: {m.message}")
    return float(m.memory_mb)


if __name__ == "__main__":
    sys.exit(main())
