"""The layer model: each layer's latency from its operator class and shapes.

Each layer's latency comes from its operator class (:func:`op_class`: dense / grouped /
depthwise convolution, linear, matmul, BN, each activation, pooling, add, broadcast
multiply, concat, copy) as a roofline ``t = a0 + a1 * flops + a2 * bytes`` (pooling: its
window reads as flops) fitted per class by non-negative least squares on relative error,
times a correction ``exp(f(x))`` from a forest of regression trees on the layer's
log-shapes (kernel, stride, groups, channels, map size, batch, working set, arithmetic
intensity, oneDNN or native path, ...), weighted 0, 0.5 or 1 as cross-validation says.
Views (flatten, reshape, dropout in eval) cost nothing of their own. An operator the model
has no measurements for is **never free**: it is priced by a measured fallback, the
bytes-and-FLOPs roofline ``t = a0 + a1 * flops + a2 * bytes`` of its fallback class
(:data:`FALLBACK_CLASSES`: element-wise, normalization, data movement, pooling, compute),
fitted on the measured layers of that class, whose 90% error on an op it has not seen (each
measured op left out in turn) widens its interval (:func:`fit_fallback`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from carb.netmodel.io import FOREST_FILE, ModelError

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
#: Weights of the forest's correction that :meth:`LayerModel.fit` chooses among.
SHRINKS = (0.0, 0.5, 1.0)
#: Layer features of version 1: log-shapes, kernel, stride, inputs, broadcast.
_FEATURES_V1 = [
    "l_flops",
    "l_in",
    "l_out",
    "l_w",
    "l_batch",
    "l_cin",
    "l_cout",
    "l_hw",
    "l_howo",
    "kernel",
    "stride",
    "l_groups",
    "l_cin_g",
    "n_inputs",
    "broadcast",
]
#: Layer features of version 2: version 1's, ``l_flops`` counting a pooling window's reads
#: as work (:func:`_work`), plus the working set ``l_ws = log2(in + out + weight bytes)``
#: and the arithmetic intensity ``l_ai = log2(work) - log2(working set)``.
_FEATURES_V2 = _FEATURES_V1 + ["l_ws", "l_ai"]
#: Layer features of version 3: version 2's plus ``onednn``, whether PyTorch runs a dense or
#: grouped fp32 convolution through oneDNN or its own im2col + GEMM (:func:`onednn_conv`).
#: No shape feature says which path runs, and the two differ most on narrow layers (a
#: 4-channel 3x3 convolution of a 32 px map: 0.03 ms native at batch 1, 0.11 ms oneDNN at 2).
_FEATURES = _FEATURES_V2 + ["onednn"]
#: Version of the layer features :meth:`LayerModel.fit` uses; a saved model keeps its own.
FEATURES_VERSION = 3
#: The feature names of each version (a saved model predicts with its own version's).
_FEATURES_BY_VERSION = {1: _FEATURES_V1, 2: _FEATURES_V2, 3: _FEATURES}


def op_class(layers: pd.DataFrame) -> np.ndarray:
    """Cost class of each layer row, from its ``op`` and shapes.

    ``conv``, ``conv_grouped``, ``conv_dw`` (groups == input channels), ``conv_dilated`` (any
    dilation above 1), ``relu`` (ReLU and ReLU6), ``pool`` (max and average; ``pool1d``,
    ``pool3d`` for the 1-D and 3-D ones), ``layernorm_strided`` (a layer norm of a
    non-contiguous view: its kernel copies it first), ``conv`` too for a linear layer over several rows
    per image (a pointwise convolution's GEMM), the other ops by name; ``view`` costs
    nothing of its own.
    """
    op = layers["op"].astype(str).to_numpy()
    out = op.astype(object).copy()
    g = layers["groups"].to_numpy()
    cin = layers["cin"].to_numpy()
    conv = op == "conv"
    out[conv & (g > 1) & (g == cin)] = "conv_dw"
    out[conv & (g > 1) & (g != cin)] = "conv_grouped"
    if "dilation" in layers:  # a dilated convolution runs other kernels: a class of its own
        out[conv & (layers["dilation"].to_numpy() > 1)] = "conv_dilated"
    if "geometry" in layers:  # a layer norm of a permuted view copies it first (torchvision's LayerNorm2d)
        strided = (op == "layernorm") & layers["geometry"].astype(str).str.contains("contiguous=0", regex=False)
        out[strided.to_numpy()] = "layernorm_strided"
    out[op == "relu6"] = "relu"
    out[(op == "maxpool") | (op == "avgpool")] = "pool"
    out[(op == "maxpool1d") | (op == "avgpool1d")] = "pool1d"
    out[(op == "maxpool3d") | (op == "avgpool3d")] = "pool3d"
    # a linear layer over many rows per image (tokens, or ConvNeXt's channels-last MLP) is
    # the GEMM of a pointwise convolution on an H x W map: priced as one (the measured
    # linear layers are classifier heads, one row per image, whose GEMV-like speed
    # over-prices such layers 2-3x)
    rows = layers["h"].to_numpy() * layers["w"].to_numpy()
    out[(op == "linear") & (rows > 1)] = "conv"
    return out


def onednn_conv(layers: pd.DataFrame, threads: int = 1) -> np.ndarray:
    """Whether PyTorch's CPU dispatch runs each layer row through oneDNN, not its own im2col + GEMM.

    Only fp32 convolution rows can be ``True``. The rule of ATen's
    ``ConvParams::use_mkldnn`` for fp32 CPU tensors: oneDNN unless the convolution is a 1x1,
    unstrided, undilated one on fewer than 16 images on one thread, or is dense, has a kernel
    of at most 3 on a side, one image and at most 20,480 input elements.
    ``tests/netmodel/test_netmodel.py`` checks it against the profiler of the installed torch.

    Args:
        layers: layer rows (:data:`carb.graph.table.COLUMNS`).
        threads: the device's intra-op threads.

    Returns:
        One bool per row.

    """
    if not len(layers):
        return np.zeros(0, bool)
    op = layers["op"].astype(str).to_numpy()
    # fp32: 4 bytes per element (the layer family's closed-form rows carry no dtype column)
    conv = (op == "conv") & (layers["bytes_per_element"].to_numpy(np.int64) == 4)
    b = layers["batch"].to_numpy(np.int64)
    kh = layers["kernel"].to_numpy(np.int64)
    kw = layers["kernel_w"].to_numpy(np.int64) if "kernel_w" in layers else kh
    one = (kh == 1) & (kw == 1)
    strided = layers["stride"].to_numpy(np.int64) > 1
    dilated = layers["dilation"].to_numpy(np.int64) > 1 if "dilation" in layers else np.zeros(len(b), bool)
    numel = b * layers["cin"].to_numpy(np.int64) * layers["h"].to_numpy(np.int64) * layers["w"].to_numpy(np.int64)
    first = strided | dilated | (b >= 16) | ~one | (threads > 1)
    second = (layers["groups"].to_numpy(np.int64) > 1) | ((kh > 3) & (kw > 3)) | (b > 1) | (numel > 20480)
    return conv & first & second


#: Convolutions whose inputs, outputs and weights together stay under this (B) are "small" for
#: :func:`_onednn_mb`: their own buffers do not move a process's peak.
_SMALL_WS_BYTES = 0.5e6


def _onednn_mb(layers: pd.DataFrame, memory_mb: np.ndarray, threads: int = 1) -> float | None:
    """The peak memory (MB) a process gains by running convolutions through oneDNN.

    The median measured memory of small oneDNN convolutions less that of small native ones
    (each a fresh worker running one layer; on an AVX2 VM: 21.3 against 13.9 MB); ``None``
    with fewer than 5 of either or a negative difference.
    """
    ws = (layers["in_bytes"] + layers["out_bytes"] + layers["weight_bytes"]).to_numpy(np.float64)
    ok = (layers["op"].astype(str).to_numpy() == "conv") & (ws < _SMALL_WS_BYTES) & np.isfinite(memory_mb)
    on = onednn_conv(layers, threads)
    a, b = memory_mb[ok & on], memory_mb[ok & ~on]
    if len(a) < 5 or len(b) < 5:
        return None
    d = float(np.median(a) - np.median(b))
    return d if d > 0 else None


def _work(layers: pd.DataFrame, cls: np.ndarray, version: int = FEATURES_VERSION) -> np.ndarray:
    """Work of each layer row for the rooflines and features. Units: FLOP (pooling: window reads).

    ``flops`` as captured, except (version >= 2) pooling, which counts no FLOP but reads
    ``kernel**2`` inputs per output (a 3x3 stride-1 max pool of 256x112x112 takes 98 ms, a
    2x2 stride-2 one of the same input 19 ms: bytes alone price both alike); a 1-D or 3-D
    pooling reads its window's size (``kernel * kernel_w * kernel_d``).
    """
    f = layers["flops"].to_numpy(np.float64)
    if version < 2:
        return f
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
    return f


def _x(
    layers: pd.DataFrame,
    classes: Sequence[str],
    version: int = FEATURES_VERSION,
    cls: np.ndarray | None = None,
    threads: int = 1,
    onednn: np.ndarray | None = None,
) -> np.ndarray:
    """The forest's features of layer rows, then one indicator per class.

    The features of ``version`` (:data:`_FEATURES_BY_VERSION`); ``threads``: the device's
    intra-op threads; ``onednn``: the rows' :func:`onednn_conv`, if already computed.
    """
    nfeat = len(_FEATURES_BY_VERSION.get(version, _FEATURES))
    if not len(layers):
        return np.zeros((0, nfeat + len(classes)))
    cls = op_class(layers) if cls is None else cls
    l2 = lambda c: np.log2(np.maximum(layers[c].to_numpy(dtype=np.float64), 0) + 1)  # noqa: E731
    cin_g = layers["cin"].to_numpy(np.float64) / np.maximum(layers["groups"].to_numpy(np.float64), 1)
    work = _work(layers, cls, version)
    cols = [
        np.log2(np.maximum(work, 0) + 1),
        l2("in_bytes"),
        l2("out_bytes"),
        l2("weight_bytes"),
        l2("batch"),
        l2("cin"),
        l2("cout"),
        np.log2(layers["h"].to_numpy(np.float64) * layers["w"].to_numpy(np.float64) + 1),
        np.log2(layers["ho"].to_numpy(np.float64) * layers["wo"].to_numpy(np.float64) + 1),
        layers["kernel"].to_numpy(np.float64),
        layers["stride"].to_numpy(np.float64),
        l2("groups"),
        np.log2(cin_g + 1),
        layers["n_inputs"].to_numpy(np.float64),
        layers["broadcast"].to_numpy(np.float64),
    ]
    if version >= 2:
        ws = np.log2(
            sum(np.maximum(layers[c].to_numpy(np.float64), 0) for c in ("in_bytes", "out_bytes", "weight_bytes")) + 1
        )
        cols += [ws, cols[0] - ws]
    if version >= 3:
        cols.append((onednn_conv(layers, threads) if onednn is None else onednn).astype(np.float64))
    cols += [(cls == c).astype(np.float64) for c in classes]
    return np.column_stack(cols)


def _roofline(flops: np.ndarray, nbytes: np.ndarray, y: np.ndarray) -> list[float]:
    """NNLS fit of ``y = a0 + a1 * flops + a2 * bytes`` on relative error. Units: ms, FLOP, B."""
    A = np.column_stack([np.ones_like(y), flops, nbytes]) / y[:, None]
    scale = np.maximum(A.max(axis=0), 1e-30)
    coef, _ = nnls(A / scale, np.ones_like(y), maxiter=5000)
    return [float(c) for c in coef / scale]


def _apply_roofline(coef: Sequence[float], flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    return coef[0] + coef[1] * flops + coef[2] * nbytes


def _precisions(layers: pd.DataFrame) -> list[str] | None:
    """Precisions of measured layer rows.

    Their ``precision`` column, or fp32 when every row has 4-byte elements; ``None`` when it
    cannot be told (2-byte rows: fp16 or bf16).
    """
    if "precision" in layers.columns:
        return sorted(set(layers["precision"].astype(str)))
    if "bytes_per_element" in layers.columns and len(layers) and (layers["bytes_per_element"] == 4).all():
        return ["fp32"]
    return None


def _class_rooflines(
    cls_: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, y: np.ndarray, generic: list[float], min_class: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Return each class's roofline and its count of measurements.

    A class with fewer than ``min_class`` measurements gets a pooled roofline: that of the
    memory-bound classes together (:data:`_MEMORY_BOUND`) or ``generic``.
    """
    mem = np.isin(cls_, _MEMORY_BOUND)
    pooled = _roofline(flops[mem], nbytes[mem], y[mem]) if mem.sum() >= 3 else generic
    roof: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for c in sorted(set(cls_)):
        m = cls_ == c
        counts[c] = int(m.sum())
        roof[c] = (
            _roofline(flops[m], nbytes[m], y[m])
            if m.sum() >= min_class
            else (pooled if c in _MEMORY_BOUND else generic)
        )
    return roof, counts


#: The classes of the measured fallback, each the op classes (:func:`op_class`) it holds: an op
#: the model has no measurements of is priced by its class's roofline, fitted on the measured
#: layers of the class. Element-wise ops read and write each element once; normalizations
#: reduce (statistics, a softmax's sum, a global pooling's mean) before they write; data
#: movement copies without arithmetic; pooling reads a window per output; compute runs
#: matrix products (convolutions of any rank, attention, recurrent layers).
FALLBACK_CLASSES: dict[str, tuple[str, ...]] = {
    "elementwise": ("relu", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh", "mish", "add", "mul"),
    "normalization": (
        "bn",
        "layernorm",
        "layernorm_strided",
        "groupnorm",
        "instancenorm",
        "softmax",
        "gap",
        "gap1d",
        "gap3d",
    ),
    "movement": (
        "cat",
        "copy",
        "upsample_nearest",
        "upsample_bilinear",
        "pad",
        "pad_reflect",
        "pad_replicate",
        "pixelshuffle",
        "pixelunshuffle",
    ),
    "pooling": ("pool", "pool1d", "pool3d"),
    "compute": (
        "conv",
        "conv_dw",
        "conv_grouped",
        "conv_dilated",
        "conv1d",
        "conv3d",
        "convtranspose",
        "convtranspose1d",
        "convtranspose3d",
        "linear",
        "matmul",
        "sdpa",
        "mha",
        "lstm",
        "gru",
        "rnn",
    ),
}
_FALLBACK_OF = {c: k for k, cs in FALLBACK_CLASSES.items() for c in cs}
#: The fallback of an op capture could not read: every measured layer's roofline.
GENERIC = "generic"


def fallback_class(layers: pd.DataFrame, cls: np.ndarray | None = None) -> np.ndarray:
    """The fallback class of each layer row (:data:`FALLBACK_CLASSES`).

    An op capture could not read (``unknown``) is ``compute`` where it counts FLOPs (a
    matrix product ran), else :data:`GENERIC`. ``cls``: the rows' :func:`op_class`, if already computed.
    """
    c = op_class(layers) if cls is None else cls
    out = np.array([_FALLBACK_OF.get(str(k), GENERIC) for k in c], dtype=object)
    out[(out == GENERIC) & (layers["flops"].to_numpy(np.float64) > 0)] = "compute"
    return out


def fit_fallback(
    layers: pd.DataFrame, y_ms: np.ndarray, version: int = FEATURES_VERSION, coverage: float = 0.9
) -> dict[str, dict[str, Any]]:
    """Each fallback class's roofline, fitted on its measured layers, and its error on an op it has not seen.

    For each class of :data:`FALLBACK_CLASSES` with measured layers, and for :data:`GENERIC`
    (every measured layer): the roofline ``t = a0 + a1 * work + a2 * bytes`` (NNLS on relative
    error, as the class rooflines; ``work``: :func:`_work`), and ``q``: the ``coverage``
    quantile of ``|log(predicted / measured)|`` of each measured op predicted by the roofline
    fitted on the class's other ops (leave one op out; an op is an op class, max and average
    pooling apart). That is the error of pricing an op the class has never measured. A class
    of one measured op has no other to learn from: it takes :data:`GENERIC`'s ``q``.

    Args:
        layers: measured layer rows (``se`` composites and rows without a positive latency left out).
        y_ms: their latency. Units: ms.
        version: the layer features' version (its :func:`_work`).
        coverage: the quantile of the error.

    Returns:
        Class -> ``{"coef": [a0 (ms), a1 (ms/FLOP), a2 (ms/B)], "q": log error, "n": layers, "ops": [op classes]}``.

    """
    y = np.asarray(y_ms, np.float64)
    keep = (layers["op"] != "se").to_numpy() & np.isfinite(y) & (y > 0)
    layers, y = layers[keep].reset_index(drop=True), y[keep]
    if not len(y):
        return {}
    cls = op_class(layers)
    fb = fallback_class(layers, cls)
    unit = np.where(cls == "pool", layers["op"].astype(str).to_numpy(), cls)
    work, nbytes = _work(layers, cls, version), layers["bytes"].to_numpy(np.float64)
    out: dict[str, dict[str, Any]] = {}
    for name in (*FALLBACK_CLASSES, GENERIC):
        m = np.ones(len(y), bool) if name == GENERIC else fb == name
        if m.sum() < 3:
            continue
        units = sorted(set(unit[m]))
        res: list[float] = []
        for u in units:
            train, test = m & (unit != u), m & (unit == u)
            if train.sum() < 3:
                continue
            coef = _roofline(work[train], nbytes[train], y[train])
            pred = np.maximum(_apply_roofline(coef, work[test], nbytes[test]), 1e-6)
            res += list(np.abs(np.log(pred / y[test])))
        out[name] = {
            "coef": _roofline(work[m], nbytes[m], y[m]),
            "q": float(np.quantile(res, coverage)) if len(units) >= 2 and res else None,
            "n": int(m.sum()),
            "ops": [str(u) for u in units],
        }
    generic_q = out[GENERIC]["q"] if GENERIC in out else None
    for v in out.values():
        if v["q"] is None:
            v["q"] = generic_q if generic_q is not None else 1.0
    return out


#: The op campaigns of a shipped model: layer datasets of ops its own layers never measured. Each such op is priced
#: by a roofline fitted on its own layers there (:func:`fit_op_rooflines`), scaled to the model's campaign speed by
#: the bridge layers both datasets measured, instead of its class's.
OP_DATASETS: dict[str, tuple[str, ...]] = {"layers-cpu-avx2-1t": ("layers-ops-cpu-avx2-1t",)}
#: The key of an op's own roofline in a fallback (:func:`fit_op_rooflines`): ``op:`` and :func:`fallback_unit`.
OWN = "op:"


def fallback_unit(layers: pd.DataFrame, cls: np.ndarray) -> np.ndarray:
    """The op each row is priced as by its own roofline: its :func:`op_class`, pools by their op (max, average)."""
    ops = layers["op"].astype(str).to_numpy()
    return np.where(np.isin(cls, ("pool", "pool1d", "pool3d")), ops, cls.astype(str))


def fit_op_rooflines(
    layers: pd.DataFrame, y_ms: np.ndarray, version: int = FEATURES_VERSION, coverage: float = 0.9, min_layers: int = 4
) -> dict[str, dict[str, Any]]:
    """Each measured op's own roofline and its error on a layer of that op it has not seen.

    Per op (:func:`fallback_unit`) with at least ``min_layers`` measured layers: the roofline
    ``t = a0 + a1 * work + a2 * bytes`` fitted on its layers, and ``q``: the ``coverage`` quantile of
    ``|log(predicted / measured)|`` of each layer predicted by the roofline fitted on the op's other layers
    (leave one layer out). Keys: :data:`OWN` and the op.

    Args:
        layers: measured layer rows (:func:`carb.families.layers.layer_frame`).
        y_ms: their latency. Units: ms.
        version: the layer features' version (its :func:`_work`).
        coverage: the quantile of the error.
        min_layers: the fewest layers an op's roofline is fitted on.
    """
    y = np.asarray(y_ms, np.float64)
    keep = (layers["op"] != "se").to_numpy() & np.isfinite(y) & (y > 0)
    layers, y = layers[keep].reset_index(drop=True), y[keep]
    if not len(y):
        return {}
    cls = op_class(layers)
    unit = fallback_unit(layers, cls)
    work, nbytes = _work(layers, cls, version), layers["bytes"].to_numpy(np.float64)
    out: dict[str, dict[str, Any]] = {}
    for u in sorted(set(unit)):
        idx = np.flatnonzero(unit == u)
        if len(idx) < min_layers:
            continue
        res = []
        for i in idx:
            rest = idx[idx != i]
            coef = _roofline(work[rest], nbytes[rest], y[rest])
            pred = max(float(_apply_roofline(coef, work[i : i + 1], nbytes[i : i + 1])[0]), 1e-6)
            res.append(abs(np.log(pred / y[i])))
        out[OWN + u] = {
            "coef": _roofline(work[idx], nbytes[idx], y[idx]),
            "q": float(np.quantile(res, coverage)),
            "n": int(len(idx)),
            "ops": [u],
        }
    return out


def dataset_fallback(name: str, target: str, version: int) -> dict[str, dict[str, Any]] | None:
    """:func:`fit_fallback` on the shipped layer dataset ``carb/data/<name>.parquet`` (``None``: no such dataset).

    For a shipped model saved before models carried their own fallback: the measured layers it was fitted on.
    """
    from importlib import resources

    path = Path(str(resources.files("carb") / "data" / f"{name}.parquet"))
    if not name or "/" in name or not path.is_file():
        return None
    out = _fallback_of_file(str(path), path.stat().st_mtime_ns, target, version)
    for extra in OP_DATASETS.get(name, ()):
        ops = Path(str(resources.files("carb") / "data" / f"{extra}.parquet"))
        if out is not None and ops.is_file():
            own = _op_rooflines_of_file(str(ops), ops.stat().st_mtime_ns, str(path), target, version)
            out = {**out, **own}
    return out


@functools.lru_cache(maxsize=8)
def _op_rooflines_of_file(path: str, mtime_ns: int, base: str, target: str, version: int) -> dict[str, dict[str, Any]]:
    """:func:`fit_op_rooflines` on an op campaign's layers, at the base campaign's speed (its bridge layers)."""
    from carb.families.layers import layer_frame

    df = pd.read_parquet(path)
    if target not in df.columns or "op" not in df.columns:
        return {}
    df = df[df.get("status", pd.Series("ok", index=df.index)).fillna("ok") == "ok"].reset_index(drop=True)
    shipped = pd.read_parquet(base, columns=["config_id", target]).drop_duplicates("config_id").set_index("config_id")
    bridge = df["config_id"].isin(shipped.index)
    ratio = shipped.loc[df.loc[bridge, "config_id"], target].to_numpy() / df.loc[bridge, target].to_numpy()
    speed = float(np.median(ratio)) if bridge.sum() >= 3 else 1.0  # the base campaign's speed over this one's
    new = df[~bridge].reset_index(drop=True)
    return fit_op_rooflines(layer_frame(new).reset_index(drop=True), new[target].to_numpy(np.float64) * speed, version)


@functools.lru_cache(maxsize=8)
def _fallback_of_file(path: str, mtime_ns: int, target: str, version: int) -> dict[str, dict[str, Any]] | None:
    from carb.families.layers import layer_frame

    df = pd.read_parquet(path)
    if target not in df.columns or "op" not in df.columns:
        return None
    df = df[df.get("status", pd.Series("ok", index=df.index)).fillna("ok") == "ok"].reset_index(drop=True)
    return fit_fallback(layer_frame(df).reset_index(drop=True), df[target].to_numpy(np.float64), version)


def _fit_correction(X: np.ndarray, resid: np.ndarray, trees: int, seed: int) -> tuple[float, Any]:
    """Return the weight of the forest's log-correction of the rooflines and the forest (``None`` at weight 0).

    The weight is the one of :data:`SHRINKS` with the least 3-fold cross-validated
    |log error|: on noisy measurements the rooflines alone can win.
    """
    from sklearn.ensemble import ExtraTreesRegressor

    def forest(rows: np.ndarray) -> Any:
        et = ExtraTreesRegressor(n_estimators=trees, min_samples_leaf=3, max_features=0.6, random_state=seed, n_jobs=1)
        return et.fit(X[rows], resid[rows])

    fold = np.random.default_rng(seed).integers(0, 3, len(resid))
    errs = {s: 0.0 for s in SHRINKS}
    for k in range(3):
        tr, te = fold != k, fold == k
        if tr.sum() < 5 or not te.any():
            continue
        f = forest(tr).predict(X[te])
        for s in SHRINKS:
            errs[s] += float(np.abs(resid[te] - s * f).sum())
    shrink = min(SHRINKS, key=lambda s: (errs[s], s))
    return shrink, (forest(np.ones(len(resid), bool)) if shrink > 0 else None)


@dataclass
class LayerModel:
    """Per-class rooflines and a residual forest, fitted on measured layers.

    Attributes:
        rooflines: class -> ``[a0 (ms), a1 (ms/FLOP), a2 (ms/B)]``.
        generic: the roofline of every measured layer pooled (unknown operators).
        classes: the classes with measurements (known operators).
        forest: trees of the log-correction (``None``: no correction).
        q_generic: 90% quantile of the generic roofline's |log error| on the measured layers.
        n: measurements per class.
        shrink: weight of the forest's log-correction (0, 0.5 or 1), chosen by cross-validation.
        features: version of the layer features and work (:data:`FEATURES_VERSION`; a saved
            model without one is version 1 and predicts with version 1's).
        precisions: precisions of the measured layers (``fp32``, ...); ``None``: not recorded.
            A network in another precision is priced from these layers' work and its own
            bytes, which says nothing of what the device's kernels for it cost.
        threads: intra-op threads the layers were measured with (:func:`onednn_conv`'s rule
            depends on it).
        onednn_mb: how much more peak memory a process holds once it has run a convolution
            through oneDNN (its runtime, kernels and scratchpad), from the measured layers:
            the median of small oneDNN convolutions less that of small native ones (MB);
            ``None``: not measured. A network none of whose convolutions runs there is priced
            that much lower (:func:`_mem_shift`).
        fallback: the measured fallback of the ops it has no measurements of
            (:func:`fit_fallback`: per class, a roofline and its leave-one-op-out error);
            ``None``: none (such ops take :attr:`generic` and :attr:`q_generic`).

    """

    rooflines: dict[str, list[float]]
    generic: list[float]
    classes: list[str]
    forest: Any = None
    q_generic: float = 1.0
    n: dict[str, int] = field(default_factory=dict)
    shrink: float = 1.0
    features: int = FEATURES_VERSION
    precisions: list[str] | None = None
    threads: int = 1
    onednn_mb: float | None = None
    fallback: dict[str, dict[str, Any]] | None = None

    @classmethod
    def fit(
        cls,
        layers: pd.DataFrame,
        y_ms: np.ndarray,
        *,
        min_class: int = 6,
        trees: int = 200,
        seed: int = 0,
        threads: int = 1,
        features: int | None = None,
        memory_mb: np.ndarray | None = None,
    ) -> "LayerModel":
        """Fit on measured layers.

        ``se`` rows (composites) and rows without a positive latency are left out.

        Args:
            layers: layer rows (:data:`carb.families.layers.LAYER_COLUMNS`).
            y_ms: their measured latency. Units: ms.
            min_class: fewest measurements for a class's own roofline (fewer: a pooled one).
            trees: trees of the correction forest.
            seed: seeds the forest and the cross-validation folds.
            threads: the intra-op threads the layers were measured with.
            features: the feature version (default :data:`FEATURES_VERSION`; older ones for
                comparisons).
            memory_mb: the layers' measured peak memory (MB), for :attr:`onednn_mb`.

        Returns:
            The fitted layer model.

        Raises:
            ModelError: an unknown feature version, or fewer than 10 measured layers.

        """
        version = FEATURES_VERSION if features is None else int(features)
        if version not in _FEATURES_BY_VERSION:
            raise ModelError(
                f"layer model: unknown feature version {version} (one of {', '.join(map(str, _FEATURES_BY_VERSION))})"
            )
        from carb.model import ArrayForest

        keep = (layers["op"] != "se").to_numpy() & np.isfinite(y_ms) & (y_ms > 0)
        layers, y = layers[keep].reset_index(drop=True), np.asarray(y_ms, float)[keep]
        onednn_mb = None if memory_mb is None else _onednn_mb(layers, np.asarray(memory_mb, float)[keep], threads)
        precisions = _precisions(layers)
        if len(y) < 10:
            raise ModelError(f"layer model: {len(y)} measured layers; need at least 10")
        cls_ = op_class(layers)
        flops = _work(layers, cls_, version)
        nbytes = layers["bytes"].to_numpy(np.float64)
        generic = _roofline(flops, nbytes, y)
        roof, counts = _class_rooflines(cls_, flops, nbytes, y, generic, min_class)
        classes = sorted(roof)
        base = np.array([_apply_roofline(roof[c], f, b) for c, f, b in zip(cls_, flops, nbytes)])
        base = np.maximum(base, 1e-6)
        q_generic = float(
            np.quantile(np.abs(np.log(np.maximum(_apply_roofline(generic, flops, nbytes), 1e-6) / y)), 0.9)
        )
        X = _x(layers, classes, version, cls_, threads)
        shrink, et = _fit_correction(X, np.log(y / base), trees, seed)
        return cls(
            rooflines=roof,
            generic=generic,
            classes=classes,
            forest=ArrayForest.from_sklearn(et) if et is not None else None,
            q_generic=q_generic,
            n=counts,
            shrink=shrink,
            features=version,
            precisions=precisions,
            threads=int(threads),
            onednn_mb=onednn_mb,
            fallback=fit_fallback(layers, y, version),
        )

    def to_doc(self) -> dict[str, Any]:
        """The model's JSON document (:mod:`carb.netmodel.io`; the forest is saved apart)."""
        return {
            "rooflines": self.rooflines,
            "generic": self.generic,
            "classes": self.classes,
            "q_generic": self.q_generic,
            "n": self.n,
            "shrink": self.shrink,
            "features": self.features,
            "precisions": self.precisions,
            "threads": self.threads,
            "onednn_mb": self.onednn_mb,
            "fallback": self.fallback,
            "forest": FOREST_FILE if self.forest is not None else None,
        }

    @classmethod
    def from_doc(cls, ly: dict[str, Any], forest: Any) -> "LayerModel":
        """The model of a document written by :meth:`to_doc`, with its loaded ``forest``."""
        return cls(
            rooflines={k: list(map(float, v)) for k, v in ly["rooflines"].items()},
            generic=list(map(float, ly["generic"])),
            classes=list(ly["classes"]),
            forest=forest,
            q_generic=float(ly["q_generic"]),
            n=dict(ly.get("n", {})),
            shrink=float(ly.get("shrink", 1.0)),
            # a document without the key holds a version 1 model
            features=int(ly.get("features", 1)),
            precisions=None if ly.get("precisions") is None else [str(p) for p in ly["precisions"]],
            threads=int(ly.get("threads", 1)),
            onednn_mb=None if ly.get("onednn_mb") is None else float(ly["onednn_mb"]),
            fallback=_fallback_doc(ly.get("fallback")),
        )

    def known(self, layers: pd.DataFrame, cls: np.ndarray | None = None) -> np.ndarray:
        """Which rows the model knows: a measured class, or a view (no cost of its own).

        ``cls``: the rows' :func:`op_class`, if already computed.
        """
        c = op_class(layers) if cls is None else cls
        return np.isin(c, self.classes) | (c == "view")

    def predict(
        self, layers: pd.DataFrame, cls: np.ndarray | None = None, onednn: np.ndarray | None = None
    ) -> np.ndarray:
        """Latency of each layer row. Units: ms.

        Views: 0; unknown operators: their fallback class's roofline (:attr:`fallback`; never 0
        unless the op moves no byte and does no FLOP). ``cls`` and ``onednn``: the rows'
        :func:`op_class` and :func:`onednn_conv`, if already computed.
        """
        if not len(layers):
            return np.zeros(0)
        c = op_class(layers) if cls is None else cls
        flops = _work(layers, c, self.features)
        nbytes = layers["bytes"].to_numpy(np.float64)
        out = np.zeros(len(layers))
        known = np.isin(c, self.classes)
        for k in set(c[known]):
            m = c == k
            out[m] = _apply_roofline(self.rooflines[k], flops[m], nbytes[m])
        out = np.maximum(out, 1e-6)
        if self.forest is not None and known.any():
            on = None if onednn is None else onednn[known]
            out[known] *= np.exp(
                self.shrink
                * self.forest.predict(_x(layers[known], self.classes, self.features, c[known], self.threads, on))
            )
        unk = ~known & (c != "view")
        if unk.any():
            keys = self._fallback_keys(layers[unk], c[unk])
            coef = np.array([self._fallback(k)[0] for k in keys], np.float64).reshape(-1, 3)
            pred = coef[:, 0] + coef[:, 1] * flops[unk] + coef[:, 2] * nbytes[unk]
            out[unk] = np.maximum(pred, 1e-6)
        out[c == "view"] = 0.0
        return out

    def _fallback(self, name: str) -> tuple[list[float], float]:
        """The roofline and 90% log error of a fallback class (without a fallback: the generic roofline's)."""
        fb = self.fallback or {}
        got = fb.get(name) or fb.get(GENERIC)
        if got is None:
            return self.generic, self.q_generic
        return got["coef"], float(got["q"])

    def fallback_q(self, layers: pd.DataFrame, cls: np.ndarray | None = None) -> np.ndarray:
        """The 90% log error of each row's price: its fallback class's for an unknown op, 0 for a known op or a view.

        ``cls``: the rows' :func:`op_class`, if already computed.
        """
        c = op_class(layers) if cls is None else cls
        out = np.zeros(len(layers))
        unk = ~(np.isin(c, self.classes) | (c == "view"))
        if unk.any():
            out[unk] = [self._fallback(k)[1] for k in self._fallback_keys(layers[unk], c[unk])]
        return out

    def _fallback_keys(self, layers: pd.DataFrame, cls: np.ndarray) -> list[str]:
        """Each unknown row's fallback: its op's own measured roofline where the fallback has one, else its class's."""
        fb = self.fallback or {}
        own = [OWN + u for u in fallback_unit(layers, cls)]
        return [k if k in fb else c for k, c in zip(own, fallback_class(layers, cls))]


def _fallback_doc(doc: Any) -> dict[str, dict[str, Any]] | None:
    """A saved fallback (:func:`fit_fallback`'s shape) with its numbers as floats; ``None`` where none was saved."""
    if not isinstance(doc, dict):
        return None
    return {
        str(k): {
            "coef": [float(c) for c in v["coef"]],
            "q": float(v["q"]),
            "n": int(v.get("n", 0)),
            "ops": [str(o) for o in v.get("ops", [])],
        }
        for k, v in doc.items()
    }
