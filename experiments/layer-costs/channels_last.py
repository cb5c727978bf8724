"""What a channels-last layout does to each op's time, and what a copying reshape costs against its price.

The layer campaigns measure channels-first tensors. A network converted with
``.to(memory_format=torch.channels_last)`` runs other kernels for many ops (oneDNN's NHWC
convolutions, the NHWC pooling and interpolation loops). Each op here is timed on one thread,
channels first and channels last alternately, ``--rounds`` times (median of ``--reps`` calls
each); the ratio NHWC / NCHW of each round is recorded. An op whose every ratio lies within
``--tol`` of 1 runs the same on both layouts: the capture keeps it known under channels last
(:data:`carb.netmodel.roofline.LAYOUT_FREE`); any other op is priced as unknown there.

A reshape of a strided view copies it (the kernel of ``.contiguous()``). Each such copy below is
timed alone and priced by the shipped model of this machine's kind: a copy whose rows are runs
(a channel shuffle's, a window partition's) is the ``copy`` the layer campaigns measured; one
striding over its last dimension (``copy_strided``) is not.

    taskset -c 1 python experiments/layer-costs/channels_last.py --json experiments/layer-costs/results/channels_last.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402


def cases():
    """(op, size label, callable or module, input shapes): each op at a large and a small map."""
    import torch.nn as nn
    import torch.nn.functional as F

    out = []
    for c, hw in ((64, 112), (256, 14)):
        x = [(1, c, hw, hw)]
        s = f"{c}x{hw}x{hw}"
        out += [
            ("conv", s, nn.Conv2d(c, c, 3, padding=1), x),
            ("conv_1x1", s, nn.Conv2d(c, c, 1), x),
            ("conv_dw", s, nn.Conv2d(c, c, 3, padding=1, groups=c), x),
            ("conv_grouped", s, nn.Conv2d(c, c, 3, padding=1, groups=c // 16), x),
            ("conv_dilated", s, nn.Conv2d(c, c, 3, padding=2, dilation=2), x),
            ("convtranspose", s, nn.ConvTranspose2d(c, c // 2, 2, 2), x),
            ("bn", s, nn.BatchNorm2d(c), x),
            ("groupnorm", s, nn.GroupNorm(8, c), x),
            ("instancenorm", s, nn.InstanceNorm2d(c), x),
            ("maxpool", s, nn.MaxPool2d(3, 2, 1), x),
            ("avgpool", s, nn.AvgPool2d(3, 2, 1), x),
            ("gap", s, nn.AdaptiveAvgPool2d(1), x),
            ("upsample_nearest", s, nn.Upsample(scale_factor=2), x),
            ("upsample_bilinear", s, nn.Upsample(scale_factor=2, mode="bilinear"), x),
            ("pixelshuffle", s, nn.PixelShuffle(2), x),
            ("pad", s, nn.ZeroPad2d(1), x),
            ("cat", s, lambda a, b: __import__("torch").cat([a, b], 1), x * 2),
            ("add", s, lambda a, b: a + b, x * 2),
            ("mul", s, lambda a, b: a * b, [x[0], (1, c, 1, 1)]),
            ("relu", s, nn.ReLU(), x),
            ("sigmoid", s, nn.Sigmoid(), x),
            ("silu", s, nn.SiLU(), x),
            ("hardswish", s, nn.Hardswish(), x),
            ("hardsigmoid", s, nn.Hardsigmoid(), x),
            ("tanh", s, nn.Tanh(), x),
            ("gelu", s, nn.GELU(), x),
            ("mish", s, nn.Mish(), x),
            ("softmax_channels", s, lambda a: F.softmax(a, 1), x),
        ]
    return out


def copies():
    """(name, module, input shape): reshapes that copy."""
    import torch

    class Shuffle(torch.nn.Module):
        def forward(self, x):
            b, c, h, w = x.shape
            return x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)

    class Windows(torch.nn.Module):
        def forward(self, x):
            b, h, w, c = x.shape
            return x.view(b, h // 7, 7, w // 7, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, c)

    class Transposed(torch.nn.Module):
        def forward(self, x):
            return x.transpose(-2, -1).reshape(x.shape[0], -1)

    return [
        ("channel shuffle", Shuffle(), (1, 116, 56, 56)),
        ("channel shuffle", Shuffle(), (1, 232, 28, 28)),
        ("window partition", Windows(), (1, 56, 56, 96)),
        ("window partition", Windows(), (1, 28, 28, 192)),
        ("last two transposed", Transposed(), (64, 49, 96)),
        ("last two transposed", Transposed(), (16, 196, 128)),
    ]


def _copy_rows(reps: int) -> list[dict]:
    import torch

    from carb import graph
    from carb.netmodel import default_model
    from carb.netmodel.io import resolve
    from carb.netmodel.network import load
    from carb.netmodel.roofline import op_class

    name = default_model()
    nm = load(resolve(name))
    out = []
    for what, m, shape in copies():
        layers = graph.capture(m, shape).layers
        c = layers[layers["op"] == "copy"]
        price = float(nm.layer.predict(c).sum())
        timed = _median_ms(m, [torch.randn(shape)], reps)
        cls = sorted(set(op_class(c)))
        out.append(
            {"copy": what, "input": list(shape), "class": cls, "price_ms": price, "timed_ms": timed, "model": name}
        )
        print(
            f"{what:20s} {str(shape):18s} {cls} price {price:.4f} ms  timed {timed:.4f} ms  ratio {price / timed:.2f}"
        )
    return out


def _median_ms(f, args, reps: int) -> float:
    import torch

    with torch.inference_mode():
        for _ in range(3):
            f(*args)
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            f(*args)
            ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tol", type=float, default=0.10)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for op, size, f, shapes in cases():
        xs = [torch.randn(s) for s in shapes]
        xs_cl = [t.contiguous(memory_format=torch.channels_last) for t in xs]
        g = f.eval() if isinstance(f, torch.nn.Module) else f
        g_cl = (
            __import__("copy").deepcopy(f).eval().to(memory_format=torch.channels_last)
            if isinstance(f, torch.nn.Module)
            else f
        )
        ratios, nchw, nhwc = [], [], []
        for _ in range(a.rounds):
            t0 = _median_ms(g, xs, a.reps)
            t1 = _median_ms(g_cl, xs_cl, a.reps)
            nchw.append(t0)
            nhwc.append(t1)
            ratios.append(t1 / t0)
        free = all(abs(r - 1) <= a.tol for r in ratios)
        rows.append({"op": op, "input": size, "nchw_ms": nchw, "nhwc_ms": nhwc, "ratio": ratios, "layout_free": free})
        print(
            f"{op:18s} {size:10s} nchw {statistics.median(nchw):8.3f} ms  nhwc {statistics.median(nhwc):8.3f} ms  "
            f"ratio {' '.join(f'{r:.2f}' for r in ratios)}{'  same' if free else ''}",
            flush=True,
        )
    ops = sorted({r["op"] for r in rows})
    free_ops = [o for o in ops if all(r["layout_free"] for r in rows if r["op"] == o)]
    print("within ±{:.0%} on every input and round: {}".format(a.tol, ", ".join(free_ops)))
    copy_rows = _copy_rows(a.reps)
    if a.json:
        _common.write_json(
            a.json,
            {
                "what": "time of one layer, channels first (NCHW) and channels last (NHWC), 1 thread, wall time, "
                "median of --reps calls per round; ratio = NHWC / NCHW per round; copies: one reshape that copies, "
                "timed alone (wall, median of --reps calls, Python call included) against the shipped model's price",
                "tol": a.tol,
                "layout_free": free_ops,
                "rows": rows,
                "copies": copy_rows,
            },
            argv,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
