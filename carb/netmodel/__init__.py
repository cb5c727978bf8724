"""Any network from its layers: per-operator cost models + a network model, per device.

How a prediction is made (:func:`predict_module`):

1. :func:`carb.graph.capture` turns the module into a table of layers (meta device).
2. **Layer model** (:class:`LayerModel`): each layer's latency from its operator class
   (:func:`op_class`: dense / grouped / depthwise convolution, linear, matmul, BN, each
   activation, pooling, add, broadcast multiply, concat, copy) as a roofline
   ``t = a0 + a1 * flops + a2 * bytes`` (pooling: its window reads as flops) fitted per class
   by non-negative least squares on relative error, times a correction ``exp(f(x))`` from a
   forest of regression trees on the layer's log-shapes (kernel, stride, groups, channels,
   map size, batch, working set, arithmetic intensity, ...), fitted on the
   measured ``layers`` campaign, weighted 0, 0.5 or 1 as cross-validation says. Views (flatten, reshape, dropout in eval) cost nothing of
   their own. An operator the model has no measurements for is **never free**: it is priced
   by the generic roofline fitted on every measured layer, listed in ``unknown``, and its
   share widens the interval.
3. **Network model**: ``latency = s * sum(layer latencies) + o * nodes + c`` (NNLS on
   relative error over whole-network measurements; the overheads ``o`` and ``c`` shrunk
   towards 0, so a few networks move them only as far as they agree): ``o`` is the per-node
   dispatch overhead (module calls, views) and ``c`` the per-forward one. Peak memory is a static liveness
   simulation (weights + input + the peak of live activations, :mod:`carb.graph`) corrected
   by a learned linear term (NNLS on ``model_bytes``, ``input_bytes``, ``peak_live_bytes``,
   the largest layer's weights, a constant).
4. **Calibration** to a device (or to the machine's speed of the day) from K whole-network
   measurements (:func:`calibrate_on`, ``carb calibrate --model <network model>``): by
   default one device factor per target, or none where it does not predict the K better
   left out (``factor``); :func:`carb.transfer.fit_log_map`'s full log-space map per target
   (``log``: also a slope and a batch term); or the network terms refitted on the K
   (``refit``). The K are chosen spread over the predicted latency and the input sizes
   (:func:`choose_networks`). Leave-one-out intervals at the finite-sample conformal level.

Intervals are 90% by default: the quantile of the network model's leave-one-family-out
log-residuals on its training networks (or, once calibrated, of the map's leave-one-out
residuals), widened by the unknown operators' share.

A model is saved as a directory (:meth:`NetModel.save`): ``netmodel.json`` (coefficients,
classes, provenance) and ``layer_forest.npz`` (trees as arrays, :class:`carb.model._forest.ArrayForest`,
loaded with ``allow_pickle=False``): loading runs no code from the files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from carb.graph import CaptureError, LayerTable

__all__ = ["NetModel", "LayerModel", "Prediction", "predict_module", "predict_modules", "predict_table", "predict_tables", "op_class", "network_row", "fit_netmodel",
           "load", "resolve", "ModelError", "FORMAT", "SHIPPED", "DEFAULT_MODEL"]

FORMAT = "carb-netmodel/1"
#: Network models shipped with carb: name -> directory under ``carb/data``.
SHIPPED = {"layers-cpu-avx2-1t": "layers-cpu-avx2-1t.netmodel", "layers-cpu-1t": "layers-cpu-1t.netmodel"}
#: The model ``carb predict --module`` uses when none is given.
DEFAULT_MODEL = "layers-cpu-avx2-1t"
MB = 1e6


class ModelError(ValueError):
    """A network model cannot be fitted, loaded or applied; one line."""


# --------------------------------------------------------------------------- layers

_ACT_CLASSES = ("relu", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh", "softmax", "bn", "layernorm")
#: Classes pooled for the roofline when a class has few measurements.
_MEMORY_BOUND = ("relu", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh", "softmax", "bn", "layernorm",
                 "pool", "gap", "add", "mul", "cat", "copy")
#: Weights of the forest's correction that :meth:`LayerModel.fit` chooses among.
SHRINKS = (0.0, 0.5, 1.0)
_FEATURES_V1 = ["l_flops", "l_in", "l_out", "l_w", "l_batch", "l_cin", "l_cout", "l_hw", "l_howo", "kernel", "stride",
                "l_groups", "l_cin_g", "n_inputs", "broadcast"]
#: Layer features of the current version (2): version 1's, ``l_flops`` counting a pooling
#: window's reads as work (:func:`_work`), plus the working set ``l_ws = log2(in + out +
#: weight bytes)`` and the arithmetic intensity ``l_ai = log2(work) - log2(working set)``.
#: Chosen by leave-one-family-out on the quiet zoo (benchmarks/RESULTS.md, issue 15).
_FEATURES_V2 = _FEATURES_V1 + ["l_ws", "l_ai"]
#: Layer features of version 3: version 2's plus ``onednn``, whether PyTorch runs a dense or
#: grouped fp32 convolution through oneDNN or its own im2col + GEMM (:func:`onednn_conv`).
#: The two paths differ most on narrow layers: a 4-channel 3x3 convolution of a 32 px map
#: took 0.03 ms at batch 1 (native) and 0.11-0.12 ms at batch 2 (oneDNN) on our AVX2 VMs
#: (benchmarks/RESULTS.md, issue 15, narrow networks); no shape feature says which path runs.
_FEATURES = _FEATURES_V2 + ["onednn"]
#: Version of the layer features :meth:`LayerModel.fit` uses; a saved model keeps its own.
FEATURES_VERSION = 3
#: The feature names of each version (a saved model predicts with its own version's).
_FEATURES_BY_VERSION = {1: _FEATURES_V1, 2: _FEATURES_V2, 3: _FEATURES}


def op_class(layers: pd.DataFrame) -> np.ndarray:
    """Cost class of each layer row (``op`` and shapes): ``conv``, ``conv_grouped``,
    ``conv_dw`` (groups == input channels), ``relu`` (ReLU and ReLU6), ``pool`` (max and
    average), ``conv`` too for a linear layer over several rows per image (a pointwise
    convolution's GEMM), the other ops by name; ``view`` costs nothing of its own."""
    op = layers["op"].astype(str).to_numpy()
    out = op.astype(object).copy()
    g = layers["groups"].to_numpy()
    cin = layers["cin"].to_numpy()
    conv = op == "conv"
    out[conv & (g > 1) & (g == cin)] = "conv_dw"
    out[conv & (g > 1) & (g != cin)] = "conv_grouped"
    out[op == "relu6"] = "relu"
    out[(op == "maxpool") | (op == "avgpool")] = "pool"
    # a linear layer over many rows per image (tokens, or ConvNeXt's channels-last MLP) is
    # the GEMM of a pointwise convolution on an H x W map: priced as one (the measured
    # linear layers are classifier heads, one row per image, whose GEMV-like speed
    # over-priced such layers 2-3x; benchmarks/RESULTS.md, issue 15, public zoo)
    rows = layers["h"].to_numpy() * layers["w"].to_numpy()
    out[(op == "linear") & (rows > 1)] = "conv"
    return out


def onednn_conv(layers: pd.DataFrame, threads: int = 1) -> np.ndarray:
    """Whether PyTorch's CPU dispatch runs each layer row through oneDNN (``True``) or its
    native im2col + GEMM (``False``): convolution rows in fp32 only (others ``False``).

    The rule of ATen's ``ConvParams::use_mkldnn`` for fp32 CPU tensors: oneDNN unless the
    convolution is a 1x1, unstrided, undilated one on fewer than 16 images on one thread, or
    is dense, has a kernel of at most 3 on a side, one image and at most 20,480 input
    elements. ``tests/test_netmodel.py`` checks it against the profiler of the installed torch.
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
    """The peak memory (MB) a process gains by running convolutions through oneDNN: median
    measured memory of small oneDNN convolutions less that of small native ones (each a fresh
    worker running one layer); ``None`` with fewer than 5 of either or a negative difference.
    On our AVX2 VM: 21.3 against 13.9 MB (benchmarks/RESULTS.md, issue 15)."""
    ws = (layers["in_bytes"] + layers["out_bytes"] + layers["weight_bytes"]).to_numpy(np.float64)
    ok = (layers["op"].astype(str).to_numpy() == "conv") & (ws < _SMALL_WS_BYTES) & np.isfinite(memory_mb)
    on = onednn_conv(layers, threads)
    a, b = memory_mb[ok & on], memory_mb[ok & ~on]
    if len(a) < 5 or len(b) < 5:
        return None
    d = float(np.median(a) - np.median(b))
    return d if d > 0 else None


def _work(layers: pd.DataFrame, cls: np.ndarray, version: int = FEATURES_VERSION) -> np.ndarray:
    """Work of each layer row for the rooflines and features. Units: FLOP (pooling: window
    reads). ``flops`` as captured, except (version >= 2) pooling, which counts no FLOP but
    reads ``kernel**2`` inputs per output (measured: a 3x3 stride-1 max pool of 256x112x112
    took 98 ms, a 2x2 stride-2 one of the same input 19 ms; bytes alone priced both alike)."""
    f = layers["flops"].to_numpy(np.float64)
    if version < 2:
        return f
    pool = cls == "pool"
    if pool.any():
        f = f.copy()
        out_elems = layers["out_bytes"].to_numpy(np.float64)[pool] / np.maximum(
            layers["bytes_per_element"].to_numpy(np.float64)[pool], 1)
        f[pool] = out_elems * layers["kernel"].to_numpy(np.float64)[pool] ** 2
    return f


def _x(layers: pd.DataFrame, classes: Sequence[str], version: int = FEATURES_VERSION,
       cls: np.ndarray | None = None, threads: int = 1, onednn: np.ndarray | None = None) -> np.ndarray:
    """The forest's features of layer rows (:data:`_FEATURES`, or those of the model's older
    version), then one indicator per class; ``threads``: the device's intra-op threads;
    ``onednn``: the rows' :func:`onednn_conv`, if already computed."""
    nfeat = len(_FEATURES_BY_VERSION.get(version, _FEATURES))
    if not len(layers):
        return np.zeros((0, nfeat + len(classes)))
    cls = op_class(layers) if cls is None else cls
    l2 = lambda c: np.log2(np.maximum(layers[c].to_numpy(dtype=np.float64), 0) + 1)  # noqa: E731
    cin_g = layers["cin"].to_numpy(np.float64) / np.maximum(layers["groups"].to_numpy(np.float64), 1)
    work = _work(layers, cls, version)
    cols = [np.log2(np.maximum(work, 0) + 1), l2("in_bytes"), l2("out_bytes"), l2("weight_bytes"), l2("batch"),
            l2("cin"), l2("cout"),
            np.log2(layers["h"].to_numpy(np.float64) * layers["w"].to_numpy(np.float64) + 1),
            np.log2(layers["ho"].to_numpy(np.float64) * layers["wo"].to_numpy(np.float64) + 1),
            layers["kernel"].to_numpy(np.float64), layers["stride"].to_numpy(np.float64), l2("groups"),
            np.log2(cin_g + 1), layers["n_inputs"].to_numpy(np.float64),
            layers["broadcast"].to_numpy(np.float64)]
    if version >= 2:
        ws = np.log2(sum(np.maximum(layers[c].to_numpy(np.float64), 0) for c in ("in_bytes", "out_bytes",
                                                                                   "weight_bytes")) + 1)
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
    """Precisions of measured layer rows: their ``precision`` column, or fp32 when every row
    has 4-byte elements; ``None`` when it cannot be told (2-byte rows: fp16 or bf16)."""
    if "precision" in layers.columns:
        return sorted(set(layers["precision"].astype(str)))
    if "bytes_per_element" in layers.columns and len(layers) and (layers["bytes_per_element"] == 4).all():
        return ["fp32"]
    return None


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
        features: version of the layer features and work (:data:`FEATURES_VERSION`; a model
            saved before version 2 loads as 1 and predicts as it did).
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

    @classmethod
    def fit(cls, layers: pd.DataFrame, y_ms: np.ndarray, *, min_class: int = 6, trees: int = 200,
            seed: int = 0, threads: int = 1, features: int | None = None,
            memory_mb: np.ndarray | None = None) -> "LayerModel":
        """Fit on a table of layer rows (:data:`carb.families.layers.LAYER_COLUMNS`) and their
        measured latency (ms), measured with ``threads`` intra-op threads. ``se`` rows
        (composites) are left out. ``features``: the feature version (default
        :data:`FEATURES_VERSION`; older ones for comparisons). ``memory_mb``: the layers'
        measured peak memory (MB), for :attr:`onednn_mb`."""
        version = FEATURES_VERSION if features is None else int(features)
        if version not in _FEATURES_BY_VERSION:
            raise ModelError(f"layer model: unknown feature version {version} "
                             f"(one of {', '.join(map(str, _FEATURES_BY_VERSION))})")
        from sklearn.ensemble import ExtraTreesRegressor

        from carb.model._forest import ArrayForest

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
        mem = np.isin(cls_, _MEMORY_BOUND)
        pooled = _roofline(flops[mem], nbytes[mem], y[mem]) if mem.sum() >= 3 else generic
        roof: dict[str, list[float]] = {}
        counts: dict[str, int] = {}
        for c in sorted(set(cls_)):
            m = cls_ == c
            counts[c] = int(m.sum())
            roof[c] = _roofline(flops[m], nbytes[m], y[m]) if m.sum() >= min_class else \
                (pooled if c in _MEMORY_BOUND else generic)
        classes = sorted(roof)
        base = np.array([_apply_roofline(roof[c], f, b) for c, f, b in zip(cls_, flops, nbytes)])
        base = np.maximum(base, 1e-6)
        q_generic = float(np.quantile(np.abs(np.log(np.maximum(_apply_roofline(generic, flops, nbytes), 1e-6) / y)),
                                      0.9))
        X = _x(layers, classes, version, cls_, threads)
        resid = np.log(y / base)

        def forest(rows: np.ndarray) -> Any:
            et = ExtraTreesRegressor(n_estimators=trees, min_samples_leaf=3, max_features=0.6, random_state=seed,
                                     n_jobs=1)
            return et.fit(X[rows], resid[rows])

        # how much of the forest's correction to trust: chosen by 3-fold cross-validation
        # (mean |log error|); on noisy measurements the rooflines alone can win
        fold = np.random.default_rng(seed).integers(0, 3, len(y))
        errs = {s: 0.0 for s in SHRINKS}
        for k in range(3):
            tr, te = fold != k, fold == k
            if tr.sum() < 5 or not te.any():
                continue
            f = forest(tr).predict(X[te])
            for s in SHRINKS:
                errs[s] += float(np.abs(resid[te] - s * f).sum())
        shrink = min(SHRINKS, key=lambda s: (errs[s], s))
        et = forest(np.ones(len(y), bool)) if shrink > 0 else None
        return cls(rooflines=roof, generic=generic, classes=classes,
                   forest=ArrayForest.from_sklearn(et) if et is not None else None,
                   q_generic=q_generic, n=counts, shrink=shrink, features=version, precisions=precisions,
                   threads=int(threads), onednn_mb=onednn_mb)

    def known(self, layers: pd.DataFrame, cls: np.ndarray | None = None) -> np.ndarray:
        """Which rows the model knows: a measured class, or a view (no cost of its own).
        ``cls``: the rows' :func:`op_class`, if already computed."""
        c = op_class(layers) if cls is None else cls
        return np.isin(c, self.classes) | (c == "view")

    def predict(self, layers: pd.DataFrame, cls: np.ndarray | None = None,
                onednn: np.ndarray | None = None) -> np.ndarray:
        """Latency of each layer row. Units: ms. Views: 0; unknown operators: the generic
        roofline (never 0 unless the op moves no byte and does no FLOP). ``cls`` and
        ``onednn``: the rows' :func:`op_class` and :func:`onednn_conv`, if already computed."""
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
            out[known] *= np.exp(self.shrink * self.forest.predict(_x(layers[known], self.classes, self.features,
                                                                       c[known], self.threads, on)))
        unk = ~known & (c != "view")
        out[unk] = np.maximum(_apply_roofline(self.generic, flops[unk], nbytes[unk]), 1e-6)
        out[c == "view"] = 0.0
        return out


