"""Peak memory of the same networks, in the same run, by bench_machine_shift's harness and by
CARB's worker: does the harness measure what the network model predicts?

Each network is visited by both, interleaved (harness, then worker, then the next network),
both pinned to core 1, one thread, allocator ``retain``. The harness is a fresh
``python bench_machine_shift.py _time`` process; the worker is a process forked from CARB's
forkserver (``carb.measure.CpuBackend``, as ``carb calibrate`` measures). The worker's own
breakdown (``memory_baseline_mb``, ``memory_model_mb``, ``memory_hwm_mb``) is kept.

    PYTHONPATH=/tmp/tvsite:benchmarks python experiments/memory/probe_harness_vs_worker.py \
        --json experiments/memory/results/probe_harness_vs_worker.json [--limit N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import bench_machine_shift as B

HERE = Path(__file__).resolve().parent


def worker_config(spec: dict):
    from carb.families import nets, zoo

    if spec["kind"] == "zoo":
        return zoo.ZooConfig.from_dict(spec["config"])
    return nets.NetConfig(f"{HERE / 'tv_nets.py'}:{spec['name']}", spec["input_size"], spec["batch"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--zoo", type=int, default=12, help="zoo networks of the calibration pool")
    ap.add_argument("--max-time", type=float, default=0.6)
    a = ap.parse_args()

    from carb.measure import CpuBackend
    from carb.measure.base import Protocol

    ns = argparse.Namespace(model=B.MODEL, k=10, seed=0, limit=a.limit)
    specs, roles, _ = B._networks(ns)
    zoo_specs = [s for s in specs if s["kind"] == "zoo"][: a.zoo]
    tv_specs = [s for s in specs if s["kind"] == "tv"]
    todo = zoo_specs + tv_specs
    protocol = replace(Protocol.default_for("cpu"), max_time_s=a.max_time)
    rows = []
    out = Path(a.json)
    with CpuBackend(threads=1, affinity=[1], allocator="retain", protocol=protocol) as backend:
        for i, s in enumerate(todo):
            label = B.spec_label(s)
            cmd = ["taskset", "-c", "1", sys.executable, B.__file__, "_time", json.dumps(s)]
            cmd += ["--max-time", str(a.max_time), "--warmup-s", "0.3"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            h = json.loads(p.stdout.strip().splitlines()[-1])
            m = backend.measure(worker_config(s))
            ex = m.extra or {}
            row = {
                "network": label,
                "kind": s["kind"],
                "harness_memory_mb": h["memory_mb"],
                "worker_memory_mb": m.memory_mb,
                "worker_status": m.status,
                "worker_baseline_mb": ex.get("memory_baseline_mb"),
                "worker_model_mb": ex.get("memory_model_mb"),
                "worker_hwm_mb": ex.get("memory_hwm_mb"),
                "harness_latency_ms": h["latency_ms"],
                "worker_latency_ms": m.latency_ms.median if m.latency_ms else None,
                "at": time.time(),
            }
            rows.append(row)
            print(
                f"[{i + 1}/{len(todo)}] {label}: harness {h['memory_mb']:.1f} MB, worker "
                f"{m.memory_mb if m.memory_mb is None else round(m.memory_mb, 1)} MB "
                f"(model {ex.get('memory_model_mb')})",
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
