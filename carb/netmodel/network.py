"""The network model: a network's latency and peak memory from its layers' predictions.

``latency = s * sum(layer latencies) + o * nodes + c`` (NNLS on relative error over
whole-network measurements; the overheads ``o`` and ``c`` shrunk towards 0, so a few
networks move them only as far as they agree): ``o`` is the per-node dispatch overhead
(module calls, views) and ``c`` the per-forward one. Peak memory is a static liveness
simulation (weights + input + the peak of live activations, :mod:`carb.graph`) corrected by
a learned linear term (NNLS on ``model_bytes``, ``input_bytes``, ``peak_live_bytes``, the
largest layer's weights, a constant), plus the working buffer of PyTorch's own convolution
kernels where it raises that peak (:func:`carb.netmodel.layers.native_conv_columns`).
Intervals are the quantile of the leave-one-family-out log-residuals on the training
networks (once calibrated, a Student-t interval pooling the map's leave-one-out residuals
with that in-domain error, :func:`calibrated_q`), widened by the unknown operators' share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import nnls

from carb.graph import LayerTable
from carb.netmodel.io import ModelError, read_model, write_model
from carb.netmodel.layers import LayerModel, dataset_fallback, native_conv_columns, onednn_conv, op_class

MB = 1e6

#: Network-level columns :func:`network_row` gives.
NETWORK_COLUMNS = [
    "layer_sum_ms",
    "unknown_ms",
    "nodes",
    "flops",
    "model_bytes",
    "input_bytes",
    "peak_live_bytes",
    "max_weight_bytes",
    "batch",
    "flops_known_share",
    "layers_known_share",
    "onednn_convs",
]


def network_row(table: LayerTable, layer_model: LayerModel) -> tuple[dict[str, float], np.ndarray]:
    """The network-level figures of a captured network under a layer model, and the per-layer latencies (ms)."""
    rows, t, _, _ = _network_rows([table], layer_model)
    return {k: float(v) for k, v in rows.iloc[0].items()}, t


def _network_rows(
    tables: Sequence[LayerTable], layer_model: LayerModel
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.DataFrame]:
    """:data:`NETWORK_COLUMNS` of each table (one row each), from one layer-model call over all their layers.

    Also the per-layer latencies (ms), known flags and layer rows, all tables' layers one
    after the other.
    """
    n = len(tables)
    sizes = np.array([len(t.layers) for t in tables], dtype=np.int64)
    frames = [t.layers for t in tables if len(t.layers)]
    # one table: its own frame, no copy
    L = (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)) if frames else tables[0].layers
    cls = op_class(L) if len(L) else np.zeros(0, object)
    on_any = onednn_conv(L, layer_model.threads, all_ranks=True) if len(L) else np.zeros(0, bool)
    # the latency feature, as the layer model's feature version reads it
    on = on_any if layer_model.features >= 4 or not len(L) else onednn_conv(L, layer_model.threads)
    columns = native_conv_columns(L, layer_model.threads, on_any) if len(L) else np.zeros(0)
    t_all = layer_model.predict(L, cls, on)
    known_all = layer_model.known(L, cls)
    q_all = layer_model.fallback_q(L, cls) if len(L) else np.zeros(0)
    flops_all = L["flops"].to_numpy(np.float64) if len(L) else np.zeros(0)
    bytes_all = L["bytes"].to_numpy(np.float64) if len(L) else np.zeros(0)
    costed = (L["op"] != "view").to_numpy() if len(L) else np.zeros(0, bool)
    seg = np.repeat(np.arange(n), sizes)

    def per_net(w: np.ndarray) -> np.ndarray:
        return np.bincount(seg, weights=w, minlength=n)

    flops = per_net(flops_all)
    flops_known = per_net(np.where(known_all, flops_all, 0.0))
    costed_bytes = np.where(costed, bytes_all, 0.0)
    nbytes, bytes_known = per_net(costed_bytes), per_net(np.where(known_all, costed_bytes, 0.0))
    unknown_t = np.where(known_all, 0.0, t_all)
    n_costed = per_net(costed.astype(np.float64))
    n_known_costed = per_net((known_all & costed).astype(np.float64))
    max_w = np.zeros(n)
    np.maximum.at(max_w, seg, L["weight_bytes"].to_numpy(np.float64) if len(L) else np.zeros(0))
    rows = pd.DataFrame(
        {
            "layer_sum_ms": per_net(t_all),
            "unknown_ms": per_net(np.where(known_all, 0.0, t_all)),
            "nodes": sizes.astype(np.float64),
            "flops": flops,
            "model_bytes": [float(t.model_bytes) for t in tables],
            "input_bytes": [float(t.input_bytes) for t in tables],
            "peak_live_bytes": [float(t.peak_live_bytes) for t in tables],
            "max_weight_bytes": max_w,
            "batch": [float(t.input_shape[0]) if t.input_shape else 1.0 for t in tables],
            "flops_known_share": np.divide(flops_known, flops, out=np.ones(n), where=flops > 0),
            "layers_known_share": np.divide(n_known_costed, n_costed, out=np.ones(n), where=n_costed > 0),
            "onednn_convs": per_net(on_any.astype(np.float64)),
        },
        columns=NETWORK_COLUMNS,
    )
    # the peak of live activations with the running layer's working buffer on top, beyond the plain peak
    with_buffer = np.zeros(n)
    if len(L):
        np.maximum.at(
            with_buffer, seg, L["live_bytes"].to_numpy(np.float64) + columns if "live_bytes" in L else columns
        )
    rows["work_buffer_bytes"] = np.maximum(with_buffer - rows["peak_live_bytes"].to_numpy(np.float64), 0.0)
    # how far the fallback-priced layers may be off, each by its class's measured error (90%)
    rows["unknown_hi_ms"] = per_net(unknown_t * np.expm1(q_all))
    rows["unknown_lo_ms"] = per_net(unknown_t * -np.expm1(-q_all))
    rows["bytes_known_share"] = np.divide(bytes_known, nbytes, out=np.ones(n), where=nbytes > 0)
    return rows, t_all, known_all, L


def _lat_design(rows: pd.DataFrame) -> np.ndarray:
    return np.column_stack([rows["layer_sum_ms"], rows["nodes"], np.ones(len(rows))])


def _mem_shift(rows: pd.DataFrame, layer: LayerModel) -> np.ndarray:
    """MB to take off the memory terms' prediction of each network.

    The layer model's :attr:`LayerModel.onednn_mb` where none of its convolutions (of any
    rank) runs through oneDNN (the terms are fitted on networks that all do, with this added
    to the others' measurements), else 0 (also for rows without the ``onednn_convs``
    figure); less the working buffer of PyTorch's own convolution kernels where it raises
    the peak of live activations (``work_buffer_bytes``, :func:`native_conv_columns`): a
    buffer allocated and freed within one call, counted once, not as the live activations'
    term that also carries what the allocator keeps.
    """
    shift = np.zeros(len(rows))
    if layer.onednn_mb and "onednn_convs" in rows:
        shift = np.where(rows["onednn_convs"].to_numpy(np.float64) > 0, 0.0, float(layer.onednn_mb))
    if "work_buffer_bytes" in rows:
        shift = shift - rows["work_buffer_bytes"].to_numpy(np.float64) / MB
    return shift


def _mem_design(rows: pd.DataFrame) -> np.ndarray:
    return np.column_stack(
        [
            rows["model_bytes"] / MB,
            rows["input_bytes"] / MB,
            rows["peak_live_bytes"] / MB,
            rows["max_weight_bytes"] / MB,
            np.ones(len(rows)),
        ]
    )


#: Which latency terms ``[s, o, c]`` are shrunk towards 0 (ridge, :func:`_nnls_rel`): the
#: overheads per node ``o`` and per forward ``c``; the scale ``s`` stays free, as it carries
#: the machine's speed of the day (layers and networks measured at other moments). Each layer
#: is measured with its own module call, so the plain (scaled) sum needs no overhead unless
#: the networks agree on one.
LAT_SHRUNK = (0.0, 1.0, 1.0)
#: Strength of that shrinkage: a fixed total (in networks' squared relative errors), so ten
#: networks move the overheads only as far as they agree and a hundred almost freely
#: (leave-one-family-out on the zoo, K = 10: MAPE 11.5% at 3 and 10, 11.6% at 30, 12.3% without).
LAT_SHRINK_STRENGTH = 10.0


def _nnls_rel(
    A: np.ndarray, y: np.ndarray, shrunk: Sequence[float] | None = None, strength: float = 0.0
) -> list[float]:
    """Non-negative coefficients of ``y ~ A @ coef`` on relative error.

    With ``shrunk`` (a weight per column) and ``strength > 0``, the weighted coefficients
    are shrunk towards 0 (ridge). Each coefficient is priced in its column's typical share
    of the prediction (``mean(A[:, j] / y)``), so the penalty has no units.
    """
    W = A / y[:, None]
    b = np.ones_like(y)
    if shrunk is not None and strength > 0:
        w = np.asarray(shrunk, np.float64)
        P = math.sqrt(strength) * np.diag(np.maximum(np.abs(W).mean(axis=0), 1e-30) * w)[w > 0]
        W, b = np.vstack([W, P]), np.concatenate([b, np.zeros(len(P))])
    scale = np.maximum(np.abs(W).max(axis=0), 1e-30)
    coef, _ = nnls(W / scale, b, maxiter=5000)
    return [float(c) for c in coef / scale]


#: How many networks the model's own in-domain error weighs when a calibrated interval pools
#: it with the K networks' leave-one-out residuals (:func:`calibrated_q`): as much as a
#: default calibration's ten. On carb.zoo networks left out of 60 draws of K = 10, on a machine
#: kind the shipped model was not fitted on (``benchmarks/bench_machine_shift.py``), 90%
#: intervals cover 88% at a median half-width of 16% (the K's conformal level alone, their
#: largest residual: 90% at 20%); with one of the K measured 30% slow, 90% at 19% (the
#: conformal level: 96% at 27%, a tenth of the draws over 38%). 0 leans on the K alone; more,
#: on the model's own machine.
CALIBRATION_PRIOR_NETWORKS = 10.0


def calibrated_q(
    loo: Sequence[float],
    terms: int,
    prior_q: float,
    coverage: float = 0.9,
    prior_networks: float = CALIBRATION_PRIOR_NETWORKS,
) -> float:
    """Half-width (log) of a calibrated model's interval at ``coverage``.

    A Student-t prediction interval whose variance pools the calibration map's K
    leave-one-out residuals (each already the error of predicting a network the map did not
    see) with the model's own in-domain error: ``prior_q``, its ``coverage`` quantile of
    |log residual|, read as a normal's and weighted as ``prior_networks`` networks. The
    degrees of freedom are the K and those networks less the map's fitted ``terms``. With
    ten networks the finite-sample conformal level is their largest residual: one badly
    measured network sets the width alone. Here it counts as one of ten squares, and the
    model's own error keeps a few lucky K from giving a too narrow interval.

    Args:
        loo: the K leave-one-out residuals of the map (log).
        terms: the map's fitted coefficients (0: the identity, 1: a factor or an offset).
        prior_q: the model's in-domain half-width (log) at ``coverage``; 0 or less: none,
            the K alone.
        coverage: nominal coverage, in (0, 1).
        prior_networks: the weight of ``prior_q``, in networks.

    Returns:
        The half-width (log): ``[pred / exp(q), pred * exp(q)]``.

    Example:
        >>> round(calibrated_q([0.1, -0.1] * 5, 1, 0.0), 4)  # t(9) at 95% x 0.1
        0.1833

    """
    r = np.asarray(loo, np.float64)
    half = (1.0 + coverage) / 2.0
    nu = float(prior_networks) if prior_q > 0 else 0.0
    s2 = (nu * (prior_q / stats.norm.ppf(half)) ** 2 + float(np.sum(r**2))) / max(nu + len(r), 1.0)
    df = max(nu + len(r) - terms, 1.0)
    return float(stats.t.ppf(half, df) * math.sqrt(s2))


def _map_terms(lm: Any) -> int:
    """Coefficients a :class:`carb.model.maps.LogMap` fitted: 0 (identity), 1 (factor or offset), 2 or 3."""
    if lm.add:
        return 1
    if len(lm.coef) == 2 and lm.coef[1] == 1.0:
        return 0 if lm.coef[0] == 0.0 else 1
    return len(lm.coef)


def _median_factor(s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """A device factor (log) as the median of ``log(y / s)``, and its exact leave-one-out residuals (log).

    The median, not the mean: one of the K measured while other tenants slowed the machine
    moves a mean by a tenth of its error, the median hardly.
    """
    r = np.log(y) - np.log(s)
    loo = np.array([r[i] - np.median(np.delete(r, i)) for i in range(len(r))])
    return float(np.median(r)), loo


@dataclass
class NetModel:
    """Layer model + network terms (+ optional calibration maps), per device.

    Attributes:
        layer: the :class:`LayerModel`.
        lat_coef: ``[s, o (ms/node), c (ms)]`` of ``latency = s * layer_sum + o * nodes + c``.
        mem_coef: memory (MB) on model, input, peak live activations, largest layer weights
            (all MB) and a constant (MB).
        q: 90% |log residual| quantiles of the network model per target (intervals).
        calibration: per target, a :class:`carb.model.maps.LogMap` as a dict (or absent).
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
        """Latency and memory of networks from their :func:`network_row` figures.

        Returns:
            ``latency_ms``, ``memory_mb`` and their ``_lo``/``_hi`` bounds (ms, MB), one row
            per network.

        """
        from carb.model.maps import LogMap

        lat = np.maximum(_lat_design(rows) @ np.asarray(self.lat_coef), 1e-6)
        mem = np.maximum(_mem_design(rows) @ np.asarray(self.mem_coef) - _mem_shift(rows, self.layer), 1e-6)
        out = pd.DataFrame(index=rows.index)
        batch = rows["batch"].to_numpy(np.float64)
        for target, pred in (("latency_ms", lat), ("memory_mb", mem)):
            q = self.q.get(target, 0.0)
            cal = self.calibration.get(target)
            if cal:
                # outside the K's range the map holds its end ratio (a map saved without its
                # range carries its slope on)
                lm = LogMap.from_dict(cal)
                pred = lm.apply(pred, batch)
                q = max(lm.q, 0.0) if lm.n >= 5 else max(q, lm.q)
            lo, hi = pred * math.exp(-q), pred * math.exp(q)
            if target == "latency_ms":
                # unknown operators: their fallback price is uncertain by its class's measured error
                # (rows without the per-class figures: the generic roofline's)
                s = self.lat_coef[0] or 1.0
                if "unknown_hi_ms" in rows:
                    du_lo = rows["unknown_lo_ms"].to_numpy(np.float64) * s
                    du_hi = rows["unknown_hi_ms"].to_numpy(np.float64) * s
                else:
                    u, qg = rows["unknown_ms"].to_numpy(np.float64) * s, self.layer.q_generic
                    du_lo, du_hi = u * (1 - math.exp(-qg)), u * (math.exp(qg) - 1)
                lo = np.maximum(lo - du_lo, 1e-6)
                hi = hi + du_hi
            out[target], out[f"{target}_lo"], out[f"{target}_hi"] = pred, lo, hi
        return out

    def calibrate(self, rows: pd.DataFrame, measured: pd.DataFrame, max_terms: int = 3) -> "NetModel":
        """A copy calibrated with K whole-network measurements through :func:`carb.model.maps.fit_log_map`.

        A map that is one device factor takes the median ratio (:func:`_median_factor`);
        every map's interval is :func:`calibrated_q` of its leave-one-out residuals and the
        model's own ``q``.

        Args:
            rows: the K networks' :func:`network_row` figures.
            measured: their ``latency_ms`` (ms) and ``memory_mb`` (MB), aligned with ``rows``.
            max_terms: the map's most coefficients; 1: the identity or one device factor,
                and for memory also one fixed offset.

        Returns:
            The calibrated copy.

        """
        from carb.model.maps import fit_log_map

        base = NetModel(
            self.layer, self.lat_coef, self.mem_coef, self.q, {}, self.coverage, self.device, dict(self.meta)
        )
        pred = base.predict_rows(rows)
        cal = {}
        for t in ("latency_ms", "memory_mb"):
            y = measured[t].to_numpy(np.float64)
            ok = np.isfinite(y) & (y > 0)
            if ok.sum() < 2:
                continue
            # one term: memory may instead take a fixed offset (another runtime's baseline),
            # as carb calibrate's config models do
            s = pred[t].to_numpy()[ok]
            lm = fit_log_map(
                s,
                y[ok],
                rows["batch"].to_numpy(np.float64)[ok],
                self.coverage,
                additive=max_terms == 1 and t == "memory_mb",
                max_terms=max_terms,
            )
            terms = _map_terms(lm)
            if terms == 1 and not lm.add:
                a, loo = _median_factor(s, y[ok])
                lm.coef, lm.loo = [a, 1.0], [float(v) for v in loo]
            lm.q = calibrated_q(lm.loo or [], terms, self.q.get(t, 0.0), self.coverage)
            cal[t] = lm.to_dict()
        base.calibration = cal
        base.meta["calibrated_on"] = int(len(rows))
        base.meta["calibration_interval"] = (
            f"Student-t: the K leave-one-out residuals pooled with the model's own error as "
            f"{CALIBRATION_PRIOR_NETWORKS:g} networks"
        )
        return base

    # -- persistence
    def save(self, directory: str | Path) -> Path:
        """Write the model into ``directory`` with its checksums (:mod:`carb.netmodel.io`); returns the directory."""
        doc = {
            "device": self.device,
            "coverage": self.coverage,
            "lat_coef": self.lat_coef,
            "mem_coef": self.mem_coef,
            "q": self.q,
            "calibration": self.calibration,
            "meta": self.meta,
            "layer": self.layer.to_doc(),
        }
        return write_model(directory, doc, self.layer.forest)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], forest: Any) -> "NetModel":
        """The model of a document written by :meth:`save`, with its layer model's loaded ``forest``.

        A layer model saved without its fallback (:func:`carb.netmodel.layers.fit_fallback`) takes
        the one of the shipped layer dataset of the model's name, fitted on the layers it was
        fitted on (the latency its layer model learned, ``meta["layer_target"]``).
        """
        layer = LayerModel.from_doc(doc["layer"], forest)
        meta = doc.get("meta") or {}
        if layer.fallback is None and isinstance(meta.get("name"), str):
            target = str(meta.get("layer_target", "latency_ms_p5"))
            layer.fallback = dataset_fallback(meta["name"], target, layer.features, own=tuple(layer.own_ops))
        return cls(
            layer=layer,
            lat_coef=list(map(float, doc["lat_coef"])),
            mem_coef=list(map(float, doc["mem_coef"])),
            q={k: float(v) for k, v in doc["q"].items()},
            calibration=doc.get("calibration") or {},
            coverage=float(doc.get("coverage", 0.9)),
            device=str(doc.get("device", "")),
            meta=doc.get("meta") or {},
        )


