"""Few-shot calibration of a source-device model to a device it has never seen.

Measure K well-chosen configs on the new device, then map the source model's
predictions to the new device's values, per target:

* **Active sampler** (:func:`choose_samples`): the K configs are spread over the source
  model's predicted cost range (one per quantile bin of predicted latency) and over the
  space (within a bin, the config farthest from those already chosen, in the parameters'
  level ranks), so that the map sees cheap and costly, small- and large-batch configs.
* **Map** (:class:`CalibratedModel`): in log space, with ``s`` the source prediction,
  one of ``log y = log s`` (no change: the target transfers as it is), ``a + log s``
  (a device factor), ``a + b log s`` (a factor and a different growth with cost) or,
  from 8 measurements on, ``a + b log s + c log batch``
  (energy and latency scale differently with load on different devices), whichever has
  the least exact leave-one-out error. Intervals: the source interval mapped through the
  map and widened by the map's leave-one-out residual quantile.

The map is the same one whatever the source: a CARB bundle, or any predictor with
``predict(DataFrame)`` giving ``<target>``, ``_lo``, ``_hi`` columns and ``targets_``.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = ["choose_samples", "CalibratedModel", "fit_calibrated", "load_predictor", "MIN_K_BATCH_TERM"]

#: from this many measurements on, the map also reads log(batch)
MIN_K_BATCH_TERM = 8
CALIBRATION_FILE = "calibration.json"


def choose_samples(candidates: pd.DataFrame, source: Any, k: int, seed: int = 0,
                   target: str = "latency_ms") -> pd.DataFrame:
    """Pick ``k`` configs to measure: one per quantile bin of the source model's predicted
    ``target``, each the farthest (maximin over the parameters' level ranks) from those
    already chosen. Returns the chosen rows of ``candidates``."""
    if k < 2:
        raise ValueError(f"samples: {k} is too few to calibrate (at least 2)")
    if k >= len(candidates):
        return candidates.copy()
    pred = np.log(source.predict(candidates)[target].to_numpy(float))
    rng = np.random.default_rng(seed)
    levels = _level_ranks(candidates)
    order = np.argsort(pred + rng.uniform(0, 1e-9, len(pred)))
    bins = np.array_split(order, k)
    chosen: list[int] = []
    for b in bins:
        if not chosen:
            chosen.append(int(rng.choice(b)))
            continue
        d = np.min(((levels[b][:, None, :] - levels[chosen][None, :, :]) ** 2).sum(-1), axis=1)
        chosen.append(int(b[np.argmax(d + rng.uniform(0, 1e-9, len(d)))]))
    return candidates.iloc[sorted(chosen)].copy()


def _level_ranks(df: pd.DataFrame) -> np.ndarray:
    from carb.space import PARAMETERS

    cols = []
    for p in PARAMETERS:
        if p not in df.columns:
            continue
        codes = pd.factorize(df[p].astype(str), sort=True)[0].astype(float)
        cols.append(codes / max(codes.max(), 1.0))
    return np.column_stack(cols)


@dataclass
class _Map:
    coef: list[float]           # intercept, slope on log source, [slope on log batch]
    q: float                    # LOO residual quantile (log), widens the interval
    n: int

    def design(self, log_s: np.ndarray, batch: np.ndarray) -> np.ndarray:
        cols = [np.ones_like(log_s), log_s]
        if len(self.coef) == 3:
            cols.append(np.log(batch))
        return np.column_stack(cols)


def _fit_map(log_s: np.ndarray, log_y: np.ndarray, batch: np.ndarray, coverage: float) -> _Map:
    """Choose among four maps by exact leave-one-out error (least squares, hat matrix):
    the identity (``log y = log s``), a device factor alone (``log y = a + log s``), a
    line (``a + b log s``), and, from
    :data:`MIN_K_BATCH_TERM` measurements, a line plus ``c log batch``. With few or noisy
    measurements the factor alone usually wins: it cannot overfit."""
    n = len(log_y)
    # None: the identity (the source as it is: nothing fitted, so its leave-one-out
    # residuals are its residuals). It wins where the target does not change between
    # devices (memory between thread counts), where any fitted map only adds noise.
    candidates: list[np.ndarray | None] = [None, np.ones((n, 1))]
    if n >= 4 and np.ptp(log_s) > 0:
        candidates.append(np.column_stack([np.ones(n), log_s]))
    if n >= MIN_K_BATCH_TERM and len(np.unique(batch)) > 1:
        candidates.append(np.column_stack([np.ones(n), log_s, np.log(batch)]))
    best = None
    for X in candidates:
        if X is None:
            loo = log_y - log_s
            err = float(np.median(np.abs(loo)))
            best = (err, [0.0, 1.0], loo)
            continue
        # the factor-only map regresses log(y / s) on a constant, with the slope fixed at 1
        target = log_y - log_s if X.shape[1] == 1 else log_y
        coef = np.linalg.lstsq(X, target, rcond=None)[0]
        H = X @ np.linalg.pinv(X)
        loo = (target - X @ coef) / np.clip(1 - np.diag(H), 1e-6, None)
        # median, not mean: the sampler picks the extremes of the cost range on purpose, and
        # leaving out an extreme point makes any slope extrapolate; one such point should not decide
        err = float(np.median(np.abs(loo)))
        if best is None or err < best[0] - 1e-12:
            full = [float(coef[0]), 1.0] if X.shape[1] == 1 else [float(c) for c in coef]
            best = (err, full, loo)
    _, coef, loo = best
    level = min(1.0, math.ceil((n + 1) * coverage) / n)
    q = float(np.quantile(np.abs(loo), level)) if n > 1 else 0.0
    return _Map(coef=coef, q=q, n=n)


class CalibratedModel:
    """A source model mapped to a new device by :func:`fit_calibrated`.

    Attributes:
        targets_: targets it predicts (those of the source with target measurements).
        maps_: per target the fitted map (coefficients, interval widening, K).
    """

    def __init__(self, source: Any, maps: dict[str, _Map], coverage: float = 0.9,
                 meta: dict[str, Any] | None = None) -> None:
        self.source = source
        self.maps_ = maps
        self.targets_ = list(maps)
        self.coverage = coverage
        self.meta = meta or {}

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame:
        """Predicted ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB) with
        ``_lo``/``_hi`` on the new device; targets without a map are NaN."""
        src = self.source.predict(configs)
        batch = np.asarray(configs["batch"], dtype=float)
        out = pd.DataFrame(index=src.index)
        for t in ("energy_j", "latency_ms", "memory_mb"):
            m = self.maps_.get(t)
            if m is None:
                out[t] = out[f"{t}_lo"] = out[f"{t}_hi"] = np.nan
                continue
            c = np.asarray(m.coef)
            f = lambda s: m.design(np.log(np.maximum(s, 1e-12)), batch) @ c  # noqa: E731
            out[t] = np.exp(f(src[t].to_numpy(float)))
            # the source interval, mapped, then widened by the map's own error
            lo = np.exp(f(src[f"{t}_lo"].to_numpy(float)) - m.q)
            hi = np.exp(f(src[f"{t}_hi"].to_numpy(float)) + m.q)
            out[f"{t}_lo"], out[f"{t}_hi"] = np.minimum(lo, hi), np.maximum(lo, hi)
        return out

    def save(self, directory: str | Path, source_dir: str | Path | None = None) -> Path:
        """Write ``calibration.json`` (maps, meta) beside a copy of the source bundle in
        ``source/``; ``source_dir`` is the source bundle's directory."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if source_dir is not None and Path(source_dir).resolve() != (d / "source").resolve():
            if (d / "source").exists():
                shutil.rmtree(d / "source")
            shutil.copytree(source_dir, d / "source")
        doc = {"format": "carb-calibration", "version": 1, "coverage": self.coverage, "meta": self.meta,
               "maps": {t: {"coef": m.coef, "q": m.q, "n": m.n} for t, m in self.maps_.items()}}
        (d / CALIBRATION_FILE).write_text(json.dumps(doc, indent=2, default=str))
        return d


