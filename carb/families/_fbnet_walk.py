"""The FBNet family's work, counted per image operator by operator without building a module.

Per-(layer, op) tables of each input size and the stem and head of each size and class count, combined into
the figures of whole networks; :mod:`carb.families.fbnet` turns them into its feature columns.
"""

from __future__ import annotations

import functools

import numpy as np

from ._fbnet_tables import HEAD_CHANNELS, N_LAYERS, OP_SPECS, OPS, STAGE_CHANNELS, STEM_CHANNELS, layer_plan

# per-image figures in elements or counts: those that add up over layers, those that are
# maxima over operators, and the one minimum
_ADD = (
    "flops",
    "flops_1x1",
    "flops_dw",
    "params",
    "bn_channels",
    "n_bn",
    "n_conv",
    "n_linear",
    "activation",
    "n_ops",
    "n_blocks",
    "n_projections",
    "n_residual",
)
_MAX = ("peak_io", "live", "largest", "max_channels")
_NO_MIN = np.iinfo(np.int64).max  # the minimum of a layer without convolutions (identity)


class _Walk:
    """Walks one piece of a forward for one image (a layer, or the stem and head).

    It accumulates the piece's figures in elements and counts, and mirrors the forwards of
    :func:`carb.families.fbnet.build` operator by operator. ``live_before``: elements alive when an
    operator starts (its input included when counted).
    """

    def __init__(self) -> None:
        self.v = dict.fromkeys(_ADD + _MAX, 0)
        self.min_channels = _NO_MIN

    def out(self, elems: int, inp: int | None = None, live: int | None = None) -> None:
        """An operator's output; ``inp`` and ``live`` for the operators that allocate it."""
        v = self.v
        v["activation"] += elems
        v["n_ops"] += 1
        v["largest"] = max(v["largest"], elems)
        if inp is not None:
            v["peak_io"] = max(v["peak_io"], inp + elems)
        if live is not None:
            v["live"] = max(v["live"], live)

    def conv(self, cin: int, cout: int, k: int, stride: int, groups: int, h: int, live_before: int) -> tuple[int, int]:
        """A bias-free k x k convolution, padding k // 2; returns (output side, elements)."""
        ho = (h - 1) // stride + 1
        o = cout * ho * ho
        flops = 2 * (cin // groups) * cout * k * k * ho * ho  # FlopCounterMode's conv count
        v = self.v
        v["flops"] += flops
        if k == 1:
            v["flops_1x1"] += flops
        elif groups == cin == cout:
            v["flops_dw"] += flops
        v["params"] += cout * (cin // groups) * k * k
        v["n_conv"] += 1
        v["max_channels"] = max(v["max_channels"], cout)
        self.min_channels = min(self.min_channels, cout)
        self.out(o, inp=cin * h * h, live=live_before + o)
        return ho, o

    def bn(self, c: int, elems: int, live_before: int) -> None:
        self.v["params"] += 2 * c
        self.v["bn_channels"] += c
        self.v["n_bn"] += 1
        self.out(elems, inp=elems, live=live_before + elems)

    def block(self, cin: int, cout: int, k: int, e: int, g: int, stride: int, h: int) -> None:
        """IRBlock.forward; its input x stays alive throughout (the caller holds it)."""
        x, mid = cin * h * h, cin * e
        _, m = self.conv(cin, mid, 1, 1, g, h, x)
        self.bn(mid, m, x + m)  # the conv output is alive until bn returns
        self.out(m)  # relu, in place
        if g > 1:
            self.out(m, inp=m, live=x + 2 * m)  # channel shuffle: a contiguous copy
        ho, m2 = self.conv(mid, mid, k, stride, mid, h, x + m)
        self.bn(mid, m2, x + m2)
        self.out(m2)  # relu
        _, o = self.conv(mid, cout, 1, 1, g, ho, x + m2)
        self.bn(cout, o, x + o)
        self.v["n_blocks"] += 1
        if stride == 1 and cin == cout:
            self.out(o)  # out += x, in place
            self.v["n_residual"] += 1

    def skip(self, cin: int, cout: int, stride: int, h: int) -> None:
        """Identity (nothing runs), or SkipProjection.forward."""
        if stride == 1 and cin == cout:
            return
        x = cin * h * h
        _, o = self.conv(cin, cout, 1, stride, 1, h, x)
        self.bn(cout, o, x + o)
        self.out(o)  # relu
        self.v["n_projections"] += 1


@functools.lru_cache(maxsize=512)
def _layer_tables(input_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (layer, op) figures at one input size.

    Returns:
        Additive (22, 9, len(_ADD)), maxima (22, 9, len(_MAX)) and minimum channels (22, 9); int64, read-only.
    """
    add = np.zeros((N_LAYERS, len(OPS), len(_ADD)), dtype=np.int64)
    mx = np.zeros((N_LAYERS, len(OPS), len(_MAX)), dtype=np.int64)
    mn = np.full((N_LAYERS, len(OPS)), _NO_MIN, dtype=np.int64)
    h = input_size
    for layer, (_, cin, cout, stride, _) in enumerate(layer_plan()):
        for j, op in enumerate(OPS):
            w = _Walk()
            if op == "skip":
                w.skip(cin, cout, stride, h)
            else:
                k, e, g = OP_SPECS[op]
                w.block(cin, cout, k, e, g, stride, h)
            add[layer, j] = [w.v[f] for f in _ADD]
            mx[layer, j] = [w.v[f] for f in _MAX]
            mn[layer, j] = w.min_channels
        h = (h - 1) // stride + 1  # every op of a layer gives the same output side
    for a in (add, mx, mn):
        a.setflags(write=False)
    return add, mx, mn


@functools.lru_cache(maxsize=512)
def _fixed(input_size: int, classes: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Figures of the stem and head, the same in every network of a size and class count.

    Returns:
        Additive and maxima vectors, minimum channels, stem output side, final feature side.
    """
    w = _Walk()
    h, s = w.conv(3, STEM_CHANNELS, 3, 1, 1, input_size, 0)  # the input batch is not counted
    w.bn(STEM_CHANNELS, s, s)
    w.out(s)  # relu
    stem_side = hf = h
    for _, _, _, stride, _ in layer_plan():
        hf = (hf - 1) // stride + 1
    last, head = STAGE_CHANNELS[-1], HEAD_CHANNELS
    x = last * hf * hf
    _, o = w.conv(last, head, 1, 1, 1, hf, x)
    w.bn(head, o, o)  # the last layer's output is freed when the conv returns
    w.out(o)  # relu
    w.out(head, inp=o, live=o + head)  # global average pooling
    w.v["flops"] += 2 * head * classes  # linear (flatten is a view)
    w.v["params"] += head * classes + classes
    w.v["n_linear"] += 1
    w.out(classes, inp=head, live=head + classes)
    return (
        np.array([w.v[f] for f in _ADD], dtype=np.int64),
        np.array([w.v[f] for f in _MAX], dtype=np.int64),
        w.min_channels,
        stem_side,
        hf,
    )


def _network_figures(nets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-image figures of each distinct network (rows of 22 op codes, input size, classes).

    Summed and maximised from the per-(layer, op) tables.

    Returns:
        Additive (g, len(_ADD)) and maxima (g, len(_MAX)) figures, minimum channels, stem output side and final
        feature side.
    """
    g = len(nets)
    add = np.zeros((g, len(_ADD)), np.int64)
    mx = np.zeros((g, len(_MAX)), np.int64)
    mn = np.zeros(g, np.int64)
    stem_side = np.zeros(g, np.int64)
    final_side = np.zeros(g, np.int64)
    layers = np.arange(N_LAYERS)
    for s in np.unique(nets[:, N_LAYERS]) if g else []:
        rows = np.flatnonzero(nets[:, N_LAYERS] == s)
        t_add, t_max, t_min = _layer_tables(int(s))
        c = nets[rows, :N_LAYERS]
        add[rows] = t_add[layers, c].sum(axis=1)
        mx[rows] = t_max[layers, c].max(axis=1)
        mn[rows] = t_min[layers, c].min(axis=1)
        for cl in np.unique(nets[rows, N_LAYERS + 1]):
            sub = rows[nets[rows, N_LAYERS + 1] == cl]
            f_add, f_max, f_min, ss, fs = _fixed(int(s), int(cl))
            add[sub] += f_add
            mx[sub] = np.maximum(mx[sub], f_max)
            mn[sub] = np.minimum(mn[sub], f_min)
            stem_side[sub], final_side[sub] = ss, fs
    return add, mx, mn, stem_side, final_side
