"""A zoo of real CNN designs in plain PyTorch (no torchvision), for evaluating
:mod:`carb.netmodel` on networks it never saw.

Ten families, each a published design written from its paper's tables and scaled by a
width multiplier, a depth multiplier, a kernel choice where the design has one, at any
input size and batch (ImageNet-style stems and heads, 1000 classes by default):

========================  ====================================================================
``vgg``                   VGG-11/13/16 with BN (depth 11, 13, 16), 3x3 convs, max pools,
                          global average pool + one linear classifier (no 4096-wide FCs)
``mobilenetv2``           MobileNetV2 inverted residuals (ReLU6), depthwise kernel 3 or 5
``mobilenetv3``           MobileNetV3-Large blocks (SE, hard-swish), kernels as published or all 3/5
``shufflenetv2``          ShuffleNetV2 units (channel split, shuffle, concat), 0.5x..2.0x
``mnasnet``               MnasNet-B1 (MBConv, 3x3/5x5 as published, no SE)
``efficientnet``          EfficientNet-B0 MBConv with SE and SiLU (compound width/depth)
``regnet``                RegNetX / RegNetY (SE) stages of grouped bottlenecks, group width 8..48
``densenet``              DenseNet-BC dense blocks (BN-ReLU-conv1x1-BN-ReLU-conv3x3, concat)
``resnext``               ResNeXt bottlenecks (32 groups x 4d), depths 26/38/50
``wideresnet``            Wide-ResNet bottlenecks (groups 1, 2x mid width), same depths
========================  ====================================================================

``resnext`` and ``wideresnet`` of equal depth have the same stage layout, blocks and
output widths; the 3x3 convolutions are grouped (32 groups, ResNeXt's 32x4d) in one and
dense at twice the base width in the other (Wide-ResNet-50-2's), the pair nn-Meter prices
identically because it ignores ``groups``.

A :class:`ZooConfig` is a family member and how it is run; :data:`ZOO` is its
:class:`carb.families.Family` record, registered at run time by the tools that measure the
zoo (``carb.families.register(carb.families.zoo.ZOO)``), so that ``run_campaign`` and the store
handle it like any family. Features come from :func:`carb.graph.capture` on the meta device.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from carb.families._base import PRECISIONS, Family, SpaceError, _as_float, _as_int, _py, init_weights, row_parameters

__all__ = ["ARCHS", "ZooConfig", "build", "ZOO", "sample_configs", "PARAMETERS"]

FAMILY = "zoo"
ARCHS: tuple[str, ...] = ("vgg", "mobilenetv2", "mobilenetv3", "shufflenetv2", "mnasnet", "efficientnet", "regnet",
                          "densenet", "resnext", "wideresnet")
PARAMETERS: tuple[str, ...] = ("arch", "width", "depth", "kernel", "input_size", "batch", "precision", "classes")


@dataclass(frozen=True)
class ZooConfig:
    """One zoo network and how it is run.

    Attributes:
        arch: one of :data:`ARCHS`.
        width: channel multiplier (1.0 = the published width).
        depth: depth setting: a multiplier of each stage's repeats (1.0 = published), or the
            layer count for ``vgg`` (11, 13, 16) and ``resnext``/``wideresnet`` (26, 38, 50),
            or the variant (0: X, 1: Y with SE) times 10 plus a multiplier for ``regnet`` —
            see :func:`build`.
        kernel: depthwise kernel (3 or 5) where the design has one; 0 = as published.
        input_size: input height = width. Units: px.
        batch: images per forward.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        classes: classifier outputs.
    """

    arch: str
    width: float = 1.0
    depth: float = 1.0
    kernel: int = 0
    input_size: int = 224
    batch: int = 1
    precision: str = "fp32"
    classes: int = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch", _py(self.arch))
        object.__setattr__(self, "width", _as_float("width", self.width))
        object.__setattr__(self, "depth", _as_float("depth", self.depth))
        for name in ("kernel", "input_size", "batch", "classes"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        if self.arch not in ARCHS:
            raise SpaceError(f"arch: unknown value {self.arch!r} (expected one of {', '.join(ARCHS)})")
        if self.precision not in PRECISIONS:
            raise SpaceError(f"precision: unknown value {self.precision!r}")
        if self.width <= 0 or self.depth <= 0 or self.batch < 1 or self.input_size < 32 or self.classes < 1:
            raise SpaceError("width, depth > 0, batch >= 1, input_size >= 32, classes >= 1")
        if self.kernel not in (0, 3, 5, 7):
            raise SpaceError(f"kernel: {self.kernel} not one of 0, 3, 5, 7")

    def to_dict(self) -> dict[str, Any]:
        return {"family": FAMILY, "arch": self.arch, "width": self.width, "depth": self.depth, "kernel": self.kernel,
                "input_size": self.input_size, "batch": self.batch, "precision": self.precision,
                "classes": self.classes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ZooConfig":
        d = dict(d)
        if d.pop("family", FAMILY) != FAMILY:
            raise SpaceError("family: not zoo")
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        return cls(**d)

    def canonical(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def label(self) -> str:
        return f"{self.arch}-w{self.width:g}-d{self.depth:g}-k{self.kernel}-i{self.input_size}-b{self.batch}-{self.precision}"


def _div(v: float, d: int = 8) -> int:
    """Round channels to a multiple of ``d``, not below 90% of ``v`` (MobileNet's rule)."""
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


@functools.cache
def _classes() -> Any:
    from types import SimpleNamespace

    import torch
    from torch import nn
    import torch.nn.functional as F

    def cba(cin: int, cout: int, k: int, s: int = 1, g: int = 1, act: Any = nn.ReLU) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU) else act())
        return nn.Sequential(*layers)

    class SE(nn.Module):
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

        def __init__(self, cin: int, cout: int, k: int, s: int, e: float, se: float = 0.0, act: Any = nn.ReLU6,
                     se_act: Any = nn.ReLU, se_gate: Any = nn.Sigmoid, se_div: int = 1) -> None:
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

    return SimpleNamespace(nn=nn, cba=cba, SE=SE, MBConv=MBConv, Net=Net, ShuffleUnit=ShuffleUnit,
                           DenseLayer=DenseLayer, Bottleneck=Bottleneck)


