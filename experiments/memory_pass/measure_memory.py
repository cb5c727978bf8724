"""A memory pass: a shipped CPU dataset's configs measured again by today's CPU worker, into a campaign store.

Each config of the dataset gets one visit in a fresh worker (``carb.measure.CpuBackend``, forked from
the preloaded forkserver, the parent's library pages mapped before the memory baseline:
``carb.measure.cpu.MEMORY_DEFINITION``), with the dataset's own per-visit protocol (warm-up 2
forwards and >= 0.1 s, then timed forwards until the median's 95% CI is within 2% or 0.5 s), so
that the peak covers the forwards a visit of the dataset ran. The dataset's threads and allocator
are kept; no speed sentinel (latency is not the point of the pass). Configs are visited in a seeded
random order, in chunks; the pass stops before a chunk that would end after ``--deadline``, so
what it measured is a random sample of the dataset. A rerun resumes past stored configs.

    taskset -c 1 nice -n 5 python experiments/memory_pass/measure_memory.py --data cpu-1t \
        --store experiments/memory_pass/cpu-1t-memory.duckdb --deadline 2026-12-07T03:45

A dataset measured on other kernels than this CPU's best (the AVX2 datasets, on an AVX-512 CPU) is
measured with torch and oneDNN capped to its kernels (``KERNELS``); the pass refuses to run without the cap:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 taskset -c 1 nice -n 5 python \
        experiments/memory_pass/measure_memory.py --data cpu-avx2-1t --store ... --deadline ...
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

#: the shipped datasets' per-visit protocol (their cards: warm-up 2 iterations and >= 0.1 s, CI 2% or 0.5 s)
VISIT = {"ci_target": 0.02, "max_time_s": 0.5, "warmup": 2, "warmup_s": 0.1}
THREADS = {"cpu-1t": 1, "cpu-2t": 2, "cpu-avx2-1t": 1, "cpu-avx2-2t": 2}
#: the kernels a dataset's configs ran on, where they are not this CPU's best: measured with torch and oneDNN
#: capped to them (the environment, recorded in each run's provenance as ``kernel_env``)
KERNELS = {"cpu-avx2-1t": "AVX2", "cpu-avx2-2t": "AVX2"}
KERNEL_ENV = {"AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def _configs(name: str, seed: int) -> list:
    """The dataset's configs in a seeded random order."""
    import pandas as pd

    from carb import families

    root = Path(__file__).resolve().parents[2]
    df = pd.read_parquet(root / "carb" / "data" / f"{name}.parquet")
    configs = [families.config_from_row(r) for r in df.to_dict("records")]
    assert [c.config_id for c in configs] == df["config_id"].tolist(), "config ids do not round-trip"
    random.Random(seed).shuffle(configs)
    return configs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, choices=sorted(THREADS), help="the shipped dataset")
    ap.add_argument("--store", required=True, help="the campaign store to write (resumed when it exists)")
    ap.add_argument("--deadline", required=True, help="UTC time the pass must end by, e.g. 2026-12-07T03:45")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=50, help="configs between two deadline checks")
    a = ap.parse_args(argv)
    deadline = datetime.fromisoformat(a.deadline).replace(tzinfo=timezone.utc).timestamp()

    from carb.campaign import Store, run_campaign
    from carb.measure import CpuBackend
    from carb.measure.base import Protocol

    want = KERNELS.get(a.data)
    if want is not None:  # the dataset's kernels, not this CPU's best: torch and oneDNN read the cap at import
        import os

        import torch

        env = KERNEL_ENV[want]
        if str(torch.backends.cpu.get_cpu_capability()) != want or any(os.environ.get(k) != v for k, v in env.items()):
            sys.exit(f"error: {a.data} ran on {want} kernels: run with " + " ".join(f"{k}={v}" for k, v in env.items()))
    configs = _configs(a.data, a.seed)
    protocol = Protocol(**VISIT)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    done = 0
    with CpuBackend(threads=THREADS[a.data], protocol=protocol) as backend, Store(a.store) as store:
        per_chunk_s = 0.0  # the slowest chunk so far (s)
        for i in range(0, len(configs), a.chunk):
            if time.time() + 1.5 * max(per_chunk_s, 60.0) > deadline:
                print(f"deadline: stopped before config {i} of {len(configs)}", flush=True)
                break
            t0 = time.time()
            r = run_campaign(configs[i : i + a.chunk], backend, store, platform=a.data, command=command, sentinel=None)
            if r.measured:
                per_chunk_s = max(per_chunk_s, time.time() - t0)
            done += r.measured
            print(f"{i + a.chunk}/{len(configs)}: {r.measured} measured, {r.skipped} stored before", flush=True)
    print(f"{done} configs measured into {a.store}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
