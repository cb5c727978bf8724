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
    The *target* model predicts the survivors with intervals at ``confidence``. With
    ``risk="decide"`` every budget call is three-way: ``accept`` (the whole interval is
    within every budget), ``reject`` (the chance that a target is over its budget is at
    least ``confidence``: its one-sided lower bound is over) or ``measure`` (neither: not a
    decision, a config to profile).
    With ``rule="joint"`` a call is made when the chance that every budget is met (or
    that one is missed) is at least ``confidence``, from the model's conformal scores.
    The two-way calls of before stay: a budget is met when the interval's upper bound is
    within it (``risk="safe"``), or the point prediction (``"point"``), or the lower bound
    (``"optimistic"``).
Shortlist
    ``front="point"``: the Pareto front of the predicted values of the feasible configs.
    ``front="probable"`` (the default with ``risk="decide"``) keeps the front under
    uncertainty: of the configs that may be within budget (``accept`` and ``measure``), a
    config is dropped when a config surely within budget dominates it even at the ends of
    both intervals (:func:`carb.decide.pareto.dominated_by`); the others are ranked by their
    chance of being on the front of the feasible configs, estimated by Monte-Carlo draws
    of the true costs from the predictive intervals (log-Student-t with :data:`TAIL_DF`
    degrees of freedom, as heavy-tailed as the measured errors; independent per config),
    and those with a chance of at least ``front_min_prob`` are the shortlist, at most
    ``shortlist_share`` of the candidates (:data:`SHORTLIST_SHARE`, 10% by default: on
    cpu-1t -> cpu-2t the threshold alone kept 127-144 of 1,200 configs at the median and
    upper-quartile budgets, 88-89% pruning, while the 120 likeliest kept 95-100% of the
    true front at every budget quantile and the 100 likeliest only 90-100%:
    ``benchmarks/bench_decisions.py``, recall against shortlist size in RESULTS.md).

Predictors are objects with ``predict(DataFrame) -> DataFrame`` giving, for each target
they model, columns ``<target>``, ``<target>_lo``, ``<target>_hi``, and an attribute
``targets_`` listing those targets (:class:`carb.model.CARB` is one).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol as TypingProtocol, Sequence

import numpy as np
import pandas as pd

from carb.decide import pareto

__all__ = ["Predictor", "ScreenResult", "screen", "parse_budgets", "predict_at", "RISKS", "FRONTS",
           "DECISIONS", "RULES", "FRONT_MIN_PROB", "SHORTLIST_SHARE"]