def fit_calibrated(source: Any, measured: pd.DataFrame, coverage: float = 0.9,
                   meta: dict[str, Any] | None = None) -> CalibratedModel:
    """Fit the per-target maps from ``measured`` (the K configs with their measured
    targets on the new device; rows with status other than ``ok`` are ignored)."""
    df = measured[measured["status"] == "ok"] if "status" in measured.columns else measured
    if len(df) < 2:
        raise ValueError(f"calibration needs at least 2 successful measurements, got {len(df)}")
    src = source.predict(df)
    maps = {}
    for t in source.targets_:
        if t not in df.columns:
            continue
        y = df[t].to_numpy(float)
        s = src[t].to_numpy(float)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(s) & (s > 0)
        if ok.sum() < 2:
            continue  # e.g. no energy sensor on the new device
        maps[t] = _fit_map(np.log(s[ok]), np.log(y[ok]), df["batch"].to_numpy(float)[ok], coverage)
    if not maps:
        raise ValueError("no target has measurements to calibrate on")
    return CalibratedModel(source, maps, coverage, meta)


def load_predictor(directory: str | Path) -> Any:
    """Load a model directory: a CARB bundle, or a calibrated model (``calibration.json``
    beside the source bundle in ``source/``). Never runs code from the files."""
    from carb.model import load

    d = Path(directory)
    cal = d / CALIBRATION_FILE
    if not cal.exists():
        return load(d)
    try:
        doc = json.loads(cal.read_text())
        if doc.get("format") != "carb-calibration" or doc.get("version") != 1:
            raise ValueError("not a version-1 carb calibration")
        maps = {t: _Map(coef=[float(c) for c in m["coef"]], q=float(m["q"]), n=int(m["n"]))
                for t, m in doc["maps"].items()}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{cal}: broken calibration file ({e})") from None
    return CalibratedModel(load(d / "source"), maps, float(doc.get("coverage", 0.9)), doc.get("meta"))