# --------------------------------------------------------------------------- networks

#: Network-level columns :func:`network_row` gives.
NETWORK_COLUMNS = ["layer_sum_ms", "unknown_ms", "nodes", "flops", "model_bytes", "input_bytes", "peak_live_bytes",
                   "max_weight_bytes", "batch", "flops_known_share", "layers_known_share", "onednn_convs"]


def network_row(table: LayerTable, layer_model: LayerModel) -> tuple[dict[str, float], np.ndarray]:
    """The network-level figures of a captured network under a layer model, and the
    per-layer latencies (ms)."""
    rows, t, _, _ = _network_rows([table], layer_model)
    return {k: float(v) for k, v in rows.iloc[0].items()}, t


def _network_rows(tables: Sequence[LayerTable], layer_model: LayerModel
                  ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.DataFrame]:
    """:data:`NETWORK_COLUMNS` of each table (one row each), from one layer-model call over
    all their layers; with the per-layer latencies (ms), known flags and layer rows, all
    tables' layers one after the other."""
    n = len(tables)
    sizes = np.array([len(t.layers) for t in tables], dtype=np.int64)
    frames = [t.layers for t in tables if len(t.layers)]
    # one table: its own frame, no copy
    L = (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)) if frames else tables[0].layers
    cls = op_class(L) if len(L) else np.zeros(0, object)
    on = onednn_conv(L, layer_model.threads) if len(L) else np.zeros(0, bool)  # features and memory both read it
    t_all = layer_model.predict(L, cls, on)
    known_all = layer_model.known(L, cls)
    flops_all = L["flops"].to_numpy(np.float64) if len(L) else np.zeros(0)
    costed = (L["op"] != "view").to_numpy() if len(L) else np.zeros(0, bool)
    seg = np.repeat(np.arange(n), sizes)

    def per_net(w: np.ndarray) -> np.ndarray:
        return np.bincount(seg, weights=w, minlength=n)

    flops = per_net(flops_all)
    flops_known = per_net(np.where(known_all, flops_all, 0.0))
    n_costed = per_net(costed.astype(np.float64))
    n_known_costed = per_net((known_all & costed).astype(np.float64))
    max_w = np.zeros(n)
    np.maximum.at(max_w, seg, L["weight_bytes"].to_numpy(np.float64) if len(L) else np.zeros(0))
    rows = pd.DataFrame({
        "layer_sum_ms": per_net(t_all), "unknown_ms": per_net(np.where(known_all, 0.0, t_all)),
        "nodes": sizes.astype(np.float64), "flops": flops,
        "model_bytes": [float(t.model_bytes) for t in tables], "input_bytes": [float(t.input_bytes) for t in tables],
        "peak_live_bytes": [float(t.peak_live_bytes) for t in tables], "max_weight_bytes": max_w,
        "batch": [float(t.input_shape[0]) if t.input_shape else 1.0 for t in tables],
        "flops_known_share": np.divide(flops_known, flops, out=np.ones(n), where=flops > 0),
        "layers_known_share": np.divide(n_known_costed, n_costed, out=np.ones(n), where=n_costed > 0),
        "onednn_convs": per_net(on.astype(np.float64)),
    }, columns=NETWORK_COLUMNS)
    return rows, t_all, known_all, L


