"""Two-stage deployment screening: from a large configuration space to a short list
worth profiling on a target device.

Stage 1 (cross-device ranking)
    A model of a *source* device predicts every candidate. Its predictions are mapped to
    the target device by a log-log line fitted on a calibration sample that both models
    predict (costs on two devices differ mostly by a device factor, the study's slopes),
    and a candidate is kept when the mapped prediction is within budget by a margin of
    ``z`` times the map's residual spread: the less the source ranks like the target, the
    wider the margin, so that truly feasible configs are not dropped.
Stage 2 (device-specific)
    The *target* model predicts the survivors with intervals. A budget is met when the
    interval's upper bound is within it (``risk="safe"``), or the point prediction
    (``"point"``), or the lower bound (``"optimistic"``). The Pareto front of the feasible
    configs over the objectives is the shortlist, ranked.

Predictors are objects with ``predict(DataFrame) -> DataFrame`` giving, for each target
they model, columns ``<target>``, ``<target>_lo``, ``<target>_hi``, and an attribute
``targets_`` listing those targets (:class:`carb.model.CARB` is one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol as TypingProtocol, Sequence

import numpy as np
import pandas as pd

from carb import pareto

__all__ = ["Predictor", "ScreenResult", "screen", "parse_budgets", "RISKS"]

RISKS = ("safe", "point", "optimistic")
_TARGETS = ("energy_j", "latency_ms", "memory_mb")


class Predictor(TypingProtocol):
    targets_: Sequence[str]

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame: ...


@dataclass
class ScreenResult:
    """What a screening did.

    Attributes:
        shortlist: the ranked Pareto front of the feasible configs, with the target
            model's predictions (``rank`` 1 = first to profile).
        feasible: every config predicted within budget in Stage 2.
        summary: ``candidates``, ``after_stage1``, ``feasible``, ``shortlist``,
            ``pruning_ratio`` (1 - shortlist / candidates), the budgets, objectives, risk,
            Stage 1 map (slope, intercept, residual spread, Spearman per target) and
            timings in seconds.
    """

    shortlist: pd.DataFrame
    feasible: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)


def parse_budgets(specs: Sequence[str]) -> dict[str, float]:
    """``["energy_j=75", "latency_ms=20"]`` -> ``{"energy_j": 75.0, "latency_ms": 20.0}``."""
    out: dict[str, float] = {}
    for s in specs:
        key, sep, val = s.partition("=")
        key = key.strip()
        if not sep or key not in _TARGETS:
            raise ValueError(f"budget {s!r}: expected TARGET=VALUE with TARGET one of {', '.join(_TARGETS)}")
        try:
            v = float(val)
        except ValueError:
            raise ValueError(f"budget {s!r}: {val!r} is not a number") from None
        if not (v > 0 and np.isfinite(v)):
            raise ValueError(f"budget {s!r}: must be a finite number > 0")
        out[key] = v
    return out


def _with_derived(df: pd.DataFrame) -> pd.DataFrame:
    """Add the per-image objectives (energy per image, J) where the target is present."""
    if "energy_j" in df.columns:
        df = df.assign(energy_j_per_image=df["energy_j"] / df["batch"])
    return df


def _stage1_map(src: pd.DataFrame, tgt: pd.DataFrame, target: str) -> dict[str, float]:
    """Fit log(target) = a + b log(source) on the calibration sample; residual spread in log."""
    from scipy.stats import spearmanr

    x, y = np.log(src[target].to_numpy(float)), np.log(tgt[target].to_numpy(float))
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    return {"slope": float(b), "intercept": float(a), "sigma": float(np.std(resid, ddof=2)),
            "spearman": float(spearmanr(x, y).statistic), "n": int(len(x))}


def screen(candidates: pd.DataFrame, target: Predictor, budgets: Mapping[str, float], *,
           source: Predictor | None = None, objectives: Sequence[tuple[str, str]] | None = None,
           risk: str = "safe", z: float = 2.0, calibration: int = 512, seed: int = 0) -> ScreenResult:
    """Screen ``candidates`` (a DataFrame of configs: ``config_id`` and the parameters).

    Args:
        candidates: the space to screen.
        target: the target device's model.
        budgets: target -> budget in the target's unit (J, ms, MB) per forward of the batch.
        source: a source device's model for Stage 1; without it Stage 1 keeps everything.
        objectives: (column, min|max) pairs for the Pareto front; default
            :data:`carb.pareto.DEFAULT_OBJECTIVES`, less those the target model lacks.
        risk: how budgets use the intervals: ``safe`` (upper bound), ``point``,
            ``optimistic`` (lower bound).
        z: Stage 1 margin in residual standard deviations of the source-to-target map.
        calibration: configs predicted by both models to fit the Stage 1 map.
        seed: seed of the calibration sample.
    """
    if risk not in RISKS:
        raise ValueError(f"risk {risk!r}: expected one of {', '.join(RISKS)}")
    if candidates.empty:
        raise ValueError("no candidates to screen")
    missing = [t for t in budgets if t not in target.targets_]
    if missing:
        raise ValueError(f"budget on {missing[0]}, which the target model does not predict "
                         f"(it predicts {', '.join(target.targets_)})")
    timings: dict[str, float] = {}
    n = len(candidates)
    summary: dict[str, Any] = {"candidates": n, "budgets": dict(budgets), "risk": risk}

    # -- Stage 1 ----------------------------------------------------------------------------
    t0 = time.perf_counter()
    survivors = candidates
    if source is not None and budgets:
        shared = [t for t in budgets if t in source.targets_]
        src_all = source.predict(candidates)
        cal_idx = np.random.default_rng(seed).choice(n, size=min(calibration, n), replace=False)
        cal = candidates.iloc[cal_idx]
        tgt_cal = target.predict(cal)
        keep = np.ones(n, dtype=bool)
        maps = {}
        for t in shared:
            m = _stage1_map(src_all.iloc[cal_idx], tgt_cal, t)
            maps[t] = m
            mapped = m["intercept"] + m["slope"] * np.log(src_all[t].to_numpy(float))
            keep &= mapped <= np.log(budgets[t]) + z * m["sigma"]
        survivors = candidates[keep]
        summary["stage1"] = {"z": z, "maps": maps, "targets": shared}
    timings["stage1_s"] = time.perf_counter() - t0
    summary["after_stage1"] = int(len(survivors))

    # -- Stage 2 ----------------------------------------------------------------------------
    t0 = time.perf_counter()
    pred = target.predict(survivors) if len(survivors) else pd.DataFrame()
    if len(survivors):
        # the predictions win over same-named candidate columns: candidates taken from a
        # measured dataset carry the measured targets, which must not decide the screening
        pred = pd.concat([survivors.drop(columns=[c for c in pred.columns if c in survivors.columns])
                          .reset_index(drop=True), pred.reset_index(drop=True)], axis=1)
        col = {"safe": "_hi", "point": "", "optimistic": "_lo"}[risk]
        ok = np.ones(len(pred), dtype=bool)
        for t, b in budgets.items():
            ok &= pred[f"{t}{col}"].to_numpy(float) <= b
        feasible = _with_derived(pred[ok].reset_index(drop=True))
    else:
        feasible = pd.DataFrame(columns=candidates.columns)
    if "flops_per_image" not in feasible.columns and len(feasible):
        from carb.features import compute

        feasible = feasible.join(compute(feasible)[["flops_per_image"]])
    objs = list(objectives) if objectives is not None else [
        o for o in pareto.DEFAULT_OBJECTIVES
        if o[0] in ("flops_per_image",) or o[0].removesuffix("_per_image") in target.targets_]
    summary["objectives"] = [f"{d}:{c}" for c, d in objs]
    if len(feasible):
        front = feasible[pareto.front_mask(feasible, objs)].copy()
        # rank: mean of the per-objective ranks (1 = best), a simple, explainable order
        ranks = np.column_stack([front[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
        front["rank"] = pd.Series(ranks.mean(axis=1), index=front.index).rank(method="first").astype(int)
        shortlist = front.sort_values("rank").reset_index(drop=True)
    else:
        shortlist = feasible.assign(rank=pd.Series(dtype=int))
    timings["stage2_s"] = time.perf_counter() - t0
    summary.update(feasible=int(len(feasible)), shortlist=int(len(shortlist)),
                   pruning_ratio=1.0 - len(shortlist) / n, timings=timings)
    return ScreenResult(shortlist=shortlist, feasible=feasible, summary=summary)
