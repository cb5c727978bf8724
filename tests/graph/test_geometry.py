"""Capture never misreads: for each op kind, modules over a grid of their parameters, each
captured and checked against the module's own attributes, the shape it really computes
(run on a small CPU tensor) and an analytic FLOP count. 1-D and 3-D convolutions and pools
are ops of their own; an op capture cannot read is ``unknown``, never another op."""

from __future__ import annotations

import itertools
import math
import sys
import warnings
from typing import Any, Callable

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from carb import graph, netmodel


class Call(nn.Module):
    """A module calling ``f(self, x)``: functional forms, and modules taking more than one input."""

    def __init__(self, f: Callable[..., Any], **mods: nn.Module) -> None:
        super().__init__()
        self.f = f
        for k, m in mods.items():
            setattr(self, k, m)

    def forward(self, x):
        return self.f(self, x)


def _x(v) -> str:
    return "x".join(str(int(e)) for e in v) if isinstance(v, (tuple, list)) else str(int(v))


def _n(v, rank: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * rank


def _reading(shape, rank: int) -> tuple[int, int, int, int, int]:
    """(N, C, D, H, W) of a channels-first tensor: a 1-D op's length is H, a 3-D op's depth D."""
    n, c, *sp = shape
    if rank == 1:
        return n, c, 1, sp[0], 1
    if rank == 2:
        return n, c, 1, sp[0], sp[1]
    return n, c, sp[0], sp[1], sp[2]


@pytest.fixture(autouse=True, scope="module")
def _small_kernels():
    """Run the modules on torch's own kernels, one thread: tiny tensors, no oneDNN kernel made for each shape."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False):
            yield
    torch.set_num_threads(threads)


def _row(m: nn.Module, shape) -> dict:
    t = graph.capture(m, tuple(shape))
    rows = t.layers[t.layers["op"] != "view"]
    assert len(rows) == 1, rows[["op", "kind"]]
    return rows.iloc[0].to_dict()


def _check(m: nn.Module, shape, op: str, geometry: str, flops=None, rank: int = 2, root: bool = True, **cols) -> dict:
    """Capture ``m`` on ``shape`` and check its one costed row against what the module states and computes.

    A standard module is captured as a leaf (its module form) and as the traced root (the
    functions its forward calls, or ``torch.export``'s operators where fx cannot trace it;
    with ``root``): both read alike. ``flops``: a count, or a function of the output shape.
    """
    x = torch.randn(*shape)
    with torch.inference_mode():
        y = m.eval()(x)
    y = y[0] if isinstance(y, tuple) else y
    forms = [m] if isinstance(m, Call) else [nn.Sequential(m), m] if root else [nn.Sequential(m)]
    for form in forms:
        r = _row(form, shape)
        assert r["op"] == op and r["geometry"] == geometry, (type(form).__name__, r["op"], r["geometry"], op, geometry)
        assert tuple(r["out_shape"]) == tuple(y.shape)
        if rank:
            n, c, d, h, w = _reading(shape, rank)
            _, co, do, ho, wo = _reading(tuple(y.shape), rank)
            got = tuple(r[k] for k in ("batch", "cin", "d", "h", "w", "cout", "do", "ho", "wo"))
            assert got == (n, c, d, h, w, co, do, ho, wo)
        if flops is not None:
            assert r["flops"] == (flops(tuple(y.shape)) if callable(flops) else flops)
        for k, v in cols.items():
            assert r[k] == v, (k, r[k], v)
    return r


CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
CONVT = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
OPS = {1: "conv1d", 2: "conv", 3: "conv3d"}
OPST = {1: "convtranspose1d", 2: "convtranspose", 3: "convtranspose3d"}
SIDE = {1: (2, 4, 13), 2: (2, 4, 11, 9), 3: (1, 4, 5, 9, 7)}


def _spread(cases, step: int) -> list:
    """Every ``step``-th case of a product of parameter values.

    A step prime to every parameter's count of values still takes each value of each
    parameter, at a fraction of the product's captures.
    """
    return list(cases)[::step]


def _conv_cases(rank: int):
    kernels = [1, 3, (3, 1, 3)[:rank] if rank > 1 else 2]
    cases = itertools.product(kernels, [1, 2], [0, 1, "same"], [1, 2], [1, 2, 4])
    return _spread(((k, s, p, d, g) for k, s, p, d, g in cases if p != "same" or s == 1), 5)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_convolutions_of_each_rank_are_their_own_op_with_every_parameter(rank: int) -> None:
    shape = SIDE[rank]
    for i, (k, s, p, d, g) in enumerate(_conv_cases(rank)):
        m = CONV[rank](4, 8, k, s, p, d, g, bias=False)
        ks, ss, ds = _n(k, rank), _n(s, rank), _n(d, rank)
        ps = _n(p, rank) if p != "same" else tuple(di * (ki - 1) // 2 for ki, di in zip(ks, ds))

        def flops(out, g=g, ks=ks):
            return 2 * out[0] * 8 * math.prod(out[2:]) * (4 // g) * math.prod(ks)

        geo = f"k={_x(ks)} s={_x(ss)} p={p if p == 'same' else _x(ps)} d={_x(ds)} g={g}"
        h = -2 if rank > 1 else 0
        _check(
            m,
            shape,
            OPS[rank],
            geo,
            flops,
            rank,
            i % 5 == 0,
            kernel=ks[h],
            stride=ss[h],
            padding=ps[h],
            dilation=ds[h],
            groups=g,
            kernel_w=ks[-1] if rank > 1 else 1,
            kernel_d=ks[0] if rank == 3 else 1,
        )


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_transposed_convolutions_read_kernel_stride_padding_output_padding_groups(rank: int) -> None:
    shape = SIDE[rank]
    cases = itertools.product([2, 3], [1, 2], [0, 1], [1, 2], [1, 2])
    cases = _spread(((k, s, p, d, g, o) for k, s, p, d, g in cases for o in range(max(s, d))), 3)
    for i, (k, s, p, d, g, op_) in enumerate(cases):
        if True:
            m = CONVT[rank](4, 8, k, s, p, op_, g, bias=False, dilation=d)
            ks = _n(k, rank)
            flops = 2 * shape[0] * 4 * (8 // g) * math.prod(ks) * math.prod(shape[2:])
            geo = f"k={_x(ks)} s={_x(_n(s, rank))} p={_x(_n(p, rank))} d={_x(_n(d, rank))} g={g} op={_x(_n(op_, rank))}"
            _check(m, shape, OPST[rank], geo, flops, rank, i % 4 == 0, kernel=k, stride=s, padding=p, groups=g)


POOL = {("max", 1): nn.MaxPool1d, ("max", 2): nn.MaxPool2d, ("max", 3): nn.MaxPool3d}
POOL |= {("avg", 1): nn.AvgPool1d, ("avg", 2): nn.AvgPool2d, ("avg", 3): nn.AvgPool3d}


@pytest.mark.parametrize("kind,rank", [(k, r) for k in ("max", "avg") for r in (1, 2, 3)])
def test_pools_of_each_rank_read_kernel_stride_padding_dilation_and_ceil_mode(kind: str, rank: int) -> None:
    shape = SIDE[rank]
    op = {1: f"{kind}pool1d", 2: f"{kind}pool", 3: f"{kind}pool3d"}[rank]
    extras = [{"dilation": 1}, {"dilation": 2}] if kind == "max" else [{"count_include_pad": v} for v in (True, False)]
    cases = _spread(itertools.product([2, 3], [None, 1, 2], [0, 1], [False, True], extras), 5)
    for i, (k, s, p, ceil, extra) in enumerate(cases):
        ss = _n(s if s is not None else k, rank)
        if True:
            m = POOL[kind, rank](k, s, p, ceil_mode=ceil, **extra)
            base = f"k={_x(_n(k, rank))} s={_x(ss)} p={_x(_n(p, rank))}"
            if kind == "max":
                geo = f"{base} d={_x(_n(extra['dilation'], rank))} ceil={int(ceil)}"
            else:
                geo = f"{base} ceil={int(ceil)} count_include_pad={int(extra['count_include_pad'])}"
            _check(m, shape, op, geo, 0, rank, i % 3 == 0, kernel=k, stride=ss[0], padding=p)


def test_functional_pools_and_convolutions_read_as_their_modules() -> None:
    x5 = (1, 4, 6, 8, 8)
    _check(
        Call(lambda s, x: F.max_pool3d(x, 3, 2, 1, ceil_mode=True)),
        x5,
        "maxpool3d",
        "k=3x3x3 s=2x2x2 p=1x1x1 d=1x1x1 ceil=1",
        0,
        3,
    )
    _check(
        Call(lambda s, x: F.avg_pool1d(x, 3, 2)),
        (2, 4, 13),
        "avgpool1d",
        "k=3 s=2 p=0 ceil=0 count_include_pad=1",
        0,
        1,
    )
    w = torch.randn(8, 2, 3, 5, 5)
    _check(
        Call(lambda s, x: F.conv3d(x, w, None, (1, 2, 2), (1, 2, 2), 1, 2)),
        x5,
        "conv3d",
        "k=3x5x5 s=1x2x2 p=1x2x2 d=1x1x1 g=2",
        2 * 8 * 6 * 4 * 4 * 2 * 75,
        3,
        weight_bytes=w.numel() * 4,
    )
    wt = torch.randn(4, 3, 2, 2)
    _check(
        Call(lambda s, x: F.conv_transpose2d(x, wt, None, 2)),
        (1, 4, 6, 6),
        "convtranspose",
        "k=2x2 s=2x2 p=0x0 d=1x1 g=1 op=0x0",
        2 * 4 * 3 * 4 * 36,
        2,
    )
    # a max pooling returning its indices runs another kernel: unknown, never a plain max pooling
    r = _check(Call(lambda s, x: F.max_pool2d(x, 2, return_indices=True)[0]), (1, 4, 8, 8), "unknown", "", 0, 0)
    assert r["kind"] == "max_pool2d_with_indices"


def test_adaptive_pools_read_as_global_or_equal_windows_else_unknown() -> None:
    for rank, op in ((1, "gap1d"), (2, "gap"), (3, "gap3d")):
        m = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}[rank](1)
        _check(m, SIDE[rank][:2] + (6,) * rank, op, "", 0, rank)
    _check(
        nn.AdaptiveAvgPool2d(3),
        (1, 4, 12, 6),
        "avgpool",
        "k=4x2 s=4x2 p=0x0 ceil=0 count_include_pad=1 adaptive=1",
        0,
        2,
        kernel=4,
        stride=4,
    )
    _check(
        Call(lambda s, x: F.adaptive_avg_pool2d(x, 2)),
        (1, 4, 8, 8),
        "avgpool",
        "k=4x4 s=4x4 p=0x0 ceil=0 count_include_pad=1 adaptive=1",
        0,
        2,
    )
    _check(nn.AdaptiveAvgPool2d(5), (1, 4, 7, 7), "unknown", "", 0, 0)  # windows of unequal sizes


def test_upsampling_by_scale_and_by_size_nearest_and_bilinear() -> None:
    shape = (2, 4, 6, 5)
    for mode, how, ac in itertools.product(["nearest", "bilinear"], ["scale", "size"], [False, True]):
        if mode == "nearest" and ac:
            continue
        kw: dict[str, Any] = {"scale_factor": 2.0} if how == "scale" else {"size": (9, 13)}
        if mode == "bilinear":
            kw["align_corners"] = ac
        geo = "scale=2x2" if how == "scale" else "size=9x13"
        geo += f" align_corners={int(ac)}" if mode == "bilinear" else ""
        op = f"upsample_{mode}"
        _check(nn.Upsample(mode=mode, **kw), shape, op, geo, 0)
        _check(Call(lambda s, x, kw=kw, mode=mode: F.interpolate(x, mode=mode, **kw)), shape, op, geo, 0)
    _check(nn.UpsamplingBilinear2d(scale_factor=3), shape, "upsample_bilinear", "scale=3x3 align_corners=1", 0)
    _check(nn.Upsample(scale_factor=(2, 3)), shape, "upsample_nearest", "scale=2x3", 0)
    # other modes and ranks: another kernel, unknown
    _check(Call(lambda s, x: F.interpolate(x, scale_factor=2, mode="bicubic")), shape, "unknown", "", 0, 0)
    _check(
        Call(lambda s, x: F.interpolate(x, scale_factor=2, mode="bilinear", antialias=True)), shape, "unknown", "", 0, 0
    )
    _check(nn.Upsample(scale_factor=2), (1, 4, 3, 5, 5), "unknown", "", 0, 0)


def test_normalizations_read_their_groups_and_the_elements_they_normalize() -> None:
    # channels last: LayerNorm(C) on (N, H, W, C): C features, H * W rows an image
    r = _check(nn.LayerNorm(16), (2, 5, 7, 16), "layernorm", "normalized=16 affine=1", 0, 0)
    assert (r["batch"], r["cin"], r["h"], r["w"], r["cout"], r["ho"]) == (2, 16, 35, 1, 16, 35)
    # over a whole sample (GroupNorm(1)'s reduction): C * H * W features, one row an image
    r = _check(
        nn.LayerNorm((8, 5, 5), elementwise_affine=False), (2, 8, 5, 5), "layernorm", "normalized=8x5x5 affine=0", 0, 0
    )
    assert (r["batch"], r["cin"], r["h"]) == (2, 200, 1)
    r = _check(Call(lambda s, x: F.layer_norm(x, (12,))), (3, 9, 12), "layernorm", "normalized=12 affine=0", 0, 0)
    assert (r["batch"], r["cin"], r["h"]) == (3, 12, 9)
    for g, affine in itertools.product([1, 2, 8], [True, False]):
        _check(
            nn.GroupNorm(g, 8, affine=affine),
            (2, 8, 6, 5),
            "groupnorm",
            f"groups={g} affine={int(affine)}",
            0,
            groups=g,
        )
    _check(Call(lambda s, x: F.group_norm(x, 4)), (2, 8, 6, 5), "groupnorm", "groups=4 affine=0", 0, groups=4)
    for rank, cls in ((1, nn.InstanceNorm1d), (2, nn.InstanceNorm2d), (3, nn.InstanceNorm3d)):
        for track in (False, True):
            _check(cls(4, track_running_stats=track), SIDE[rank], "instancenorm", f"track={int(track)}", 0, rank)
    for rank, cls in ((1, nn.BatchNorm1d), (2, nn.BatchNorm2d), (3, nn.BatchNorm3d)):
        _check(cls(4), SIDE[rank], "bn", "", 0, rank)


def test_pixel_shuffle_pad_and_activations() -> None:
    _check(nn.PixelShuffle(2), (1, 16, 5, 6), "pixelshuffle", "r=2", 0)
    _check(nn.PixelUnshuffle(2), (1, 4, 6, 8), "pixelunshuffle", "r=2", 0)
    _check(Call(lambda s, x: F.pixel_shuffle(x, 3)), (1, 18, 4, 4), "pixelshuffle", "r=3", 0)
    _check(nn.ZeroPad2d(1), (1, 4, 6, 6), "pad", "pad=1,1,1,1", 0, padding=1)
    _check(nn.ConstantPad2d((1, 2, 0, 3), 0.5), (1, 4, 6, 6), "pad", "pad=1,2,0,3 value=0.5", 0)
    _check(nn.ReflectionPad2d((2, 1, 1, 2)), (1, 4, 6, 6), "pad_reflect", "pad=2,1,1,2", 0)
    _check(nn.ReplicationPad2d(1), (1, 4, 6, 6), "pad_replicate", "pad=1,1,1,1", 0)
    _check(nn.ZeroPad3d(1), (1, 4, 3, 6, 6), "pad", "pad=1,1,1,1,1,1", 0, 3)
    _check(Call(lambda s, x: F.pad(x, (1, 1, 2, 2))), (1, 4, 6, 6), "pad", "pad=1,1,2,2", 0)
    _check(Call(lambda s, x: F.pad(x, (1, 1, 2, 2), mode="reflect")), (1, 4, 6, 6), "pad_reflect", "pad=1,1,2,2", 0)
    _check(Call(lambda s, x: F.pad(x, (1, 1, 2, 2), mode="circular")), (1, 4, 6, 6), "unknown", "", 0, 0)
    for m, op in (
        (nn.Mish(), "mish"),
        (nn.SiLU(), "silu"),
        (nn.Hardswish(), "hardswish"),
        (nn.Hardsigmoid(), "hardsigmoid"),
        (nn.Sigmoid(), "sigmoid"),
        (nn.GELU(), "gelu"),
        (nn.Tanh(), "tanh"),
    ):
        _check(m, (1, 4, 6, 6), op, "", 0)
    _check(Call(lambda s, x: F.mish(x)), (1, 4, 6, 6), "mish", "", 0)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 6, 10), (4, 9)])
def test_a_softmax_reads_the_row_it_normalizes_and_the_elements_after_it(shape: tuple[int, ...]) -> None:
    """Every way to call a softmax, over every dimension: ``row`` is the size of that dimension, ``inner`` the
    elements after it (none over the last); a softmax over another dimension is a class of its own."""
    for dim in range(-len(shape), len(shape)):
        d = dim % len(shape)
        inner = math.prod(shape[d + 1 :])
        want = f"row={shape[d]}" + (f" inner={inner}" if inner > 1 else "")
        for m in (
            nn.Softmax(dim=dim),
            Call(lambda s, x, dim=dim: F.softmax(x, dim=dim)),
            Call(lambda s, x, dim=dim: torch.softmax(x, dim)),
            Call(lambda s, x, dim=dim: x.softmax(dim)),
        ):
            r = _row(m, shape)
            assert (r["op"], r["geometry"]) == ("softmax", want), (m, dim)
            cls = netmodel.op_class(pd.DataFrame([r]))[0]
            assert cls == ("softmax" if inner == 1 else "softmax_strided")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the implicit dimension's deprecation
        implicit = _row(nn.Softmax(), shape)["geometry"]  # the first of a 1- or 3-D input, else the second
    d = 0 if len(shape) == 3 else 1
    assert implicit.startswith(f"row={shape[d]}")


def test_a_softmax_layer_reads_as_the_same_softmax_in_a_network_and_its_work_is_its_rows() -> None:
    from carb.families import layers as L

    cfg = L.LayerConfig(op="softmax", cin=6, input_size=7, batch=2)
    lf = L.layer_frame([cfg])
    r = _row(nn.Softmax(dim=-1), (2, 6, 7, 7))
    assert lf["geometry"].iloc[0] == r["geometry"] == "row=7"
    work = netmodel._work(lf, netmodel.op_class(lf), 5)
    assert work[0] == 2 * 6 * 7  # rows of 7
    assert netmodel._work(lf, netmodel.op_class(lf), 4)[0] == lf["flops"].iloc[0]


def test_attention_reads_heads_lengths_and_counts_its_two_products() -> None:
    for heads, lq, lk, e, ev, causal in itertools.product([1, 4], [5, 16], [5, 9], [8], [8, 6], [False, True]):
        if causal and lq != lk:
            continue

        def f(s, x, lk=lk, ev=ev, causal=causal):
            k = x.new_ones(x.shape[0], x.shape[1], lk, x.shape[-1])
            v = x.new_ones(x.shape[0], x.shape[1], lk, ev)
            return F.scaled_dot_product_attention(x, k, v, is_causal=causal)

        m = Call(f)
        x = torch.randn(2, heads, lq, e)
        t = graph.capture(m, x)
        r = t.layers[t.layers["op"] == "sdpa"].iloc[0]
        assert r["geometry"] == f"heads={heads} Lq={lq} Lk={lk} E={e} Ev={ev} causal={int(causal)} mask=0"
        assert (r["batch"], r["cin"], r["h"], r["w"], r["wo"]) == (2, heads, lq, e, ev)
        assert r["flops"] == 2 * 2 * heads * lq * lk * (e + ev)
    for e, heads, bf in itertools.product([16, 32], [1, 4], [True, False]):
        m = Call(lambda s, x: s.a(x, x, x)[0], a=nn.MultiheadAttention(e, heads, batch_first=bf))
        shape = (2, 7, e) if bf else (7, 2, e)
        r = _check(
            m,
            shape,
            "mha",
            f"embed={e} heads={heads} Lq=7 Lk=7 kdim={e} vdim={e} batch_first={int(bf)} need_weights=1",
            None,
            0,
        )
        assert (r["batch"], r["cin"], r["h"]) == (2, e, 7)
        # in and out projections, then the two products of every head
        assert r["flops"] == 2 * 14 * e * 3 * e + 2 * 14 * e * e + 2 * 2 * 2 * 7 * 7 * e


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_recurrent_layers_count_2_gates_input_plus_hidden_times_hidden_per_step(kind: str) -> None:
    cls, gates = {"lstm": (nn.LSTM, 4), "gru": (nn.GRU, 3), "rnn": (nn.RNN, 1)}[kind]
    for fin, hid, layers, bidir, bf in _spread(
        itertools.product([8, 12], [16], [1, 2, 3], [False, True], [True, False]), 3
    ):
        m = Call(lambda s, x: s.r(x)[0], r=cls(fin, hid, layers, batch_first=bf, bidirectional=bidir))
        n, steps = 3, 5
        shape = (n, steps, fin) if bf else (steps, n, fin)
        dirs = 2 if bidir else 1
        flops = sum(2 * gates * ((fin if i == 0 else hid * dirs) + hid) * hid * dirs for i in range(layers)) * steps * n
        geo = f"hidden={hid} layers={layers} bidirectional={int(bidir)} batch_first={int(bf)}"
        geo += " nonlinearity=tanh" if kind == "rnn" else ""
        r = _check(m, shape, kind, geo, flops, 0)
        assert (r["batch"], r["cin"], r["h"], r["cout"]) == (n, fin, steps, hid * dirs)


def test_no_op_called_known_whose_geometry_differs_from_the_module() -> None:
    """Over every module of a mixed grid: each named op's geometry is the module's own (0 misreads)."""
    cases = []
    for rank in (1, 2, 3):
        for k, s, p, d, g in _conv_cases(rank)[::2]:
            cases.append((CONV[rank](4, 8, k, s, p, d, g), SIDE[rank]))
        cases.append((POOL["max", rank](3, 2, 1, ceil_mode=True), SIDE[rank]))
        cases.append((CONVT[rank](4, 4, 2, 2), SIDE[rank]))
    cases += [(nn.Conv2d(4, 8, (1, 7), (1, 2), (0, 3)), SIDE[2]), (nn.MaxPool2d((2, 3), (1, 2)), SIDE[2])]
    misread = []
    for m, shape in cases:
        t = graph.capture(m, shape)
        r = t.layers.iloc[0]
        rank = len(shape) - 2
        ks = _n(m.kernel_size, rank)
        ss = _n(m.stride if m.stride is not None else m.kernel_size, rank)
        want_k = (ks[-2] if rank > 1 else ks[0], ks[-1] if rank > 1 else 1, ks[0] if rank == 3 else 1)
        n, c, dd, h, w = _reading(shape, rank)
        if r["op"] != "unknown" and (
            (r["kernel"], r["kernel_w"], r["kernel_d"]) != want_k
            or r["stride"] != (ss[-2] if rank > 1 else ss[0])
            or (r["cin"], r["d"], r["h"], r["w"]) != (c, dd, h, w)
            or f"k={_x(ks)} s={_x(ss)}" not in r["geometry"]
        ):
            misread.append((type(m).__name__, r["op"], r["geometry"]))
    assert misread == []


def test_export_path_reads_the_same_ops_and_geometry() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c3 = nn.Conv3d(3, 8, (3, 7, 7), (1, 2, 2), (1, 3, 3))
            self.p3 = nn.MaxPool3d(3, 2, 1)
            self.up = nn.ConvTranspose2d(8, 4, 2, 2)

        def forward(self, x):
            y = self.p3(self.c3(x))
            y = y.flatten(1, 2)[:, :8]
            y = F.interpolate(self.up(y), scale_factor=2.0)
            return F.pad(y, (1, 1, 1, 1)) if x.shape[-1] > 4 else y  # fx cannot trace this branch

    cols = ["op", "geometry", "cin", "d", "h", "w", "flops"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = graph.capture(Net(), (1, 3, 8, 16, 16))
    assert t.meta["capture"] == "torch.export"
    costed = t.layers[t.layers["op"] != "view"][cols]
    got = costed.to_dict("records")
    assert [r["op"] for r in got] == ["conv3d", "maxpool3d", "convtranspose", "upsample_nearest", "pad"]
    assert got[0]["geometry"] == "k=3x7x7 s=1x2x2 p=1x3x3 d=1x1x1 g=1" and (got[0]["cin"], got[0]["d"]) == (3, 8)
    assert got[3]["geometry"] == "scale=2x2" and got[4]["geometry"] == "pad=1,1,1,1"


def test_closed_forms_of_1d_3d_transposed_and_recurrent_layers_equal_running_on_meta(monkeypatch) -> None:
    from carb.graph import trace

    runner = sys.modules[trace._GraphRun.__module__]  # the closed forms' switch: where the graph's nodes run
    cases = [
        (nn.Conv1d(4, 8, 3, 2, 1, 2, 2), (2, 4, 13)),
        (nn.Conv3d(4, 8, (3, 5, 5), (1, 2, 2), (1, 2, 2), groups=4), (1, 4, 5, 9, 7)),
        (nn.ConvTranspose2d(4, 8, 3, 2, 1, 1, 2, dilation=2), (1, 4, 6, 7)),
        (nn.ConvTranspose3d(4, 8, 2, 2), (1, 4, 3, 4, 5)),
        (nn.LSTM(8, 16, 2, batch_first=True, bidirectional=True), (3, 5, 8)),
        (nn.GRU(8, 16), (5, 8)),
        (nn.RNN(8, 16, 3), (5, 2, 8)),
    ]
    for m, shape in cases:
        fast = graph.capture(nn.Sequential(m), shape).layers
        monkeypatch.setattr(runner, "_CLOSED_FORMS", False)
        slow = graph.capture(nn.Sequential(m), shape).layers
        monkeypatch.setattr(runner, "_CLOSED_FORMS", True)
        assert fast.equals(slow), type(m).__name__
