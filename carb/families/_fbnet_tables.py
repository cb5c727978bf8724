"""The FBNet family's fixed tables.

They are shared by its config and features (:mod:`.fbnet`) and its networks (:mod:`._fbnet_nets`) without either
importing the other.

The macro-architecture is HW-NAS-Bench's FBNet space, CIFAR-100 variant (``hw_nas_bench_api``'s
``fbnet_get_metrics`` for ``"cifar100"``): a 3x3 stem to 16 channels at stride 1 on 32x32, then
7 stages of searchable layers (the first of a stage carries its stride), then a 1x1 head conv
to 1504 channels, global average pooling and a 100-way classifier.
"""

from __future__ import annotations

import functools

#: The 9 candidate operations of a searchable layer, in HW-NAS-Bench's index order:
#: inverted-residual block with kernel k, expansion e, optional 2-group 1x1 convs; or skip.
OPS: tuple[str, ...] = (
    "k3_e1",
    "k3_e1_g2",
    "k3_e3",
    "k3_e6",
    "k5_e1",
    "k5_e1_g2",
    "k5_e3",
    "k5_e6",
    "skip",
)
#: Searchable layers of a network.
N_LAYERS = 22

#: (kernel, expansion, groups of the two 1x1 convolutions) of each op; skip is coded
#: 0, 0, 0 (no convolution of its own, except a projection where the shape changes).
OP_SPECS: dict[str, tuple[int, int, int]] = {
    "k3_e1": (3, 1, 1),
    "k3_e1_g2": (3, 1, 2),
    "k3_e3": (3, 3, 1),
    "k3_e6": (3, 6, 1),
    "k5_e1": (5, 1, 1),
    "k5_e1_g2": (5, 1, 2),
    "k5_e3": (5, 3, 1),
    "k5_e6": (5, 6, 1),
    "skip": (0, 0, 0),
}

#: Input height = width of the published data. Units: px.
INPUT_SIZE = 32
#: Output channels of the 3x3, stride-1 stem convolution. Units: channels.
STEM_CHANNELS = 16
#: Searchable layers per stage (22 in all).
STAGE_LAYERS: tuple[int, ...] = (1, 4, 4, 4, 4, 4, 1)
#: Output channels of each stage. Units: channels.
STAGE_CHANNELS: tuple[int, ...] = (16, 24, 32, 64, 112, 184, 352)
#: Stride of the first layer of each stage (the others have stride 1).
STAGE_STRIDES: tuple[int, ...] = (1, 1, 2, 2, 1, 2, 1)
#: Output channels of the 1x1 head convolution (FBNet v1's 1504). Units: channels.
HEAD_CHANNELS = 1504
#: Classifier outputs (CIFAR-100).
CLASSES = 100


@functools.cache
def layer_plan() -> tuple[tuple[int, int, int, int, bool], ...]:
    """(stage, in channels, out channels, stride, first of its stage) of each of the 22 searchable layers.

    The same whatever the input size. Units: channels.
    """
    out = []
    cin = STEM_CHANNELS
    for stage, (n, cout, stride) in enumerate(zip(STAGE_LAYERS, STAGE_CHANNELS, STAGE_STRIDES)):
        for i in range(n):
            out.append((stage, cin, cout, stride if i == 0 else 1, i == 0))
            cin = cout
    return tuple(out)
