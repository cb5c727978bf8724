"""Probe (issue 15): what glibc's page faults add to CPU inference latency.

The same networks measured through CARB's own CPU pipeline (a fresh worker per visit, 1
thread) with the two worker allocators of ``carb.measure.cpu.ALLOCATORS``, side by side:
each network's ``default`` and ``retain`` visits one after the other, the order alternating
(ABBA), so both see the machine in the same minutes. Prints per network the latency (median
and fastest sample), page faults per forward and peak memory under each, and the ratios.

    taskset -c 1 python benchmarks/probe_allocator.py --zoo-store campaigns/quiet-avx2-1t.duckdb \
        --n 30 --out benchmarks/results/probe_allocator.json
    taskset -c 1 python benchmarks/probe_allocator.py --layers-store campaigns/quiet-avx2-1t.duckdb --n 60 ...

The networks (or layers) are a seeded sample of a campaign store's configs (any family).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo-store", default=None, help="campaign store whose zoo networks are sampled")
    ap.add_argument("--layers-store", default=None, help="campaign store whose layers are sampled")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-time", type=float, default=1.5, help="sampling seconds per visit")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if (args.zoo_store is None) == (args.layers_store is None):
        ap.error("give one of --zoo-store or --layers-store")

    import bench_modules as B

    from carb.measure import Protocol, get_backend

    if args.zoo_store:
        _, configs, _, _ = B.zoo_data(args.zoo_store)
    else:
        from carb.families import layers as L

        df = B.read_store(args.layers_store, "layers")[0]
        configs = [L.LayerConfig.from_dict({k: r[k] for k in L.PARAMETERS}) for r in df.to_dict("records")]
    rng = np.random.default_rng(args.seed)
    pick = [configs[i] for i in sorted(rng.choice(len(configs), size=min(args.n, len(configs)), replace=False))]
    proto = replace(Protocol.default_for("cpu"), max_time_s=args.max_time)
    backends = {a: get_backend("cpu", threads=1, protocol=proto, allocator=a) for a in ("default", "retain")}
    rows = []
    t0 = time.time()
    try:
        for i, c in enumerate(pick):
            order = ("default", "retain") if i % 2 == 0 else ("retain", "default")
            r: dict = {"label": c.label(), "order": order[0]}
            for a in order:
                m = backends[a].measure(c)
                if m.status != "ok":
                    r[a] = {"status": m.status, "message": m.message}
                    continue
                s = np.asarray(m.extra.get("latency_samples_ms") or [m.latency_ms.median])
                r[a] = {
                    "latency_ms": float(m.latency_ms.median),
                    "latency_ms_min": float(s.min()),
                    "faults_per_forward": m.extra.get("page_faults_per_forward"),
                    "memory_mb": m.memory_mb,
                }
            if "latency_ms" in r.get("default", {}) and "latency_ms" in r.get("retain", {}):
                d, k = r["default"], r["retain"]
                r["ratio_median"] = d["latency_ms"] / k["latency_ms"]
                r["ratio_min"] = d["latency_ms_min"] / k["latency_ms_min"]
                print(
                    f"{time.time() - t0:6.0f}s {c.label():48s} default {d['latency_ms']:8.2f} ms "
                    f"({d['faults_per_forward']:7.0f} faults) retain {k['latency_ms']:8.2f} ms "
                    f"({k['faults_per_forward']:5.0f}) x{r['ratio_median']:.2f} (fastest x{r['ratio_min']:.2f}) "
                    f"memory {d['memory_mb']:.0f} / {k['memory_mb']:.0f} MB",
                    flush=True,
                )
            rows.append(r)
    finally:
        for b in backends.values():
            b.close()
    ok = [r for r in rows if "ratio_median" in r]
    med = np.array([r["ratio_median"] for r in ok])
    fast = np.array([r["ratio_min"] for r in ok])
    summary = {
        "n": len(ok),
        "ratio_median": {"median": float(np.median(med)), "p90": float(np.quantile(med, 0.9)), "max": float(med.max())},
        "ratio_min": {"median": float(np.median(fast)), "p90": float(np.quantile(fast, 0.9)), "max": float(fast.max())},
        "share_over_1.10": float((med > 1.10).mean()),
        "measured": [
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        ],
        "command": "python " + " ".join(sys.argv),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
