"""The grids of the op campaign: the layer shapes :func:`carb.families.layers.new_ops_sample` draws from.

Plain data (lists of :class:`carb.families.layers.LayerConfig` field values), kept apart from the
layer family's code. A new group goes at the end: :func:`~carb.families.layers.new_ops_sample`
draws the groups in this order from one generator, so the samples of earlier groups at a seed
stay the ones measured.
"""

from __future__ import annotations

from typing import Any

_B = [1, 2, 4, 8]
_C = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
_S = [7, 10, 14, 20, 28, 40, 56]
#: The grids :func:`new_ops_sample` draws from, one group each: the ops of :data:`NEW_OPS` (and
#: the new parameters of earlier ones: dilation, ceil mode) at the shapes of deployed CNNs
#: (U-Nets' and GANs' transposed convolutions and upsampling, DeepLab's dilated convolutions,
#: GoogLeNet's ceil-mode pools, ConvNeXt's and PoolFormer's norms, ESPCN's pixel shuffle, ViTs'
#: attention, CRNNs' recurrent heads, audio 1-D and video 3-D networks). A group of several
#: grids samples their union.
NEW_OP_GRIDS: dict[str, list[dict[str, list[Any]]]] = {
    "convtranspose": [
        {
            "op": ["convtranspose"],
            "cin": [16, 32, 64, 128, 256, 512],
            "cout": [8, 16, 32, 64, 128, 256],
            "input_size": [4, 7, 14, 28, 56],
            "kernel": [2, 3, 4],
            "stride": [2],
            "groups": [1],
            "batch": _B,
        },
        {
            "op": ["convtranspose"],
            "cin": [32, 64, 128],
            "cout": [32, 64, 128],
            "input_size": [14, 28],
            "kernel": [3],
            "stride": [1],
            "groups": [1, 4],
            "batch": [1, 2],
        },
    ],
    "conv_dilated": [
        {
            "op": ["conv"],
            "cin": [64, 128, 256, 512],
            "cout": [64, 128, 256],
            "input_size": [14, 28, 40, 56],
            "kernel": [3],
            "dilation": [2, 4, 6, 12],
            "batch": [1, 2, 4],
        },
        {
            "op": ["conv"],
            "cin": [64, 128, 256, 512, 960],
            "cout": [0],
            "groups": [0],
            "input_size": [14, 28, 56],
            "kernel": [3],
            "dilation": [2, 4],
            "batch": [1, 2, 4],
        },
    ],
    "pool_k3s2": [
        {
            "op": ["maxpool", "avgpool"],
            "cin": [16, 32, 64, 128, 192, 256, 480, 832],
            "input_size": [7, 14, 15, 28, 56, 57, 112],
            "kernel": [3],
            "stride": [2],
            "padding": [0, 1],
            "ceil_mode": [0, 1],
            "batch": _B,
        },
    ],
    "upsample_nearest": [
        {
            "op": ["upsample_nearest"],
            "cin": _C,
            "input_size": [4, 7, 10, 14, 20, 28, 56],
            "stride": [2, 4],
            "batch": _B,
        },
        {"op": ["upsample_nearest"], "cin": _C, "input_size": [7, 14, 28], "output_size": [15, 29, 57], "batch": _B},
    ],
    "upsample_bilinear": [
        {
            "op": ["upsample_bilinear"],
            "cin": _C,
            "input_size": [4, 7, 10, 14, 20, 28, 56],
            "stride": [2, 4],
            "align_corners": [0, 1],
            "batch": _B,
        },
        {
            "op": ["upsample_bilinear"],
            "cin": _C,
            "input_size": [7, 14, 28],
            "output_size": [15, 29, 57],
            "align_corners": [0, 1],
            "batch": _B,
        },
    ],
    "layernorm": [
        {
            "op": ["layernorm"],
            "cin": [64, 96, 128, 192, 256, 384, 512, 768, 1024],
            "input_size": [1, 7, 14, 28, 56],
            "batch": _B,
        }
    ],
    "groupnorm_1": [
        {
            "op": ["groupnorm"],
            "cin": [64, 96, 128, 192, 256, 320, 512, 768],
            "groups": [1],
            "input_size": [7, 14, 28, 56],
            "batch": _B,
        }
    ],
    "groupnorm": [
        {
            "op": ["groupnorm"],
            "cin": [64, 128, 256, 512, 1024],
            "groups": [8, 16, 32],
            "input_size": [7, 14, 28, 56],
            "batch": _B,
        }
    ],
    "instancenorm": [
        {"op": ["instancenorm"], "cin": [16, 32, 64, 128, 256, 512], "input_size": [7, 14, 28, 56, 112], "batch": _B}
    ],
    "mish": [{"op": ["mish"], "cin": _C, "input_size": [3, 7, 14, 28, 56, 112], "batch": _B}],
    "pad": [{"op": ["pad"], "cin": _C, "input_size": [7, 14, 28, 56, 112], "padding": [1, 2, 3], "batch": _B}],
    "pixelshuffle": [
        {
            "op": ["pixelshuffle"],
            "cin": [16, 32, 48, 64, 96, 128, 192, 256],
            "input_size": [7, 14, 28, 56],
            "stride": [2, 4],
            "batch": _B,
        }
    ],
    "sdpa": [
        {
            "op": ["sdpa"],
            "cin": [64, 128, 192, 256, 384, 512, 768],
            "groups": [1, 2, 4, 8, 12],
            "input_size": [4, 7, 8, 14],
            "batch": _B,
        }
    ],
    "mha": [
        {
            "op": ["mha"],
            "cin": [64, 128, 192, 256, 384, 512, 768],
            "groups": [1, 2, 4, 8, 12],
            "input_size": [4, 7, 8, 14],
            "batch": _B,
        }
    ],
    "lstm": [
        {
            "op": ["lstm"],
            "cin": [16, 32, 64, 128, 256, 512],
            "cout": [32, 64, 128, 256, 512],
            "input_size": [8, 16, 32, 64, 128],
            "batch": _B,
        }
    ],
    "gru": [
        {
            "op": ["gru"],
            "cin": [16, 32, 64, 128, 256, 512],
            "cout": [32, 64, 128, 256, 512],
            "input_size": [8, 16, 32, 64, 128],
            "batch": _B,
        }
    ],
    "conv1d": [
        {
            "op": ["conv1d"],
            "cin": [1, 16, 64, 128, 256, 512],
            "cout": [16, 64, 128, 256, 512],
            "input_size": [32, 128, 512, 2048, 8192],
            "kernel": [1, 3, 7],
            "stride": [1, 2],
            "batch": _B,
        },
        {
            "op": ["conv1d"],
            "cin": [64, 128, 256, 512],
            "cout": [0],
            "groups": [0],
            "input_size": [64, 256, 1024],
            "kernel": [3, 5, 7],
            "batch": _B,
        },
    ],
    "conv3d": [
        {
            "op": ["conv3d"],
            "cin": [3, 16, 64, 128, 256],
            "cout": [16, 64, 128, 256],
            "input_size": [7, 14, 28, 56],
            "frames": [2, 4, 8, 16],
            "kernel": [1, 3],
            "kernel_d": [0, 1, 3],
            "stride": [1, 2],
            "batch": [1, 2],
        },
        {
            "op": ["conv3d"],
            "cin": [3],
            "cout": [32, 64],
            "input_size": [56, 112],
            "frames": [8, 16],
            "kernel": [7],
            "kernel_d": [3, 5],
            "stride": [2],
            "batch": [1, 2],
        },
    ],
    "pool3d": [
        {
            "op": ["maxpool3d", "avgpool3d"],
            "cin": [16, 32, 64, 128, 256],
            "input_size": [7, 14, 28, 56],
            "frames": [2, 4, 8, 16],
            "kernel": [2, 3],
            "kernel_d": [0, 1],
            "stride": [2],
            "ceil_mode": [0, 1],
            "batch": [1, 2],
        },
    ],
    # ResNeXt's and RegNet's 3x3 grouped convolutions (2-64 groups, 4-128 channels a group) and
    # ShuffleNet's grouped 1x1 convolutions
    "conv_grouped": [
        {
            "op": ["conv"],
            "cin": [64, 128, 256, 512, 1024],
            "cout": [0],
            "groups": [2, 4, 8, 16, 32, 64],
            "input_size": [7, 14, 28, 56],
            "kernel": [3],
            "stride": [1, 2],
            "batch": _B,
        },
        {
            "op": ["conv"],
            "cin": [64, 128, 256, 512],
            "cout": [64, 128, 256, 512],
            "groups": [2, 3, 4, 8],
            "input_size": [14, 28, 56],
            "kernel": [1],
            "batch": [1, 2, 4],
        },
    ],
    # squeeze-excitation's broadcast scaling, at the channels and sizes of MobileNets and EfficientNets
    "mul": [
        {
            "op": ["mul"],
            "cin": [16, 24, 40, 64, 96, 128, 256, 480, 672, 960, 1280],
            "input_size": [7, 14, 28, 56, 112],
            "batch": _B,
        },
    ],
    # softmax over rows of 7-196 (the layer's last dimension): attention maps and per-pixel class scores
    "softmax": [
        {
            "op": ["softmax"],
            "cin": [1, 4, 8, 16, 32, 64, 128, 256],
            "input_size": [7, 14, 28, 49, 98, 196],
            "batch": _B,
        },
    ],
}

#: Most FLOP and most input-plus-output elements of a layer :func:`carb.families.layers.new_ops_sample` draws: the
#: layers space's budget (each measured in well under a second on one thread).
NEW_OPS_MAX_FLOPS = 1.5e9
NEW_OPS_MAX_ELEMENTS = 8e6
