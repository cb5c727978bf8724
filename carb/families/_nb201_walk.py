"""The NAS-Bench-201 family's work, counted per image operator by operator without building a module.

One walk over the forward whose values are numpy arrays over many networks at once;
:mod:`carb.families.nb201` turns the figures into its feature columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._nb201_tables import CONV1, CONV3, EDGES, NONE, POOL, STAGE_CHANNELS, STEM_CHANNELS


class _Acc:
    """Per-image figures of many networks at once (numpy arrays of length n; elements or counts).

    The figures are accumulated operator by operator in the order the forward of
    :func:`carb.families.nb201.build` runs them. ``live``:
    elements alive now (held by callers) besides the new output.
    """

    def __init__(self, n: int) -> None:
        z = lambda: np.zeros(n, np.int64)  # noqa: E731
        self.flops, self.flops_1x1, self.params, self.bn_channels = z(), z(), z(), z()
        self.n_conv, self.n_bn, self.n_ops, self.activation = z(), z(), z(), z()
        self.peak_io, self.live_peak, self.largest = z(), z(), z()

    def out(self, elems: Any, mask: Any = True, inp: Any = None, live: Any = None) -> None:
        """Book an operator's output of ``elems`` elements, where ``mask``.

        For allocating operators, ``inp`` is its first input and ``live`` the elements alive once it is allocated.
        """
        m = np.asarray(mask, dtype=bool)
        e = np.where(m, elems, 0)
        self.activation += e
        self.n_ops += m
        self.largest = np.maximum(self.largest, e)
        if inp is not None:
            self.peak_io = np.maximum(self.peak_io, np.where(m, inp + elems, 0))
        if live is not None:
            self.live_peak = np.maximum(self.live_peak, np.where(m, live, 0))

    def conv(
        self, cin: int, cout: int, k: int, h: int, stride: int, live: Any, mask: Any = True, inp: int | None = None
    ) -> int:
        """A bias-free k x k convolution, padding k // 2; returns its output's elements."""
        ho = (h - 1) // stride + 1
        o = cout * ho * ho
        m = np.asarray(mask, dtype=bool)
        f = 2 * cin * cout * k * k * ho * ho
        self.flops += np.where(m, f, 0)
        if k == 1:
            self.flops_1x1 += np.where(m, f, 0)
        self.params += np.where(m, cout * cin * k * k, 0)
        self.n_conv += m
        self.out(o, m, inp=cin * h * h if inp is None else inp, live=live + o)
        return o

    def bn(self, c: int, elems: int, live: Any, mask: Any = True) -> None:
        m = np.asarray(mask, dtype=bool)
        self.params += np.where(m, 2 * c, 0)
        self.bn_channels += np.where(m, c, 0)
        self.n_bn += m
        self.out(elems, m, inp=elems, live=live + elems)

    def relu_conv_bn(self, cin: int, cout: int, k: int, h: int, stride: int, live: Any, mask: Any = True) -> int:
        """Book a ReLUConvBN on an input of ``cin x h x h`` held by the caller (counted in ``live``).

        Returns:
            The output's elements (alive after it returns).
        """
        x = cin * h * h
        self.out(x, mask, inp=x, live=live + x)  # relu, not in place
        o = self.conv(cin, cout, k, h, stride, live + x, mask)  # relu output alive until conv returns
        self.bn(cout, o, live + o, mask)  # conv output alive until bn returns
        return o


def _cells(acc: _Acc, codes: np.ndarray, c: int, h: int, live_out: int) -> None:
    """The 5 cells of a stage (identical, so the same figures five times; maxima once).

    ``live_out``: elements held outside the cell (none: the caller holds only the input).
    """
    e = c * h * h
    before = {
        k: getattr(acc, k).copy()
        for k in ("flops", "flops_1x1", "params", "bn_channels", "n_conv", "n_bn", "n_ops", "activation")
    }
    n = len(codes)
    # elements held: the cell input (node 0) and every node that is a fresh tensor
    held = np.full(n, live_out + e, np.int64)
    fresh_node = {0: np.zeros(n, bool)}  # node 0 is the input, held by the caller
    for j in (1, 2, 3):
        acc_alive = np.zeros(n, bool)  # an accumulator exists
        acc_fresh = np.zeros(n, bool)  # ... and is a temporary (not an existing node)
        for k, (dst, src) in enumerate(EDGES):
            if dst != j:
                continue
            op = codes[:, k]
            cur = held + np.where(acc_fresh, e, 0)
            conv1, conv3, pool = op == CONV1, op == CONV3, op == POOL
            acc.relu_conv_bn(c, c, 1, h, 1, cur, conv1)
            acc.relu_conv_bn(c, c, 3, h, 1, cur, conv3)
            acc.out(e, pool, inp=e, live=cur + e)
            computed = conv1 | conv3 | pool  # a fresh tensor y (skip: y is the source node)
            present = op != NONE
            add = present & acc_alive
            # acc + y: a new tensor while acc and y are alive
            acc.out(e, add, inp=e, live=cur + np.where(computed, e, 0) + e)
            acc_fresh = np.where(add, True, np.where(present & ~acc_alive, computed, acc_fresh))
            acc_alive = acc_alive | present
        zero = ~acc_alive
        acc.out(e, zero, inp=e, live=held + e)  # torch.zeros_like(x)
        fresh_node[j] = zero | acc_fresh
        held = held + np.where(fresh_node[j], e, 0)
    for k, v in before.items():  # the other four cells add the same again
        setattr(acc, k, v + 5 * (getattr(acc, k) - v))


