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

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.netmodel.fallback import (  # noqa: F401  (the fallback's names, read from here too)
    _FALLBACK_OF,
    FALLBACK_CLASSES,
    GENERIC,
    OP_DATASETS,
    OWN,
    _fallback_doc,
    dataset_fallback,
    fallback_class,
    fallback_unit,
    fit_fallback,
    fit_op_rooflines,
)
from carb.netmodel.io import FOREST_FILE, ModelError
from carb.netmodel.roofline import (  # noqa: F401  (the roofline's names, read from here too)
    _MEMORY_BOUND,
    FEATURES_VERSION,
    _apply_roofline,
    _roofline,
    _work,
    op_class,
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
_FEATURES_V3 = _FEATURES_V2 + ["onednn"]
#: Layer features of version 4: version 3's, ``onednn`` read for 1-D, 3-D and transposed
#: convolutions too (``onednn_conv(..., all_ranks=True)``): a 3-D convolution on few
#: frames and channels runs ATen's ``slow_conv3d``, the same layer on more runs oneDNN.
_FEATURES_V4 = list(_FEATURES_V3)
#: Layer features of version 5: version 4's, with a softmax's work its rows
#: (:func:`carb.netmodel.roofline.softmax_rows`), not its FLOPs, plus the output channels per
#: group ``l_cout_g`` (version 4 reads the input's only) and a 3-D layer's depth and kernel
#: depth ``l_d``, ``l_kd`` (version 4 reads height and width only).
_FEATURES = _FEATURES_V4 + ["l_cout_g", "l_d", "l_kd"]
#: The feature names of each version (a saved model predicts with its own version's).
_FEATURES_BY_VERSION = {1: _FEATURES_V1, 2: _FEATURES_V2, 3: _FEATURES_V3, 4: _FEATURES_V4, 5: _FEATURES}


#: The convolution ops of every rank that ATen's ``ConvParams::use_mkldnn`` decides for
#: (1-D ones run as 2-D ones of height 1).
_CONV_OPS = ("conv", "conv1d", "conv3d", "convtranspose")


def onednn_conv(layers: pd.DataFrame, threads: int = 1, all_ranks: bool = False) -> np.ndarray:
    """Whether PyTorch's CPU dispatch runs each layer row through oneDNN, not its own im2col + GEMM.

    Only fp32 convolution rows can be ``True``. The rule of ATen's
    ``ConvParams::use_mkldnn`` for fp32 CPU tensors: oneDNN unless the convolution is a 1x1,
    unstrided, undilated one on fewer than 16 images on one thread, or is dense, has a kernel
    of at most 3 on a side, one image and at most 20,480 input elements (the input's first
    four dimensions: images, channels, then frames and height for a 3-D one).
    ``tests/netmodel/test_netmodel.py`` checks it against the profiler of the installed torch.

    Args:
        layers: layer rows (:data:`carb.graph.table.COLUMNS`).
        threads: the device's intra-op threads.
        all_ranks: also 1-D, 3-D and transposed convolutions; else 2-D ones alone (the
            ``onednn`` latency feature the layer models are fitted with).

    Returns:
        One bool per row.

    """
    if not len(layers):
        return np.zeros(0, bool)
    op = layers["op"].astype(str).to_numpy()
    # fp32: 4 bytes per element (the layer family's closed-form rows carry no dtype column)
    conv = np.isin(op, _CONV_OPS if all_ranks else ("conv",)) & (layers["bytes_per_element"].to_numpy(np.int64) == 4)
    b = layers["batch"].to_numpy(np.int64)
    kh = layers["kernel"].to_numpy(np.int64)
    kw = layers["kernel_w"].to_numpy(np.int64) if "kernel_w" in layers else kh
    one = (kh == 1) & (kw == 1)
    strided = layers["stride"].to_numpy(np.int64) > 1
    dilated = layers["dilation"].to_numpy(np.int64) > 1 if "dilation" in layers else np.zeros(len(b), bool)
    third = layers["w"].to_numpy(np.int64)
    if all_ranks and "d" in layers:  # N, C, D, H, W: ATen counts N * C * D * H
        third = np.where(op == "conv3d", layers["d"].fillna(1).to_numpy(np.int64), third)
    numel = b * layers["cin"].to_numpy(np.int64) * layers["h"].to_numpy(np.int64) * third
    first = strided | dilated | (b >= 16) | ~one | (threads > 1)
    second = (layers["groups"].to_numpy(np.int64) > 1) | ((kh > 3) & (kw > 3)) | (b > 1) | (numel > 20480)
    return conv & first & second


def native_conv_columns(layers: pd.DataFrame, threads: int = 1, onednn: np.ndarray | None = None) -> np.ndarray:
    """The working buffer (B) of each convolution PyTorch runs through its own kernels, else 0.

    A convolution of any rank that does not run through oneDNN (:func:`onednn_conv`)
    unfolds its input into a column matrix before its GEMM (``slow_conv2d``: in-channels x
    kernel area rows by output positions; ``slow_conv3d`` likewise with the kernel's depth
    and the output's frames; ``slow_conv_transpose2d``: out-channels x kernel area by input
    positions), allocated and freed within the call, unless it is a 1x1 unstrided unpadded
    one. The rule leaves such a path only to one image, so the buffer is one image's.
    Measured on this project's machines: a lone 3x3x3 convolution's peak over its ready
    inputs is its output plus this buffer (16 to 64 channels, 16 frames of 56 px: 99.5 MB
    against 12.8 + 86.7).

    Args:
        layers: layer rows (:data:`carb.graph.table.COLUMNS`).
        threads: the device's intra-op threads.
        onednn: the rows' ``onednn_conv(layers, threads, all_ranks=True)``, if already computed.

    Returns:
        Bytes per row (fp32).

    """
    if not len(layers):
        return np.zeros(0)
    op = layers["op"].astype(str).to_numpy()
    native = np.isin(op, _CONV_OPS) & (layers["bytes_per_element"].to_numpy(np.int64) == 4)
    native &= ~(onednn_conv(layers, threads, all_ranks=True) if onednn is None else onednn)

    def col(name: str, default: float) -> np.ndarray:
        if name not in layers:
            return np.full(len(layers), default)
        return pd.to_numeric(layers[name], errors="coerce").fillna(default).to_numpy(np.float64)

    kh = col("kernel", 1.0)
    kw = col("kernel_w", np.nan)
    kw = np.where(np.isnan(kw), kh, kw)
    kd = np.maximum(col("kernel_d", 1.0), 1.0)
    unfolds = ~((kh == 1) & (kw == 1) & (kd == 1) & (col("stride", 1.0) == 1) & (col("padding", 0.0) == 0))
    area = kh * kw * kd
    groups = np.maximum(col("groups", 1.0), 1.0)
    forward = col("cin", 0.0) / groups * area * col("ho", 0.0) * col("wo", 0.0) * np.maximum(col("do", 1.0), 1.0)
    transposed = col("cout", 0.0) / groups * area * col("h", 0.0) * col("w", 0.0)
    elems = np.where(op == "convtranspose", transposed, forward)
    return np.where(native & unfolds, elems * 4.0, 0.0)


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
        on = onednn_conv(layers, threads, all_ranks=version >= 4) if onednn is None else onednn
        cols.append(on.astype(np.float64))
    if version >= 5:
        cout_g = layers["cout"].to_numpy(np.float64) / np.maximum(layers["groups"].to_numpy(np.float64), 1)
        cols += [np.log2(cout_g + 1), l2("d"), l2("kernel_d")]
    cols += [(cls == c).astype(np.float64) for c in classes]
    return np.column_stack(cols)


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


def _fit_correction(X: np.ndarray, resid: np.ndarray, trees: int, seed: int) -> tuple[float, Any, np.ndarray]:
    """Return the forest's weight, the forest (``None`` at weight 0) and each row's held-out |log error|.

    The forest log-corrects the rooflines; the held-out error is each row's at the chosen weight.
    The weight is the one of :data:`SHRINKS` with the least 3-fold cross-validated
    |log error|: on noisy measurements the rooflines alone can win.
    """
    from sklearn.ensemble import ExtraTreesRegressor

    def forest(rows: np.ndarray) -> Any:
        et = ExtraTreesRegressor(n_estimators=trees, min_samples_leaf=3, max_features=0.6, random_state=seed, n_jobs=1)
        return et.fit(X[rows], resid[rows])

    fold = np.random.default_rng(seed).integers(0, 3, len(resid))
    errs = {s: 0.0 for s in SHRINKS}
    held_out = np.zeros(len(resid))  # the forest's held-out correction of each row
    for k in range(3):
        tr, te = fold != k, fold == k
        if tr.sum() < 5 or not te.any():
            continue
        f = forest(tr).predict(X[te])
        held_out[te] = f
        for s in SHRINKS:
            errs[s] += float(np.abs(resid[te] - s * f).sum())
    shrink = min(SHRINKS, key=lambda s: (errs[s], s))
    return shrink, (forest(np.ones(len(resid), bool)) if shrink > 0 else None), np.abs(resid - shrink * held_out)


#: How much lower the own rooflines' held-out error must be for a class to leave the forest (a tie keeps it).
_OWN_MARGIN = 0.9
#: The fewest layers an op's own roofline is fitted on (:func:`fit_op_rooflines`' default).
_OWN_MIN_LAYERS = 4


def choose_own_ops(
    layers: pd.DataFrame, y: np.ndarray, cls: np.ndarray, forest_err: np.ndarray, version: int
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """The known classes better priced by their own ops' rooflines than by the class roofline and forest.

    A class whose every op (:func:`fallback_unit`) has a roofline of its own (:func:`fit_op_rooflines`)
    and whose layers' median held-out |log error| under those rooflines (each layer left out of its op's
    fit) is below :data:`_OWN_MARGIN` times the median held-out |log error| of the class roofline times
    the forest (``forest_err``, 3-fold) is priced by its ops' rooflines. A pooling, for instance,
    reads a window per output: a roofline per op (max, average) prices it from its window reads and
    bytes, where the forest, fitted mostly on convolutions, adds error.

    Returns:
        ``class -> {"roofline": median |log error|, "forest": median |log error|, "n": layers}`` for the
        chosen classes, and the chosen ops' rooflines (keys :data:`OWN` and the op).
    """
    unit = fallback_unit(layers, cls)
    layers_of = pd.Series(unit).value_counts()
    held = rooflines_held_out(layers, y, version)  # each layer left out of its own op's roofline, once
    chosen: dict[str, dict[str, float]] = {}
    units: set[str] = set()
    for c in sorted(set(cls)):
        m = cls == c
        ops = set(unit[m])
        if any(layers_of[u] < _OWN_MIN_LAYERS for u in ops):
            continue
        ours, theirs = float(np.median(held[m])), float(np.median(forest_err[m]))
        if ours < _OWN_MARGIN * theirs:
            chosen[str(c)] = {"roofline": ours, "forest": theirs, "n": int(m.sum())}
            units |= ops
    return chosen, (fit_op_rooflines(layers, y, version, min_layers=_OWN_MIN_LAYERS, units=units) if units else {})


def rooflines_held_out(layers: pd.DataFrame, y: np.ndarray, version: int) -> np.ndarray:
    """Each layer's |log error| priced by its op's roofline (:func:`fallback_unit`) fitted on the op's other layers."""
    cls = op_class(layers)
    unit = fallback_unit(layers, cls)
    work, nbytes = _work(layers, cls, version), layers["bytes"].to_numpy(np.float64)
    out = np.full(len(y), np.nan)
    for u in set(unit):
        idx = np.flatnonzero(unit == u)
        for i in idx:
            rest = idx[idx != i]
            if len(rest) < 3:
                continue
            coef = _roofline(work[rest], nbytes[rest], y[rest])
            out[i] = abs(np.log(max(float(_apply_roofline(coef, work[i : i + 1], nbytes[i : i + 1])[0]), 1e-6) / y[i]))
    return out


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
        own_ops: the measured classes priced by their own ops' rooflines (``op:<op>`` in
            :attr:`fallback`) and not by the class roofline and forest, because their held-out
            error is lower (:func:`choose_own_ops`): class -> ``{"roofline", "forest"}`` (median
            held-out |log error| of each) and ``n``. Still known: measured.
        op_scale: per op (:func:`carb.netmodel.fallback.fallback_unit`), a factor on its layers' price
            measured on another machine (:func:`carb.netmodel.calibrate.fit_op_scale`): how much faster or
            slower that op runs there than the model's convolutions; empty: none.

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
    own_ops: dict[str, dict[str, float]] = field(default_factory=dict)
    op_scale: dict[str, float] = field(default_factory=dict)

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
        shrink, et, forest_err = _fit_correction(X, np.log(y / base), trees, seed)
        own_ops, own_rooflines = choose_own_ops(layers, y, cls_, forest_err, version)
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
            fallback=fit_fallback(layers, y, version) | own_rooflines,
            own_ops=own_ops,
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
            "own_ops": self.own_ops,
            **({"op_scale": self.op_scale} if self.op_scale else {}),
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
            own_ops={
                str(k): {"roofline": float(v["roofline"]), "forest": float(v["forest"]), "n": int(v["n"])}
                for k, v in (ly.get("own_ops") or {}).items()
            },
            op_scale={str(k): float(v) for k, v in (ly.get("op_scale") or {}).items()},
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
        own = self._own_rows(layers, c)
        corrected = known & ~own  # rows priced by their op's own roofline take no forest correction
        if self.forest is not None and corrected.any():
            on = None if onednn is None else onednn[corrected]
            x = _x(layers[corrected], self.classes, self.features, c[corrected], self.threads, on)
            out[corrected] *= np.exp(self.shrink * self.forest.predict(x))
        if own.any():
            keys = [OWN + u for u in fallback_unit(layers[own], c[own])]
            coef = np.array([self.fallback[k]["coef"] for k in keys], np.float64).reshape(-1, 3)
            out[own] = np.maximum(coef[:, 0] + coef[:, 1] * flops[own] + coef[:, 2] * nbytes[own], 1e-6)
        unk = ~known & (c != "view")
        if unk.any():
            keys = self._fallback_keys(layers[unk], c[unk])
            coef = np.array([self._fallback(k)[0] for k in keys], np.float64).reshape(-1, 3)
            pred = coef[:, 0] + coef[:, 1] * flops[unk] + coef[:, 2] * nbytes[unk]
            out[unk] = np.maximum(pred, 1e-6)
        out[c == "view"] = 0.0
        if self.op_scale:
            unit = fallback_unit(layers, c)
            out *= np.array([self.op_scale.get(str(u), 1.0) for u in unit], np.float64)
        return out

    def _own_rows(self, layers: pd.DataFrame, cls: np.ndarray) -> np.ndarray:
        """The rows priced by their op's own roofline (:attr:`own_ops`, where :attr:`fallback` holds it)."""
        own = np.isin(cls, list(self.own_ops))
        if own.any():
            fb = self.fallback or {}
            has = np.array([OWN + u in fb for u in fallback_unit(layers[own], cls[own])])
            own[np.flatnonzero(own)[~has]] = False
        return own

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
