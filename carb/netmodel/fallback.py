"""The measured fallback: how the layer model prices an op it has no measurements of.

An op the layer model has not measured is **never free**: it is priced by the bytes-and-FLOPs
roofline of its fallback class (:data:`FALLBACK_CLASSES`: element-wise, normalization, data
movement, pooling, compute), fitted on the measured layers of that class, and its interval is
widened by that roofline's error on an op it has not seen (:func:`fit_fallback`). An op an op
campaign measured (:data:`OP_DATASETS`) is priced by a roofline of its own layers instead
(:func:`fit_op_rooflines`), scaled to the model's campaign speed by the bridge layers.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Collection

import numpy as np
import pandas as pd

from carb.netmodel.roofline import CHANNELS_LAST, FEATURES_VERSION, _apply_roofline, _roofline, _work, op_class

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
        "softmax_strided",
        "gap",
        "gap1d",
        "gap3d",
    ),
    "movement": (
        "cat",
        "copy",
        "copy_strided",
        "upsample_nearest",
        "upsample_bilinear",
        "pad",
        "pad_reflect",
        "pad_replicate",
        "pixelshuffle",
        "pixelunshuffle",
    ),
    "pooling": ("pool", "pool1d", "pool3d", "pool_dilated", "pool1d_dilated", "pool3d_dilated"),
    "compute": (
        "conv",
        "conv_dw",
        "conv_dw_multiplier",
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


def _measured_rows(layers: pd.DataFrame, y_ms: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows a roofline is fitted on: a positive, finite latency (ms), ``se`` composites left out."""
    y = np.asarray(y_ms, np.float64)
    keep = (layers["op"] != "se").to_numpy() & np.isfinite(y) & (y > 0)
    return layers[keep].reset_index(drop=True), y[keep]


def fallback_class(layers: pd.DataFrame, cls: np.ndarray | None = None) -> np.ndarray:
    """The fallback class of each layer row (:data:`FALLBACK_CLASSES`).

    An op capture could not read (``unknown``) is ``compute`` where it counts FLOPs (a
    matrix product ran), else :data:`GENERIC`; an op on a channels-last input is its class's.
    ``cls``: the rows' :func:`op_class`, if already computed.
    """
    c = op_class(layers) if cls is None else cls
    out = np.array([_FALLBACK_OF.get(str(k).removesuffix(CHANNELS_LAST), GENERIC) for k in c], dtype=object)
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
    layers, y = _measured_rows(layers, y_ms)
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
    layers: pd.DataFrame,
    y_ms: np.ndarray,
    version: int = FEATURES_VERSION,
    coverage: float = 0.9,
    min_layers: int = 4,
    units: Collection[str] | None = None,
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
        units: only these ops (:func:`fallback_unit`); ``None``: every op.

    Returns:
        ``op:<op>`` -> ``{"coef", "q", "n", "ops", "median"}``; ``median``: the median held-out ``|log error|``.
    """
    layers, y = _measured_rows(layers, y_ms)
    if not len(y):
        return {}
    cls = op_class(layers)
    unit = fallback_unit(layers, cls)
    work, nbytes = _work(layers, cls, version), layers["bytes"].to_numpy(np.float64)
    out: dict[str, dict[str, Any]] = {}
    for u in sorted(set(unit) if units is None else set(unit) & set(units)):
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
            "median": float(np.median(res)),
        }
    return out


def dataset_fallback(
    name: str, target: str, version: int, own: Collection[str] = ()
) -> dict[str, dict[str, Any]] | None:
    """:func:`fit_fallback` on the shipped layer dataset ``carb/data/<name>.parquet`` (``None``: no such dataset).

    For a shipped model saved before models carried their own fallback: the measured layers it was fitted on,
    the op campaigns' rooflines (:data:`OP_DATASETS`), and the rooflines of the ops of the known classes
    ``own`` (:attr:`carb.netmodel.LayerModel.own_ops`) fitted on the dataset's own layers, which win over a
    campaign's.
    """
    from importlib import resources

    path = Path(str(resources.files("carb") / "data" / f"{name}.parquet"))
    if not name or "/" in name or not path.is_file():
        return None
    out = _fallback_of_file(str(path), path.stat().st_mtime_ns, target, version)
    for extra in OP_DATASETS.get(name, ()):
        ops = Path(str(resources.files("carb") / "data" / f"{extra}.parquet"))
        if out is not None and ops.is_file():
            campaign = _op_rooflines_of_file(str(ops), ops.stat().st_mtime_ns, str(path), target, version)
            out = {**out, **campaign}
    if out is not None and own:
        out = {**out, **_own_rooflines_of_file(str(path), path.stat().st_mtime_ns, target, version, tuple(sorted(own)))}
    return out


@functools.lru_cache(maxsize=8)
def _own_rooflines_of_file(
    path: str, mtime_ns: int, target: str, version: int, classes: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """:func:`fit_op_rooflines` on a layer dataset's own layers of the op classes ``classes``."""
    from carb.families.layers import layer_frame

    df = pd.read_parquet(path)
    if target not in df.columns or "op" not in df.columns:
        return {}
    df = df[df.get("status", pd.Series("ok", index=df.index)).fillna("ok") == "ok"].reset_index(drop=True)
    lf = layer_frame(df).reset_index(drop=True)
    cls = op_class(lf)
    units = set(fallback_unit(lf, cls)[np.isin(cls, classes)])
    return fit_op_rooflines(lf, df[target].to_numpy(np.float64), version, units=units)


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
            **({"median": float(v["median"])} if "median" in v else {}),
        }
        for k, v in doc.items()
    }
