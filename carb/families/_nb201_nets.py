"""The PyTorch networks of the NAS-Bench-201 family (:class:`carb.families.nb201.NB201Config`).

They are built by :func:`carb.families.nb201.build`.

NAS-Bench-201's inference model (``TinyNetwork`` with ``InferCell``, C = 16, N = 5); the
operators and the choices behind them are described in :mod:`carb.families.nb201`. The
forwards are written one statement per operator so that eager PyTorch frees each
intermediate tensor where :func:`carb.families.nb201.features` assumes it does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._nb201_tables import CELLS_PER_STAGE, EDGES, STAGE_CHANNELS, STEM_CHANNELS

__all__ = ["ReLUConvBN", "Cell", "ReductionBlock", "NB201Net"]


class ReLUConvBN(nn.Module):
    """ReLU (not in place: its input is a node other edges read) + k x k convolution (padding k // 2, no bias) + BN."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(x)
        out = self.conv(out)
        out = self.bn(out)
        return out


def _edge(op: str, channels: int) -> nn.Module:
    """The module of one cell edge (``nn.Identity`` for skip, and a placeholder for none)."""
    if op == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1, 1)
    if op == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3, 1)
    if op == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    return nn.Identity()


class Cell(nn.Module):
    """NAS-Bench-201's cell (``InferCell``) with ``none`` edges dropped (see :mod:`carb.families.nb201`).

    ``ops[k]`` is edge k's module.
    """

    def __init__(self, edges: tuple[str, ...], channels: int) -> None:
        super().__init__()
        self.edges = tuple(edges)
        self.ops = nn.ModuleList(_edge(op, channels) for op in self.edges)
        # per node: the (edge, source node) pairs that contribute (structural, fixed here)
        self.inputs = tuple(
            tuple((k, src) for k, (dst, src) in enumerate(EDGES) if dst == j and self.edges[k] != "none")
            for j in (1, 2, 3)
        )

    def forward(self, x: Tensor) -> Tensor:
        nodes = [x]
        for inputs in self.inputs:
            acc = None
            for k, src in inputs:
                # the edge's output is a temporary freed by the addition (no name keeps it)
                acc = self.ops[k](nodes[src]) if acc is None else acc + self.ops[k](nodes[src])
            if acc is None:  # every incoming edge is none: the node is zero
                acc = torch.zeros_like(x)
            nodes.append(acc)
        return nodes[3]


class ReductionBlock(nn.Module):
    """NAS-Bench-201's ``ResNetBasicblock`` at stride 2."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv_a = ReLUConvBN(cin, cout, 3, 2)
        self.conv_b = ReLUConvBN(cout, cout, 3, 1)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2, padding=0)
        self.shortcut = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv_a(x)
        out = self.conv_b(out)
        res = self.pool(x)
        res = self.shortcut(res)
        return res + out


class NB201Net(nn.Module):
    """The NAS-Bench-201 skeleton around one cell (``TinyNetwork``, C = 16, N = 5)."""

    def __init__(self, edges: tuple[str, ...], classes: int = 10) -> None:
        super().__init__()
        self.stem_conv = nn.Conv2d(3, STEM_CHANNELS, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(STEM_CHANNELS)
        cells: list[nn.Module] = []
        cin = STEM_CHANNELS
        for s, c in enumerate(STAGE_CHANNELS):
            if s:
                cells.append(ReductionBlock(cin, c))
            cells += [Cell(edges, c) for _ in range(CELLS_PER_STAGE)]
            cin = c
        self.cells = nn.ModuleList(cells)
        self.last_bn = nn.BatchNorm2d(cin)
        self.last_relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cin, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem_conv(x)
        x = self.stem_bn(x)
        # a loop, not nn.Sequential: each cell's input is freed when the next starts
        for cell in self.cells:
            x = cell(x)
        x = self.last_bn(x)
        x = self.last_relu(x)
        x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)
