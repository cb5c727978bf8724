"""NAS-Bench-201 (the nb201 dataset): HELP's few-shot protocol on its 15,625 cells, and its analyses.

- :func:`fewshot_nb201`: the latency of every cell on a new device from K measured there;
  :func:`fewshot_help_nb201` runs HELP's protocol (reference cells, trimmed pools) for one device.
- :func:`nb201_batch_scaling`, :func:`nb201_transfer_matrix`, :func:`nb201_decoupling`: batch
  scaling on the desktop GPUs, the transfer matrix between its 29 settings, and energy
  against latency on an energy platform.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import RidgeCV

from carb.model.maps import nnls_map

from ._protocol import trim_middle

__all__ = [
    "NB201_GPUS",
    "NB201_METHODS",
    "NB201_PASSTHROUGH",
    "fewshot_help_nb201",
    "fewshot_nb201",
    "nb201_batch_scaling",
    "nb201_decoupling",
    "nb201_transfer_matrix",
]

#: cost features of a NAS-Bench-201 cell the nb201 map reads in log space (FLOP, count, B, count)
NB201_PASSTHROUGH: tuple[str, ...] = ("flops", "params", "activation_bytes", "n_ops")


@functools.cache
def _nb201_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the source-model inputs and the latency of every NAS-Bench-201 cell.

    (X, latency): per NAS-Bench-201 architecture (index = arch_idx, CIFAR-10 input as
    HELP's files), the source-model inputs (one-hot edge operations, the passthrough costs,
    zero nodes and node sums) and the latency (ms) on every platform under HELP's names.
    """
    from carb.datasets import nb201 as d
    from carb.families import nb201 as fam

    archs = d.archs()
    codes = fam.edge_codes(archs)
    feats = fam.features(archs.assign(input_size=32, classes=10))
    X = pd.DataFrame(
        {f"e{k}_{op}": (codes[:, k] == j).astype(float) for k in range(6) for j, op in enumerate(fam.OPS)},
        index=archs["arch_idx"],
    )
    for c in (*NB201_PASSTHROUGH, "n_conv", "live_activation_bytes", "n_zero_nodes", "n_node_adds"):
        X[c] = feats[c].to_numpy(float)
    w = d._wide_by_metric(str(d._data_dir()))
    w = w[w["dataset"] == "cifar10"]
    lat = w.pivot(index="arch_idx", columns="device", values="latency_ms").reindex(archs["arch_idx"])
    return X, lat


#: maps of :func:`fewshot_nb201`: ``ensemble`` (default) and ``ridge`` (its first part alone, to compare)
NB201_METHODS: tuple[str, ...] = ("ensemble", "ridge")


