"""The deployed networks' memory noise floor: how far fresh processes of one network peak apart.

Each network of ``benchmarks/nets/deployed_nets.py`` is measured ``--visits`` times, each visit a
fresh process of ``bench_deployed``'s own harness (the one that measured the stored truth: the
imports, the baseline, the network built, the peak reset, forwards; 1 thread, allocator
``retain``), the networks shuffled within each round. Per network: the visits' median and their
spread. The floor of the target "within ±10% of a fresh-process measurement": the share of single
visits within ±10% of their network's median (what a predictor that knew each network's median
would score), and the share of two-visit medians (as the stored truth is) within ±10% of it.

    taskset -c 1 python experiments/memory/memory_floor.py --core 1 --json experiments/memory/results/memory_floor.json
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
import bench_deployed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--visits", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    harness = argparse.Namespace(
        core=a.core, allocator="retain", forwards=5, min_time_s=0.3, warmup_s=0.2
    )  # memory only: a short timing
    names = list(bench_deployed.load_nets().NETWORKS)
    rng = random.Random(a.seed)
    t0 = time.time()
    visits: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.visits):
        order = names[:]
        rng.shuffle(order)
        for n in order:
            v = bench_deployed.visit(n, f"round {r}", harness)
            if "memory_mb" in v:
                visits[n].append(float(v["memory_mb"]))
            else:
                print(f"{n}: {v.get('error')}", flush=True)
        print(f"round {r + 1}/{a.visits} done in {time.time() - t0:.0f} s", flush=True)
    per = {}
    single, paired = [], []
    for n, v in visits.items():
        if len(v) < 2:
            continue
        m = float(np.median(v))
        dev = [x / m - 1 for x in v]
        pairs = [float(np.median(p)) / m - 1 for p in itertools.combinations(v, 2)]
        single += dev
        paired += pairs
        per[n] = {"visits_mb": v, "median_mb": m, "max_abs_dev_pct": 100 * max(abs(d) for d in dev)}
        print(f"{n:18s} median {m:6.1f} MB  visits {np.round(v, 1)}  max dev {per[n]['max_abs_dev_pct']:4.1f}%")
    single, paired = np.abs(single), np.abs(paired)
    floor = {
        "single_visit_within10_pct": float(100 * (single <= 0.1).mean()),
        "two_visit_median_within10_pct": float(100 * (paired <= 0.1).mean()),
        "networks_any_visit_off_by_10pct": int(sum(p["max_abs_dev_pct"] > 10 for p in per.values())),
        "single_visit_abs_dev_median_pct": float(100 * np.median(single)),
        "single_visit_abs_dev_p90_pct": float(100 * np.quantile(single, 0.9)),
    }
    print(
        f"single visits within ±10% of their network's median: {floor['single_visit_within10_pct']:.1f}%; "
        f"two-visit medians: {floor['two_visit_median_within10_pct']:.1f}%; networks with a visit off by >10%: "
        f"{floor['networks_any_visit_off_by_10pct']} of {len(per)}"
    )
    if a.json:
        doc = {
            "what": "fresh-process peak memory (MB = 1e6 B) of each deployed network, several visits, bench_deployed's "
            "harness; the floor of 'within ±10%' against it",
            "floor": floor,
            "networks": per,
            "harness": vars(harness),
            "seconds": time.time() - t0,
        }
        _common.write_json(a.json, doc)
        print(f"written {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
