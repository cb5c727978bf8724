"""Probe (issue 15): is a network slower than the sum of its layers because, inside the
network, each layer meets cold caches? A layer timed alone (the layer datasets) runs again
and again on the same weights and inputs, which stay in the CPU's caches; inside a forward
every layer's weights and input were last touched a whole network ago (weights) or by
another layer (inputs).

For each network: the whole forward's median time, and the sum over its leaf modules of the
median time of one call (a) repeated back to back (hot, as the layer campaigns time them)
and (b) each call after streaming a buffer larger than the last-level cache (cold; the
streaming is outside the timed region). One thread, freed memory kept (the ``retain``
allocator of the shipped model), pinned by the caller::

    taskset -c 1 python benchmarks/probe_cold_layers.py --json benchmarks/results/probe_cold_layers.json

Zoo networks (``carb.families.zoo``) at the input sizes where the shipped model under-prices (96 px)
and where it does not (160-224 px), side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

#: (arch, width, depth, kernel, input size, batch): the same designs at 96 px and larger
NETWORKS = (
    ("mnasnet", 1.3, 1.3, 0, 96, 2),
    ("mnasnet", 1.3, 1.3, 0, 192, 2),
    ("mobilenetv3", 1.25, 1.0, 3, 96, 2),
    ("mobilenetv3", 1.25, 1.0, 3, 224, 2),
    ("mobilenetv2", 1.4, 0.7, 5, 96, 2),
    ("mobilenetv2", 1.4, 0.7, 5, 160, 2),
    ("resnext", 0.5, 26, 0, 96, 4),
    ("resnext", 0.5, 26, 0, 160, 4),
    ("vgg", 0.25, 16, 0, 96, 2),
    ("vgg", 0.25, 16, 0, 160, 2),
)
FLUSH_MB = 96  # larger than the last-level cache of the machines this ran on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="timed calls per layer and per network")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from carb.families import zoo
    from carb.measure import cpu

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    retained = cpu._retain_freed_memory()
    buf = torch.empty(FLUSH_MB * 2**20 // 4)

    def flush() -> None:
        buf.add_(1.0)  # streams the buffer through the caches, evicting the layer's data

    def timed(f, cold: bool) -> float:
        ts = []
        for i in range(args.reps + 2):
            if cold:
                flush()
            t0 = time.perf_counter_ns()
            f()
            t = time.perf_counter_ns() - t0
            if i >= 2:  # two warm-up calls
                ts.append(t / 1e6)
        return statistics.median(ts)

    rows = []
    for arch, w, d, k, s, b in NETWORKS:
        cfg = zoo.ZooConfig(arch, float(w), float(d), int(k), int(s), int(b))
        net = zoo.build(cfg).eval()
        x = torch.randn(b, 3, s, s)
        calls: list = []

        def hook(mod, inp, out, calls=calls) -> None:
            calls.append((mod, tuple(t.detach().clone() if torch.is_tensor(t) else t for t in inp)))

        leaves = [m for m in net.modules() if not list(m.children())]
        hs = [m.register_forward_hook(hook) for m in leaves]
        with torch.inference_mode():
            net(x)
        for h in hs:
            h.remove()
        with torch.inference_mode():
            whole = timed(lambda: net(x), cold=False)
            hot = sum(timed(lambda m=m, a=a: m(*a), cold=False) for m, a in calls)
            cold = sum(timed(lambda m=m, a=a: m(*a), cold=True) for m, a in calls)
        rows.append(
            {
                "network": cfg.label(),
                "input_size": s,
                "leaf_calls": len(calls),
                "whole_ms": whole,
                "sum_hot_ms": hot,
                "sum_cold_ms": cold,
                "whole_over_hot": whole / hot,
                "whole_over_cold": whole / cold,
            }
        )
        print(
            f"{cfg.label():45s} whole {whole:8.2f} ms  layers hot {hot:8.2f} ({whole / hot:5.2f}x)  "
            f"cold {cold:8.2f} ({whole / cold:5.2f}x)  {len(calls)} calls",
            flush=True,
        )
    out = {
        "rows": rows,
        "reps": args.reps,
        "flush_mb": FLUSH_MB,
        "retain_allocator": retained,
        "torch": torch.__version__,
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "note": "leaf modules only: functional ops between them (adds, concatenations, reshapes) are in "
        "whole_ms but in neither sum",
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"written {args.json}")


if __name__ == "__main__":
    main()
