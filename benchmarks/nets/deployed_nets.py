"""Networks that deployment engineers ship outside image classification, written in plain ``torch.nn``.

Each network is a top-level builder without arguments (``unet_transposed() -> nn.Module``)
that returns it with random weights in ``eval()`` mode. :data:`NETWORKS` names every builder
with the input it runs at (batch 1), its task and the operators it exercises; the sizes put
one forward at about 2-80 ms on one CPU thread. The file imports torch only, so any of its
networks prices as a user's module does::

    carb predict --module benchmarks/nets/deployed_nets.py:unet_transposed --input 1x3x256x256

``benchmarks/bench_deployed.py`` measures them all against CARB's predictions.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# -- building blocks ------------------------------------------------------------------------------


def cbr(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, dilation: int = 1, act: type = nn.ReLU):
    """Conv2d (no bias, "same" padding), BatchNorm2d and an activation (``None``: none)."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, padding=dilation * (k - 1) // 2, dilation=dilation, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.SiLU, nn.Hardswish) else act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-BN, an identity or 1x1 projection shortcut, ReLU after the add."""

    def __init__(self, cin: int, cout: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = cbr(cin, cout, 3, stride, dilation=dilation)
        self.conv2 = cbr(cout, cout, 3, 1, dilation=dilation, act=None)
        self.short = cbr(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv2(self.conv1(x)) + self.short(x))


class SmallResNet(nn.Module):
    """A small ResNet trunk returning its last three stages (strides 8, 16, 32; dilated instead where asked).

    ``dilate``: per stage 3 and 4, whether it keeps the resolution and dilates its convolutions
    instead (DeepLab's output stride 8).
    """

    def __init__(self, widths=(32, 64, 128, 256), blocks=(1, 1, 1, 1), dilate=(False, False)) -> None:
        super().__init__()
        self.stem = nn.Sequential(cbr(3, widths[0], 3, 2), cbr(widths[0], widths[0], 3, 1), nn.MaxPool2d(3, 2, 1))
        stages, cin, dil = [], widths[0], 1
        for i, (w, n) in enumerate(zip(widths, blocks)):
            stride = 1 if i == 0 else 2
            if i >= 2 and dilate[i - 2]:
                stride, dil = 1, dil * 2
            layers = [BasicBlock(cin, w, stride, dil)] + [BasicBlock(w, w, 1, dil) for _ in range(n - 1)]
            stages.append(nn.Sequential(*layers))
            cin = w
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs[1:]


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: global average pool, two 1x1 convs, a gate multiplying the input."""

    def __init__(self, c: int, squeeze: int, act: type = nn.ReLU, gate: type = nn.Sigmoid) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.act = act(inplace=True)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


def _eval(net: nn.Module) -> nn.Module:
    return net.eval()


# -- segmentation ---------------------------------------------------------------------------------


def _double(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(cbr(cin, cout), cbr(cout, cout))


class UNet(nn.Module):
    """U-Net: four down steps (max-pool), four up steps (transposed conv or bilinear), concatenated skips."""

    def __init__(self, base: int = 16, classes: int = 2, bilinear: bool = False) -> None:
        super().__init__()
        w = [base * 2**i for i in range(5)]
        self.downs = nn.ModuleList([_double(3, w[0])] + [_double(w[i], w[i + 1]) for i in range(4)])
        self.pool = nn.MaxPool2d(2)
        self.bilinear = bilinear
        if bilinear:  # up-sample, then the double conv halves the channels of the concatenation
            self.ups = nn.ModuleList([nn.Upsample(scale_factor=2, mode="bilinear") for _ in range(4)])
            self.convs = nn.ModuleList([_double(w[i + 1] + w[i], w[i]) for i in reversed(range(4))])
        else:
            self.ups = nn.ModuleList([nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2) for i in reversed(range(4))])
            self.convs = nn.ModuleList([_double(2 * w[i], w[i]) for i in reversed(range(4))])
        self.head = nn.Conv2d(w[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x if i == 0 else self.pool(x))
            skips.append(x)
        x = skips.pop()
        for up, conv in zip(self.ups, self.convs):
            x = conv(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet_transposed() -> nn.Module:
    """U-Net (base 8 channels) with 2x2 stride-2 transposed convolutions and concatenated skips."""
    return _eval(UNet(base=8, bilinear=False))


def unet_bilinear() -> nn.Module:
    """U-Net (base 12 channels) with bilinear up-sampling and concatenated skips."""
    return _eval(UNet(base=12, bilinear=True))


class ASPP(nn.Module):
    """DeepLab's atrous spatial pyramid: 1x1, three dilated 3x3, image pooling; concatenated, projected."""

    def __init__(self, cin: int, c: int, rates=(6, 12, 18)) -> None:
        super().__init__()
        self.branches = nn.ModuleList([cbr(cin, c, 1)] + [cbr(cin, c, 3, dilation=r) for r in rates])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, c, 1, bias=False), nn.ReLU(inplace=True))
        self.project = cbr(c * (len(rates) + 2), c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [b(x) for b in self.branches]
        outs.append(F.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(outs, dim=1))


class DeepLab(nn.Module):
    """A dilated ResNet trunk (output stride 8), an ASPP head, bilinear up-sampling to the input."""

    def __init__(self, classes: int = 21) -> None:
        super().__init__()
        self.backbone = SmallResNet((24, 48, 96, 128), (1, 1, 1, 1), dilate=(True, True))
        self.aspp = ASPP(128, 64)
        self.head = nn.Sequential(cbr(64, 64), nn.Conv2d(64, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.aspp(self.backbone(x)[-1]))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def deeplab_aspp() -> nn.Module:
    """DeepLabV3-style segmenter: dilated trunk, ASPP with rates 6/12/18 and image pooling."""
    return _eval(DeepLab())


class PSPNet(nn.Module):
    """A dilated trunk, a pyramid pooling module (bins 1, 2, 3, 6), bilinear up-sampling."""

    def __init__(self, classes: int = 21, bins=(1, 2, 3, 6)) -> None:
        super().__init__()
        self.backbone = SmallResNet((24, 48, 96, 128), (1, 1, 1, 1), dilate=(True, True))
        self.levels = nn.ModuleList([nn.Sequential(nn.AdaptiveAvgPool2d(b), cbr(128, 32, 1)) for b in bins])
        self.head = nn.Sequential(cbr(128 + 32 * len(bins), 64), nn.Conv2d(64, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)[-1]
        size = f.shape[-2:]
        pyramid = [f] + [F.interpolate(m(f), size=size, mode="bilinear", align_corners=False) for m in self.levels]
        y = self.head(torch.cat(pyramid, dim=1))
        return F.interpolate(y, scale_factor=8, mode="bilinear", align_corners=False)


def pspnet() -> nn.Module:
    """PSPNet-style segmenter: adaptive average pools to 1, 2, 3 and 6 bins on a stride-8 map."""
    return _eval(PSPNet())


class FCN8s(nn.Module):
    """FCN-8s on a slim VGG trunk: score layers at strides 8, 16, 32 fused by transposed convs and adds."""

    def __init__(self, classes: int = 21, widths=(16, 32, 64, 96, 96), fc: int = 192) -> None:
        super().__init__()
        reps, stages, cin = (2, 2, 3, 3, 3), [], 3
        for w, n in zip(widths, reps):
            layers: list[nn.Module] = []
            for _ in range(n):
                layers += [nn.Conv2d(cin, w, 3, padding=1), nn.ReLU(inplace=True)]
                cin = w
            stages.append(nn.Sequential(*layers, nn.MaxPool2d(2, 2, ceil_mode=True)))
        self.stages = nn.ModuleList(stages)
        self.fc = nn.Sequential(
            nn.Conv2d(cin, fc, 3, padding=1), nn.ReLU(inplace=True), nn.Dropout2d(),
            nn.Conv2d(fc, fc, 1), nn.ReLU(inplace=True), nn.Dropout2d(),
        )  # fmt: skip
        self.score_fr = nn.Conv2d(fc, classes, 1)
        self.score_pool4 = nn.Conv2d(widths[3], classes, 1)
        self.score_pool3 = nn.Conv2d(widths[2], classes, 1)
        self.up2 = nn.ConvTranspose2d(classes, classes, 4, stride=2, padding=1, bias=False)
        self.up2b = nn.ConvTranspose2d(classes, classes, 4, stride=2, padding=1, bias=False)
        self.up8 = nn.ConvTranspose2d(classes, classes, 16, stride=8, padding=4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = []
        for s in self.stages:
            x = s(x)
            feats.append(x)
        y = self.up2(self.score_fr(self.fc(x))) + self.score_pool4(feats[3])
        y = self.up2b(y) + self.score_pool3(feats[2])
        return self.up8(y)


def fcn8s() -> nn.Module:
    """FCN-8s-style segmenter: VGG trunk, 1x1 score layers, transposed-conv fusion and x8 up-sampling."""
    return _eval(FCN8s())


# -- detection necks and heads --------------------------------------------------------------------


class FPN(nn.Module):
    """Feature pyramid: 1x1 laterals, nearest x2 top-down path with adds, 3x3 outputs, P6 by a stride-2 max-pool."""

    def __init__(self, cins=(64, 128, 256), c: int = 64) -> None:
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(ci, c, 1) for ci in cins])
        self.output = nn.ModuleList([nn.Conv2d(c, c, 3, padding=1) for _ in cins])

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        lat = [m(f) for m, f in zip(self.lateral, feats)]
        top = lat[-1]
        outs = [self.output[-1](top)]
        for i in range(len(lat) - 2, -1, -1):
            top = lat[i] + F.interpolate(top, scale_factor=2.0, mode="nearest")
            outs.insert(0, self.output[i](top))
        outs.append(F.max_pool2d(outs[-1], 1, stride=2))
        return outs


class FPNDetector(nn.Module):
    """A small ResNet trunk and an FPN neck, returning the pyramid P3-P6."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = SmallResNet((32, 64, 128, 256), (1, 1, 1, 1))
        self.fpn = FPN((64, 128, 256), 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.fpn(self.backbone(x)))


def fpn_resnet() -> nn.Module:
    """Detection neck: ResNet trunk, FPN with nearest up-sampling and lateral adds (four outputs)."""
    return _eval(FPNDetector())


class FCOSHead(nn.Module):
    """RetinaNet/FCOS head shared over the levels: 4x (3x3 conv, GroupNorm, ReLU) per tower; class, box, centreness."""

    def __init__(self, c: int = 64, classes: int = 80, convs: int = 4, groups: int = 16) -> None:
        super().__init__()

        def tower() -> nn.Sequential:
            layers: list[nn.Module] = []
            for _ in range(convs):
                layers += [nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(groups, c), nn.ReLU(inplace=True)]
            return nn.Sequential(*layers)

        self.cls_tower, self.box_tower = tower(), tower()
        self.cls = nn.Conv2d(c, classes, 3, padding=1)
        self.box = nn.Conv2d(c, 4, 3, padding=1)
        self.ctr = nn.Conv2d(c, 1, 3, padding=1)
        self.classes = classes

    def forward(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cls, box, ctr = [], [], []
        for f in feats:
            t, b = self.cls_tower(f), self.box_tower(f)
            cls.append(self.cls(t).permute(0, 2, 3, 1).reshape(f.shape[0], -1, self.classes))
            box.append(F.relu(self.box(b)).permute(0, 2, 3, 1).reshape(f.shape[0], -1, 4))
            ctr.append(self.ctr(b).permute(0, 2, 3, 1).reshape(f.shape[0], -1))
        return torch.cat(cls, 1), torch.cat(box, 1), torch.cat(ctr, 1)


class FCOS(nn.Module):
    """Trunk, FPN (P3-P5, P6-P7 by stride-2 convs) and the shared GroupNorm head."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = SmallResNet((32, 64, 128, 256), (1, 1, 1, 1))
        self.fpn = FPN((64, 128, 256), 64)
        self.p7 = nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.head = FCOSHead(64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = self.fpn(self.backbone(x))
        p.append(self.p7(F.relu(p[-1])))
        return self.head(p)


def fcos_gn() -> nn.Module:
    """Detector head of the RetinaNet/FCOS kind: GroupNorm towers shared over five pyramid levels."""
    return _eval(FCOS())


def _silu(cin: int, cout: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return cbr(cin, cout, k, s, act=nn.SiLU)


class Bottleneck(nn.Module):
    """YOLO's bottleneck: 1x1 then 3x3 conv (SiLU), residual where asked."""

    def __init__(self, c: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1, self.cv2 = _silu(c, c, 1), _silu(c, c, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP block: two 1x1 branches, bottlenecks on one, concatenated and fused by a 1x1 conv."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        h = cout // 2
        self.cv1, self.cv2, self.cv3 = _silu(cin, h), _silu(cin, h), _silu(2 * h, cout)
        self.m = nn.Sequential(*[Bottleneck(h, shortcut) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], dim=1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 stride-1 max-pools, concatenated with the input."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        h = cin // 2
        self.cv1, self.cv2 = _silu(cin, h), _silu(4 * h, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], dim=1))


class YOLO(nn.Module):
    """CSP trunk with SPPF, a PAN neck (nearest up-sampling, concatenations, stride-2 convs), 1x1 detect convs."""

    def __init__(self, w=(16, 32, 64, 128, 256), classes: int = 80, anchors: int = 3) -> None:
        super().__init__()
        self.stem = _silu(3, w[0], 3, 2)
        self.s2 = nn.Sequential(_silu(w[0], w[1], 3, 2), C3(w[1], w[1], 1))
        self.s3 = nn.Sequential(_silu(w[1], w[2], 3, 2), C3(w[2], w[2], 2))
        self.s4 = nn.Sequential(_silu(w[2], w[3], 3, 2), C3(w[3], w[3], 2))
        self.s5 = nn.Sequential(_silu(w[3], w[4], 3, 2), C3(w[4], w[4], 1), SPPF(w[4], w[4]))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.lat5, self.td4 = _silu(w[4], w[3]), C3(2 * w[3], w[3], 1, False)
        self.lat4, self.td3 = _silu(w[3], w[2]), C3(2 * w[2], w[2], 1, False)
        self.down3, self.bu4 = _silu(w[2], w[2], 3, 2), C3(2 * w[2], w[3], 1, False)
        self.down4, self.bu5 = _silu(w[3], w[3], 3, 2), C3(2 * w[3], w[4], 1, False)
        self.detect = nn.ModuleList([nn.Conv2d(c, anchors * (5 + classes), 1) for c in (w[2], w[3], w[4])])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c3 = self.s3(self.s2(self.stem(x)))
        c4 = self.s4(c3)
        c5 = self.s5(c4)
        h5 = self.lat5(c5)
        h4 = self.lat4(self.td4(torch.cat([self.up(h5), c4], 1)))
        p3 = self.td3(torch.cat([self.up(h4), c3], 1))
        p4 = self.bu4(torch.cat([self.down3(p3), h4], 1))
        p5 = self.bu5(torch.cat([self.down4(p4), h5], 1))
        return tuple(d(p) for d, p in zip(self.detect, (p3, p4, p5)))  # type: ignore[return-value]


def yolo_pan() -> nn.Module:
    """YOLOv5-style detector: CSP trunk, SPPF max-pools, PAN neck with concatenations, three detect convs."""
    return _eval(YOLO())


def _dw_sep(cin: int, cout: int, s: int) -> nn.Sequential:
    return nn.Sequential(cbr(cin, cin, 3, s, groups=cin, act=nn.ReLU6), cbr(cin, cout, 1, act=nn.ReLU6))


class SSDLite(nn.Module):
    """SSD on a MobileNetV1 trunk (maps 19x19 and 10x10 of a 300x300 input), four extra stride-2 levels,
    3x3 box and class convs per level, predictions flattened and concatenated."""

    def __init__(self, classes: int = 21, anchors=(4, 6, 6, 6, 4, 4), alpha: float = 0.5) -> None:
        super().__init__()

        def c(n: int) -> int:
            return int(n * alpha)

        plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5
        layers: list[nn.Module] = [cbr(3, c(32), 3, 2, act=nn.ReLU6)]
        cin = c(32)
        for w, s in plan:
            layers.append(_dw_sep(cin, c(w), s))
            cin = c(w)
        self.body19 = nn.Sequential(*layers)  # stride 16
        self.body10 = nn.Sequential(_dw_sep(cin, c(1024), 2), _dw_sep(c(1024), c(1024), 1))
        chans = [cin, c(1024), 256, 128, 128, 64]
        self.extras = nn.ModuleList(
            [
                nn.Sequential(cbr(ci, co // 2, 1, act=nn.ReLU6), cbr(co // 2, co, 3, 2, act=nn.ReLU6))
                for ci, co in zip(chans[1:-1], chans[2:])
            ]
        )
        self.loc = nn.ModuleList([nn.Conv2d(ci, a * 4, 3, padding=1) for ci, a in zip(chans, anchors)])
        self.conf = nn.ModuleList([nn.Conv2d(ci, a * classes, 3, padding=1) for ci, a in zip(chans, anchors)])
        self.classes = classes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.body19(x)
        feats = [f, self.body10(f)]
        for e in self.extras:
            feats.append(e(feats[-1]))
        n = x.shape[0]
        loc = torch.cat([m(f).permute(0, 2, 3, 1).reshape(n, -1, 4) for m, f in zip(self.loc, feats)], 1)
        conf = torch.cat([m(f).permute(0, 2, 3, 1).reshape(n, -1, self.classes) for m, f in zip(self.conf, feats)], 1)
        return loc, F.softmax(conf, dim=-1)


def ssd_mobilenet() -> nn.Module:
    """SSD-style detector: depthwise-separable trunk, extra levels, per-level 3x3 box/class heads, softmax."""
    return _eval(SSDLite())


# -- modern convnets ------------------------------------------------------------------------------


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW map (permuted to channels-last and back)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, channels-last LayerNorm, 4x Linear MLP with GELU, layer scale, residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.fc1, self.act, self.fc2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(self.act(self.fc1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt: 4x4 patchify stem, LayerNorm + 2x2 stride-2 downsampling, GAP, LayerNorm, linear head."""

    def __init__(self, dims=(32, 64, 128, 256), depths=(2, 2, 4, 2), classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (d, n) in enumerate(zip(dims, depths)):
            if i:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, stride=2)]
            layers += [ConvNeXtBlock(d) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.features(x).mean(dim=(2, 3))))


def convnext_lite() -> nn.Module:
    """ConvNeXt-style net (dims 32-256): 7x7 depthwise, channels-last LayerNorm, GELU, layer scale."""
    return _eval(ConvNeXt())


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class InvertedResidual(nn.Module):
    """MobileNetV2/V3 and EfficientNet block: 1x1 expansion, kxk depthwise, optional SE, 1x1 projection."""

    def __init__(self, cin: int, exp: int, cout: int, k: int, s: int, act: type, se: int | None, gate: type) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(cbr(cin, exp, 1, act=act))
        layers.append(cbr(exp, exp, k, s, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcite(exp, se, nn.ReLU if gate is nn.Hardsigmoid else act, gate))
        layers.append(cbr(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = s == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


#: MobileNetV3-Large: kernel, expansion, output, SE, hard-swish, stride
_MBV3_LARGE = [
    (3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1),
]  # fmt: skip


class MobileNetV3(nn.Module):
    """MobileNetV3-Large: hard-swish, SE with hard-sigmoid gates, a 1x1 head before the pool."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [cbr(3, 16, 3, 2, act=nn.Hardswish)]
        cin = 16
        for k, exp, out, se, hs, s in _MBV3_LARGE:
            act = nn.Hardswish if hs else nn.ReLU
            layers.append(InvertedResidual(cin, exp, out, k, s, act, _div8(exp / 4) if se else None, nn.Hardsigmoid))
            cin = out
        layers.append(cbr(cin, 960, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(960, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2), nn.Linear(1280, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def mobilenetv3_large() -> nn.Module:
    """MobileNetV3-Large: inverted residuals, SE with hard-sigmoid, hard-swish."""
    return _eval(MobileNetV3())


#: EfficientNet-B0: expansion ratio, kernel, stride, output, repeats
_EFFNET_B0 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # fmt: skip


class EfficientNet(nn.Module):
    """EfficientNet-B0: MBConv blocks with SiLU and SE (sigmoid gate, squeeze to a quarter of the input)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [cbr(3, 32, 3, 2, act=nn.SiLU)]
        cin = 32
        for e, k, s, out, n in _EFFNET_B0:
            for i in range(n):
                layers.append(
                    InvertedResidual(cin, cin * e, out, k, s if i == 0 else 1, nn.SiLU, max(1, cin // 4), nn.Sigmoid)
                )
                cin = out
        layers.append(cbr(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def efficientnet_b0() -> nn.Module:
    """EfficientNet-B0-style net: MBConv with SiLU and sigmoid-gated SE."""
    return _eval(EfficientNet())


class GroupBottleneck(nn.Module):
    """ResNeXt / RegNet bottleneck: 1x1, grouped 3x3 (stride here), 1x1, projection shortcut where shapes change."""

    def __init__(self, cin: int, mid: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            cbr(cin, mid, 1), cbr(mid, mid, 3, stride, groups=groups), cbr(mid, cout, 1, act=None)
        )  # fmt: skip
        self.short = cbr(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.short(x))


class GroupedNet(nn.Module):
    """A stem and four stages of grouped bottlenecks; ``stages``: (mid width, output width, depth, groups)."""

    def __init__(
        self, stem: int, stages: list[tuple[int, int, int, int]], deep_stem: bool, classes: int = 1000
    ) -> None:
        super().__init__()
        if deep_stem:  # ResNeXt: 7x7 stride 2 and a max-pool
            layers: list[nn.Module] = [cbr(3, stem, 7, 2), nn.MaxPool2d(3, 2, 1)]
        else:  # RegNet: one 3x3 stride 2
            layers = [cbr(3, stem, 3, 2)]
        cin = stem
        for i, (mid, out, depth, groups) in enumerate(stages):
            stride = 1 if deep_stem and i == 0 else 2
            for j in range(depth):
                layers.append(GroupBottleneck(cin, mid, out, stride if j == 0 else 1, groups))
                cin = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def resnext_32x4d() -> nn.Module:
    """ResNeXt with 32 groups of width 4 (bottleneck widths 128-1024), stages of depth 1, 2, 2, 1."""
    return _eval(GroupedNet(64, [(128, 256, 1, 32), (256, 512, 2, 32), (512, 1024, 2, 32), (1024, 2048, 1, 32)], True))


def regnetx_400mf() -> nn.Module:
    """RegNetX-400MF: widths 32-384, depths 1, 2, 7, 12, group width 16, bottleneck ratio 1."""
    widths, depths, gw = (32, 64, 160, 384), (1, 2, 7, 12), 16
    return _eval(GroupedNet(32, [(w, w, d, w // gw) for w, d in zip(widths, depths)], False))


class RepVGG(nn.Module):
    """RepVGG as deployed: its training branches folded into one 3x3 conv with bias per layer, then ReLU."""

    def __init__(self, widths=(32, 48, 96, 192, 640), depths=(1, 2, 4, 14, 1), classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for w, d in zip(widths, depths):
            for j in range(d):
                layers += [nn.Conv2d(cin, w, 3, 2 if j == 0 else 1, 1), nn.ReLU(inplace=True)]
                cin = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def repvgg_deploy() -> nn.Module:
    """RepVGG-style plain net (A0 depths, 0.5x early widths), as deployed: 3x3 conv + ReLU only."""
    return _eval(RepVGG())


# -- hybrids --------------------------------------------------------------------------------------


def _trunk16(c: int) -> nn.Sequential:
    """A conv trunk down to stride 16 with ``c`` channels."""
    return nn.Sequential(
        cbr(3, 32, 3, 2), cbr(32, 32, 3, 1), cbr(32, 64, 3, 2), BasicBlock(64, 64), BasicBlock(64, 96, 2),
        BasicBlock(96, c, 2),
    )  # fmt: skip


class ConvAttention(nn.Module):
    """Conv trunk to a 14x14 map, one multi-head self-attention block over its tokens (pre-norm, MLP), mean pool."""

    def __init__(self, c: int = 128, heads: int = 4, classes: int = 1000) -> None:
        super().__init__()
        self.trunk = _trunk16(c)
        self.pos = nn.Parameter(torch.zeros(1, 196, c))
        self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c))
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.trunk(x).flatten(2).transpose(1, 2) + self.pos
        h = self.norm1(t)
        t = t + self.attn(h, h, h, need_weights=False)[0]
        t = t + self.mlp(self.norm2(t))
        return self.head(t.mean(dim=1))


def cnn_mha() -> nn.Module:
    """Hybrid: conv trunk, then nn.MultiheadAttention over the 196 tokens of its 14x14 map."""
    return _eval(ConvAttention())


class ConvTransformer(nn.Module):
    """DETR-style encoder: conv trunk to 16x16, 1x1 projection, two nn.TransformerEncoderLayer, per-token heads."""

    def __init__(self, c: int = 128, heads: int = 4, layers: int = 2, classes: int = 92) -> None:
        super().__init__()
        self.trunk = _trunk16(c)
        self.proj = nn.Conv2d(c, c, 1)
        self.pos = nn.Parameter(torch.zeros(1, 256, c))
        layer = nn.TransformerEncoderLayer(c, heads, dim_feedforward=2 * c, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.cls = nn.Linear(c, classes)
        self.box = nn.Sequential(nn.Linear(c, c), nn.ReLU(inplace=True), nn.Linear(c, 4), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.proj(self.trunk(x)).flatten(2).transpose(1, 2) + self.pos
        t = self.encoder(t)
        return self.cls(t), self.box(t)


def cnn_transformer() -> nn.Module:
    """Hybrid: conv trunk, two transformer encoder layers on the flattened 16x16 map, class and box heads."""
    return _eval(ConvTransformer())


class CRNN(nn.Module):
    """Text recognition: conv trunk pooling the height to 1, a recurrent head over the width, per-step classes."""

    def __init__(self, rnn: type, classes: int = 37, hidden: int = 128) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            cbr(1, 32), nn.MaxPool2d(2),                     # 16 x 128
            cbr(32, 64), nn.MaxPool2d(2),                    # 8 x 64
            cbr(64, 128), cbr(128, 128), nn.MaxPool2d((2, 1)),  # 4 x 64
            cbr(128, 192), cbr(192, 192), nn.MaxPool2d((2, 1)),  # 2 x 64
            cbr(192, 192, 2, act=nn.ReLU),                   # 1 x 63 (2x2, no padding)
        )  # fmt: skip
        self.convs[-1][0].padding = (0, 0)
        self.rnn = rnn(192, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.convs(x).squeeze(2).transpose(1, 2)  # (N, W, C)
        return self.fc(self.rnn(f)[0]).log_softmax(-1)


def crnn_lstm() -> nn.Module:
    """CRNN text recogniser: conv trunk on a 32x256 grey crop, 2-layer bidirectional LSTM over the width."""
    return _eval(CRNN(nn.LSTM))


class SoundEventCRNN(nn.Module):
    """Sound event detection on a log-mel spectrogram: conv blocks pooling the frequency only, a GRU over time."""

    def __init__(self, mels: int = 64, classes: int = 10, hidden: int = 96) -> None:
        super().__init__()
        blocks, cin = [], 1
        for c, p in ((32, 4), (64, 4), (96, 2), (96, 2)):
            blocks += [cbr(cin, c), cbr(c, c), nn.MaxPool2d((p, 1))]
            cin = c
        self.convs = nn.Sequential(*blocks)
        self.gru = nn.GRU(cin * (mels // 64), hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.convs(x).flatten(1, 2).transpose(1, 2)  # (N, frames, C)
        return torch.sigmoid(self.fc(self.gru(f)[0]))


def crnn_gru() -> nn.Module:
    """Sound-event CRNN: conv blocks on a 64-mel x 256-frame spectrogram, 2-layer bidirectional GRU over time."""
    return _eval(SoundEventCRNN())


# -- video, audio, super-resolution, pose, style ----------------------------------------------------


class C3D(nn.Module):
    """C3D-style clip classifier: 3x3x3 Conv3d, BatchNorm3d, ReLU, MaxPool3d; global pool, linear."""

    def __init__(self, widths=(8, 16, 32, 64), classes: int = 101) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for i, w in enumerate(widths):
            layers += [nn.Conv3d(cin, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True)]
            if i >= 2:  # C3D doubles the convolutions of its later stages
                layers += [nn.Conv3d(w, w, 3, padding=1, bias=False), nn.BatchNorm3d(w), nn.ReLU(inplace=True)]
            layers.append(nn.MaxPool3d((1, 2, 2) if i == 0 else (2, 2, 2)))
            cin = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def c3d_video() -> nn.Module:
    """Video: a C3D-style net of Conv3d and MaxPool3d on an 8-frame 112x112 clip."""
    return _eval(C3D())


class M11(nn.Module):
    """Raw-waveform keyword spotter (M11): a wide strided Conv1d, stacks of 3-tap Conv1d with max-pools."""

    def __init__(self, classes: int = 35) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv1d(1, 64, 80, stride=4, padding=38),
            nn.BatchNorm1d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool1d(4),
        ]
        cin = 64
        for c, n in ((64, 2), (128, 2), (256, 3), (512, 2)):
            for _ in range(n):
                layers += [nn.Conv1d(cin, c, 3, padding=1), nn.BatchNorm1d(c), nn.ReLU(inplace=True)]
                cin = c
            layers.append(nn.MaxPool1d(4) if c != 512 else nn.AdaptiveAvgPool1d(1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).flatten(1))


def audio_m11() -> nn.Module:
    """Audio: M11 keyword spotter on one second of 16 kHz waveform (Conv1d, BatchNorm1d, MaxPool1d)."""
    return _eval(M11())


class GatedResidual(nn.Module):
    """WaveNet layer: causal dilated Conv1d (left padding), tanh x sigmoid gate, 1x1 residual and skip."""

    def __init__(self, c: int, skip: int, dilation: int, k: int = 3) -> None:
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv = nn.Conv1d(c, 2 * c, k, dilation=dilation)
        self.res, self.skip = nn.Conv1d(c, c, 1), nn.Conv1d(c, skip, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.conv(F.pad(x, (self.pad, 0))).chunk(2, dim=1)
        h = torch.tanh(a) * torch.sigmoid(b)
        return x + self.res(h), self.skip(h)


class TCN(nn.Module):
    """A WaveNet-style temporal conv net on mel frames: two stacks of dilations 1-32, summed skips, 1x1 output."""

    def __init__(self, mels: int = 80, c: int = 64, skip: int = 128, out: int = 80) -> None:
        super().__init__()
        self.inp = nn.Conv1d(mels, c, 1)
        self.layers = nn.ModuleList([GatedResidual(c, skip, 2**i) for _ in range(2) for i in range(6)])
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(), nn.Conv1d(skip, out, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        total = 0
        for layer in self.layers:
            x, s = layer(x)
            total = total + s
        return self.out(total)


def wavenet_tcn() -> nn.Module:
    """Audio: WaveNet-style gated, dilated causal Conv1d stack over 400 mel frames."""
    return _eval(TCN())


class EDSR(nn.Module):
    """Super-resolution (EDSR-lite): conv head, residual blocks with scaled residuals, conv + PixelShuffle(2), tail."""

    def __init__(self, c: int = 32, blocks: int = 4, scale: int = 2) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, c, 3, padding=1)
        self.body = nn.ModuleList(
            [
                nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(c, c, 3, padding=1))
                for _ in range(blocks)
            ]
        )
        self.body_out = nn.Conv2d(c, c, 3, padding=1)
        self.up = nn.Sequential(nn.Conv2d(c, c * scale * scale, 3, padding=1), nn.PixelShuffle(scale))
        self.tail = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        y = h
        for b in self.body:
            y = y + 0.1 * b(y)
        return self.tail(self.up(self.body_out(y) + h))


def edsr_x2() -> nn.Module:
    """Super-resolution x2 (EDSR-lite, 32 channels, 4 residual blocks) with PixelShuffle."""
    return _eval(EDSR())


class SimpleBaseline(nn.Module):
    """Pose estimation (SimpleBaseline): ResNet trunk, three 4x4 stride-2 transposed convs, 1x1 to 17 heatmaps."""

    def __init__(self, joints: int = 17, c: int = 96) -> None:
        super().__init__()
        self.backbone = SmallResNet((32, 64, 128, 256), (1, 1, 1, 1))
        layers: list[nn.Module] = []
        cin = 256
        for _ in range(3):
            layers += [
                nn.ConvTranspose2d(cin, c, 4, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(inplace=True),
            ]
            cin = c
        self.deconv = nn.Sequential(*layers)
        self.final = nn.Conv2d(c, joints, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.final(self.deconv(self.backbone(x)[-1]))


def pose_deconv() -> nn.Module:
    """Pose/keypoint net: ResNet trunk on a 256x192 person crop, three deconvolutions to 17 heatmaps."""
    return _eval(SimpleBaseline())


class _ReflectConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int, s: int = 1) -> None:
        super().__init__(nn.ReflectionPad2d(k // 2), nn.Conv2d(cin, cout, k, s))


class StyleResidual(nn.Module):
    """Residual block with reflection padding and InstanceNorm."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _ReflectConv(c, c, 3), nn.InstanceNorm2d(c, affine=True), nn.ReLU(inplace=True),
            _ReflectConv(c, c, 3), nn.InstanceNorm2d(c, affine=True),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class StyleNet(nn.Module):
    """Fast neural style transfer (Johnson et al.): reflection-padded convs, InstanceNorm, residual blocks,
    nearest up-sampling then conv, a 9x9 output conv."""

    def __init__(self, w=(16, 32, 64), blocks: int = 3) -> None:
        super().__init__()

        def down(cin: int, cout: int, k: int, s: int) -> list[nn.Module]:
            return [_ReflectConv(cin, cout, k, s), nn.InstanceNorm2d(cout, affine=True), nn.ReLU(inplace=True)]

        def up(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Upsample(scale_factor=2, mode="nearest"), *down(cin, cout, 3, 1)]

        self.net = nn.Sequential(
            *down(3, w[0], 9, 1), *down(w[0], w[1], 3, 2), *down(w[1], w[2], 3, 2),
            *[StyleResidual(w[2]) for _ in range(blocks)],
            *up(w[2], w[1]), *up(w[1], w[0]), _ReflectConv(w[0], 3, 9), nn.Tanh(),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def style_transfer() -> nn.Module:
    """Style transfer: InstanceNorm, reflection padding, residual blocks, nearest up-sampling, tanh."""
    return _eval(StyleNet())


# -- the table ------------------------------------------------------------------------------------


class Network(NamedTuple):
    """A network of the set: its builder, the input it runs at, its task and the operators it exercises."""

    build: Callable[[], nn.Module]
    input: tuple[int, ...]
    task: str
    ops: str


#: every network of the set, by name (the name is its builder's)
NETWORKS: dict[str, Network] = {
    "unet_transposed": Network(unet_transposed, (1, 3, 256, 256), "segmentation",
        "conv3x3, BN, ReLU, max-pool, ConvTranspose2d 2x2/s2, cat"),
    "unet_bilinear": Network(unet_bilinear, (1, 3, 192, 192), "segmentation",
        "conv3x3, BN, ReLU, max-pool, bilinear Upsample, cat"),
    "deeplab_aspp": Network(deeplab_aspp, (1, 3, 256, 256), "segmentation",
        "dilated conv (2, 4, 6, 12, 18), BN, image pooling, bilinear interpolate to a size, cat"),
    "pspnet": Network(pspnet, (1, 3, 256, 256), "segmentation",
        "dilated conv, adaptive avg-pool to 1/2/3/6 bins, bilinear interpolate, cat"),
    "fcn8s": Network(fcn8s, (1, 3, 256, 256), "segmentation",
        "conv3x3 with bias, ReLU, ceil-mode max-pool, ConvTranspose2d 4x4/s2 and 16x16/s8, add"),
    "fpn_resnet": Network(fpn_resnet, (1, 3, 320, 320), "detection neck",
        "ResNet basic blocks, 1x1 laterals, nearest interpolate x2, add, 1x1/s2 max-pool, tuple output"),
    "fcos_gn": Network(fcos_gn, (1, 3, 256, 256), "detection head",
        "conv3x3, GroupNorm, ReLU shared over 5 levels, permute, reshape, cat"),
    "yolo_pan": Network(yolo_pan, (1, 3, 320, 320), "detection neck and head",
        "conv-BN-SiLU, CSP cat, SPPF max-pool 5x5/s1, nearest Upsample, cat, 1x1 detect"),
    "ssd_mobilenet": Network(ssd_mobilenet, (1, 3, 300, 300), "detection head",
        "depthwise 3x3, ReLU6, extra stride-2 levels, 3x3 heads, permute, reshape, cat, softmax"),
    "convnext_lite": Network(convnext_lite, (1, 3, 224, 224), "convnet",
        "4x4/s4 patchify, depthwise 7x7, channels-last LayerNorm, Linear, GELU, layer-scale mul, permute"),
    "mobilenetv3_large": Network(mobilenetv3_large, (1, 3, 224, 224), "convnet",
        "depthwise 3x3/5x5, hardswish, SE (GAP, 1x1, hardsigmoid, mul), Linear"),
    "efficientnet_b0": Network(efficientnet_b0, (1, 3, 224, 224), "convnet",
        "depthwise 3x3/5x5, SiLU, SE (GAP, 1x1, sigmoid, mul), residual add"),
    "resnext_32x4d": Network(resnext_32x4d, (1, 3, 160, 160), "convnet",
        "7x7/s2 stem, grouped 3x3 (32 groups), 1x1, BN, ReLU, projection shortcuts"),
    "regnetx_400mf": Network(regnetx_400mf, (1, 3, 224, 224), "convnet",
        "grouped 3x3 (group width 16), 1x1, BN, ReLU, residual add"),
    "repvgg_deploy": Network(repvgg_deploy, (1, 3, 224, 224), "convnet",
        "plain 3x3 conv with bias and ReLU (re-parameterised RepVGG)"),
    "cnn_mha": Network(cnn_mha, (1, 3, 224, 224), "hybrid",
        "conv trunk, flatten, transpose, MultiheadAttention, LayerNorm, GELU MLP, mean"),
    "cnn_transformer": Network(cnn_transformer, (1, 3, 256, 256), "hybrid",
        "conv trunk, 1x1, TransformerEncoder (2 layers), Linear heads, sigmoid"),
    "crnn_lstm": Network(crnn_lstm, (1, 1, 32, 256), "hybrid (text recognition)",
        "conv3x3, BN, max-pool (2,1), 2x2 valid conv, bidirectional 2-layer LSTM, log-softmax"),
    "crnn_gru": Network(crnn_gru, (1, 1, 64, 256), "hybrid (sound events)",
        "conv3x3, BN, frequency max-pool, bidirectional 2-layer GRU, sigmoid"),
    "c3d_video": Network(c3d_video, (1, 3, 8, 112, 112), "video",
        "Conv3d 3x3x3, BatchNorm3d, MaxPool3d, AdaptiveAvgPool3d"),
    "audio_m11": Network(audio_m11, (1, 1, 16000), "audio",
        "Conv1d 80/s4 and 3-tap, BatchNorm1d, MaxPool1d, AdaptiveAvgPool1d"),
    "wavenet_tcn": Network(wavenet_tcn, (1, 80, 400), "audio",
        "causal dilated Conv1d (F.pad left), tanh x sigmoid gate, chunk, 1x1 Conv1d, skip sums"),
    "edsr_x2": Network(edsr_x2, (1, 3, 96, 96), "super-resolution",
        "conv3x3, scaled residuals (mul, add), PixelShuffle x2"),
    "pose_deconv": Network(pose_deconv, (1, 3, 256, 192), "pose",
        "ResNet trunk, ConvTranspose2d 4x4/s2 x3, BN, 1x1 heatmaps"),
    "style_transfer": Network(style_transfer, (1, 3, 192, 192), "style transfer",
        "ReflectionPad2d, conv 9x9/3x3, InstanceNorm2d, nearest Upsample, residual add, tanh"),
}  # fmt: skip
