"""The PyTorch networks of the zoo family (:class:`carb.families.zoo.ZooConfig`).

They are built by :func:`carb.families.zoo.build` through :data:`BUILDERS`, one builder per design.

Each design is written from its paper's tables and scaled by a width multiplier ``wm``, a
depth setting ``d`` and a kernel choice ``k`` (0: as published); see
:mod:`carb.families.zoo` for what ``d`` means per design.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BUILDERS", "build_network"]


def _div(v: float, d: int = 8) -> int:
    """Round channels to a multiple of ``d``, not below 90% of ``v`` (MobileNet's rule)."""
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


def _reps(n: int, d: float) -> int:
    """Repeats of a stage of ``n`` blocks under the depth multiplier ``d`` (at least 1)."""
    return max(1, int(math.ceil(n * d)))


# --- building blocks -----------------------------------------------------------------


def cba(cin: int, cout: int, k: int, s: int = 1, g: int = 1, act: Any = nn.ReLU) -> nn.Sequential:
    """Convolution (padding k // 2, no bias) + BN + an optional activation (in place where it can be)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU) else act())
    return nn.Sequential(*layers)


class SE(nn.Module):
    """Squeeze-excitation: global pool, 1x1 conv to ``r``, activation, 1x1 conv back, gate, scale."""

    def __init__(self, c: int, r: int, act: Any = nn.ReLU, gate: Any = nn.Sigmoid) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, r, 1)
        self.act = act(inplace=True)
        self.fc2 = nn.Conv2d(r, c, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class MBConv(nn.Module):
    """Inverted residual: optional 1x1 expansion, kxk depthwise, optional SE, 1x1 projection."""

    def __init__(
        self,
        cin: int,
        cout: int,
        k: int,
        s: int,
        e: float,
        se: float = 0.0,
        act: Any = nn.ReLU6,
        se_act: Any = nn.ReLU,
        se_gate: Any = nn.Sigmoid,
        se_div: int = 1,
    ) -> None:
        super().__init__()
        mid = _div(cin * e) if e != 1 else cin
        layers: list[nn.Module] = []
        if mid != cin:
            layers.append(cba(cin, mid, 1, act=act))
        layers.append(cba(mid, mid, k, s, g=mid, act=act))
        if se:
            base = cin if se_div == 0 else mid
            layers.append(SE(mid, max(8, _div(base * se) if se_div else int(base * se)), se_act, se_gate))
        layers.append(cba(mid, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.res = s == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.res else self.block(x)


class Net(nn.Module):
    """Features, global average pooling, flatten and a head (one linear layer by default)."""

    def __init__(self, features: nn.Module, cfeat: int, classes: int, head: nn.Module | None = None) -> None:
        super().__init__()
        self.features = features
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = head if head is not None else nn.Linear(cfeat, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.head(x)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit: channel split (stride 1) or two branches (stride 2), concat, shuffle."""

    def __init__(self, cin: int, cout: int, s: int, k: int) -> None:
        super().__init__()
        self.s = s
        half = cout // 2
        if s > 1:
            self.left = nn.Sequential(cba(cin, cin, k, s, g=cin, act=None), cba(cin, half, 1))
            cin_r = cin
        else:
            self.left = None
            cin_r = half
        self.right = nn.Sequential(cba(cin_r, half, 1), cba(half, half, k, s, g=half, act=None), cba(half, half, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.s == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.right(b)), 1)
        else:
            out = torch.cat((self.left(x), self.right(x)), 1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class DenseLayer(nn.Module):
    """DenseNet-BC layer: BN-ReLU-conv1x1 (4 x growth)-BN-ReLU-conv3x3 (growth), concatenated."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(F.relu(self.bn1(x)))
        y = self.conv2(F.relu(self.bn2(y)))
        return torch.cat((x, y), 1)


class Bottleneck(nn.Module):
    """1x1, grouped 3x3 (stride), optional SE, 1x1; projection shortcut where the shape changes."""

    def __init__(self, cin: int, mid: int, cout: int, s: int, g: int, se: float = 0.0) -> None:
        super().__init__()
        layers: list[nn.Module] = [cba(cin, mid, 1), cba(mid, mid, 3, s, g=g)]
        if se:
            layers.append(SE(mid, max(8, int(cin * se))))
        layers.append(cba(mid, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.down = cba(cin, cout, 1, s, act=None) if (s != 1 or cin != cout) else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        return self.relu(self.block(x) + identity)


# --- one builder per design ----------------------------------------------------------


def _vgg(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """VGG-11/13/16 with BN (``d`` is the depth); global average pool + one linear classifier."""
    plans = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3)}
    reps = plans.get(int(d), plans[11])
    layers: list[nn.Module] = []
    cin = 3
    for n, c in zip(reps, (64, 128, 256, 512, 512)):
        c = _div(c * wm)
        for _ in range(n):
            layers.append(cba(cin, c, 3))
            cin = c
        layers.append(nn.MaxPool2d(2, 2))
    return Net(nn.Sequential(*layers), cin, classes)


def _inverted_residual_net(
    table: list[tuple[int, int, int, int, int]],
    act: Any,
    se: float,
    wm: float,
    d: float,
    classes: int,
    separable_first: bool = False,
) -> nn.Module:
    """An inverted-residual network: a stem, MBConv stages, a 1x1 conv to 1280 channels and a linear classifier.

    The MBConv stages are the rows of ``table`` (expansion, channels, repeats, stride, kernel).
    """
    stem, last = 32, 1280
    cin = _div(stem * wm)
    layers: list[nn.Module] = [cba(3, cin, 3, 2, act=act)]
    if separable_first:  # MnasNet's depthwise-separable first block
        c16 = _div(16 * wm)
        layers += [cba(cin, cin, 3, 1, g=cin, act=act), cba(cin, c16, 1, act=None)]
        cin = c16
    for t, c, n, s, kt in table:
        c = _div(c * wm)
        for i in range(_reps(n, d)):
            layers.append(
                MBConv(cin, c, kt, s if i == 0 else 1, t, se=se, act=act, se_act=nn.SiLU if se else nn.ReLU, se_div=0)
            )
            cin = c
    clast = _div(last * max(1.0, wm))
    layers.append(cba(cin, clast, 1, act=act))
    return Net(nn.Sequential(*layers), clast, classes)


def _mobilenetv2(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """MobileNetV2 (ReLU6), every depthwise kernel ``k`` (3 by default)."""
    kk = k or 3
    table = [
        (1, 16, 1, 1, 3),
        (6, 24, 2, 2, kk),
        (6, 32, 3, 2, kk),
        (6, 64, 4, 2, kk),
        (6, 96, 3, 1, kk),
        (6, 160, 3, 2, kk),
        (6, 320, 1, 1, kk),
    ]
    return _inverted_residual_net(table, nn.ReLU6, 0.0, wm, d, classes)


def _mnasnet(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """MnasNet-B1 (no SE), kernels as published or all ``k``."""
    table = [
        (3, 24, 3, 2, 3),
        (3, 40, 3, 2, 5),
        (6, 80, 3, 2, 5),
        (6, 96, 2, 1, 3),
        (6, 192, 4, 2, 5),
        (6, 320, 1, 1, 3),
    ]
    table = [(t, c, n, s, (k or k0)) for (t, c, n, s, k0) in table]
    return _inverted_residual_net(table, nn.ReLU, 0.0, wm, d, classes, separable_first=True)


def _efficientnet(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """EfficientNet-B0 (SE, SiLU), kernels as published or all ``k``."""
    table = [
        (1, 16, 1, 1, 3),
        (6, 24, 2, 2, 3),
        (6, 40, 2, 2, 5),
        (6, 80, 3, 2, 3),
        (6, 112, 3, 1, 5),
        (6, 192, 4, 2, 5),
        (6, 320, 1, 1, 3),
    ]
    table = [(t, c, n, s, (k or k0)) for (t, c, n, s, k0) in table]
    return _inverted_residual_net(table, nn.SiLU, 0.25, wm, d, classes)


def _mobilenetv3(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """MobileNetV3-Large (SE, hard-swish); the depth multiplier repeats the stride-1 blocks."""
    # k, exp, c, se, hswish, s
    table = [
        (3, 16, 16, 0, 0, 1),
        (3, 64, 24, 0, 0, 2),
        (3, 72, 24, 0, 0, 1),
        (5, 72, 40, 1, 0, 2),
        (5, 120, 40, 1, 0, 1),
        (5, 120, 40, 1, 0, 1),
        (3, 240, 80, 0, 1, 2),
        (3, 200, 80, 0, 1, 1),
        (3, 184, 80, 0, 1, 1),
        (3, 184, 80, 0, 1, 1),
        (3, 480, 112, 1, 1, 1),
        (3, 672, 112, 1, 1, 1),
        (5, 672, 160, 1, 1, 2),
        (5, 960, 160, 1, 1, 1),
        (5, 960, 160, 1, 1, 1),
    ]
    cin = _div(16 * wm)
    layers: list[nn.Module] = [cba(3, cin, 3, 2, act=nn.Hardswish)]
    prev_c = None
    for kt, e, c, se, hs, s in table:
        c = _div(c * wm)
        reps = 1 if (s == 2 or c != prev_c) else _reps(1, d)
        for _ in range(reps if prev_c == c else 1):
            mid = _div(e * wm)
            layers.append(
                MBConv(
                    cin,
                    c,
                    k or kt,
                    s,
                    mid / cin,
                    se=0.25 if se else 0.0,
                    act=nn.Hardswish if hs else nn.ReLU,
                    se_act=nn.ReLU,
                    se_gate=nn.Hardsigmoid,
                )
            )
            cin, s = c, 1
        prev_c = c
    clast = _div(960 * wm)
    layers.append(cba(cin, clast, 1, act=nn.Hardswish))
    head = nn.Sequential(nn.Linear(clast, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2), nn.Linear(1280, classes))
    return Net(nn.Sequential(*layers), clast, classes, head=head)


def _shufflenetv2(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """ShuffleNetV2 at the published width nearest ``wm`` (0.5x .. 2.0x), kernel ``k`` (3 by default)."""
    chans = {
        0.5: (48, 96, 192, 1024),
        1.0: (116, 232, 464, 1024),
        1.5: (176, 352, 704, 1024),
        2.0: (244, 488, 976, 2048),
    }
    key = min(chans, key=lambda x: abs(x - wm))
    c1, c2, c3, last = chans[key]
    kk = k or 3
    layers: list[nn.Module] = [cba(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 24
    for n, c in zip((4, 8, 4), (c1, c2, c3)):
        for i in range(_reps(n, d)):
            layers.append(ShuffleUnit(cin, c, 2 if i == 0 else 1, kk))
            cin = c
    layers.append(cba(cin, last, 1))
    return Net(nn.Sequential(*layers), last, classes)


def _regnet(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """RegNetX-400MF-like stages of grouped bottlenecks.

    ``d`` // 10 picks X (0) or Y (1, with SE), the rest is the depth multiplier.
    """
    variant = int(d // 10)
    dm = d - 10 * variant or 1.0
    stages = [(1, 32, 16), (2, 64, 16), (7, 160, 16), (12, 384, 16)]  # depth, width, group width
    layers: list[nn.Module] = [cba(3, 32, 3, 2)]
    cin = 32
    for n, w, gw in stages:
        w = _div(w * wm, 16)
        gw = min(gw, w)
        for i in range(_reps(n, dm)):
            layers.append(Bottleneck(cin, w, w, 2 if i == 0 else 1, w // gw, se=0.25 if variant else 0.0))
            cin = w
    return Net(nn.Sequential(*layers), cin, classes)


def _densenet(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """DenseNet-BC-121-like dense blocks with transitions; growth rate 32 x ``wm``."""
    growth = max(8, int(round(32 * wm)))
    blocks = [_reps(n, d) for n in (6, 12, 24, 16)]
    c = 2 * growth
    layers: list[nn.Module] = [cba(3, c, 7, 2), nn.MaxPool2d(3, 2, 1)]
    for bi, n in enumerate(blocks):
        for _ in range(n):
            layers.append(DenseLayer(c, growth))
            c += growth
        if bi < len(blocks) - 1:
            layers += [
                nn.BatchNorm2d(c),
                nn.ReLU(inplace=True),
                nn.Conv2d(c, c // 2, 1, bias=False),
                nn.AvgPool2d(2, 2),
            ]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
    return Net(nn.Sequential(*layers), c, classes)


def _bottleneck_net(wm: float, d: float, classes: int, grouped: bool) -> nn.Module:
    """ResNeXt or Wide-ResNet bottleneck stages, the same layout.

    ResNeXt when ``grouped`` (3x3 in 32 groups, 32x4d), else Wide-ResNet (dense 3x3 at twice the base width); ``d`` is
    the depth (26, 38, 50).
    """
    plans = {26: (2, 2, 2, 2), 38: (3, 3, 3, 3), 50: (3, 4, 6, 3)}
    reps = plans.get(int(d), plans[26])
    layers: list[nn.Module] = [cba(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for si, n in enumerate(reps):
        base = 64 * 2**si
        cout = _div(base * 4 * wm)
        mid, g = (_div(base * 2 * wm, 32), 32) if grouped else (_div(base * 2 * wm), 1)
        for i in range(n):
            layers.append(Bottleneck(cin, mid, cout, 2 if (i == 0 and si > 0) else 1, g))
            cin = cout
    return Net(nn.Sequential(*layers), cin, classes)


def _resnext(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """ResNeXt bottlenecks (32 groups x 4d)."""
    return _bottleneck_net(wm, d, classes, grouped=True)


def _wideresnet(wm: float, d: float, k: int, classes: int) -> nn.Module:
    """Wide-ResNet bottlenecks (groups 1, 2x mid width)."""
    return _bottleneck_net(wm, d, classes, grouped=False)


#: design name -> builder ``(width, depth, kernel, classes) -> nn.Module``
BUILDERS: dict[str, Callable[[float, float, int, int], nn.Module]] = {
    "vgg": _vgg,
    "mobilenetv2": _mobilenetv2,
    "mobilenetv3": _mobilenetv3,
    "shufflenetv2": _shufflenetv2,
    "mnasnet": _mnasnet,
    "efficientnet": _efficientnet,
    "regnet": _regnet,
    "densenet": _densenet,
    "resnext": _resnext,
    "wideresnet": _wideresnet,
}


def build_network(arch: str, width: float, depth: float, kernel: int, classes: int) -> nn.Module:
    """The network of one design (torch's default initialisation, train mode).

    Args:
        arch: a key of :data:`BUILDERS`.
        width: channel multiplier.
        depth: depth setting (see :class:`carb.families.zoo.ZooConfig`).
        kernel: depthwise kernel where the design has one; 0 = as published.
        classes: classifier outputs.

    Returns:
        The network, an ``nn.Module`` in train mode (the caller initialises and sets eval).
    """
    return BUILDERS[arch](width, depth, kernel, classes)
