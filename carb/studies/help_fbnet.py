"""HELP's public FBNet data: few-shot latency transfer to a new device, and GPU-to-GPU transfer.

- :func:`fewshot_help_fbnet`: the latency of all 5,000 architectures on a new device from
  K of them measured there (source models from HELP's devices, :mod:`carb.transfer`'s map).
- :func:`help_fbnet_datasets` / :func:`help_fbnet_transfer`: HELP's latency as one dataset
  per device setting, and :func:`carb.studies.analyses.transfer` between its GPU settings.
- :func:`protocol`, :func:`sample_ids`, :class:`Baseline`, :func:`score`: HELP's evaluation
  protocol (pool and test set, all or trimmed; K measured archs; Spearman over seeds) and the
  plain baseline it is compared with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from carb.datasets import help_fbnet as hf
from carb.model.gbm import GBMRegressor
from carb.transfer.fewshot import FewShotModel, SourceModels

from ._protocol import HELP_TRIM, trim_middle
from .analyses import TransferResult, transfer

__all__ = [
    "HELP_GPU_BATCH1",
    "HELP_PASSTHROUGH",
    "HELP_TRIM",
    "fewshot_help_fbnet",
    "help_fbnet_datasets",
    "help_fbnet_transfer",
    "trim_middle",
    "TRAIN",
    "TEST",
    "protocol",
    "sample_ids",
    "Baseline",
    "score",
]

#: Cost features of help-fbnet architectures that the map reads directly (MACs in millions,
#: pointwise and depthwise MACs, parameters, activation elements, convolutions).
HELP_PASSTHROUGH: tuple[str, ...] = ("macs_m", "pw_macs_m", "dw_macs_m", "params_m", "activations_m", "convs")
#: the batch-1 GPU settings of HELP's FBNet data (latency, ms)
HELP_GPU_BATCH1: tuple[str, ...] = ("1080ti_1", "2080ti_1", "titan_rtx_1", "titanx_1", "titanxp_1")


def _read_measured(measured: pd.DataFrame, wide: pd.DataFrame) -> tuple[pd.Series, np.ndarray]:
    """Return the measured ``arch_id`` and ``latency_ms`` (ms), checked against the table."""
    for col in ("arch_id", "latency_ms"):
        if col not in measured.columns:
            raise ValueError(f"measurements: missing column {col!r} (need arch_id and latency_ms)")
    ids = pd.to_numeric(measured["arch_id"], errors="coerce")
    y = pd.to_numeric(measured["latency_ms"], errors="coerce").to_numpy(float)
    known = set(wide["arch_id"])
    bad = [i for i in ids if i != i or i not in known]
    if bad:
        raise ValueError(f"measurements: arch_id {bad[0]!r} is not an architecture of help-fbnet (0..4999)")
    if ids.duplicated().any():
        raise ValueError(f"measurements: arch_id {int(ids[ids.duplicated()].iloc[0])} appears twice")
    if not (np.isfinite(y) & (y > 0)).all():
        raise ValueError("measurements: every latency_ms must be a positive number (ms)")
    return ids, y


def _source_devices(wide: pd.DataFrame, sources: Sequence[str] | None) -> list[str]:
    """Return the source devices, each checked to have a latency column in the table."""
    from carb.datasets import help_fbnet as hf

    devs = list(hf.SOURCE_DEVICES if sources is None else sources)
    have = [c.removeprefix("latency_ms_") for c in wide.columns if c.startswith("latency_ms_")]
    unknown = [d for d in devs if d not in have]
    if unknown or not devs:
        raise ValueError(
            f"source device {unknown[0] if unknown else '(none)'!r} not in help-fbnet "
            f"(devices: {', '.join(sorted(have))})"
        )
    return devs


def fewshot_help_fbnet(
    measured: pd.DataFrame,
    *,
    sources: Sequence[str] | None = None,
    method: str = "auto",
    table: pd.DataFrame | None = None,
    trim: bool = False,
) -> tuple[pd.DataFrame, FewShotModel]:
    """Predict the latency of every architecture of HELP's FBNet data on a new device from K measured there.

    Args:
        measured: the K measurements: ``arch_id`` (0..4999) and ``latency_ms`` (ms, > 0).
        sources: source devices (default: HELP's :data:`carb.datasets.help_fbnet.SOURCE_DEVICES`);
            their models learn from architectures 0..3999 (HELP's training side), per-block
            operation counts in, latency out (ridge).
        method: the map (``auto``, ``nnls``, ``single``; see :class:`carb.transfer.FewShotModel`).
        table: the wide help-fbnet table (default :func:`carb.datasets.help_fbnet.load` ``(wide=True)``).
        trim: HELP's protocol as its code runs it (:func:`trim_middle`): each source model
            learns from the middle 80% of architectures 0..3999 by that device's latency.
            Off by default: every architecture is used.

    Returns:
        ``(predictions, model)``: one row per architecture (``arch_id``, ``latency_ms``
        predicted in ms, ``measured`` True for the K given), and the fitted map.

    Raises:
        ValueError: (one line) unknown architectures or devices, missing columns, fewer
            than 2 or non-positive measurements.

    Example:
        >>> measured = pd.DataFrame({"arch_id": [0, 1, 2], "latency_ms": [5.0, 7.0, 6.0]})
        >>> pred, model = fewshot_help_fbnet(measured)  # doctest: +SKIP
    """
    from carb.datasets import help_fbnet as hf

    wide = hf.load(wide=True) if table is None else table
    ids, y = _read_measured(measured, wide)
    devs = _source_devices(wide, sources)
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[list(HELP_PASSTHROUGH)]], axis=1)
    train = wide["arch_id"].isin(hf.TRAIN_ARCH_IDS).to_numpy()
    y_src = {d: wide.loc[train, f"latency_ms_{d}"].to_numpy(float) for d in devs}
    keep = {d: trim_middle(np.arange(len(y)), y) for d, y in y_src.items()} if trim else None
    src = SourceModels("ridge", columns=list(counts.columns)).fit(X[train], y_src, rows=keep)
    rows = pd.Index(wide["arch_id"]).get_indexer(ids.astype(int))
    model = FewShotModel(src, passthrough=list(HELP_PASSTHROUGH), method=method).fit(X.iloc[rows], y)
    pred = pd.DataFrame({"arch_id": wide["arch_id"].to_numpy(), "latency_ms": model.predict(X)})
    pred["measured"] = pred["arch_id"].isin(set(ids.astype(int)))
    return pred, model


def help_fbnet_datasets(
    devices: Sequence[str] = HELP_GPU_BATCH1, n_archs: int | None = None, seed: int = 0
) -> dict[str, pd.DataFrame]:
    """Return HELP's public FBNet latency (ms) as one dataset per device setting.

    Args:
        devices: HELP device settings (e.g. ``1080ti_1``: the GPU at batch 1).
        n_archs: draw this many architectures at random (the same on every device); all
            when None.
        seed: seed of the draw.

    Returns:
        Device setting -> its rows, keyed by ``arch_id``, with the numeric config and
        feature columns, ``device`` and ``latency_ms`` (ms).

    Raises:
        ValueError: an unknown device setting.
    """
    from carb.datasets import help_fbnet

    wide = help_fbnet.load(wide=True)
    unknown = [d for d in devices if f"latency_ms_{d}" not in wide.columns]
    if unknown:
        raise ValueError(f"help-fbnet: unknown device {unknown[0]!r} (devices: {', '.join(help_fbnet.devices())})")
    if n_archs is not None and n_archs < len(wide):
        wide = wide.sample(n=n_archs, random_state=seed).sort_values("arch_id")
    lat = [c for c in wide.columns if c.startswith("latency_ms_")]
    base = wide.drop(columns=lat)
    return {
        d: base.assign(device=d, latency_ms=wide[f"latency_ms_{d}"].to_numpy()).reset_index(drop=True) for d in devices
    }


def help_fbnet_transfer(
    devices: Sequence[str] = HELP_GPU_BATCH1, n_archs: int | None = 2000, seed: int = 0, test_fraction: float = 0.3
) -> TransferResult:
    """Run :func:`carb.studies.analyses.transfer` of latency (ms) between HELP's GPU settings.

    The model is :class:`carb.model.gbm.GBMRegressor` on the FBNet config and feature columns.

    Args:
        devices: the device settings (default: the five batch-1 GPUs).
        n_archs: architectures drawn at random (all when None).
        seed: seed of the draw and of the held-out split.
        test_fraction: share of the architectures held out.

    Returns:
        The :class:`carb.studies.analyses.TransferResult`.
    """
    data = help_fbnet_datasets(devices, n_archs=n_archs, seed=seed)
    return transfer(
        data,
        targets=["latency_ms"],
        model_factory=lambda: GBMRegressor(targets=["latency_ms"], interval_folds=0),
        key="arch_id",
        test_fraction=test_fraction,
        seed=seed,
    )


#: HELP's splits: the pool a predictor may learn from and sample from, and the test set (arch ids)
TRAIN = np.arange(hf.TRAIN_ARCH_IDS.start, hf.TRAIN_ARCH_IDS.stop)
TEST = np.arange(hf.TEST_ARCH_IDS.start, hf.TEST_ARCH_IDS.stop)


def protocol(y: dict[str, np.ndarray], devices: list[str], trimmed: bool) -> dict[str, dict[str, np.ndarray]]:
    """Return, per device, its pool (arch ids a model may learn from / sample from) and its test set.

    They are all of 0..3999 and 4000..4999, or HELP's trimmed middle 80% of each.
    """
    if not trimmed:
        return {"pool": {d: TRAIN for d in devices}, "test": {d: TEST for d in devices}}
    return {
        "pool": {d: trim_middle(TRAIN, y[d][TRAIN]) for d in devices},
        "test": {d: trim_middle(TEST, y[d][TEST]) for d in devices},
    }


def sample_ids(seed: int, k: int, with_reference: bool, reference: np.ndarray, pool: np.ndarray = TRAIN) -> np.ndarray:
    """Return the target's measured architectures.

    They are the reference ones (when asked) plus k drawn at random, without repeats, from ``pool`` (arch_id
    0..3999, or the target's trimmed pool).
    """
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(pool, reference) if with_reference else pool
    drawn = rng.choice(pool, size=k, replace=False)
    return np.concatenate([reference, drawn]) if with_reference else drawn


class Baseline:
    """HELP's plain baseline: per-source LightGBM models, then a ridge map to the target.

    The per-source LightGBM models are fitted on one-hot layer ops (log latency, arch 0..3999, or each source's
    ``pools[d]``); the ridge map (alpha 0.1, log space) goes from their predictions to the target, fitted on the K
    target measurements.
    """

    def __init__(
        self,
        onehot: np.ndarray,
        y: dict[str, np.ndarray],
        sources: list[str],
        jobs: int,
        pools: dict[str, np.ndarray] | None = None,
    ):
        """Fit one LightGBM model per source device (``jobs`` threads) and keep their log predictions of every arch."""
        import lightgbm as lgb

        pools = pools or {d: TRAIN for d in sources}
        self.logpred = np.column_stack(
            [
                lgb.LGBMRegressor(
                    n_estimators=300,
                    learning_rate=0.05,
                    num_leaves=31,
                    n_jobs=jobs,
                    random_state=0,
                    verbose=-1,
                    deterministic=True,
                    force_row_wise=True,
                )
                .fit(onehot[pools[d]], np.log(y[d][pools[d]]))
                .predict(onehot)
                for d in sources
            ]
        )

    def predict(self, idx: np.ndarray, y_target: np.ndarray) -> np.ndarray:
        """Fit the ridge map on the target archs ``idx`` and return the log latency it predicts for every arch."""
        from sklearn.linear_model import Ridge

        m = Ridge(alpha=0.1).fit(self.logpred[idx], np.log(y_target[idx]))
        return m.predict(self.logpred)


def score(
    predict,
    target: str,
    y: dict[str, np.ndarray],
    k: int,
    with_ref: bool,
    seeds: range,
    reference: np.ndarray,
    prot: dict | None = None,
) -> tuple[float, float]:
    """Return the mean and standard deviation over seeds of the test Spearman correlation.

    ``prot`` (from :func:`protocol`) gives the target's pool and test set (default: all archs).
    """
    pool = TRAIN if prot is None else prot["pool"][target]
    test = TEST if prot is None else prot["test"][target]
    rs = []
    for seed in seeds:
        idx = sample_ids(seed, k, with_ref, reference, pool)
        p = predict(idx, y[target])
        rs.append(stats.spearmanr(p[test], y[target][test])[0])
    return float(np.mean(rs)), float(np.std(rs))