def load(directory: str | Path) -> NetModel:
    """A model saved by :meth:`NetModel.save` (no code runs from the files; they are checked against their checksums).

    Args:
        directory: its directory, or the name of a shipped model (:func:`carb.netmodel.io.resolve`).

    Returns:
        The network model.

    Raises:
        ModelError: not a network-model directory, one without checksums, edited or corrupt, or a malformed one (one
            line).

    """
    return read_model(directory, NetModel.from_doc)


def allocator_of(nm: NetModel) -> str:
    """The CPU workers' allocator the model's measurements were taken with.

    One of :data:`carb.measure.cpu.ALLOCATORS`; ``default`` for a model that does not record it.
    """
    return str(nm.meta.get("allocator", "default"))


def fit_netmodel(
    layer_model: LayerModel,
    rows: pd.DataFrame,
    measured: pd.DataFrame,
    *,
    groups: Sequence[str] | None = None,
    coverage: float = 0.9,
    device: str = "",
    meta: Mapping[str, Any] | None = None,
    shrink_strength: float = LAT_SHRINK_STRENGTH,
) -> NetModel:
    """Fit the network terms on whole-network measurements.

    Args:
        layer_model: the fitted :class:`LayerModel`.
        rows: :func:`network_row` figures of the measured networks.
        measured: their ``latency_ms`` and ``memory_mb`` (aligned with ``rows``).
        groups: family of each network: the interval quantiles come from
            leave-one-family-out residuals (otherwise from leave-one-out).
        coverage: nominal coverage of the intervals.
        device: the device the model describes (e.g. ``cpu-1t``).
        meta: provenance kept in the model.
        shrink_strength: how strongly the latency overheads (per node, per forward) are
            shrunk towards 0 (:data:`LAT_SHRUNK`, :data:`LAT_SHRINK_STRENGTH`); 0: plain NNLS.

    Returns:
        The network model.

    Raises:
        ModelError: fewer than 3 networks.

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
    # the finite-sample conformal level (ceil((n + 1) c) / n), as carb.model.maps use:
    # with ten networks the plain 90% quantile is below the largest residual and under-covers
    q = {
        t: float(np.quantile(np.abs(v), min(1.0, math.ceil((len(v) + 1) * coverage) / len(v)))) if v else 0.5
        for t, v in res.items()
    }
    return NetModel(
        layer=layer_model,
        lat_coef=lat_coef,
        mem_coef=mem_coef,
        q=q,
        coverage=coverage,
        device=device,
        meta=dict(meta or {}),
    )
