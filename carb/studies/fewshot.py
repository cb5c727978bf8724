"""Few-shot latency of every architecture of a space from K measurements, as ``carb fewshot`` runs it.

The space is every FBNet architecture of HELP's public data (:func:`carb.studies.help_fbnet.fewshot_help_fbnet`)
or every NAS-Bench-201 cell (:func:`carb.studies.nb201.fewshot_nb201`). The K measurements are the user's, or K
drawn from a platform of the data taken as unseen, whose held-out architectures then score the predictions
(HELP's protocol).

Example:
    >>> from carb.studies.fewshot import fewshot
    >>> pred, summary = fewshot(platform="titan_rtx_1", samples=10)  # doctest: +SKIP
    >>> summary["spearman"]                                            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["SPACES", "fewshot", "read_measured"]

#: the spaces :func:`fewshot` predicts
SPACES = ("fbnet", "nb201")


def read_measured(measured: Path) -> pd.DataFrame:
    """A user's K measurements (.parquet or .csv), ``latency_ms`` at their campaign's median speed.

    Only the rows the paired speed sentinel timed (``carb characterize`` output) change, as ``carb train`` learns
    them; anything else is as read.

    Raises:
        ValueError: ``measured PATH: cannot read (...)``.
    """
    from carb.campaign import speed as drift

    measured = Path(measured)
    try:
        meas = pd.read_parquet(measured) if measured.suffix == ".parquet" else pd.read_csv(measured)
    except (OSError, ValueError) as e:
        raise ValueError(f"measured {measured}: cannot read ({' '.join(str(e).split())[:160]})") from None
    return drift.corrected(meas, paired_only=True)


def fewshot(
    space: str = "fbnet",
    measured: Path | None = None,
    platform: str | None = None,
    samples: int = 10,
    seed: int = 0,
    sources: Sequence[str] | None = None,
    method: str = "auto",
) -> tuple[pd.DataFrame, dict]:
    """Predict the latency (ms) of every architecture of ``space`` from K measurements.

    Args:
        space: ``fbnet`` (HELP's 5,000 FBNet archs) or ``nb201`` (NAS-Bench-201's 15,625 cells).
        measured: the user's K measurements (:func:`read_measured`: ``arch_id`` and ``latency_ms``); or
        platform: a platform of the space's data taken as unseen: K of its training archs are drawn (``samples``,
            ``seed``) and its test archs score the predictions.
        samples: K, with ``platform``.
        seed: seed of the K drawn with ``platform``.
        sources: source devices (None: HELP's; a held-out platform is never its own source).
        method: fbnet: ``auto``, ``nnls`` or ``single``; nb201: ``auto`` (``ensemble``), ``ensemble`` or ``ridge``.

    Returns:
        The predictions (one row per architecture, ``measured`` marking the K) and a summary: ``k``, ``sources``,
        ``method``, and with ``platform`` its ``spearman`` and ``mape`` on the test archs.

    Raises:
        ValueError: an unknown space, method or platform, too many samples, or measurements that cannot be read
            or used (the message names the parameter).
    """
    if (measured is None) == (platform is None):
        raise ValueError("give exactly one of measured or platform")
    if space not in SPACES:
        raise ValueError(f"space {space}: unknown value (expected {' or '.join(SPACES)})")
    if space == "nb201":
        return _fewshot_nb201(measured, platform, samples, seed, sources, "ensemble" if method == "auto" else method)
    if method not in ("auto", "nnls", "single"):
        raise ValueError(f"method: unknown value {method!r} (expected auto, nnls or single)")
    return _fewshot_fbnet(measured, platform, samples, seed, sources, method)


def _fewshot_fbnet(
    measured: Path | None, platform: str | None, samples: int, seed: int, sources: Sequence[str] | None, method: str
) -> tuple[pd.DataFrame, dict]:
    """:func:`fewshot` on HELP's FBNet data (:func:`carb.studies.help_fbnet.fewshot_help_fbnet`)."""
    from scipy.stats import spearmanr

    from carb.datasets import help_fbnet as hf

    from .help_fbnet import fewshot_help_fbnet

    wide = hf.load(wide=True)
    truth = None
    if measured is not None:
        meas = read_measured(measured)
    else:
        col = f"latency_ms_{platform}"
        if col not in wide.columns:
            raise ValueError(f"platform {platform!r}: not in help-fbnet (platforms: {', '.join(hf.devices())})")
        if samples > len(hf.TRAIN_ARCH_IDS):
            raise ValueError(f"samples {samples}: K is drawn from the {len(hf.TRAIN_ARCH_IDS):,} training archs")
        ids = np.random.default_rng(seed).choice(np.asarray(hf.TRAIN_ARCH_IDS), size=samples, replace=False)
        truth = wide.set_index("arch_id")[col]
        meas = pd.DataFrame({"arch_id": ids, "latency_ms": truth.loc[ids].to_numpy()})
        if sources is None:  # the held-out device is never its own source
            sources = [d for d in hf.SOURCE_DEVICES if d != platform]
    try:
        pred, model = fewshot_help_fbnet(meas, sources=sources, method=method, table=wide)
    except ValueError as e:
        raise ValueError(f"measured {measured}: {e}" if measured is not None else str(e)) from None
    summary: dict = {
        "k": int(pred.measured.sum()),
        "sources": model.sources_used_,
        "method": model.method_,
        "weights": model.weights(),
    }
    if truth is not None:
        test = pred[pred.arch_id.isin(hf.TEST_ARCH_IDS)]
        y = truth.loc[test.arch_id].to_numpy()
        summary.update(
            device=platform,
            seed=seed,
            test_archs=int(len(test)),
            spearman=float(spearmanr(test.latency_ms, y).statistic),
            mape=float(np.mean(np.abs(test.latency_ms.to_numpy() - y) / y)),
        )
    return pred, summary


def _fewshot_nb201(
    measured: Path | None, platform: str | None, samples: int, seed: int, sources: Sequence[str] | None, method: str
) -> tuple[pd.DataFrame, dict]:
    """:func:`fewshot` on NAS-Bench-201 (:func:`~carb.studies.nb201.fewshot_help_nb201` on a platform)."""
    from .nb201 import fewshot_help_nb201, fewshot_nb201

    try:
        if platform is not None:
            r = fewshot_help_nb201(platform, samples=samples, seed=seed, sources=sources, method=method)
            pred = r.pop("predictions")
            return pred, {k: v for k, v in r.items() if k != "measured_ids"}
        return fewshot_nb201(read_measured(measured), sources=sources, method=method)
    except ValueError as e:
        if str(e).startswith(f"measured {measured}: cannot read"):
            raise
        raise ValueError(f"measured {measured}: {e}" if measured is not None else str(e)) from None
