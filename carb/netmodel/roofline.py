"""What the layer model's rooflines read: each layer's cost class and work, and the roofline fit.

A roofline prices a layer as ``t = a0 + a1 * work + a2 * bytes`` (:func:`_roofline`: non-negative
least squares on relative error), where the work is its FLOPs, or a pooling window's reads
(:func:`_work`), and the layer's class (:func:`op_class`) says which roofline applies.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import nnls

#: Classes pooled for the roofline when a class has few measurements.
_MEMORY_BOUND = (
    "relu",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "silu",
    "gelu",
    "tanh",
    "softmax",
    "bn",
    "layernorm",
    "pool",
    "gap",
    "add",
    "mul",
    "cat",
    "copy",
)
#: Classes whose kernel reads a channels-last tensor as it reads a channels-first one: the same
#: element-wise pass over the same bytes, within ±10% on both layouts in every round and at
#: every input (``experiments/layer-costs/results/channels_last.json``). Every other class on a
#: channels-last input runs other kernels or another cost per call (convolutions, pools,
#: interpolation, normalizations: 0.04-3x; even add and mul: 0.84-1.21x on small maps) and is a
#: class of its own, ``<class>_cl``, which no layer campaign has measured.
LAYOUT_FREE = ("relu", "hardswish", "silu", "tanh", "mish")
#: The suffix of a class on a channels-last input (:data:`LAYOUT_FREE`).
CHANNELS_LAST = "_cl"
#: Version of the layer features :meth:`LayerModel.fit` uses; a saved model keeps its own.
FEATURES_VERSION = 5


def op_class(layers: pd.DataFrame) -> np.ndarray:
    """Cost class of each layer row, from its ``op`` and shapes.

    ``conv``, ``conv_grouped``, ``conv_dw`` (groups == input channels == output channels),
    ``conv_dw_multiplier`` (groups == input channels, more output channels), ``conv_dilated`` (any
    dilation above 1), ``relu`` (ReLU and ReLU6), ``pool`` (max and average; ``pool1d``,
    ``pool3d`` for the 1-D and 3-D ones; ``<pool>_dilated`` for a dilated one), ``layernorm_strided`` (a layer norm of a
    non-contiguous view: its kernel copies it first), ``softmax_strided`` (a softmax over
    another dimension than the last), ``copy_strided`` (a copy of a view strided over its
    last dimension), ``conv`` too for a linear layer over several rows
    per image (a pointwise convolution's GEMM), the other ops by name; ``view`` costs
    nothing of its own. On a channels-last input (``cl=1`` in the geometry) a class outside
    :data:`LAYOUT_FREE` is ``<class>_cl``.
    """
    op = layers["op"].astype(str).to_numpy()
    out = op.astype(object).copy()
    g = layers["groups"].to_numpy()
    cin = layers["cin"].to_numpy()
    conv = op == "conv"
    out[conv & (g > 1) & (g == cin)] = "conv_dw"
    out[conv & (g > 1) & (g != cin)] = "conv_grouped"
    # a depthwise convolution with a channel multiplier (GhostNet's cheap operation) runs no
    # depthwise kernel: 1.3-10x the time the depthwise layers price it at
    cout = layers["cout"].to_numpy() if "cout" in layers else cin
    out[conv & (g > 1) & (g == cin) & (cout != cin)] = "conv_dw_multiplier"
    if "dilation" in layers:  # a dilated convolution runs other kernels: a class of its own
        out[conv & (layers["dilation"].to_numpy() > 1)] = "conv_dilated"
    if "geometry" in layers:  # a layer norm of a permuted view copies it first (torchvision's LayerNorm2d)
        strided = (op == "layernorm") & layers["geometry"].astype(str).str.contains("contiguous=0", regex=False)
        out[strided.to_numpy()] = "layernorm_strided"
        # a softmax over another dimension than the last strides over the ones after it: another kernel
        inner = (op == "softmax") & layers["geometry"].astype(str).str.contains("inner=", regex=False)
        out[inner.to_numpy()] = "softmax_strided"
        # a copy striding over its last dimension gathers element by element: another loop
        out[((op == "copy") & layers["geometry"].astype(str).str.contains("strided=1", regex=False)).to_numpy()] = (
            "copy_strided"
        )
    out[op == "relu6"] = "relu"
    out[(op == "maxpool") | (op == "avgpool")] = "pool"
    out[(op == "maxpool1d") | (op == "avgpool1d")] = "pool1d"
    out[(op == "maxpool3d") | (op == "avgpool3d")] = "pool3d"
    if "dilation" in layers:  # no layer campaign measured a dilated pooling: a class of its own
        dilated = np.isin(out, ("pool", "pool1d", "pool3d")) & (layers["dilation"].to_numpy() > 1)
        out[dilated] = [f"{c}_dilated" for c in out[dilated]]
    # a linear layer over many rows per image (tokens, or ConvNeXt's channels-last MLP) is
    # the GEMM of a pointwise convolution on an H x W map: priced as one (the measured
    # linear layers are classifier heads, one row per image, whose GEMV-like speed
    # over-prices such layers 2-3x)
    rows = layers["h"].to_numpy() * layers["w"].to_numpy()
    out[(op == "linear") & (rows > 1)] = "conv"
    if "geometry" in layers:
        cl = layers["geometry"].astype(str).str.contains(r"(?:^| )cl=1(?: |$)", regex=True).to_numpy()
        # a layer norm of a strided view copies it first, whatever its layout; a copy's strides say its cost
        moved = cl & ~np.isin(out, (*LAYOUT_FREE, "view", "layernorm_strided", "copy", "copy_strided"))
        out[moved] = [f"{c}{CHANNELS_LAST}" for c in out[moved]]
    return out


def _work(layers: pd.DataFrame, cls: np.ndarray, version: int = FEATURES_VERSION) -> np.ndarray:
    """Work of each layer row for the rooflines and features. Units: FLOP (pooling: window reads).

    ``flops`` as captured, except (version >= 2) pooling, which counts no FLOP but reads
    ``kernel**2`` inputs per output (a 3x3 stride-1 max pool of 256x112x112 takes 98 ms, a
    2x2 stride-2 one of the same input 19 ms: bytes alone price both alike); a 1-D or 3-D
    pooling reads its window's size (``kernel * kernel_w * kernel_d``); and (version >= 5) a
    softmax over the last dimension, whose work is its rows (:func:`softmax_rows`: on the
    AVX-512 EPYC kind a row of 7 costs 128 ns, of 14 238 ns, of 28 38 ns, of 196 141 ns).
    """
    f = layers["flops"].to_numpy(np.float64)
    if version < 2:
        return f
    # the same work on either layout, dilated or not
    cls = np.array([str(c).removesuffix(CHANNELS_LAST).removesuffix("_dilated") for c in cls], dtype=object)
    pool = cls == "pool"
    if pool.any():
        f = f.copy()
        out_elems = layers["out_bytes"].to_numpy(np.float64)[pool] / np.maximum(
            layers["bytes_per_element"].to_numpy(np.float64)[pool], 1
        )
        f[pool] = out_elems * layers["kernel"].to_numpy(np.float64)[pool] ** 2
    other = np.isin(cls, ("pool1d", "pool3d"))
    if other.any():  # the window's every side: kernel (length), kernel_w and kernel_d are 1 where a rank has none
        f = f.copy()
        window = np.ones(int(other.sum()))
        for col in ("kernel", "kernel_w", "kernel_d"):
            if col in layers:
                window = window * layers[col].to_numpy(np.float64)[other]
        out_elems = layers["out_bytes"].to_numpy(np.float64)[other] / np.maximum(
            layers["bytes_per_element"].to_numpy(np.float64)[other], 1
        )
        f[other] = out_elems * window
    soft = cls == "softmax"
    if version >= 5 and soft.any():
        f = f.copy()
        f[soft] = softmax_rows(layers[soft])
    return f


def softmax_rows(layers: pd.DataFrame) -> np.ndarray:
    """The rows each softmax row normalizes: its output elements over the row length.

    The row length is ``row=`` of the geometry (the last dimension ``w`` where a row has none). A
    softmax over the last dimension costs per row (a row's max, sum and scaling; a row shorter
    than the vector width runs scalar), not per FLOP.
    """
    elems = layers["out_bytes"].to_numpy(np.float64) / np.maximum(layers["bytes_per_element"].to_numpy(np.float64), 1)
    row = layers["w"].to_numpy(np.float64)
    if "geometry" in layers:
        read = pd.to_numeric(layers["geometry"].astype(str).str.extract(r"row=(\d+)")[0], errors="coerce").to_numpy()
        row = np.where(np.isfinite(read), read, row)
    return elems / np.maximum(row, 1)


def _roofline(flops: np.ndarray, nbytes: np.ndarray, y: np.ndarray) -> list[float]:
    """NNLS fit of ``y = a0 + a1 * flops + a2 * bytes`` on relative error. Units: ms, FLOP, B."""
    A = np.column_stack([np.ones_like(y), flops, nbytes]) / y[:, None]
    scale = np.maximum(A.max(axis=0), 1e-30)
    coef, _ = nnls(A / scale, np.ones_like(y), maxiter=5000)
    return [float(c) for c in coef / scale]


def _apply_roofline(coef: Sequence[float], flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    return coef[0] + coef[1] * flops + coef[2] * nbytes