def _lat_design(rows: pd.DataFrame) -> np.ndarray:
    return np.column_stack([rows["layer_sum_ms"], rows["nodes"], np.ones(len(rows))])


def _mem_shift(rows: pd.DataFrame, layer: LayerModel) -> np.ndarray:
    """MB to take off the memory terms' prediction of each network: the layer model's
    :attr:`LayerModel.onednn_mb` where none of its convolutions runs through oneDNN (the
    terms are fitted on networks that all do, with this added to the others' measurements),
    else 0. Rows without the ``onednn_convs`` figure (older callers): 0."""
    if not layer.onednn_mb or "onednn_convs" not in rows:
        return np.zeros(len(rows))
    return np.where(rows["onednn_convs"].to_numpy(np.float64) > 0, 0.0, float(layer.onednn_mb))


def _mem_design(rows: pd.DataFrame) -> np.ndarray:
    return np.column_stack([rows["model_bytes"] / MB, rows["input_bytes"] / MB, rows["peak_live_bytes"] / MB,
                            rows["max_weight_bytes"] / MB, np.ones(len(rows))])


#: Which latency terms ``[s, o, c]`` are shrunk towards 0 (ridge, :func:`_nnls_rel`): the
#: overheads per node ``o`` and per forward ``c``; the scale ``s`` stays free, as it carries
#: the machine's speed of the day (layers and networks measured at other moments). Each layer
#: was measured with its own module call, so the plain (scaled) sum needs no overhead unless
#: the networks agree on one.
LAT_SHRUNK = (0.0, 1.0, 1.0)
#: Strength of that shrinkage: a fixed total (in networks' squared relative errors), so ten
#: networks move the overheads only as far as they agree and a hundred almost freely. Chosen
#: by leave-one-family-out on the quiet zoo run 1 (pooled K = 10 MAPE 11.5% at 3 and 10,
#: 11.6% at 30, 12.3% without), checked on run 2 (benchmarks/RESULTS.md, issue 15).
LAT_SHRINK_STRENGTH = 10.0