def _reps(n: int, d: float) -> int:
    return max(1, int(math.ceil(n * d)))


def build(config: ZooConfig | Mapping[str, Any]) -> Any:
    """The network of a zoo config (eval mode, fp32 weights, torch's default device)."""
    cfg = config if isinstance(config, ZooConfig) else ZooConfig.from_dict(config)
    C = _classes()
    nn = C.nn
    a, wm, d, k, classes = cfg.arch, cfg.width, cfg.depth, cfg.kernel, cfg.classes
    if a == "vgg":
        plans = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3)}
        reps = plans.get(int(d), plans[11])
        layers: list[Any] = []
        cin = 3
        for n, c in zip(reps, (64, 128, 256, 512, 512)):
            c = _div(c * wm)
            for _ in range(n):
                layers.append(C.cba(cin, c, 3))
                cin = c
            layers.append(nn.MaxPool2d(2, 2))
        net = C.Net(nn.Sequential(*layers), cin, classes)
    elif a in ("mobilenetv2", "mnasnet", "efficientnet"):
        kk = k or 3
        if a == "mobilenetv2":  # t, c, n, s, kernel
            table = [(1, 16, 1, 1, 3), (6, 24, 2, 2, kk), (6, 32, 3, 2, kk), (6, 64, 4, 2, kk), (6, 96, 3, 1, kk),
                     (6, 160, 3, 2, kk), (6, 320, 1, 1, kk)]
            act, se, stem, last = nn.ReLU6, 0.0, 32, 1280
        elif a == "mnasnet":
            table = [(3, 24, 3, 2, 3), (3, 40, 3, 2, 5), (6, 80, 3, 2, 5), (6, 96, 2, 1, 3), (6, 192, 4, 2, 5),
                     (6, 320, 1, 1, 3)]
            table = [(t, c, n, s, (k or kk0)) for (t, c, n, s, kk0) in table]
            act, se, stem, last = nn.ReLU, 0.0, 32, 1280
        else:
            table = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
                     (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]
            table = [(t, c, n, s, (k or kk0)) for (t, c, n, s, kk0) in table]
            act, se, stem, last = nn.SiLU, 0.25, 32, 1280
        cin = _div(stem * wm)
        layers = [C.cba(3, cin, 3, 2, act=act)]
        if a == "mnasnet":  # depthwise-separable first block
            c16 = _div(16 * wm)
            layers += [C.cba(cin, cin, 3, 1, g=cin, act=act), C.cba(cin, c16, 1, act=None)]
            cin = c16
        for t, c, n, s, kt in table:
            c = _div(c * wm)
            for i in range(_reps(n, d)):
                layers.append(C.MBConv(cin, c, kt, s if i == 0 else 1, t, se=se, act=act, se_act=nn.SiLU if se else nn.ReLU,
                                       se_div=0))
                cin = c
        clast = _div(last * max(1.0, wm))
        layers.append(C.cba(cin, clast, 1, act=act))
        net = C.Net(nn.Sequential(*layers), clast, classes)
    elif a == "mobilenetv3":
        # k, exp, c, se, hswish, s (MobileNetV3-Large)
        table = [(3, 16, 16, 0, 0, 1), (3, 64, 24, 0, 0, 2), (3, 72, 24, 0, 0, 1), (5, 72, 40, 1, 0, 2),
                 (5, 120, 40, 1, 0, 1), (5, 120, 40, 1, 0, 1), (3, 240, 80, 0, 1, 2), (3, 200, 80, 0, 1, 1),
                 (3, 184, 80, 0, 1, 1), (3, 184, 80, 0, 1, 1), (3, 480, 112, 1, 1, 1), (3, 672, 112, 1, 1, 1),
                 (5, 672, 160, 1, 1, 2), (5, 960, 160, 1, 1, 1), (5, 960, 160, 1, 1, 1)]
        cin = _div(16 * wm)
        layers = [C.cba(3, cin, 3, 2, act=nn.Hardswish)]
        prev_c = None
        for kt, e, c, se, hs, s in table:
            c = _div(c * wm)
            reps = 1 if (s == 2 or c != prev_c) else _reps(1, d)  # the depth multiplier repeats the stride-1 blocks
            for _ in range(reps if prev_c == c else 1):
                mid = _div(e * wm)
                layers.append(C.MBConv(cin, c, k or kt, s, mid / cin, se=0.25 if se else 0.0,
                                       act=nn.Hardswish if hs else nn.ReLU, se_act=nn.ReLU, se_gate=nn.Hardsigmoid))
                cin, s = c, 1
            prev_c = c
        clast = _div(960 * wm)
        layers.append(C.cba(cin, clast, 1, act=nn.Hardswish))
        head = nn.Sequential(nn.Linear(clast, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2), nn.Linear(1280, classes))
        net = C.Net(nn.Sequential(*layers), clast, classes, head=head)
    elif a == "shufflenetv2":
        chans = {0.5: (48, 96, 192, 1024), 1.0: (116, 232, 464, 1024), 1.5: (176, 352, 704, 1024),
                 2.0: (244, 488, 976, 2048)}
        key = min(chans, key=lambda x: abs(x - wm))
        c1, c2, c3, last = chans[key]
        kk = k or 3
        layers = [C.cba(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 24
        for n, c in zip((4, 8, 4), (c1, c2, c3)):
            for i in range(_reps(n, d)):
                layers.append(C.ShuffleUnit(cin, c, 2 if i == 0 else 1, kk))
                cin = c
        layers.append(C.cba(cin, last, 1))
        net = C.Net(nn.Sequential(*layers), last, classes)
    elif a == "regnet":
        variant = int(d // 10)          # 0: RegNetX, 1: RegNetY (SE)
        dm = d - 10 * variant or 1.0
        # RegNetX-400MF-like stages (depth, width, group width), scaled
        stages = [(1, 32, 16), (2, 64, 16), (7, 160, 16), (12, 384, 16)]
        layers = [C.cba(3, 32, 3, 2)]
        cin = 32
        for n, w, gw in stages:
            w = _div(w * wm, 16)
            gw = min(gw, w)
            for i in range(_reps(n, dm)):
                layers.append(C.Bottleneck(cin, w, w, 2 if i == 0 else 1, w // gw, se=0.25 if variant else 0.0))
                cin = w
        net = C.Net(nn.Sequential(*layers), cin, classes)
    elif a == "densenet":
        growth = max(8, int(round(32 * wm)))
        blocks = [_reps(n, d) for n in (6, 12, 24, 16)]
        c = 2 * growth
        layers = [C.cba(3, c, 7, 2), nn.MaxPool2d(3, 2, 1)]
        for bi, n in enumerate(blocks):
            for _ in range(n):
                layers.append(C.DenseLayer(c, growth))
                c += growth
            if bi < len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        net = C.Net(nn.Sequential(*layers), c, classes)
    else:  # resnext / wideresnet: same stage layout, grouped 3x3 (32 x 4d) or dense 3x3 (2x mid width)
        plans = {26: (2, 2, 2, 2), 38: (3, 3, 3, 3), 50: (3, 4, 6, 3)}
        reps = plans.get(int(d), plans[26])
        layers = [C.cba(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for si, n in enumerate(reps):
            base = 64 * 2 ** si
            cout = _div(base * 4 * wm)
            if a == "resnext":
                mid, g = _div(base * 2 * wm, 32), 32
            else:
                mid, g = _div(base * 2 * wm), 1
            for i in range(n):
                layers.append(C.Bottleneck(cin, mid, cout, 2 if (i == 0 and si > 0) else 1, g))
                cin = cout
        net = C.Net(nn.Sequential(*layers), cin, classes)
    init_weights(net)
    return net.eval()


#: Per-family grids :func:`sample_configs` draws from: width, depth and kernel values.
GRIDS: dict[str, dict[str, tuple]] = {
    "vgg": {"width": (0.25, 0.375, 0.5), "depth": (11, 13, 16), "kernel": (0,)},
    "mobilenetv2": {"width": (0.5, 0.75, 1.0, 1.4), "depth": (0.7, 1.0, 1.3), "kernel": (3, 5)},
    "mobilenetv3": {"width": (0.5, 0.75, 1.0, 1.25), "depth": (1.0, 2.0), "kernel": (0, 3, 5)},
    "shufflenetv2": {"width": (0.5, 1.0, 1.5, 2.0), "depth": (0.5, 1.0), "kernel": (3, 5)},
    "mnasnet": {"width": (0.5, 0.75, 1.0, 1.3), "depth": (0.7, 1.0, 1.3), "kernel": (0, 3)},
    "efficientnet": {"width": (0.5, 0.75, 1.0, 1.2), "depth": (0.7, 1.0, 1.4), "kernel": (0, 3)},
    "regnet": {"width": (0.5, 0.75, 1.0, 1.5), "depth": (0.5, 1.0, 10.5, 11.0), "kernel": (0,)},
    "densenet": {"width": (0.375, 0.5, 0.75), "depth": (0.34, 0.5, 0.67), "kernel": (0,)},
    "resnext": {"width": (0.25, 0.5, 0.75), "depth": (26, 38, 50), "kernel": (0,)},
    "wideresnet": {"width": (0.25, 0.5, 0.75), "depth": (26, 38, 50), "kernel": (0,)},
}
SIZES = (96, 128, 160, 192, 224)
BATCHES = (1, 2, 4)


def sample_configs(per_family: int = 10, seed: int = 0, max_gflops: float = 3.0,
                   archs: Iterable[str] = ARCHS) -> list[ZooConfig]:
    """``per_family`` distinct configs of each family, drawn at random (seeded) from its
    :data:`GRIDS` x :data:`SIZES` x :data:`BATCHES`, keeping those under ``max_gflops``
    GFLOP per forward (so a forward takes well under a second on one core). ``resnext`` and
    ``wideresnet`` get the same (width, depth, size, batch) draws, pairwise."""
    rng = np.random.default_rng(seed)
    out: list[ZooConfig] = []
    pairs: list[tuple] = []
    for a in archs:
        g = GRIDS[a]
        got: list[ZooConfig] = []
        tries = 0
        while len(got) < per_family and tries < 400:
            tries += 1
            budget = max_gflops
            if a == "wideresnet" and pairs:
                if tries > len(pairs):
                    break
                w, dd, kk, s, b = pairs[tries - 1]
                budget = 2.5 * max_gflops  # the dense twin of a resnext has ~2.4x its FLOPs
            else:
                w, dd, kk = (g[p][rng.integers(len(g[p]))] for p in ("width", "depth", "kernel"))
                s, b = SIZES[rng.integers(len(SIZES))], BATCHES[rng.integers(len(BATCHES))]
            cfg = ZooConfig(a, float(w), float(dd), int(kk), int(s), int(b))
            if cfg in got:
                continue
            lt = capture(cfg)
            if lt.flops > budget * 1e9:
                continue
            got.append(cfg)
            if a == "resnext":
                pairs.append((w, dd, kk, s, b))
        out += got
    return out


def _meta_build(cfg: ZooConfig) -> Any:
    """The network of ``cfg`` on the meta device, built without running any weight
    initialisation (:func:`carb.graph.skip_meta_init`: a meta tensor has no values to
    initialise, and on meta ``normal_`` and ``uniform_`` go through slow Python
    decompositions)."""
    import torch

    from carb import graph

    with torch.device("meta"), graph.skip_meta_init():
        return graph.gc_paused(build)(cfg)


def capture(cfg: ZooConfig) -> Any:
    """:func:`carb.graph.capture` of a config's network, built on the meta device."""
    from carb import graph

    return graph.capture(_meta_build(cfg), (cfg.batch, 3, cfg.input_size, cfg.input_size), cfg.precision)


def features(df: pd.DataFrame) -> pd.DataFrame:
    """``flops``, ``params``, ``model_bytes``, ``input_bytes``, ``live_activation_bytes``,
    ``n_layers`` of zoo rows, from :func:`carb.graph.capture` on the meta device."""
    from carb import graph

    return graph.capture_features(df, lambda r: capture(_from_row(r)))


def _from_row(row: Mapping[str, Any]) -> ZooConfig:
    # a store row: the ``arch`` column is the family's parameters as JSON, and this
    # family's own ``arch`` parameter is inside it
    return ZooConfig.from_dict(row_parameters(row, PARAMETERS))


ZOO = Family(name=FAMILY, config_type=ZooConfig, from_row=_from_row, to_row=lambda c: c.to_dict(), build=build,
             features=features, description="real CNN designs in plain torch (carb.families.zoo), for evaluation",
             parameters=PARAMETERS)
