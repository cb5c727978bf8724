"""The PyTorch networks of the FBNet family (:class:`carb.families.fbnet.FBNetConfig`).

They are built by :func:`carb.families.fbnet.build`.

The operators, their order and the choices behind them are described in
:mod:`carb.families.fbnet`; the forwards are written one statement per operator so that
eager PyTorch frees each intermediate tensor where :func:`carb.families.fbnet.features`
assumes it does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._fbnet_tables import CLASSES, HEAD_CHANNELS, OP_SPECS, STAGE_CHANNELS, STEM_CHANNELS, layer_plan

__all__ = ["channel_shuffle", "IRBlock", "SkipProjection", "FBNet"]


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    """FBNet's ChannelShuffle: [N, g, C/g, H, W] -> [N, C/g, g, H, W], one contiguous copy."""
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class IRBlock(nn.Module):
    """FBNet's inverted-residual block (see :mod:`carb.families.fbnet`).

    Args:
        cin, cout: input and output channels.
        kernel: side of the depthwise convolution (3 or 5).
        expansion: the expanded width is ``expansion * cin``.
        groups: groups of both 1x1 convolutions (2 adds a channel shuffle).
        stride: stride of the depthwise convolution.
    """

    def __init__(self, cin: int, cout: int, kernel: int, expansion: int, groups: int, stride: int) -> None:
        super().__init__()
        mid = cin * expansion
        self.groups = groups
        self.residual = stride == 1 and cin == cout
        self.conv_pw = nn.Conv2d(cin, mid, 1, groups=groups, bias=False)
        self.bn_pw = nn.BatchNorm2d(mid)
        self.conv_dw = nn.Conv2d(mid, mid, kernel, stride=stride, padding=kernel // 2, groups=mid, bias=False)
        self.bn_dw = nn.BatchNorm2d(mid)
        self.conv_pwl = nn.Conv2d(mid, cout, 1, groups=groups, bias=False)
        self.bn_pwl = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv_pw(x)
        out = self.bn_pw(out)
        out = self.relu(out)
        if self.groups > 1:  # structural (fixed at construction), not data-dependent
            out = channel_shuffle(out, self.groups)
        out = self.conv_dw(out)
        out = self.bn_dw(out)
        out = self.relu(out)
        out = self.conv_pwl(out)
        out = self.bn_pwl(out)
        if self.residual:
            out += x
        return out


class SkipProjection(nn.Module):
    """FBNet v1's ``Identity`` where the shape changes: 1x1 conv (stride) + BN + ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv(x)
        out = self.bn(out)
        return self.relu(out)


def _layer(op: str, cin: int, cout: int, stride: int) -> nn.Module:
    """The module of one searchable layer: a block, the identity, or a skip projection."""
    kernel, expansion, groups = OP_SPECS[op]
    if op != "skip":
        return IRBlock(cin, cout, kernel, expansion, groups, stride)
    if stride == 1 and cin == cout:
        return nn.Identity()
    return SkipProjection(cin, cout, stride)


class FBNet(nn.Module):
    """The FBNet macro-architecture with the given 22 operations.

    Args:
        ops: 22 names of :data:`carb.families.fbnet.OPS`.
        classes: classifier outputs.
    """

    def __init__(self, ops: tuple[str, ...], classes: int = CLASSES) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(3, STEM_CHANNELS, 3, padding=1, bias=False)
        self.bn_stem = nn.BatchNorm2d(STEM_CHANNELS)
        self.relu = nn.ReLU(inplace=True)
        self.layers = nn.ModuleList(
            _layer(op, cin, cout, stride) for op, (_, cin, cout, stride, _) in zip(ops, layer_plan())
        )
        last = STAGE_CHANNELS[-1]
        self.conv_head = nn.Conv2d(last, HEAD_CHANNELS, 1, bias=False)
        self.bn_head = nn.BatchNorm2d(HEAD_CHANNELS)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(HEAD_CHANNELS, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv_stem(x)
        x = self.bn_stem(x)
        x = self.relu(x)
        # a loop, not one nn.Sequential call, so that no variable keeps the stem's output
        # alive while the 22 layers run (each layer's input is freed when the next one starts)
        for layer in self.layers:
            x = layer(x)
        x = self.conv_head(x)
        x = self.bn_head(x)
        x = self.relu(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)