def _nnls_rel(A: np.ndarray, y: np.ndarray, shrunk: Sequence[float] | None = None,
              strength: float = 0.0) -> list[float]:
    """Non-negative coefficients of ``y ~ A @ coef`` on relative error; with ``shrunk``
    (a weight per column) and ``strength > 0``, the weighted coefficients are shrunk towards
    0 (ridge). Each coefficient is priced in its column's typical share of the prediction
    (``mean(A[:, j] / y)``), so the penalty has no units."""
    W = A / y[:, None]
    b = np.ones_like(y)
    if shrunk is not None and strength > 0:
        w = np.asarray(shrunk, np.float64)
        P = math.sqrt(strength) * np.diag(np.maximum(np.abs(W).mean(axis=0), 1e-30) * w)[w > 0]
        W, b = np.vstack([W, P]), np.concatenate([b, np.zeros(len(P))])
    scale = np.maximum(np.abs(W).max(axis=0), 1e-30)
    coef, _ = nnls(W / scale, b, maxiter=5000)
    return [float(c) for c in coef / scale]


@dataclass
class NetModel:
    """Layer model + network terms (+ optional calibration maps), per device.

    Attributes:
        layer: the :class:`LayerModel`.
        lat_coef: ``[s, o (ms/node), c (ms)]`` of ``latency = s * layer_sum + o * nodes + c``.
        mem_coef: memory (MB) on model, input, peak live activations, largest layer weights
            (all MB) and a constant (MB).
        q: 90% |log residual| quantiles of the network model per target (intervals).
        calibration: per target, a :class:`carb.transfer.LogMap` as a dict (or absent).
        coverage: nominal coverage of the intervals.
        device: the device the model describes (e.g. ``cpu-1t``).
        meta: provenance (data, counts, fitted when).
    """

    layer: LayerModel
    lat_coef: list[float]
    mem_coef: list[float]
    q: dict[str, float]
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    coverage: float = 0.9
    device: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    # -- prediction
    def predict_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Latency and memory of networks from their :func:`network_row` figures:
        ``latency_ms``, ``memory_mb`` and their ``_lo``/``_hi`` bounds (ms, MB)."""
        from carb.transfer import LogMap

        lat = np.maximum(_lat_design(rows) @ np.asarray(self.lat_coef), 1e-6)
        mem = np.maximum(_mem_design(rows) @ np.asarray(self.mem_coef) - _mem_shift(rows, self.layer), 1e-6)
        out = pd.DataFrame(index=rows.index)
        batch = rows["batch"].to_numpy(np.float64)
        for target, pred in (("latency_ms", lat), ("memory_mb", mem)):
            q = self.q.get(target, 0.0)
            cal = self.calibration.get(target)
            if cal:
                # outside the K's range the map holds its end ratio (models calibrated before
                # the range was kept carry their slope on, as they did)
                lm = LogMap.from_dict(cal)
                pred = lm.apply(pred, batch)
                q = max(lm.q, 0.0) if lm.n >= 5 else max(q, lm.q)
            lo, hi = pred * math.exp(-q), pred * math.exp(q)
            if target == "latency_ms":
                # unknown operators: their fallback cost is uncertain by the generic roofline's error
                u = rows["unknown_ms"].to_numpy(np.float64) * (self.lat_coef[0] or 1.0)
                qg = self.layer.q_generic
                lo = np.maximum(lo - u * (1 - math.exp(-qg)), 1e-6)
                hi = hi + u * (math.exp(qg) - 1)
            out[target], out[f"{target}_lo"], out[f"{target}_hi"] = pred, lo, hi
        return out

    def calibrate(self, rows: pd.DataFrame, measured: pd.DataFrame, max_terms: int = 3) -> "NetModel":
        """A copy calibrated with K whole-network measurements (``latency_ms``,
        ``memory_mb`` columns of ``measured``, aligned with ``rows``) through
        :func:`carb.transfer.fit_log_map` (``max_terms``: its most coefficients; 1: the
        identity or one device factor, and for memory also one fixed offset)."""
        from carb.transfer import fit_log_map

        base = NetModel(self.layer, self.lat_coef, self.mem_coef, self.q, {}, self.coverage, self.device,
                        dict(self.meta))
        pred = base.predict_rows(rows)
        cal = {}
        for t in ("latency_ms", "memory_mb"):
            y = measured[t].to_numpy(np.float64)
            ok = np.isfinite(y) & (y > 0)
            if ok.sum() < 2:
                continue
            # one term: memory may instead take a fixed offset (another runtime's baseline),
            # as carb calibrate's config models do
            lm = fit_log_map(pred[t].to_numpy()[ok], y[ok], rows["batch"].to_numpy(np.float64)[ok], self.coverage,
                             additive=max_terms == 1 and t == "memory_mb", max_terms=max_terms)
            cal[t] = lm.to_dict()
        base.calibration = cal
        base.meta["calibrated_on"] = int(len(rows))
        return base

    # -- persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``netmodel.json`` and ``layer_forest.npz`` into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.layer.forest is not None:
            self.layer.forest.save(d / "layer_forest.npz")
        doc = {"format": FORMAT, "device": self.device, "coverage": self.coverage, "lat_coef": self.lat_coef,
               "mem_coef": self.mem_coef, "q": self.q, "calibration": self.calibration, "meta": self.meta,
               "layer": {"rooflines": self.layer.rooflines, "generic": self.layer.generic,
                         "classes": self.layer.classes, "q_generic": self.layer.q_generic, "n": self.layer.n,
                         "shrink": self.layer.shrink, "features": self.layer.features,
                         "precisions": self.layer.precisions, "threads": self.layer.threads,
                         "onednn_mb": self.layer.onednn_mb,
                         "forest": "layer_forest.npz" if self.layer.forest is not None else None}}
        (d / "netmodel.json").write_text(json.dumps(doc, indent=1))
        return d


def resolve(model: str | Path) -> Path:
    """The directory of a network model: ``model`` itself, or, when no such path exists
    and it names one of :data:`SHIPPED`, the shipped model's directory in the installed
    package (found in a wheel as in a source tree)."""
    p = Path(model)
    if not p.exists() and str(model) in SHIPPED:
        from importlib import resources

        return Path(str(resources.files("carb") / "data" / SHIPPED[str(model)]))
    return p


def load(directory: str | Path) -> NetModel:
    """A model saved by :meth:`NetModel.save` (no code runs from the files), from its
    directory or the name of a shipped model (:func:`resolve`).

    Raises:
        ModelError: not a network-model directory, or a malformed one (one line).
    """
    from carb.model._forest import ArrayForest

    d = resolve(directory)
    f = d / "netmodel.json"
    if not f.is_file():
        raise ModelError(f"{d}: not a network model (no netmodel.json; shipped: {', '.join(SHIPPED)}; make one "
                         "with carb calibrate or carb.netmodel.fit_netmodel)")
    try:
        doc = json.loads(f.read_text())
        if doc.get("format") != FORMAT:
            raise ModelError(f"{f}: format {doc.get('format')!r}, expected {FORMAT!r}")
        ly = doc["layer"]
        forest = ArrayForest.load(d / ly["forest"]) if ly.get("forest") else None
        layer = LayerModel(rooflines={k: list(map(float, v)) for k, v in ly["rooflines"].items()},
                           generic=list(map(float, ly["generic"])), classes=list(ly["classes"]), forest=forest,
                           q_generic=float(ly["q_generic"]), n=dict(ly.get("n", {})),
                           shrink=float(ly.get("shrink", 1.0)),
                           # models saved before the key existed used version 1's features
                           features=int(ly.get("features", 1)),
                           precisions=None if ly.get("precisions") is None else [str(p) for p in ly["precisions"]],
                           threads=int(ly.get("threads", 1)),
                           onednn_mb=None if ly.get("onednn_mb") is None else float(ly["onednn_mb"]))
        return NetModel(layer=layer, lat_coef=list(map(float, doc["lat_coef"])),
                        mem_coef=list(map(float, doc["mem_coef"])), q={k: float(v) for k, v in doc["q"].items()},
                        calibration=doc.get("calibration") or {}, coverage=float(doc.get("coverage", 0.9)),
                        device=str(doc.get("device", "")), meta=doc.get("meta") or {})
    except ModelError:
        raise
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise ModelError(f"{d}: malformed network model ({type(e).__name__}: {e})") from None


def fit_netmodel(layer_model: LayerModel, rows: pd.DataFrame, measured: pd.DataFrame, *,
                 groups: Sequence[str] | None = None, coverage: float = 0.9, device: str = "",
                 meta: Mapping[str, Any] | None = None, shrink_strength: float = LAT_SHRINK_STRENGTH) -> NetModel:
    """Fit the network terms on whole-network measurements.

    Args:
        layer_model: the fitted :class:`LayerModel`.
        rows: :func:`network_row` figures of the measured networks.
        measured: their ``latency_ms`` and ``memory_mb`` (aligned with ``rows``).
        groups: family of each network: the interval quantiles come from
            leave-one-family-out residuals (otherwise from leave-one-out).
        coverage: nominal coverage of the intervals.
        shrink_strength: how strongly the latency overheads (per node, per forward) are
            shrunk towards 0 (:data:`LAT_SHRUNK`, :data:`LAT_SHRINK_STRENGTH`); 0: plain NNLS.
    """
    y_lat = measured["latency_ms"].to_numpy(np.float64)
    y_mem = measured["memory_mb"].to_numpy(np.float64)
    if len(rows) < 3:
        raise ModelError(f"network model: {len(rows)} measured networks; need at least 3")
    A, M = _lat_design(rows), _mem_design(rows)
    # the terms describe a process that ran oneDNN; a network that never does is measured lower
    shift = _mem_shift(rows, layer_model)
    y_mem_fit = y_mem + shift
    lat_coef, mem_coef = _nnls_rel(A, y_lat, LAT_SHRUNK, shrink_strength), _nnls_rel(M, y_mem_fit)
    g = np.asarray(groups) if groups is not None else np.arange(len(rows)).astype(str)
    res: dict[str, list[float]] = {"latency_ms": [], "memory_mb": []}
    for k in np.unique(g):
        tr, te = g != k, g == k
        if tr.sum() < 3:
            continue
        cl, cm = _nnls_rel(A[tr], y_lat[tr], LAT_SHRUNK, shrink_strength), _nnls_rel(M[tr], y_mem_fit[tr])
        res["latency_ms"] += list(np.log(np.maximum(A[te] @ cl, 1e-6) / y_lat[te]))
        res["memory_mb"] += list(np.log(np.maximum(M[te] @ cm - shift[te], 1e-6) / y_mem[te]))
    # the finite-sample conformal level (ceil((n + 1) c) / n), as carb.transfer's maps use:
    # with ten networks the plain 90% quantile is below the largest residual and under-covers
    q = {t: float(np.quantile(np.abs(v), min(1.0, math.ceil((len(v) + 1) * coverage) / len(v)))) if v else 0.5
         for t, v in res.items()}
    return NetModel(layer=layer_model, lat_coef=lat_coef, mem_coef=mem_coef, q=q, coverage=coverage, device=device,
                    meta=dict(meta or {}))


# --------------------------------------------------------------------------- API


@dataclass
class Prediction:
    """What a network will cost on the model's device.

    Attributes:
        latency_ms, latency_ms_lo, latency_ms_hi: per forward of the whole batch, with the
            interval (``coverage``). Units: ms.
        memory_mb, memory_mb_lo, memory_mb_hi: peak memory of inference. Units: MB (1e6 B).
        energy_j: per forward, where the device model has energy; else ``None`` and
            ``energy_missing_reason`` says why. Units: J.
        coverage_flops, coverage_layers: shares (0..1) of the FLOPs and of the costed layers
            whose operator type the model has measurements for.
        unknown_ops: operator kinds priced by the generic fallback.
        precision, precision_measured: the network's precision, and whether the model's
            layers were measured in it (``None``: not recorded by the model).
        layers: the per-layer table with ``latency_ms`` (predicted, ms) and ``share``, the
            most expensive first.
        flops, params: of the whole forward / module. Units: FLOP, count.
    """

    latency_ms: float
    latency_ms_lo: float
    latency_ms_hi: float
    memory_mb: float
    memory_mb_lo: float
    memory_mb_hi: float
    coverage_flops: float
    coverage_layers: float
    unknown_ops: list[str]
    flops: int
    params: int
    interval: float = 0.9
    device: str = ""
    energy_j: float | None = None
    energy_missing_reason: str | None = "the device model has no energy measurements"
    #: the network's precision, and whether the model measured layers in it (``None``: the
    #: model does not record its layers' precisions)
    precision: str = ""
    precision_measured: bool | None = None
    # the captured table, per-layer ms and known flags the breakdown is made of, on first
    # use of ``layers`` (sorting and copying the table was most of the per-network predict
    # time, and a sweep over many networks seldom reads it)
    _source: tuple[pd.DataFrame, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _layers: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def layers(self) -> pd.DataFrame:
        """The per-layer table with ``latency_ms`` (predicted, ms), ``known`` and ``share``,
        the most expensive first."""
        if self._layers is None:
            table, t, known = self._source if self._source is not None else (pd.DataFrame(), np.zeros(0), np.zeros(0, bool))
            order = np.argsort(-t, kind="stable")
            total = t.sum()
            L = table.take(order).reset_index(drop=True)
            self._layers = L.assign(latency_ms=t[order], known=known[order],
                                    share=(t[order] / total) if total > 0 else 0.0)
        return self._layers

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` most expensive layers: name, op, shapes, predicted ms, share."""
        cols = ["name", "op", "kind", "in_shape", "out_shape", "kernel", "stride", "groups", "flops", "latency_ms",
                "share", "known"]
        return self.layers[cols].head(n)

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """JSON-serialisable summary (coverage first)."""
        t = self.top(top).copy()
        t["in_shape"] = t["in_shape"].map(list)
        t["out_shape"] = t["out_shape"].map(list)
        return {
            "coverage": {"flops": self.coverage_flops, "layers": self.coverage_layers, "unknown_ops": self.unknown_ops,
                         "precision": self.precision, "precision_measured": self.precision_measured},
            "device": self.device, "interval": self.interval,
            "latency_ms": {"value": self.latency_ms, "lo": self.latency_ms_lo, "hi": self.latency_ms_hi},
            "memory_mb": {"value": self.memory_mb, "lo": self.memory_mb_lo, "hi": self.memory_mb_hi},
            "energy_j": self.energy_j, "energy_missing_reason": self.energy_missing_reason,
            "flops": self.flops, "params": self.params, "n_layers": int(len(self.layers)),
            "top_layers": json.loads(t.to_json(orient="records")),
        }


