"""Narrow convolutions: what each costs by batch and kernel path, and what the layer
harness adds to a layer timed alone.

In-process loops (``bench_modules.loop_ms``), one thread, the ``retain`` allocator: not the
pipeline's protocol (a fresh worker per visit), but every figure of one table is taken in the
same minute, side by side. For each dense convolution of a 32 px map it prints the time, which
path torch takes (``carb.netmodel.onednn_conv``) and what a network model prices it at; then,
for a few layers of the ``layers`` family, the time of the family's module (the operator on
inputs held as buffers, as campaigns time it) against the bare operator.

    taskset -c 1 python benchmarks/probe_narrow_convs.py [--model layers-cpu-avx2-1t] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        nargs="+",
        default=["layers-cpu-avx2-1t"],
        help="network model(s) whose layer model prices each conv (shipped names or directories)",
    )
    ap.add_argument("--channels", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 16])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch
    from bench_modules import loop_ms

    from carb import graph, netmodel
    from carb.families import layers as L
    from carb.measure.cpu import _retain_freed_memory

    if not _retain_freed_memory():
        raise SystemExit("error: the retain allocator needs glibc")
    torch.set_num_threads(1)
    nms = [netmodel.load(m) for m in args.model]
    out: dict = {"models": args.model, "torch": torch.__version__, "convs": [], "harness": []}
    print(f"{'conv (32 px map)':<22} {'path':<7} {'ms':>8}  priced by each model (ms, ratio)")
    for c in args.channels:
        for k in (1, 3):
            for b in args.batches:
                cfg = L.LayerConfig("conv", c, c, 32, k, 1, 1, b)
                m = L.build(cfg)
                inner, x = m.layer, m.x
                t = loop_ms(lambda: inner(x), 0.1)
                rows = graph.capture(torch.nn.Sequential(inner), (b, c, 32, 32)).layers
                ps = [float(nm.layer.predict(rows).sum()) for nm in nms]
                path = "oneDNN" if bool(netmodel.onednn_conv(rows, 1).any()) else "native"
                out["convs"].append({"cin": c, "kernel": k, "batch": b, "path": path, "ms": t, "priced_ms": ps})
                print(f"c{c}x{c} k{k} b{b:<12} {path:<7} {t:8.4f}  " + "  ".join(f"{p:8.4f} {t / p:5.2f}" for p in ps))
    print("\nthe family's module (as campaigns time a layer) against the bare operator:")
    for cfg in [
        L.LayerConfig("relu", 4, 4, 32),
        L.LayerConfig("bn", 4, 4, 32),
        L.LayerConfig("add", 16, 16, 32),
        L.LayerConfig("conv", 4, 4, 32, 3, 1, 1, 1),
        L.LayerConfig("conv", 16, 16, 32, 3, 1, 1, 2),
    ]:
        m = L.build(cfg)
        x = m.x
        wrapped = loop_ms(lambda: m(None), 0.2)
        if hasattr(m, "layer"):
            inner = m.layer
            bare = loop_ms(lambda: inner(x), 0.2)
        else:
            y = m.y
            bare = loop_ms(lambda: x + y, 0.2)
        out["harness"].append({"layer": cfg.label(), "module_ms": wrapped, "bare_ms": bare})
        print(f"{cfg.label():<34} module {wrapped:.4f} ms, bare {bare:.4f} ms, +{1000 * (wrapped - bare):.1f} us")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"written {args.json}")


if __name__ == "__main__":
    main()
