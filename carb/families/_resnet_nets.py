"""The PyTorch networks of the ResNet families (:class:`carb.families.resnet.Config`).

They are built by :func:`carb.families.resnet.build`.

Two families, both plain ``nn.Module`` trees with no data-dependent Python control flow
(so they trace, script, export and run on the ``meta`` device):

``cifar``
    The 3-stage ResNet of He et al. (2016), section 4.2: a 3x3 convolution stem
    (stride 2 when ``early_downsample``, else 1) with BN and ReLU; three stages of ``n``
    blocks with base channels 16/32/64 times ``width``; stride 2 in the first block of
    stages 2 and 3; global average pooling and a linear classifier. ``depth = 6n + 2``
    for basic blocks and ``9n + 2`` for bottleneck blocks (expansion 4: the stage's
    channels are the bottleneck's inner width, its output is 4x). Shortcuts are
    identities, except where the shape changes: there a 1x1 convolution + BN projects
    (option B of the paper).

``imagenet``
    torchvision's ``ResNet`` (``resnet18`` ... ``resnet152``), rebuilt here: 7x7/2 stem,
    BN, ReLU, 3x3/2 max-pool, 4 stages of 64/128/256/512 times ``width`` channels with the
    block counts of :data:`carb.families.resnet.IMAGENET_LAYERS`, v1.5 bottlenecks (stride on the
    3x3 convolution), 1x1 conv + BN downsample shortcuts, adaptive average pooling and a
    linear classifier. At ``width = 1`` and 1000 classes the parameter counts equal
    torchvision's (ResNet-18: 11,689,512; ResNet-50: 25,557,032).

Channel counts under a width multiplier are :func:`channels` of the base count
(``max(1, round(base * width))``, Python's round-half-to-even); the stem of the imagenet
family is scaled the same way. Convolutions have no bias (each is followed by BN), ReLU
and the residual addition are in place, and the forwards are written one statement per
layer, as in torchvision, so that eager PyTorch holds the same tensors alive (the
``live_activation_bytes`` model of :mod:`carb.families.features` relies on this).

:mod:`carb.families.features` computes the same networks' FLOPs, parameters and activation sizes in
closed form without building them; the tests check that both agree exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._resnet_tables import IMAGENET_LAYERS, channels

__all__ = ["dtype_of", "channels", "BasicBlock", "Bottleneck", "CifarResNet", "ImageNetResNet"]

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_of(precision: str) -> torch.dtype:
    """The torch dtype of a precision name (``fp32``, ``fp16``, ``bf16``).

    Raises:
        ValueError: unknown precision.
    """
    try:
        return _DTYPES[precision]
    except KeyError:
        raise ValueError(f"precision: unknown value {precision!r} (expected one of {', '.join(_DTYPES)})") from None


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


def _projection(cin: int, cout: int, stride: int) -> nn.Sequential | None:
    """1x1 conv + BN shortcut when the shape changes, else ``None`` (identity)."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(_conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BN, ReLU and a residual connection.

    Args:
        cin: input channels.
        planes: channels of both convolutions (the output).
        stride: stride of the first convolution (and of the projection shortcut).
    """

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _projection(cin, planes, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:  # structural (fixed at construction), not data-dependent
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride, ResNet v1.5), 1x1 expand to ``4 * planes``.

    Args:
        cin: input channels.
        planes: inner width; the output has ``4 * planes`` channels.
        stride: stride of the 3x3 convolution (and of the projection shortcut).
    """

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, cout)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _projection(cin, cout, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:  # structural, not data-dependent
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


_BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


def _stage(
    block: type[BasicBlock] | type[Bottleneck], cin: int, planes: int, n: int, stride: int
) -> tuple[nn.Sequential, int]:
    """``n`` blocks, the first with ``stride``; returns the stage and its output channels."""
    layers = []
    for i in range(n):
        layers.append(block(cin, planes, stride if i == 0 else 1))
        cin = planes * block.expansion
    return nn.Sequential(*layers), cin


class CifarResNet(nn.Module):
    """3-stage ResNet of He et al. 2016 (CIFAR-style); see the module docstring.

    Args:
        block: ``basic`` or ``bottleneck``.
        depth: ``6n + 2`` (basic) or ``9n + 2`` (bottleneck).
        width: channel multiplier of the base channels 16/32/64.
        early_downsample: stride-2 stem.
        classes: classifier outputs.
    """

    def __init__(
        self,
        block: str = "basic",
        depth: int = 20,
        width: float = 1.0,
        early_downsample: bool = False,
        classes: int = 10,
    ) -> None:
        super().__init__()
        blk = _BLOCKS[block]
        per = 6 if block == "basic" else 9
        if depth < per + 2 or (depth - 2) % per:
            raise ValueError(f"depth: {depth} is not {per}n+2 for cifar {block} blocks")
        n = (depth - 2) // per
        c1, c2, c3 = (channels(b, width) for b in (16, 32, 64))
        self.conv1 = _conv3x3(3, c1, 2 if early_downsample else 1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.relu = nn.ReLU(inplace=True)
        self.layer1, c = _stage(blk, c1, c1, n, 1)
        self.layer2, c = _stage(blk, c, c2, n, 2)
        self.layer3, c = _stage(blk, c, c3, n, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


class ImageNetResNet(nn.Module):
    """torchvision's ResNet (v1.5) with a width multiplier; see the module docstring.

    Args:
        depth: 18, 34, 50, 101 or 152 (the block type follows from it).
        width: channel multiplier of the stem's 64 and the stages' 64/128/256/512.
        classes: classifier outputs.
    """

    def __init__(self, depth: int = 50, width: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        if depth not in IMAGENET_LAYERS:
            raise ValueError(f"depth: {depth} not an imagenet ResNet depth ({', '.join(map(str, IMAGENET_LAYERS))})")
        block, counts = IMAGENET_LAYERS[depth]
        blk = _BLOCKS[block]
        stem = channels(64, width)
        self.conv1 = nn.Conv2d(3, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        c = stem
        self.layer1, c = _stage(blk, c, channels(64, width), counts[0], 1)
        self.layer2, c = _stage(blk, c, channels(128, width), counts[1], 2)
        self.layer3, c = _stage(blk, c, channels(256, width), counts[2], 2)
        self.layer4, c = _stage(blk, c, channels(512, width), counts[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)