def predict_module(module: Any, example_input: Any, model: NetModel | str | Path, *, precision: str | None = None,
                   fold_bn: bool = False) -> Prediction:
    """Predict latency and peak memory of ``module`` on ``example_input`` on the device of
    ``model`` (a :class:`NetModel` or its directory), with intervals, the per-layer
    breakdown and the coverage of the model.

    Args:
        module: any ``torch.nn.Module`` (captured on the meta device; not modified).
        example_input: a tensor, a tuple of tensors, or a shape such as ``(1, 3, 224, 224)``.
        model: the device's network model.
        precision: ``fp32``, ``fp16``, ``bf16``; ``None``: the input's dtype.

    Raises:
        carb.graph.CaptureError: the module does not trace, bad input or precision (one line).
        ModelError: the model cannot be loaded (one line).
    """
    from carb import graph

    nm = model if isinstance(model, NetModel) else load(model)
    table = graph.capture(module, example_input, precision, fold_bn=fold_bn)
    return predict_table(table, nm)


def predict_table(table: LayerTable, nm: NetModel) -> Prediction:
    """:func:`predict_module` on an already captured network."""
    return predict_tables([table], nm)[0]


def predict_tables(tables: Sequence[LayerTable], nm: NetModel) -> list[Prediction]:
    """:func:`predict_table` over many captured networks at once: one layer-model call
    over all their layers and one network-model call over all networks (per network,
    the fixed cost of those calls was most of the prediction time). Same figures as
    predicting each table alone."""
    if not tables:
        return []
    rows, t_all, known_all, L = _network_rows(tables, nm.layer)
    ends = np.cumsum([len(t.layers) for t in tables])
    starts = ends - np.array([len(t.layers) for t in tables])
    pred = nm.predict_rows(rows)
    cols = {c: pred[c].to_numpy(np.float64) for c in pred.columns}
    kind_all = L["kind"].to_numpy() if len(L) else np.zeros(0, object)
    share_f, share_l = rows["flops_known_share"].to_numpy(), rows["layers_known_share"].to_numpy()
    out = []
    for i, table in enumerate(tables):
        t, known = t_all[starts[i]:ends[i]], known_all[starts[i]:ends[i]]
        order = np.argsort(-t, kind="stable")
        unknown = list(dict.fromkeys(str(k) for k in kind_all[starts[i]:ends[i]][order][~known[order]]))
        out.append(Prediction(
            latency_ms=float(cols["latency_ms"][i]), latency_ms_lo=float(cols["latency_ms_lo"][i]),
            latency_ms_hi=float(cols["latency_ms_hi"][i]), memory_mb=float(cols["memory_mb"][i]),
            memory_mb_lo=float(cols["memory_mb_lo"][i]), memory_mb_hi=float(cols["memory_mb_hi"][i]),
            coverage_flops=float(share_f[i]), coverage_layers=float(share_l[i]),
            unknown_ops=unknown, flops=table.flops, params=table.params, interval=nm.coverage, device=nm.device,
            precision=table.precision,
            precision_measured=None if nm.layer.precisions is None else table.precision in nm.layer.precisions,
            _source=(table.layers, t, known)))
    return out