def _read_measured(measured: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Return the measured ``arch_idx`` and ``latency_ms`` (ms), checked."""
    for col in ("arch_idx", "latency_ms"):
        if col not in measured.columns:
            raise ValueError(f"measurements: missing column {col!r} (need arch_idx and latency_ms)")
    ids = pd.to_numeric(measured["arch_idx"], errors="coerce").to_numpy(float)
    y = pd.to_numeric(measured["latency_ms"], errors="coerce").to_numpy(float)
    if not (np.isfinite(ids) & (ids >= 0) & (ids < 15625) & (ids == np.round(ids))).all():
        raise ValueError("measurements: every arch_idx must be an architecture of nb201 (0..15624)")
    if len(set(ids.tolist())) != len(ids):
        raise ValueError("measurements: an arch_idx appears twice")
    if len(y) < 3 or not (np.isfinite(y) & (y > 0)).all():
        raise ValueError(f"measurements: need >= 3 positive latency_ms values (ms), got {len(y)} rows")
    return ids, y


def _source_devices(lat: pd.DataFrame, sources: Sequence[str] | None, method: str) -> list[str]:
    """Return the source devices, checked against the platforms of ``lat``, after checking ``method``."""
    from carb.datasets import nb201 as d

    devs = list(d.HELP_SOURCE_DEVICES if sources is None else sources)
    unknown = [s for s in devs if s not in lat.columns]
    if unknown or not devs:
        raise ValueError(
            f"source device {unknown[0] if unknown else '(none)'!r} not in nb201 "
            f"(devices: {', '.join(sorted(lat.columns))})"
        )
    if method not in NB201_METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(NB201_METHODS)}")
    return devs


def fewshot_nb201(
    measured: pd.DataFrame, *, sources: Sequence[str] | None = None, trim: bool = True, method: str = "ensemble"
) -> tuple[pd.DataFrame, dict]:
    """Predict the latency (ms) of all 15,625 NAS-Bench-201 cells on a new device from K measured there.

    HELP's setting: the device's latency of its 10 reference cells and a few more. Source
    models, learnt from HELP's training pool (archs 0..899, each trimmed to the middle 80%
    of its device's latency when ``trim``, as HELP's loader): per source device a ridge of
    log latency on the one-hot edge operations and cell costs (additive: one factor per
    operation on each edge); with ``method="ensemble"`` the mean (log) of that ridge and a
    second one that also reads the products of pairs of edge one-hots (which operations
    meet in a cell: a convolution fed by a dead node costs what it costs on some devices
    and not others).

    The map (``method``):

    - ``"ridge"``: a ridge (penalty by generalized cross-validation) from the log source
      predictions and the log costs :data:`NB201_PASSTHROUGH` to the log of the K
      measurements (mean Spearman 0.944 on HELP's targets).
    - ``"ensemble"`` (default): the mean, in log space, of three maps fitted on the K
      measurements from those source predictions: that ridge, which here also reads the
      cell's operation counts (how many of its six edges carry each operation); the same
      ridge anchored on the one source that alone tracks the target best (slope 1 and a
      free offset, least median deviation on the K; the ridge then fits the residual, so
      the penalty shrinks toward that source instead of toward a constant); and HELP-style
      non-negative least squares in milliseconds (:func:`carb.model.maps.nnls_map`: the
      source latencies and the raw costs as non-negative parts of the target's latency).
      The three err differently (log vs linear units, shrunk toward zero vs toward a
      source), and their mean beats each of them on HELP's validation devices
      (titanx_1/32/256, gold_6240). Mean Spearman over seeds 0..9: validation 0.968
      against 0.949 for ``ridge``; HELP's nine meta-training devices, each left out of the
      sources and taken as the target, 0.931 against 0.914 (0.911 without the operation
      counts); HELP's six targets 0.952 against 0.942 (HELP: 0.932).

    Args:
        measured: ``arch_idx`` (0..15624) and ``latency_ms`` (ms, > 0), K >= 3 rows.
        sources: HELP device names (default HELP's meta-training devices).
        trim: HELP's per-device trimming of the sources' training pool.
        method: ``ensemble`` or ``ridge`` (above).

    Returns:
        ``(predictions, info)``: ``arch_idx``, ``latency_ms`` (ms), ``measured``; and the
        map's ``sources``, ``method``, ``alpha`` (the ridge map's penalty) and ``k``.

    Raises:
        ValueError: (one line) unknown architectures or devices, too few or bad measurements.

    Example:
        >>> measured = pd.DataFrame({"arch_idx": [0, 1, 2], "latency_ms": [5.0, 7.0, 6.0]})
        >>> pred, info = fewshot_nb201(measured)  # doctest: +SKIP
    """
    ids, y = _read_measured(measured)
    X, lat = _nb201_inputs()
    devs = _source_devices(lat, sources, method)
    S = _nb201_source_logs(tuple(devs), trim)
    if method == "ensemble":  # each source: the mean (log) of its additive and its pairs ridge
        S = (S + _nb201_source_logs(tuple(devs), trim, pairs=True)) / 2
    costs = X[list(NB201_PASSTHROUGH)].to_numpy(float)
    k = ids.astype(int)
    Z = np.column_stack([S, np.log(costs)])
    if method == "ensemble":
        # how many of the six edges carry each operation: with them the map can price from
        # the K points an operation the target weighs unlike every source (eyeriss, the ASIC;
        # the 1080 Ti at batch 256); chosen on HELP's validation devices and on its
        # meta-training devices left out one at a time as targets
        Z = np.column_stack([Z, _nb201_op_counts(X)])
    m = RidgeCV(alphas=np.logspace(-3, 2, 11)).fit(Z[k], np.log(y))
    log_pred = m.predict(Z)
    if method == "ensemble":
        log_pred = (log_pred + _anchored_ridge(S, Z, k, np.log(y)) + _nnls_ms(S, costs, k, y)) / 3
    pred = pd.DataFrame({"arch_idx": X.index.to_numpy(), "latency_ms": np.exp(log_pred)})
    pred["measured"] = pred["arch_idx"].isin(set(k.tolist()))
    return pred, {"sources": devs, "method": method, "alpha": float(m.alpha_), "k": int(len(k))}


def _nb201_op_counts(X: pd.DataFrame) -> np.ndarray:
    """Return, per cell, how many of its six edges carry each operation.

    Per cell, how many of its six edges carry each operation of NAS-Bench-201, shape
    (n, 5), from the one-hot edge columns ``e{edge}_{op}`` of :func:`_nb201_inputs`.
    """
    from carb.families import nb201 as fam

    return np.column_stack([X[[f"e{k}_{op}" for k in range(6)]].to_numpy(float).sum(axis=1) for op in fam.OPS])


def _anchored_ridge(S: np.ndarray, Z: np.ndarray, k: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    """Return the log prediction of a ridge anchored on one source.

    Log prediction of a ridge anchored on one source: ``log y = S[:, j] + ridge(Z)``, with
    ``j`` the source whose log prediction, shifted by its mean offset, deviates least (median)
    from the K measured ``log_y`` (rows ``k``); Z centred on the K so the ridge's intercept is
    the offset. Shrinking the ridge then leaves that source, not a constant.
    """
    dev = log_y[:, None] - S[k]
    j = int(np.argmin(np.median(np.abs(dev - dev.mean(axis=0)), axis=0)))
    Zc = Z - Z[k].mean(axis=0)
    r = RidgeCV(alphas=np.logspace(-2, 3, 11)).fit(Zc[k], log_y - S[k, j])
    return S[:, j] + r.predict(Zc)


def _nnls_ms(S: np.ndarray, costs: np.ndarray, k: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return the log prediction of HELP-style non-negative least squares in milliseconds.

    Log prediction of HELP-style non-negative least squares in milliseconds: the source
    latencies ``exp(S)`` and the raw ``costs`` as non-negative parts of the K measured ``y``
    (rows ``k``; :func:`carb.model.maps.nnls_map`). Floored at a tenth of the least measured latency: a
    linear map can cross zero far from its K points, and a log of ~0 would swamp a mean.
    """
    F = np.column_stack([np.exp(S), costs])
    w, b = nnls_map(F[k], y)
    return np.log(np.maximum(F @ w + b, 0.1 * float(np.min(y))))


@functools.cache
def _nb201_source_logs(devs: tuple[str, ...], trim: bool, pairs: bool = False) -> np.ndarray:
    """Return the log latency predicted by each source device's ridge for all 15,625 cells.

    Log latency predicted by each source device's ridge for all 15,625 cells (cached:
    the protocol asks for the same sources for every target and seed). ``pairs``: the
    ridge also reads the products of pairs of edge one-hots (standardized, as every
    column), its penalty searched higher (1e-1 .. 1e4: ~400 more columns, 720 cells).
    """
    from carb.datasets import nb201 as d

    X, lat = _nb201_inputs()
    pool = np.arange(d.HELP_TRAIN_ARCHS.start, d.HELP_TRAIN_ARCHS.stop)
    y_src = {s: lat[s].to_numpy(float)[pool] for s in devs}
    rows = {s: trim_middle(np.arange(len(pool)), v) for s, v in y_src.items()} if trim else None
    F = X.to_numpy(float)
    if pairs:
        onehot = X[[c for c in X.columns if c.startswith("e")]].to_numpy(float)
        i, j = np.triu_indices(onehot.shape[1], 1)
        prod = onehot[:, i] * onehot[:, j]
        F = np.column_stack([F, prod[:, prod[pool].std(axis=0) > 0]])  # same-edge pairs are all zero
    # standardized: on the raw costs (FLOPs ~1e8) the GCV solve is ill-conditioned (sources
    # move by up to 0.35 in log with the column order)
    F = (F - F[pool].mean(axis=0)) / np.where(F[pool].std(axis=0) > 0, F[pool].std(axis=0), 1.0)
    alphas = np.logspace(-1, 4, 11) if pairs else np.logspace(-3, 3, 13)
    out = []
    for s, v in y_src.items():  # a ridge on log latency; penalty by GCV
        keep = pool[rows[s]] if rows is not None else pool
        out.append(RidgeCV(alphas=alphas).fit(F[keep], np.log(lat[s].to_numpy(float)[keep])).predict(F))
    return np.column_stack(out)


def fewshot_help_nb201(
    device: str,
    *,
    samples: int = 10,
    seed: int = 0,
    reference: bool = True,
    sources: Sequence[str] | None = None,
    method: str = "ensemble",
) -> dict:
    """Run HELP's few-shot protocol on NAS-Bench-201 for one device.

    HELP's few-shot protocol on NAS-Bench-201 for one device, as HELP's code runs it
    (``loader.py``): the device's latency of the 10 reference cells (when ``reference``) and
    of ``samples`` cells drawn (``seed``) from its trimmed pool (archs 0..899, middle 80% by
    its latency) is all :func:`fewshot_nb201` sees; it is scored on the trimmed test set
    (archs 900..1899, middle 80%). ``device``: a HELP device name or nb201 platform;
    ``method``: the map (:data:`NB201_METHODS`).

    Returns:
        ``device``, ``k``, ``spearman``, ``mape`` (fraction) on the ``test_archs`` scored,
        ``measured_ids``, ``predictions`` (all 15,625 cells) and the map's info.

    Raises:
        ValueError: (one line) unknown device (naming those there are).
    """
    from scipy.stats import spearmanr

    from carb.datasets import nb201 as d

    name = d.help_device(device)
    _, lat = _nb201_inputs()
    if name not in lat.columns:
        raise ValueError(f"device {device!r} not in nb201 (devices: {', '.join(sorted(lat.columns))})")
    if not 1 <= samples <= 700:
        raise ValueError(f"samples: {samples} must be in 1..700 (the trimmed pool has 720 cells)")
    y = lat[name].to_numpy(float)
    pool = np.arange(d.HELP_TRAIN_ARCHS.start, d.HELP_TRAIN_ARCHS.stop)
    test = np.arange(d.HELP_TEST_ARCHS.start, d.HELP_TEST_ARCHS.stop)
    tr, te = trim_middle(pool, y[pool]), trim_middle(test, y[test])
    ref = np.array(d.reference_arch_ids()) if reference else np.array([], int)
    drawn = np.random.default_rng(seed).choice(np.setdiff1d(tr, ref), samples, replace=False)
    ids = np.concatenate([ref, drawn]).astype(int)
    srcs = [s for s in (d.HELP_SOURCE_DEVICES if sources is None else sources) if s != name]
    pred, info = fewshot_nb201(pd.DataFrame({"arch_idx": ids, "latency_ms": y[ids]}), sources=srcs, method=method)
    p = pred["latency_ms"].to_numpy()[te]
    return {
        "device": name,
        "k": int(len(ids)),
        "seed": seed,
        "test_archs": int(len(te)),
        "spearman": float(spearmanr(p, y[te]).statistic),
        "mape": float(np.mean(np.abs(p - y[te]) / y[te])),
        "measured_ids": ids.tolist(),
        "predictions": pred,
        **info,
    }


# -- analyses of the measured dataset (29 device settings) ---------------------------------

#: the five desktop GPUs of HELP's NAS-Bench-201 data, each at batch 1, 32 and 256
NB201_GPUS: tuple[str, ...] = ("1080ti", "2080ti", "titanx", "titanxp", "titan_rtx")


def _nb201_cifar10(df: pd.DataFrame) -> pd.DataFrame:
    """``ok`` rows of the CIFAR-10 input (every platform has it), latency per arch and platform."""
    d = df[(df["status"] == "ok") & (df["dataset"] == "cifar10")]
    return d.pivot_table(index="arch_idx", columns="platform", values="latency_ms", aggfunc="first")


def nb201_batch_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Return latency against batch on the five desktop GPUs of the ``nb201`` dataset.

    Latency against batch on the five desktop GPUs of the ``nb201`` dataset (CIFAR-10
    input, all cells measured at batch 1, 32 and 256: a balanced grid).

    One row per GPU: ``b1_ms``, ``b32_ms``, ``b256_ms`` (median over cells of the time of
    one forward of the whole batch, ms), ``ratio_32_1`` and ``ratio_256_1`` (medians over
    cells of the per-cell ratios), ``per_image_gain_256`` (per-image time at batch 1 / at
    256, median over cells), ``elasticity_1_32`` and ``elasticity_32_256`` (log-log slopes
    of the median profile: ~0 launch-bound, ~1 throughput-bound), ``share_flat_32``
    (share of cells whose batch-32 forward costs at most 1.2x their batch-1 one).
    """
    lat = _nb201_cifar10(df)
    rows = []
    for g in NB201_GPUS:
        cols = [f"{g}_b{b}" for b in (1, 32, 256)]
        if not all(c in lat.columns for c in cols):
            continue
        t = lat[cols].dropna()
        b1, b32, b256 = (t[c].to_numpy(float) for c in cols)
        m1, m32, m256 = np.median(b1), np.median(b32), np.median(b256)
        rows.append(
            {
                "gpu": g,
                "cells": len(t),
                "b1_ms": m1,
                "b32_ms": m32,
                "b256_ms": m256,
                "ratio_32_1": float(np.median(b32 / b1)),
                "ratio_256_1": float(np.median(b256 / b1)),
                "per_image_gain_256": float(np.median(256 * b1 / b256)),
                "elasticity_1_32": float(np.log(m32 / m1) / np.log(32)),
                "elasticity_32_256": float(np.log(m256 / m32) / np.log(8)),
                "share_flat_32": float(np.mean(b32 <= 1.2 * b1)),
            }
        )
    return pd.DataFrame(rows)


def nb201_transfer_matrix(df: pd.DataFrame, method: str = "spearman") -> pd.DataFrame:
    """Return how one setting's latency ranks the cells of another, for all settings.

    How one setting's latency ranks the cells of another, for all settings of the ``nb201``
    dataset (CIFAR-10 input; cells measured on both): the Spearman correlation of the
    two settings' measured latencies (``method="spearman"``), or the R² of the log-log line
    from one to the other (``"r2_log"``: the share of log-latency variance a per-device
    factor and exponent carry over). A square DataFrame, settings sorted.
    """
    lat = _nb201_cifar10(df)
    lat = lat[sorted(lat.columns)]
    if method == "spearman":
        return lat.corr(method="spearman")
    if method == "r2_log":
        return np.log(lat).corr(method="pearson") ** 2
    raise ValueError(f"method {method!r}: expected spearman or r2_log")


def nb201_decoupling(df: pd.DataFrame, platform: str = "edgegpu") -> dict[str, Any]:
    """Return energy against latency on one energy platform of the ``nb201`` dataset.

    Energy against latency on one energy platform of the ``nb201`` dataset (default the
    Jetson TX2): how far energy is more than latency times a constant power.

    Returns ``summary`` (rows; mean / sd / p5 / p95 / min / max of the mean power
    ``energy_j / latency_ms`` in W; R² of log energy on log latency; Spearman of energy
    with latency; the share of cell pairs, same input, that energy and latency order
    differently (2,000 cells sampled per input); the MAPE of "latency x median power" as an
    energy predictor; the noise floor: median |cifar10 - cifar100| / pair mean of energy and
    latency), ``by_input`` (power per input variant), ``drivers`` (Spearman of power with
    the latency and each static feature on the CIFAR-10 rows, largest first: what the
    power depends on; needs the feature columns), ``power`` (the rows' power in W).
    """
    d = df[(df["status"] == "ok") & (df["platform"] == platform) & df["energy_j"].notna()].copy()
    if not len(d):
        raise ValueError(f"nb201_decoupling: no energy rows on {platform!r}")
    d["power_w"] = d["energy_j"] / d["latency_ms"] * 1000.0
    p = d["power_w"].to_numpy(float)
    le, ll = np.log(d["energy_j"].to_numpy(float)), np.log(d["latency_ms"].to_numpy(float))
    r2 = float(np.corrcoef(le, ll)[0, 1] ** 2)
    from scipy.stats import spearmanr

    med_power = float(np.median(p))
    const = d["latency_ms"].to_numpy(float) * med_power / 1000.0
    discord = []
    rng = np.random.default_rng(0)
    for _, g in d.groupby("dataset"):
        s = g.iloc[rng.choice(len(g), min(2000, len(g)), replace=False)]
        e, t = s["energy_j"].to_numpy(), s["latency_ms"].to_numpy()
        i, j = np.triu_indices(len(s), 1)
        discord.append(float(np.mean(np.sign(e[i] - e[j]) != np.sign(t[i] - t[j]))))
    pair = d.pivot_table(index="arch_idx", columns="dataset", values=["energy_j", "latency_ms"])
    floor = {}
    for t in ("energy_j", "latency_ms"):
        if ("cifar10" in pair[t].columns) and ("cifar100" in pair[t].columns):
            a, b = pair[t]["cifar10"], pair[t]["cifar100"]
            floor[t] = float(np.nanmedian(np.abs(a - b) / ((a + b) / 2)))
    summary = {
        "platform": platform,
        "rows": int(len(d)),
        "power_mean_w": float(p.mean()),
        "power_sd_w": float(p.std()),
        "power_p5_w": float(np.quantile(p, 0.05)),
        "power_p95_w": float(np.quantile(p, 0.95)),
        "power_min_w": float(p.min()),
        "power_max_w": float(p.max()),
        "power_median_w": med_power,
        "r2_log_energy_on_log_latency": r2,
        "spearman_energy_latency": float(spearmanr(d["energy_j"], d["latency_ms"]).statistic),
        "pairs_ordered_differently": float(np.mean(discord)),
        "mape_latency_x_median_power": float(np.mean(np.abs(const - d["energy_j"]) / d["energy_j"])),
        "noise_floor_cifar10_vs_cifar100": floor,
    }
    by_input = d.groupby("dataset")["power_w"].agg(["count", "mean", "std", "median"]).reset_index()
    cand = [
        "latency_ms",
        "flops",
        "params",
        "activation_bytes",
        "live_activation_bytes",
        "n_conv",
        "n_ops",
        "n_none",
        "n_skip_connect",
        "n_nor_conv_1x1",
        "n_nor_conv_3x3",
        "n_avg_pool_3x3",
        "n_zero_nodes",
        "arithmetic_intensity",
        "input_size",
        "classes",
    ]
    drivers = []
    # within one input (CIFAR-10): across inputs the input size alone moves power (by_input)
    one = d[d["dataset"] == "cifar10"] if (d["dataset"] == "cifar10").any() else d
    for c in cand:
        if c in one.columns and one[c].nunique() > 1:
            drivers.append({"input": c, "spearman_with_power": float(spearmanr(one[c], one["power_w"]).statistic)})
    drivers = pd.DataFrame(drivers)
    if len(drivers):
        drivers = drivers.reindex(drivers["spearman_with_power"].abs().sort_values(ascending=False).index)
    return {
        "summary": summary,
        "by_input": by_input,
        "drivers": drivers.reset_index(drop=True),
        "power": d[["arch_idx", "dataset", "latency_ms", "energy_j", "power_w"]].reset_index(drop=True),
    }