RISKS = ("safe", "point", "optimistic", "decide")
FRONTS = ("point", "probable")
#: the three budget calls of ``risk="decide"``
DECISIONS = ("accept", "measure", "reject")
#: how ``risk="decide"`` turns the uncertainty into calls (see :func:`screen`'s ``rule``)
RULES = ("interval", "joint")
#: default least chance of being on the front for the probable shortlist (benchmarks/bench_decisions.py)
FRONT_MIN_PROB = 0.02
#: default largest probable shortlist, as a share of the candidates (chosen on the measured
#: front recall against shortlist size, benchmarks/bench_decisions.py: 10% is the smallest
#: share that kept >= 95% of the true front at every budget quantile; 90% pruning)
SHORTLIST_SHARE = 0.10
#: degrees of freedom of the Student t the probable front draws log-cost errors from
TAIL_DF = 3.0
#: coverage of the intervals of the "dominated with high probability" filter
PREFILTER_COVERAGE = 0.99
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
        feasible: every config predicted within budget in Stage 2 (with ``risk="decide"``:
            the ``accept`` calls).
        summary: ``candidates``, ``after_stage1``, ``feasible``, ``shortlist``,
            ``pruning_ratio`` (1 - shortlist / candidates), the budgets, objectives, risk,
            confidence, front, Stage 1 map (slope, intercept, residual spread, Spearman per
            target) and timings in seconds; with ``risk="decide"`` also ``decisions``
            (count of accept / measure / reject, Stage 1 prunes counted as reject),
            ``decided_share``, ``measure_by_budget`` (per budgeted target: how many of the
            configs to measure have their upper bound over that budget) and ``crowding`` (per
            budgeted target: ``half_width_rel``, the intervals' median relative half-width,
            and ``share_within``, the share of the candidates predicted within it of the
            budget: configs no interval that wide can call).
        measure: with ``risk="decide"``, the configs neither accepted nor rejected, to
            profile; most likely on the front first (``p_front``), then nearest the budget.
        decisions: every Stage 2 survivor with its call (``decision``) and, for the
            probable front, ``p_feasible`` and ``p_front``; Stage 1 prunes are rejects not
            listed.
    """

    shortlist: pd.DataFrame
    feasible: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)
    measure: pd.DataFrame = field(default_factory=pd.DataFrame)
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)


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
        for b in ("_lo", "_hi"):
            if f"energy_j{b}" in df.columns:
                df[f"energy_j_per_image{b}"] = df[f"energy_j{b}"] / df["batch"]
    return df


def predict_at(model: Predictor, configs: pd.DataFrame, confidence: float,
               budgets: Mapping[str, float] | None = None) -> pd.DataFrame:
    """``model.predict(configs)`` with intervals at coverage ``confidence``: the model's own
    (``predict(..., coverage=)``, e.g. CARB's conformal intervals) where it takes one; else
    its intervals, whose coverage is ``model.coverage`` (0.9 when it does not say), widened
    or narrowed in log space as a normal error would be. With ``budgets``, also
    ``<target>_p_within`` per budget: the chance the true value is within it, the model's
    own (``predict(..., budgets=)``, CARB's conformal scores) where it gives one, else read
    off the interval as a log-Student-t error with :data:`TAIL_DF` degrees of freedom."""
    import inspect

    try:
        params = inspect.signature(model.predict).parameters
    except (TypeError, ValueError):
        params = {}
    if "coverage" in params:
        extra = {"budgets": dict(budgets)} if budgets and "budgets" in params else {}
        p = model.predict(configs, coverage=confidence, **extra)
    else:
        p = _rescaled(model, model.predict(configs), confidence)
    if budgets:
        missing = [t for t in budgets if f"{t}_p_within" not in p.columns]
        if missing:
            p = p.copy()
            for t in missing:
                p[f"{t}_p_within"] = _t_within(p, t, float(budgets[t]), confidence)
    return p


def _t_within(p: pd.DataFrame, t: str, budget: float, confidence: float) -> np.ndarray:
    """Chance the true value is within ``budget`` for a predictor that gives only its
    ``confidence`` interval: a log-Student-t error (TAIL_DF) whose ``confidence`` interval is
    that one (the upper half toward a budget above the point, the lower half below)."""
    from scipy.stats import t as student

    v = p[t].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(budget / v)
        half = np.where(d >= 0, np.log(p[f"{t}_hi"].to_numpy(float) / v), np.log(v / p[f"{t}_lo"].to_numpy(float)))
        z = d / (half / float(student.ppf((1 + confidence) / 2, TAIL_DF)))
    out = student.cdf(z, TAIL_DF)
    # a zero-width interval is a sure call; an unknown one (NaN) none
    return np.where(half == 0, (d >= 0).astype(float), np.where(np.isfinite(z), out, 0.5))


def _rescaled(model: Predictor, p: pd.DataFrame, confidence: float) -> pd.DataFrame:
    from carb.model._conformal import gaussian_rescale

    c0 = float(getattr(model, "coverage", 0.9))
    if abs(c0 - confidence) < 1e-12:
        return p
    p = p.copy()
    for t in [c for c in _TARGETS if c in p.columns and f"{c}_lo" in p.columns]:
        v = p[t].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            p[f"{t}_lo"] = v * np.exp(-gaussian_rescale(np.log(v / p[f"{t}_lo"].to_numpy(float)), c0, confidence))
            p[f"{t}_hi"] = v * np.exp(gaussian_rescale(np.log(p[f"{t}_hi"].to_numpy(float) / v), c0, confidence))
    return p


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


#: room a shortlist needs for the true Pareto front, in units of the probable front's expected
#: size (the sum of the configs' chances, ``expected_front``): on cpu-1t -> cpu-2t and
#: cpu-1t -> cpu-avx2-1t the shortlists that kept >= 95% of the true front held 1.9-2.5x it,
#: the two cut by the 10% cap to 1.1-1.3x kept 73-87% (benchmarks/RESULTS.md, issue 18).
#: Below it, the screening says which ``shortlist_share`` would give that room.
FRONT_ROOM = 2.0


def screen(candidates: pd.DataFrame, target: Predictor, budgets: Mapping[str, float], *,
           source: Predictor | None = None, objectives: Sequence[tuple[str, str]] | None = None,
           risk: str = "decide", z: float = 2.0, calibration: int = 512, seed: int = 0,
           confidence: float = 0.9, front: str | None = None, front_min_prob: float = FRONT_MIN_PROB,
           samples: int = 1000, max_shortlist: int | None = None,
           shortlist_share: float | None = SHORTLIST_SHARE, rule: str = "interval") -> ScreenResult:
    """Screen ``candidates`` (a DataFrame of configs: ``config_id`` and the parameters).

    Args:
        candidates: the space to screen.
        target: the target device's model.
        budgets: target -> budget in the target's unit (J, ms, MB) per forward of the batch.
        source: a source device's model for Stage 1; without it Stage 1 keeps everything.
        objectives: (column, min|max) pairs for the Pareto front; default
            :data:`carb.decide.pareto.DEFAULT_OBJECTIVES`, less those the target model lacks.
        risk: how budgets use the intervals: ``decide`` (the default; three-way: accept,
            measure, reject), or the two-way ``safe`` (upper bound), ``point``, ``optimistic`` (lower bound).
        confidence: in (0, 1), at least 0.5 with ``risk="decide"``: the coverage of the
            intervals the ``decide`` calls (rule ``interval``), the probable front and
            Stage 1's margin use; with rule ``joint``, the least chance a call is right.
        rule: how ``risk="decide"`` calls. ``interval`` (default): accept when the whole
            two-sided ``confidence`` interval of every target is within its budget (each
            target's one-sided level is ``(1 + confidence) / 2``, so two budgets are met
            together with chance >= ``confidence``), reject when the chance that one
            target is over its budget is at least ``confidence`` (``<target>_p_within``
            from the model's conformal scores: its one-sided ``confidence`` lower bound,
            the lower end of the ``2 * confidence - 1`` interval, is over the budget; a
            single target over suffices, so no Bonferroni share is needed; before
            2026-12-03 the lower end of the ``confidence`` interval, a one-sided
            ``(1 + confidence) / 2``, stricter than asked). ``joint``: accept when the chance
            that *every* budget is met is at least ``confidence`` (per-target chances
            ``<target>_p_within`` from the model's conformal scores, multiplied: errors of
            different targets taken as independent), reject when the chance that some
            budget is missed is at least ``confidence`` (the largest single-target chance,
            a lower bound), measure otherwise; with one budget, accept is the one-sided
            ``confidence`` upper bound within it. Measured side by side
            (``benchmarks/bench_decisions.py``, cpu-1t -> cpu-2t, device model out of fold,
            median budgets): ``joint`` sent 13% to measure against 16% (18% with the
            stricter rejects of before) but let false accepts reach 1.5% against 0.9%; the
            default is the rule that keeps false accepts (a config deployed over budget)
            under 1%. The one-sided rejects decided 1.1-3.1 points more of the space at
            every budget quantile, accuracy on the decided >= 0.994, false accepts equal.
        front: ``point`` or ``probable`` (see the module docstring); default ``probable``
            with ``risk="decide"``, ``point`` otherwise.
        front_min_prob: the probable shortlist keeps configs on the sampled front at least
            this often.
        samples: Monte-Carlo draws of the probable front.
        max_shortlist: keep at most this many shortlisted configs (the best ranked): a
            profiling budget. ``None``: no cap.
        shortlist_share: with the probable front, keep at most ``ceil(shortlist_share *
            len(candidates))`` configs (the likeliest on the front); default
            :data:`SHORTLIST_SHARE` (chosen by measurement, see the module docstring).
            ``None``: no share cap. With ``max_shortlist`` too, the smaller cap holds.
        z: Stage 1 margin in residual standard deviations of the source-to-target map.
        calibration: configs predicted by both models to fit the Stage 1 map.
        seed: seed of the calibration sample.
    """
    if risk not in RISKS:
        raise ValueError(f"risk {risk!r}: expected one of {', '.join(RISKS)}")
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    front = front or ("probable" if risk == "decide" else "point")
    if front not in FRONTS:
        raise ValueError(f"front {front!r}: expected one of {', '.join(FRONTS)}")
    if not 0 < float(confidence) < 1:
        raise ValueError(f"confidence {confidence!r}: must be in (0, 1), e.g. 0.9")
    if risk == "decide" and float(confidence) < 0.5:
        # below one half a config could be both accepted and rejected at that chance
        raise ValueError(f"confidence {confidence!r}: three-way calls need at least 0.5 (e.g. 0.9)")
    if not 0 <= float(front_min_prob) <= 1 or int(samples) < 1:
        raise ValueError("front_min_prob must be in [0, 1] and samples >= 1")
    if max_shortlist is not None and int(max_shortlist) < 1:
        raise ValueError(f"max_shortlist {max_shortlist!r}: must be >= 1 (or None: no cap)")
    if shortlist_share is not None and not 0 < float(shortlist_share) <= 1:
        raise ValueError(f"shortlist_share {shortlist_share!r}: must be in (0, 1] (or None: no cap)")
    if candidates.empty:
        raise ValueError("no candidates to screen")
    missing = [t for t in budgets if t not in target.targets_]
    if missing:
        raise ValueError(f"budget on {missing[0]}, which the target model does not predict "
                         f"(it predicts {', '.join(target.targets_)})")
    timings: dict[str, float] = {}
    n = len(candidates)
    summary: dict[str, Any] = {"candidates": n, "budgets": dict(budgets), "risk": risk,
                               "confidence": float(confidence), "front": front}
    if risk == "decide":
        summary["rule"] = rule

    # -- Stage 1 ----------------------------------------------------------------------------
    t0 = time.perf_counter()
    survivors = candidates
    if source is not None and budgets:
        shared = [t for t in budgets if t in source.targets_]
        src_all = source.predict(candidates)
        cal_idx = np.random.default_rng(seed).choice(n, size=min(calibration, n), replace=False)
        cal = candidates.iloc[cal_idx]
        three_way = risk == "decide" or front == "probable"
        tgt_cal = predict_at(target, cal, float(confidence)) if three_way else target.predict(cal)
        keep = np.ones(n, dtype=bool)
        maps = {}
        for t in shared:
            m = _stage1_map(src_all.iloc[cal_idx], tgt_cal, t)
            if three_way:
                # a Stage 1 prune is a reject call: keep whatever the target's interval could
                # bring within budget (the 95th percentile of its log upper half-width)
                with np.errstate(divide="ignore", invalid="ignore"):
                    up = np.log(tgt_cal[f"{t}_hi"].to_numpy(float) / tgt_cal[t].to_numpy(float))
                up = up[np.isfinite(up)]
                m["interval_margin"] = float(np.quantile(up, 0.95)) if len(up) else 0.0
            maps[t] = m
            mapped = m["intercept"] + m["slope"] * np.log(src_all[t].to_numpy(float))
            keep &= mapped <= np.log(budgets[t]) + z * m["sigma"] + m.get("interval_margin", 0.0)
        survivors = candidates[keep]
        summary["stage1"] = {"z": z, "maps": maps, "targets": shared}
    timings["stage1_s"] = time.perf_counter() - t0
    summary["after_stage1"] = int(len(survivors))

    # -- Stage 2 ----------------------------------------------------------------------------
    t0 = time.perf_counter()
    decided = risk == "decide" or front == "probable"
    # both rules' rejects read each target's chance of being within its budget
    pred = (predict_at(target, survivors, float(confidence), budgets=budgets if risk == "decide" else None)
            if decided else target.predict(survivors)) if len(survivors) else pd.DataFrame()
    measure = decisions = pd.DataFrame()
    possible = None
    if len(survivors):
        # the predictions win over same-named candidate columns: candidates taken from a
        # measured dataset carry the measured targets, which must not decide the screening
        pred = pd.concat([survivors.drop(columns=[c for c in pred.columns if c in survivors.columns])
                          .reset_index(drop=True), pred.reset_index(drop=True)], axis=1)
        if risk == "decide":
            call = _calls(pred, budgets, float(confidence), rule)
            if budgets:  # the chance every budget is met (errors of targets taken as independent)
                pred["p_within"] = np.prod([pred[f"{t}_p_within"].to_numpy(float) for t in budgets], axis=0)
            ok = call == "accept"
            possible = call != "reject"
        else:
            col = {"safe": "_hi", "point": "", "optimistic": "_lo"}[risk]
            ok = np.ones(len(pred), dtype=bool)
            for t, b in budgets.items():
                ok &= pred[f"{t}{col}"].to_numpy(float) <= b
            call = np.where(ok, "accept", "reject")
            if front == "probable":
                possible = _calls(pred, budgets) != "reject"
        pred = _with_derived(pred.assign(decision=call))
        if "flops_per_image" not in pred.columns:
            from carb.families.features import compute

            pred = pred.join(compute(pred)[["flops_per_image"]])
        feasible = pred[ok].reset_index(drop=True)
    else:
        pred = feasible = pd.DataFrame(columns=candidates.columns)
    objs = list(objectives) if objectives is not None else [
        o for o in pareto.DEFAULT_OBJECTIVES
        if o[0] in ("flops_per_image",) or o[0].removesuffix("_per_image") in target.targets_]
    summary["objectives"] = [f"{d}:{c}" for c, d in objs]
    if front == "probable" and possible is not None and possible.any():
        cand = pred[possible].reset_index(drop=True)
        p_front, p_feas = _probable_front(cand, objs, budgets, float(confidence), int(samples), seed)
        cand = cand.assign(p_feasible=p_feas, p_front=p_front)
        pred = pred.drop(columns=["p_feasible", "p_front"], errors="ignore")
        pred = pred.merge(cand[["config_id", "p_feasible", "p_front"]], on="config_id", how="left") \
            if "config_id" in pred.columns else pred
        pick = cand[cand["p_front"] >= max(float(front_min_prob), 1e-12)].copy()
        # most likely on the front first; ties by the mean of the per-objective ranks
        ranks = np.column_stack([pick[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
        pick["_tie"] = ranks.mean(axis=1) if len(pick) else []
        shortlist = pick.sort_values(["p_front", "_tie"], ascending=[False, True]).drop(columns="_tie")
        shortlist = shortlist.assign(rank=np.arange(1, len(shortlist) + 1)).reset_index(drop=True)
        summary["front_min_prob"] = float(front_min_prob)
        summary["samples"] = int(samples)
        summary["front_candidates"] = int(len(cand))
        # the sampled fronts' mean size (it ran 0.64-0.87x the true front on our two CPU pairs)
        summary["expected_front"] = float(np.sum(p_front))
        if shortlist_share is not None:
            share_cap = max(1, math.ceil(float(shortlist_share) * n))
            summary["shortlist_share"] = float(shortlist_share)
            if len(shortlist) > share_cap:
                summary["shortlist_share_cap"] = share_cap
                max_shortlist = share_cap if max_shortlist is None else min(int(max_shortlist), share_cap)
                if share_cap < FRONT_ROOM * summary["expected_front"]:
                    # a small space's front is a large share of it: the cap cuts into it
                    summary["share_for_front"] = min(1.0, math.ceil(
                        100 * FRONT_ROOM * summary["expected_front"] / n) / 100)
    elif len(feasible):
        front_rows = feasible[pareto.front_mask(feasible, objs)].copy()
        # rank: mean of the per-objective ranks (1 = best), a simple, explainable order
        ranks = np.column_stack([front_rows[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
        front_rows["rank"] = pd.Series(ranks.mean(axis=1), index=front_rows.index).rank(method="first").astype(int)
        shortlist = front_rows.sort_values("rank").reset_index(drop=True)
    else:
        shortlist = feasible.assign(rank=pd.Series(dtype=int))
    if max_shortlist is not None and len(shortlist) > int(max_shortlist):
        shortlist = shortlist.sort_values("rank").head(int(max_shortlist)).reset_index(drop=True)
        summary["max_shortlist"] = int(max_shortlist)
    if risk == "decide" and len(pred):
        measure = pred[pred["decision"] == "measure"].copy()
        # the most useful to profile first: likely on the front, then nearest a budget
        measure["_near"] = np.min([np.abs(np.log(measure[t].to_numpy(float) / b)) for t, b in budgets.items()],
                                  axis=0) if budgets and len(measure) else 0.0
        keys = (["p_front"] if "p_front" in measure.columns else []) + ["_near"]
        measure = measure.sort_values(keys, ascending=[False] * (len(keys) - 1) + [True]).drop(columns="_near")
        measure = measure.reset_index(drop=True)
        counts = {d: int((pred["decision"] == d).sum()) for d in DECISIONS}
        counts["reject"] += n - len(survivors)  # Stage 1 prunes are rejects
        summary["decisions"] = counts
        summary["decided_share"] = 1.0 - counts["measure"] / n
        # which budget keeps each undecided config from a call (its upper bound over that
        # budget; a config can count under several), and how crowded the candidates are at
        # it: the share whose point prediction lies within the interval's median relative
        # half-width of the budget. Where that share is large, narrower intervals decide few
        # more: the configs sit on the budget (benchmarks/RESULTS.md, issue 18)
        straddle, crowd = {}, {}
        for t, b in budgets.items():
            if f"{t}_hi" not in pred.columns or f"{t}_lo" not in pred.columns:
                continue
            straddle[t] = int((measure[f"{t}_hi"].to_numpy(float) > b).sum()) if len(measure) else 0
            p, lo, hi = (pred[c].to_numpy(float) for c in (t, f"{t}_lo", f"{t}_hi"))
            with np.errstate(divide="ignore", invalid="ignore"):
                hw = np.log(hi / lo) / 2
                hw = float(np.median(hw[np.isfinite(hw)])) if np.isfinite(hw).any() else float("nan")
                near = np.abs(np.log(p / b)) < hw
            crowd[t] = {"half_width_rel": float(np.expm1(hw)), "share_within": float(near.sum() / n)}
        summary["measure_by_budget"] = straddle
        summary["crowding"] = crowd
    if len(pred):
        keep = [c for c in ("config_id", "decision", "p_within", "p_feasible", "p_front") if c in pred.columns]
        decisions = pred[keep + [c for c in pred.columns if c not in keep and c.split("_")[0] in
                                 ("energy", "latency", "memory")]].copy()
    timings["stage2_s"] = time.perf_counter() - t0
    summary.update(feasible=int(len(feasible)), shortlist=int(len(shortlist)),
                   pruning_ratio=1.0 - len(shortlist) / n, timings=timings)
    return ScreenResult(shortlist=shortlist, feasible=feasible, summary=summary, measure=measure,
                        decisions=decisions)


def _calls(pred: pd.DataFrame, budgets: Mapping[str, float], confidence: float | None = None,
           rule: str = "interval") -> np.ndarray:
    """Three-way budget calls.

    ``rule="joint"``, from the chances ``<target>_p_within``: ``accept`` when their product
    is at least ``confidence``, ``reject`` when one target's chance of being over is at
    least ``confidence``, ``measure`` otherwise (NaN chances: measure).
    ``rule="interval"``: ``accept`` when every upper bound is within its budget;
    ``reject`` when one target's chance of being over is at least ``confidence`` (with
    ``confidence`` and the ``<target>_p_within`` columns; else when a lower bound is over
    its budget); ``measure`` otherwise."""
    n = len(pred)
    if not budgets:
        return np.full(n, "accept")
    chances = confidence is not None and all(f"{t}_p_within" in pred.columns for t in budgets)
    if rule == "joint" and not chances:
        raise ValueError("the joint rule needs a confidence and <target>_p_within columns")
    if chances:  # both rules reject alike: one target over with chance >= confidence
        pw = np.column_stack([pred[f"{t}_p_within"].to_numpy(float) for t in budgets])
        over = np.max(1 - pw, axis=1) >= confidence  # NaN compares False
    else:
        over = np.any([pred[f"{t}_lo"].to_numpy(float) > b for t, b in budgets.items()], axis=0)
    if rule == "joint":
        within = np.prod(pw, axis=1) >= confidence  # NaN compares False
    else:  # NaN compares False: never accepted
        within = np.all([pred[f"{t}_hi"].to_numpy(float) <= b for t, b in budgets.items()], axis=0)
    return np.where(over, "reject", np.where(within, "accept", "measure"))


def _probable_front(cand: pd.DataFrame, objs: Sequence[tuple[str, str]], budgets: Mapping[str, float],
                    confidence: float, samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Chance of each candidate being on the front of the feasible configs, and of being
    within budget, by Monte-Carlo draws of the true costs (log-normal per config and
    target, spread from its ``confidence`` interval). Configs that an accepted config
    dominates even at the ends of both intervals get 0 without being drawn."""
    from scipy.stats import t as student

    # heavy tails: the normalized out-of-fold scores of CARB on cpu-2t have q97.5/q90 of
    # 1.6-1.8 and q99/q90 of 2-3, a Student t with 3 degrees of freedom (a normal: 1.36, 1.57)
    zc = float(student.ppf((1 + confidence) / 2, TAIL_DF))
    cost = [t for t in _TARGETS if t in cand.columns and f"{t}_lo" in cand.columns
            and (t in budgets or any(c.removesuffix("_per_image") == t for c, _ in objs))]
    # best and worst plausible values of every objective: the intervals widened in log space
    # to PREFILTER_COVERAGE under the same t (a config is dropped only when dominated w.h.p.)
    widen = float(student.ppf((1 + PREFILTER_COVERAGE) / 2, TAIL_DF)) / zc if PREFILTER_COVERAGE > confidence else 1.0
    best, worst = cand.copy(), cand.copy()
    for c, d in objs:
        if f"{c}_lo" in cand.columns:
            p = cand[c].to_numpy(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                lo = p * (cand[f"{c}_lo"].to_numpy(float) / p) ** widen
                hi = p * (cand[f"{c}_hi"].to_numpy(float) / p) ** widen
            best[c], worst[c] = (lo, hi) if d == "min" else (hi, lo)
    sure = (cand["decision"] == "accept").to_numpy()
    out = pareto.dominated_by(best, worst[sure], objs)
    keep = np.flatnonzero(~out)
    k = cand.iloc[keep].reset_index(drop=True)
    logp = {t: np.log(np.maximum(k[t].to_numpy(float), 1e-300)) for t in cost}
    sig = {t: np.clip((np.log(k[f"{t}_hi"].to_numpy(float)) - np.log(k[f"{t}_lo"].to_numpy(float))) / (2 * zc),
                      0.0, 5.0) for t in cost}
    sig = {t: np.where(np.isfinite(v), v, 5.0) for t, v in sig.items()}
    fixed = pareto.oriented(k, [o for o in objs if o[0].removesuffix("_per_image") not in cost])
    rng = np.random.default_rng(seed)
    batch = k["batch"].to_numpy(float) if "batch" in k.columns else np.ones(len(k))
    feas_count = np.zeros(len(k))

    def draws():
        for _ in range(samples):
            v = {t: np.exp(logp[t] + sig[t] * rng.standard_t(TAIL_DF, len(k))) for t in cost}
            ok = np.ones(len(k), dtype=bool)
            for t, b in budgets.items():
                if t in v:
                    ok &= v[t] <= b
            feas_count[ok] += 1
            cols, fi = [], 0
            for c, d in objs:
                base = c.removesuffix("_per_image")
                if base in cost:
                    x = v[base] / batch if c.endswith("_per_image") else v[base]
                    cols.append(x if d == "min" else -x)
                else:
                    cols.append(fixed[:, fi])
                    fi += 1
            yield np.column_stack(cols), ok

    freq = pareto.sampled_front_frequency(draws(), len(k))
    p_front, p_feas = np.zeros(len(cand)), np.zeros(len(cand))
    p_front[keep] = freq
    p_feas[keep] = feas_count / samples
    # a dominated config is not drawn; its chance of meeting the budgets still counts
    p_feas[out] = np.nan
    return p_front, p_feas