#: Below this many networks :func:`predict_modules` captures in-process by default: a
#: worker process starts in 2-4 s (it imports torch), the capture time of 50-100 networks.
PARALLEL_MIN = 100


def _capture_chunk(jobs: list[tuple[int, Any, Any, str | None, bool]], in_worker: bool = False) -> list[tuple[int, Any]]:
    """Capture ``(index, module or builder, example input, precision, fold_bn)`` jobs; each
    result is a :class:`LayerTable` or the one-line error it raised."""
    from carb import graph

    if in_worker:
        import torch

        torch.set_num_threads(1)  # capture runs no kernel: one thread per worker process
    out = []
    for i, obj, example, precision, fold_bn in jobs:
        try:
            out.append((i, graph.capture(graph.build_meta(obj, f"network {i}: building it"), example, precision,
                                         fold_bn=fold_bn)))
        except CaptureError as e:
            out.append((i, str(e)))
    return out


def predict_modules(modules: Sequence[Any], example_inputs: Any, model: NetModel | str | Path, *,
                    precision: str | None = None, fold_bn: bool = False, workers: int | None = None,
                    progress: Any = None) -> list[Prediction]:
    """:func:`predict_module` for many networks (a sweep, a NAS population): each is
    captured (in ``workers`` processes), then all are predicted in one batched call.

    Args:
        modules: ``torch.nn.Module`` objects, or zero-argument callables returning one
            (e.g. ``functools.partial(build, cfg)``; built on the meta device, so nothing is
            allocated, and in the worker, so only the callable is sent there).
        example_inputs: one input for all networks (a tensor or a shape such as
            ``(1, 3, 224, 224)``), or a list with one per network.
        model: the device's network model (a :class:`NetModel` or its directory).
        precision: ``fp32``, ``fp16``, ``bf16``; ``None``: each input's dtype.
        workers: capture processes (joblib's loky workers: no ``if __name__ ==
            "__main__"`` guard needed, and kept for the next call); ``None``: one per usable
            CPU from :data:`PARALLEL_MIN` networks on, in-process below; ``1``: in-process.
        progress: called with the number of networks captured so far (e.g. a progress bar's
            ``update``), after each chunk.

    Returns:
        One :class:`Prediction` per network, in order; the same figures as
        :func:`predict_module` on each.

    Raises:
        carb.graph.CaptureError: a network does not build or trace, or bad input (one
            line, naming the network's index).
        ModelError: the model cannot be loaded (one line).
    """
    import os

    nm = model if isinstance(model, NetModel) else load(model)
    n = len(modules)
    if isinstance(example_inputs, list) and not all(isinstance(d, int) for d in example_inputs):
        if len(example_inputs) != n:
            raise CaptureError(f"example_inputs: {len(example_inputs)} inputs for {n} networks")
        inputs = example_inputs
    else:
        inputs = [example_inputs] * n
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = workers if n >= PARALLEL_MIN else 1
    workers = max(1, min(int(workers), n or 1))
    jobs = [(i, modules[i], inputs[i], precision, fold_bn) for i in range(n)]
    # chunks of ~20 networks: few round trips, and a progress step every fraction of a second
    size = max(1, min(20, -(-n // max(4 * workers, 1))))
    chunks = [jobs[k:k + size] for k in range(0, n, size)]
    results: dict[int, Any] = {}
    if workers == 1:
        done_chunks: Any = (_capture_chunk(ch) for ch in chunks)
    else:
        from joblib import Parallel, delayed

        done_chunks = Parallel(n_jobs=workers, backend="loky", return_as="generator")(
            delayed(_capture_chunk)(ch, True) for ch in chunks)
    for done in done_chunks:
        results.update(done)
        if progress is not None:
            progress(len(results))
    for i in range(n):
        if isinstance(results[i], str):
            raise CaptureError(results[i] if results[i].startswith(f"network {i}") else f"network {i}: {results[i]}")
    return predict_tables([results[i] for i in range(n)], nm)


# --------------------------------------------------------------------------- calibration

#: How :func:`calibrate_on` maps a network model to K whole networks measured on a device.
CALIBRATION_METHODS = ("factor", "log", "refit")
#: Largest network :func:`choose_networks` measures by default. Units: GFLOP per forward.
#: Up to 12 (not the zoo's 3 of the leave-one-family-out evaluation): networks as large as
#: the ImageNet CNNs users deploy, whose big dense convolutions the layer model over-prices;
#: chosen side by side on torchvision's networks (benchmarks/RESULTS.md, issue 15, public zoo).
CALIBRATION_MAX_GFLOPS = 12.0
#: The default of :func:`calibrate_on` and ``carb calibrate`` for a network model: one device
#: factor (or none, if it does not predict the K better left out). Chosen on the candidates'
#: own networks left out of the K (40 draws of K = 10, the shipped model): a factor and the
#: full log map 5.3%, refit 6.2% (p90 6.2 / 6.5 / 9.2%); the full log map's line and batch
#: term, picked by the median leave-one-out error of ten points, once scaled torchvision's
#: batch-1 networks up by a third (benchmarks/RESULTS.md, issue 15, "Small maps"). A device
#: whose speed does not differ by one factor (another batch scaling) wants ``log`` or ``refit``.
DEFAULT_CALIBRATION_METHOD = "factor"


def capture_config(config: Any) -> LayerTable:
    """:func:`carb.graph.capture` of a measurable network config (a :class:`carb.families.zoo.ZooConfig`
    or a :class:`carb.families.nets.NetConfig`), built on the meta device.

    Raises:
        CaptureError: the network does not build or trace (one line).
    """
    from carb.families import nets
    from carb.families import zoo

    if isinstance(config, nets.NetConfig):
        return nets.capture(config)
    if isinstance(config, zoo.ZooConfig):
        return zoo.capture(config)
    raise ModelError(f"not a network config: a {type(config).__name__} (expected a zoo or net config)")


#: How :func:`choose_networks` spreads the K networks: ``sizes`` (the default) takes in each
#: latency bin the input size, then the family, least used so far; ``families``, the family
#: only (the rule before sizes were added). One input size may price systematically off (the
#: layer model's thin corners), and a calibration map fitted on networks mostly of that size
#: moves every other network by that error (benchmarks/RESULTS.md, issue 15, "Small maps").
CHOICE_RULES = ("sizes", "families")


def pick_networks(cands: Sequence[Any], latency_ms: np.ndarray, k: int, rng: np.random.Generator,
                  rule: str = "sizes") -> list[int]:
    """Indices of K of ``cands`` (zoo configs with ``arch`` and ``input_size``) spread over
    their predicted ``latency_ms``: the candidates are split into K bins of log latency and
    one taken from each bin by ``rule`` (:data:`CHOICE_RULES`), ties broken by ``rng``."""
    if rule not in CHOICE_RULES:
        raise ModelError(f"unknown choice rule {rule!r} (expected one of {', '.join(CHOICE_RULES)})")
    order = np.argsort(np.log(np.asarray(latency_ms, np.float64)), kind="stable")
    fams: dict[str, int] = {}
    sizes: dict[int, int] = {}
    out = []
    for b in np.array_split(order, k):
        def key(i: int) -> tuple:
            c = cands[i]
            s = sizes.get(c.input_size, 0) if rule == "sizes" else 0
            return (s, fams.get(c.arch, 0), rng.random())
        pick = int(min(b, key=key))
        fams[cands[pick].arch] = fams.get(cands[pick].arch, 0) + 1
        sizes[cands[pick].input_size] = sizes.get(cands[pick].input_size, 0) + 1
        out.append(pick)
    return out


def choose_networks(nm: NetModel, k: int, seed: int = 0, per_family: int = 4,
                    max_gflops: float = CALIBRATION_MAX_GFLOPS, rule: str = "sizes") -> list[Any]:
    """K zoo networks (:mod:`carb.families.zoo`) to calibrate ``nm`` with: ``per_family`` random
    candidates of each family (seeded) of at most ``max_gflops`` GFLOP per forward, split
    into K bins of the model's predicted latency (log scale) and one taken from each bin
    (:func:`pick_networks`: the input size, then the family, least used so far first), so
    that the K networks span the latencies, the input sizes and the designs.

    Raises:
        ModelError: ``k`` < 2 or more than the candidates, or an unknown ``rule``.
    """
    from carb.families import zoo

    cands = zoo.sample_configs(per_family=per_family, seed=seed, max_gflops=max_gflops)
    if not 2 <= k <= len(cands):
        raise ModelError(f"--samples {k}: choose between 2 and {len(cands)} networks")
    rows = _network_rows([capture_config(c) for c in cands], nm.layer)[0]
    lat = nm.predict_rows(rows)["latency_ms"].to_numpy()
    return [cands[i] for i in pick_networks(cands, lat, k, np.random.default_rng(seed), rule)]


def calibrate_on(nm: NetModel, tables: Sequence[LayerTable], measured: pd.DataFrame,
                 method: str = DEFAULT_CALIBRATION_METHOD,
                 meta: Mapping[str, Any] | None = None) -> NetModel:
    """``nm`` calibrated with K whole networks measured on a device.

    Args:
        nm: the network model to calibrate (its layer model is kept).
        tables: the K networks' captures (:func:`capture_config`).
        measured: their ``latency_ms`` (ms) and ``memory_mb`` (MB), aligned with ``tables``.
        method: ``factor``: one device factor per target (or, for memory, one offset in MB),
            or none, whichever predicts the K better left out (:meth:`NetModel.calibrate`
            with ``max_terms=1``);
            ``log``: a log-space map of ``nm``'s prediction per target, also a line in log
            and a batch term (:meth:`NetModel.calibrate`, as ``carb calibrate`` maps a config model);
            ``refit``: the network terms refitted on the K networks (:func:`fit_netmodel`,
            overheads shrunk towards 0, scale free).
        meta: provenance added to the model's ``meta``.

    Raises:
        ModelError: an unknown method, or fewer than 3 networks measured.
    """
    if method not in CALIBRATION_METHODS:
        raise ModelError(f"--method: unknown value {method!r} for a network model (expected "
                         f"{' or '.join(CALIBRATION_METHODS)})")
    y = measured[["latency_ms", "memory_mb"]].reset_index(drop=True).astype(np.float64)
    ok = (np.isfinite(y.to_numpy()) & (y.to_numpy() > 0)).all(axis=1)
    if ok.sum() < 3:
        raise ModelError(f"calibration: {int(ok.sum())} networks measured; need at least 3")
    rows = _network_rows([t for t, o in zip(tables, ok) if o], nm.layer)[0]
    out = calibrate_rows(nm, rows, y[ok].reset_index(drop=True), method)
    out.meta = {**out.meta, "calibration_method": method, **dict(meta or {})}
    return out


def calibrate_rows(nm: NetModel, rows: pd.DataFrame, measured: pd.DataFrame, method: str) -> NetModel:
    """:func:`calibrate_on` from the K networks' :func:`network_row` figures already computed
    (``rows``, aligned with ``measured``'s ``latency_ms`` and ``memory_mb``)."""
    if method in ("log", "factor"):
        return nm.calibrate(rows, measured, max_terms=1 if method == "factor" else 3)
    out = fit_netmodel(nm.layer, rows, measured, coverage=nm.coverage, device=nm.device, meta=nm.meta)
    out.meta["calibrated_on"] = int(len(rows))
    return out


_ = CaptureError  # re-exported for callers catching capture errors through this module


def allocator_of(nm: NetModel) -> str:
    """The CPU workers' allocator the model's measurements were taken with
    (:data:`carb.measure.cpu.ALLOCATORS`; a model from before it was recorded: ``default``)."""
    return str(nm.meta.get("allocator", "default"))


def calibration_line(nm: NetModel, model_dir: Any) -> str:
    """One line on what the model's figures stand for: calibrated on how many networks by
    which method, or not calibrated (then: how to calibrate it to this machine)."""
    m = nm.meta
    if m.get("calibration_method"):
        return (f"calibrated ({m['calibration_method']}) on {m.get('calibrated_on', '?')} networks measured on "
                f"{m.get('calibration_device', nm.device or '?')}")
    n = f"{m['networks']} networks measured " if isinstance(m.get("networks"), int) else ""
    return (f"not calibrated to this machine: fitted on {n}on {nm.device or 'its device'} on another day; to fit it "
            f"to this machine: carb calibrate --model {model_dir} --out NEW_DIR (K zoo networks spread over sizes "
            "and designs; --networks YOUR_NETS.txt for a few of the kind you deploy)")


def predict_cli(module_spec: str, input_shape: str | None, precision: str, model_dir: Any, json_file: Any,
                top: int, usage: Any) -> None:
    """``carb predict --module``: load, capture, predict, print (coverage first), and write
    JSON. Bad input raises ``usage(message)`` (the CLI's one-line error, exit 2)."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from carb import graph

    if input_shape is None:
        raise usage("--module needs --input, e.g. --input 1x3x224x224")
    default = model_dir is None
    if default:
        model_dir = DEFAULT_MODEL
    if json_file is not None and Path(json_file).suffix != ".json":
        raise usage(f"--json {json_file}: expected a .json file")
    try:
        shape = graph.parse_shape(input_shape)
        graph.dtype_of(precision)
        nm = load(model_dir)
        net = graph.load_module(module_spec)
        pred = predict_module(net, shape, nm, precision=precision)
    except (CaptureError, ModelError) as e:
        raise usage(str(e)) from None
    con = Console(soft_wrap=True)  # one line per figure, whatever the terminal's width
    cov = f"coverage: {100 * pred.coverage_layers:.1f}% of layers, {100 * pred.coverage_flops:.1f}% of FLOPs known"
    if pred.unknown_ops:
        cov += f"; unknown (generic fallback, wider interval): {', '.join(pred.unknown_ops)}"
    con.print(cov, style="bold yellow" if pred.unknown_ops else "bold")
    if pred.precision_measured is False:
        con.print(f"precision {precision}: not measured by this model (its layers are "
                  f"{', '.join(nm.layer.precisions or [])}); priced as their work on {precision}'s bytes, which says "
                  f"nothing of what this device's {precision} kernels cost (on a CPU without native {precision}, "
                  "tens of times more): calibrate with networks in this precision", style="bold yellow")
    pct = f"{round(100 * pred.interval)}%"
    con.print(f"{module_spec} on {'x'.join(map(str, shape))} {precision}, device {nm.device or '?'}: "
              f"{pred.flops / 1e9:.3f} GFLOP, {pred.params / 1e6:.2f} M parameters, {len(pred.layers)} layers"
              + (f" (model: the shipped {DEFAULT_MODEL}; --model for another)" if default else ""))
    con.print(f"latency  {pred.latency_ms:10.3f} ms   {pct} interval [{pred.latency_ms_lo:.3f}, {pred.latency_ms_hi:.3f}]")
    if allocator_of(nm) == "retain":
        con.print("         the steady state of a process that keeps freed memory (measured with allocator retain); "
                  "under glibc's default malloc a forward can page-fault on fresh memory every time and take longer "
                  "(a median 1.25x, up to 1.7x, on our 2-core VMs: README, How it measures)")
    con.print(f"memory   {pred.memory_mb:10.1f} MB   {pct} interval [{pred.memory_mb_lo:.1f}, {pred.memory_mb_hi:.1f}]")
    con.print("energy   " + (f"{pred.energy_j:.4f} J" if pred.energy_j is not None else f"- ({pred.energy_missing_reason})"))
    t = Table(title=f"top {top} layers by predicted latency")
    for c in ("layer", "op", "input", "k/s/g", "GFLOP", "ms", "share", "known"):
        t.add_column(c)
    for r in pred.top(top).itertuples():
        t.add_row(str(r.name), str(r.op), "x".join(map(str, r.in_shape)), f"{r.kernel}/{r.stride}/{r.groups}",
                  f"{r.flops / 1e9:.4f}", f"{r.latency_ms:.4f}", f"{100 * r.share:.1f}%", "yes" if r.known else "NO")
    con.print(t)
    con.print(calibration_line(nm, model_dir))
    if json_file is not None:
        Path(json_file).parent.mkdir(parents=True, exist_ok=True)
        Path(json_file).write_text(json.dumps({"module": module_spec, "input": list(shape), "precision": precision,
                                               "allocator": allocator_of(nm), **pred.to_dict(top)}, indent=1) + "\n")
        con.print(f"wrote {json_file}")