def _reduction(acc: _Acc, cin: int, cout: int, h: int) -> None:
    """ResNetBasicblock at stride 2 on a ``cin x h x h`` input held by the caller."""
    x = cin * h * h
    ho = h // 2
    o = acc.relu_conv_bn(cin, cout, 3, h, 2, x)  # conv_a
    acc.relu_conv_bn(cout, cout, 3, ho, 1, x + o)  # conv_b (conv_a's output held meanwhile)
    cur = x + o  # conv_a's output freed, conv_b's kept
    p = cin * ho * ho
    acc.out(p, True, inp=x, live=cur + p)  # 2x2 average pooling
    acc.conv(cin, cout, 1, ho, 1, cur + p)  # shortcut conv (pool output alive until it returns)
    acc.out(o, True, inp=o, live=cur + 2 * o)  # res + out


def _network_table(codes: np.ndarray, size: int, classes: int) -> dict[str, np.ndarray]:
    """Per-image figures (elements, counts) of the networks of the unique edge-code rows ``codes``.

    At one input size and class count.
    """
    n = len(codes)
    acc = _Acc(n)
    s = STEM_CHANNELS * size * size
    acc.conv(3, STEM_CHANNELS, 3, size, 1, np.zeros(n, np.int64))  # the input batch is not counted
    acc.bn(STEM_CHANNELS, s, s)
    h, cin = size, STEM_CHANNELS
    for i, c in enumerate(STAGE_CHANNELS):
        if i:
            _reduction(acc, cin, c, h)
            h //= 2
        _cells(acc, codes, c, h, 0)
        cin = c
    e = cin * h * h
    acc.bn(cin, e, e)  # last BN (the last cell's output alive)
    acc.out(e)  # ReLU, in place
    acc.out(cin, True, inp=e, live=e + cin)  # global average pooling
    acc.flops += 2 * cin * classes  # linear (flatten is a view)
    acc.params += cin * classes + classes
    acc.out(classes, True, inp=cin, live=cin + classes)
    present = codes != NONE
    in_deg = np.stack(
        [present[:, [k for k, (d, _) in enumerate(EDGES) if d == j]].sum(axis=1) for j in (1, 2, 3)], axis=1
    )
    return {
        "flops": acc.flops,
        "flops_1x1": acc.flops_1x1,
        "params": acc.params,
        "bn_channels": acc.bn_channels,
        "n_conv": acc.n_conv,
        "n_bn": acc.n_bn,
        "n_ops": acc.n_ops,
        "activation": acc.activation,
        "peak_io": acc.peak_io,
        "live": acc.live_peak,
        "largest": acc.largest,
        "final_side": np.full(n, h, np.int64),
        "max_channels": np.full(n, STAGE_CHANNELS[-1], np.int64),
        "zero_nodes": (in_deg == 0).sum(axis=1),
        "node_adds": np.maximum(in_deg - 1, 0).sum(axis=1),
    }


#: The per-image figures :func:`_network_table` gives for each network.
_FIGURES = (
    "flops",
    "flops_1x1",
    "params",
    "bn_channels",
    "n_conv",
    "n_bn",
    "n_ops",
    "activation",
    "peak_io",
    "live",
    "largest",
    "final_side",
    "max_channels",
    "zero_nodes",
    "node_adds",
)


def _network_figures(nets: np.ndarray) -> dict[str, np.ndarray]:
    """Per-image figures of each distinct network (rows of 6 edge codes, input size, classes).

    One vectorized walk per (input size, classes).
    """
    g = len(nets)
    t = {k: np.zeros(g, np.int64) for k in _FIGURES}
    for s, cl in {(int(a), int(b)) for a, b in nets[:, 6:8]} if g else ():
        rows = np.flatnonzero((nets[:, 6] == s) & (nets[:, 7] == cl))
        part = _network_table(nets[rows, :6], s, cl)
        for k in _FIGURES:
            t[k][rows] = part[k]
    return t
