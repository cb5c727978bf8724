"""Two-stage deployment screening: from a large configuration space to a short list worth profiling on a target device.

Stage 1 (cross-device ranking)
    A model of a *source* device predicts every candidate. Its predictions are mapped to
    the target device by a log-log line fitted on a calibration sample that both models
    predict (costs on two devices differ mostly by a device factor), and a candidate is
    kept when the mapped prediction is within budget by a margin of ``z`` times the map's
    residual spread: the less the source ranks like the target, the wider the margin, so
    that truly feasible configs are not dropped.
Stage 2 (device-specific)
    The *target* model predicts the survivors with intervals at ``confidence``. With
    ``risk="decide"`` every budget call is three-way: ``accept``, ``reject`` or
    ``measure`` (neither: not a decision, a config to profile), by one of two rules:

    ==========  ================================================  ==================================================
    rule        accept                                            reject
    ==========  ================================================  ==================================================
    interval    the whole two-sided ``confidence`` interval of    one target is over its budget with chance
                every target is within its budget (one-sided      >= ``confidence`` (``<target>_p_within``, from the
                ``(1 + confidence) / 2`` per target: budgets      model's conformal scores: its one-sided
                met together with chance >= ``confidence``)       ``confidence`` lower bound is over the budget)
    joint       the chance that every budget is met is at least   as ``interval`` (the largest single-target
                ``confidence`` (per-target chances multiplied:    chance of being over, a lower bound of the
                errors of targets taken as independent)           chance that some budget is missed)
    ==========  ================================================  ==================================================

    ``joint`` leaves fewer configs to measure and lets more false accepts through;
    ``interval`` (the default) keeps false accepts (a config deployed over budget) under 1%.
    The two-way calls: a budget is met when the interval's upper bound is within it
    (``risk="safe"``), or the point prediction (``"point"``), or the lower bound
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
    ``shortlist_share`` of the candidates (:data:`SHORTLIST_SHARE`).
Extrapolation
    A decision never rests on extrapolation. A config whose prediction the target model flags
    ``extrapolated`` (outside its training domain: a value beyond its training range, an unseen
    family, block or precision, a precision a calibration never measured) is never accepted,
    under any risk: it is ``measure``, or ``reject`` where its interval's lower bound is over a
    budget (with ``risk="decide"``: the reject rule of its ``rule``). So it is never feasible,
    never on the point front and never a config surely within budget that prunes the probable
    front; it may be shortlisted, as a config to measure. Stage 1 never prunes a config whose
    source prediction is extrapolated. A target model of another family of networks or another
    kind of device than the space (:func:`foreign_reason`) is refused unless
    ``allow_foreign``; then every config it cannot speak for is extrapolated.

Predictors are objects with ``predict(DataFrame) -> DataFrame`` giving, for each target
they model, columns ``<target>``, ``<target>_lo``, ``<target>_hi``, and an attribute
``targets_`` listing those targets (:class:`carb.model.CARB` is one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence
from typing import Protocol as TypingProtocol

import numpy as np
import pandas as pd

from carb.decide import pareto
from carb.decide._calls import DECISIONS, call_counts, decisions_table, extrapolated, foreign_rows, measure_set
from carb.decide._calls import calls as _calls
from carb.decide._calls import device_kind as device_kind
from carb.decide._calls import foreign_reason as foreign_reason
from carb.decide._front import FRONT_ROOM as FRONT_ROOM
from carb.decide._front import PREFILTER_COVERAGE as PREFILTER_COVERAGE
from carb.decide._front import TAIL_DF, point_shortlist, probable_shortlist, share_cap
from carb.model.conformal import chance_within

__all__ = [
    "Predictor",
    "ScreenResult",
    "screen",
    "parse_budgets",
    "predict_at",
    "RISKS",
    "FRONTS",
    "DECISIONS",
    "RULES",
    "FRONT_MIN_PROB",
    "SHORTLIST_SHARE",
    "foreign_reason",
    "device_kind",
]

RISKS = ("safe", "point", "optimistic", "decide")
FRONTS = ("point", "probable")
#: how ``risk="decide"`` turns the uncertainty into calls (see the module docstring)
RULES = ("interval", "joint")
#: default least chance of being on the front for the probable shortlist
FRONT_MIN_PROB = 0.02
#: default largest probable shortlist, as a share of the candidates: the smallest share that
#: kept >= 95% of the true front at every budget quantile on cpu-1t -> cpu-2t (90% pruning)
SHORTLIST_SHARE = 0.10
_TARGETS = ("energy_j", "latency_ms", "memory_mb")


class Predictor(TypingProtocol):
    """What :func:`screen` needs of a model: its targets and a frame of predictions with intervals."""

    targets_: Sequence[str]

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame:
        """Return the predictions of ``configs``, each target with its ``_lo`` and ``_hi`` interval bounds."""
        ...


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
    """Read ``TARGET=VALUE`` budgets, e.g. ``["latency_ms=20"]`` -> ``{"latency_ms": 20.0}``.

    Args:
        specs: one ``TARGET=VALUE`` per budget, in the target's unit (J, ms, MB).

    Returns:
        Target -> budget.

    Raises:
        ValueError: an unknown target, a value that is not a finite number > 0, or two budgets for one target (the
            later one silently winning would screen against a budget the user may not mean).
    """
    out: dict[str, float] = {}
    seen: dict[str, str] = {}
    for s in specs:
        key, sep, val = s.partition("=")
        key = key.strip()
        if key in seen:
            raise ValueError(f"budget {key} given twice ({seen[key]} and {s}): give one budget per target")
        seen[key] = s
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


def predict_at(
    model: Predictor, configs: pd.DataFrame, confidence: float, budgets: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """Predict ``configs`` with intervals at coverage ``confidence``.

    The intervals are the model's own (``predict(..., coverage=)``, e.g. CARB's conformal
    intervals) where it takes a coverage; else its intervals, whose coverage is
    ``model.coverage`` (0.9 when it does not say), widened or narrowed in log space as a
    normal error would be.

    Args:
        model: the predictor.
        configs: the configs to predict.
        confidence: the intervals' coverage, in (0, 1).
        budgets: target -> budget; with it, also ``<target>_p_within`` per budget: the chance
            the true value is within it, the model's own (``predict(..., budgets=)``, CARB's
            conformal scores) where it gives one, else read off the interval as a
            log-Student-t error with :data:`TAIL_DF` degrees of freedom.

    Returns:
        The model's prediction frame at that coverage.
    """
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
    """Return the chance that the true value is within ``budget``, for a predictor that gives only its interval.

    The error is taken as log-Student-t (TAIL_DF) whose ``confidence`` interval is the predictor's one (the upper
    half toward a budget above the point, the lower half below).
    """
    v = p[t].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(budget / v)
        half = np.where(d >= 0, np.log(p[f"{t}_hi"].to_numpy(float) / v), np.log(v / p[f"{t}_lo"].to_numpy(float)))
    chance = chance_within(d, half, confidence, TAIL_DF)
    # a budget or a prediction that is not a finite positive number: no call
    return np.where(np.isfinite(d) | (half == 0), chance, 0.5)


def _rescaled(model: Predictor, p: pd.DataFrame, confidence: float) -> pd.DataFrame:
    from carb.model.conformal import gaussian_rescale

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
    return {
        "slope": float(b),
        "intercept": float(a),
        "sigma": float(np.std(resid, ddof=2)),
        "spearman": float(spearmanr(x, y).statistic),
        "n": int(len(x)),
    }


@dataclass(frozen=True)
class _Settings:
    """A screening's settings, checked and converted as its steps use them."""

    risk: str
    rule: str
    front: str
    confidence: float
    z: float
    calibration: int
    seed: int
    front_min_prob: float
    samples: int
    max_shortlist: int | None
    shortlist_share: float | None
    device: str | None = None

    @property
    def three_way(self) -> bool:
        """Whether Stage 2 needs intervals at ``confidence`` (three-way calls or the probable front)."""
        return self.risk == "decide" or self.front == "probable"


def screen(
    candidates: pd.DataFrame,
    target: Predictor,
    budgets: Mapping[str, float],
    *,
    source: Predictor | None = None,
    objectives: Sequence[tuple[str, str]] | None = None,
    risk: str = "decide",
    z: float = 2.0,
    calibration: int = 512,
    seed: int = 0,
    confidence: float = 0.9,
    front: str | None = None,
    front_min_prob: float = FRONT_MIN_PROB,
    samples: int = 1000,
    max_shortlist: int | None = None,
    shortlist_share: float | None = SHORTLIST_SHARE,
    rule: str = "interval",
    device: str | None = None,
    allow_foreign: bool = False,
) -> ScreenResult:
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
        rule: how ``risk="decide"`` calls: ``interval`` (default; accept when every target's
            whole ``confidence`` interval is within its budget) or ``joint`` (accept when the
            chance that every budget is met is at least ``confidence``); both reject when one
            target is over its budget with chance >= ``confidence``. See the module docstring.
        front: ``point`` or ``probable`` (see the module docstring); default ``probable``
            with ``risk="decide"``, ``point`` otherwise.
        front_min_prob: the probable shortlist keeps configs on the sampled front at least
            this often.
        samples: Monte-Carlo draws of the probable front.
        max_shortlist: keep at most this many shortlisted configs (the best ranked): a
            profiling budget. ``None``: no cap.
        shortlist_share: with the probable front, keep at most ``ceil(shortlist_share *
            len(candidates))`` configs (the likeliest on the front); default
            :data:`SHORTLIST_SHARE`. ``None``: no share cap. With ``max_shortlist`` too, the
            smaller cap holds.
        z: Stage 1 margin in residual standard deviations of the source-to-target map.
        calibration: configs predicted by both models to fit the Stage 1 map.
        seed: seed of the calibration sample.
        device: the device the screening is for (``cpu``, ``cuda``, ``h200``): a target model
            measured on another kind of device is foreign. None: not checked.
        allow_foreign: screen with a foreign target model (another family or device kind) anyway:
            every config it cannot speak for is extrapolated (measure or reject, never accept).

    Returns:
        The shortlist, the feasible configs, the calls and a summary (:class:`ScreenResult`).

    Raises:
        ValueError: a setting out of range, no candidates, a budget on a target the target
            model does not predict, or a foreign target model without ``allow_foreign``.
    """
    st = _check_settings(
        risk=risk,
        rule=rule,
        front=front,
        confidence=confidence,
        z=z,
        calibration=calibration,
        seed=seed,
        front_min_prob=front_min_prob,
        samples=samples,
        max_shortlist=max_shortlist,
        shortlist_share=shortlist_share,
        device=device,
    )
    _check_inputs(candidates, target, budgets, device, allow_foreign)
    n = len(candidates)
    summary = _summary_head(n, budgets, st)

    t0 = time.perf_counter()
    survivors, stage1 = _stage1(candidates, target, source, budgets, st)
    summary.update({"stage1": stage1} if stage1 is not None else {})
    timings: dict[str, float] = {"stage1_s": time.perf_counter() - t0}
    summary["after_stage1"] = int(len(survivors))

    t0 = time.perf_counter()
    feasible, shortlist, measure, decisions = _decide(candidates, survivors, target, budgets, objectives, st, summary)
    timings["stage2_s"] = time.perf_counter() - t0
    summary.update(
        feasible=int(len(feasible)),
        shortlist=int(len(shortlist)),
        pruning_ratio=1.0 - len(shortlist) / n,
        timings=timings,
    )
    return ScreenResult(shortlist=shortlist, feasible=feasible, summary=summary, measure=measure, decisions=decisions)


def _summary_head(n: int, budgets: Mapping[str, float], st: _Settings) -> dict[str, Any]:
    """Return the start of a screening's summary: the candidates, the budgets and the settings that shape the calls."""
    summary: dict[str, Any] = {
        "candidates": n,
        "budgets": dict(budgets),
        "risk": st.risk,
        "confidence": st.confidence,
        "front": st.front,
    }
    if st.risk == "decide":
        summary["rule"] = st.rule
    return summary


def _decide(
    candidates: pd.DataFrame,
    survivors: pd.DataFrame,
    target: Predictor,
    budgets: Mapping[str, float],
    objectives: Sequence[tuple[str, str]] | None,
    st: _Settings,
    summary: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run Stage 2 and the shortlist: return the feasible configs, the shortlist, the configs to measure, the calls.

    ``summary`` gets the objectives, the shortlist's settings and, with three-way calls, their counts.
    """
    n = len(candidates)
    pred, feasible, possible = _stage2(candidates, survivors, target, budgets, st)
    objs = _objectives(objectives, target)
    summary["objectives"] = [f"{d}:{c}" for c, d in objs]
    shortlist, pred = _shortlist(pred, feasible, possible, objs, budgets, st, n, summary)
    measure = decisions = pd.DataFrame()
    ext = extrapolated(pred)
    # the configs the target model predicted outside its domain, and how they were called
    summary["extrapolated"] = {
        "configs": int(ext.sum()),
        "of": int(len(pred)),
        **{d: int((pred["decision"].to_numpy()[ext] == d).sum()) for d in DECISIONS if len(pred)},
    }
    if st.risk == "decide" and len(pred):
        measure = measure_set(pred, budgets)
        summary.update(call_counts(pred, measure, budgets, n, len(survivors)))
    if len(pred):
        decisions = decisions_table(pred)
    return feasible, shortlist, measure, decisions


def _check_settings(
    *,
    risk: str,
    rule: str,
    front: str | None,
    confidence: float,
    z: float,
    calibration: int,
    seed: int,
    front_min_prob: float,
    samples: int,
    max_shortlist: int | None,
    shortlist_share: float | None,
    device: str | None = None,
) -> _Settings:
    """:func:`screen`'s settings, checked (a ValueError names the first one out of range)."""
    if risk not in RISKS:
        raise ValueError(f"risk {risk!r}: expected one of {', '.join(RISKS)}")
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    front = front or ("probable" if risk == "decide" else "point")
    if front not in FRONTS:
        raise ValueError(f"front {front!r}: expected one of {', '.join(FRONTS)}")
    if not 0 < float(confidence) < 1:
        raise ValueError(f"confidence {confidence!r}: must be in (0, 1), e.g. 0.9")
    if not float(z) >= 0:  # a negative margin would prune configs the source model itself keeps
        raise ValueError(f"z {z:g}: must be >= 0 (residual standard deviations of the source-to-target map)")
    if risk == "decide" and float(confidence) < 0.5:
        # below one half a config could be both accepted and rejected at that chance
        raise ValueError(f"confidence {confidence!r}: three-way calls need at least 0.5 (e.g. 0.9)")
    if not 0 <= float(front_min_prob) <= 1 or int(samples) < 1:
        raise ValueError("front_min_prob must be in [0, 1] and samples >= 1")
    if max_shortlist is not None and int(max_shortlist) < 1:
        raise ValueError(f"max_shortlist {max_shortlist!r}: must be >= 1 (or None: no cap)")
    if shortlist_share is not None and not 0 < float(shortlist_share) <= 1:
        raise ValueError(f"shortlist_share {shortlist_share!r}: must be in (0, 1] (or None: no cap)")
    return _Settings(
        risk=risk,
        rule=rule,
        front=front,
        confidence=float(confidence),
        z=z,
        calibration=calibration,
        seed=seed,
        front_min_prob=float(front_min_prob),
        samples=int(samples),
        max_shortlist=None if max_shortlist is None else int(max_shortlist),
        shortlist_share=None if shortlist_share is None else float(shortlist_share),
        device=device,
    )


def _check_inputs(
    candidates: pd.DataFrame, target: Predictor, budgets: Mapping[str, float], device: str | None, allow_foreign: bool
) -> None:
    """Refuse an empty space, a budget on a target the target model does not predict, and a foreign target model.

    A foreign model (another family of networks or kind of device, :func:`foreign_reason`) passes with
    ``allow_foreign``.
    """
    if candidates.empty:
        raise ValueError("no candidates to screen")
    missing = [t for t in budgets if t not in target.targets_]
    if missing:
        raise ValueError(
            f"budget on {missing[0]}, which the target model does not predict "
            f"(it predicts {', '.join(target.targets_)})"
        )
    why = foreign_reason(candidates, target, device)
    if why and not allow_foreign:
        raise ValueError(
            f"{why}: its predictions there are extrapolations; pass allow_foreign=True to screen anyway "
            "(those configs are then measure or reject, never accept)"
        )


def _stage1(
    candidates: pd.DataFrame, target: Predictor, source: Predictor | None, budgets: Mapping[str, float], st: _Settings
) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """Run Stage 1: return the candidates the source model's mapped predictions keep, and its summary.

    The summary is ``None`` without a source model or budgets, and then every candidate is kept.
    """
    if source is None or not budgets:
        return candidates, None
    n = len(candidates)
    shared = [t for t in budgets if t in source.targets_]
    src_all = source.predict(candidates)
    cal_idx = np.random.default_rng(st.seed).choice(n, size=min(st.calibration, n), replace=False)
    cal = candidates.iloc[cal_idx]
    tgt_cal = predict_at(target, cal, st.confidence) if st.three_way else target.predict(cal)
    keep = np.ones(n, dtype=bool)
    maps = {}
    for t in shared:
        m = _stage1_map(src_all.iloc[cal_idx], tgt_cal, t)
        if st.three_way:
            m["interval_margin"] = _interval_margin(tgt_cal, t)
        maps[t] = m
        mapped = m["intercept"] + m["slope"] * np.log(src_all[t].to_numpy(float))
        keep &= mapped <= np.log(budgets[t]) + st.z * m["sigma"] + m.get("interval_margin", 0.0)
    # a prune is a reject: never on an extrapolated source prediction
    keep |= extrapolated(src_all)
    return candidates[keep], {"z": st.z, "maps": maps, "targets": shared}


def _interval_margin(tgt_cal: pd.DataFrame, t: str) -> float:
    """Return Stage 1's extra margin when its prunes are reject calls.

    The margin is whatever the target's interval could bring within budget (the 95th percentile of its log upper
    half-width).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.log(tgt_cal[f"{t}_hi"].to_numpy(float) / tgt_cal[t].to_numpy(float))
    up = up[np.isfinite(up)]
    return float(np.quantile(up, 0.95)) if len(up) else 0.0


def _stage2(
    candidates: pd.DataFrame, survivors: pd.DataFrame, target: Predictor, budgets: Mapping[str, float], st: _Settings
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray | None]:
    """Run Stage 2: return the target model's predictions of the survivors, the feasible ones, and the possible ones.

    The predictions carry their calls (``decision``); the possible ones are those that may be within budget (for the
    probable front; ``None`` when it does not apply).
    """
    if not len(survivors):
        pred = feasible = pd.DataFrame(columns=candidates.columns)
        return pred, feasible, None
    # both rules' rejects read each target's chance of being within its budget
    pred = (
        predict_at(target, survivors, st.confidence, budgets=budgets if st.risk == "decide" else None)
        if st.three_way
        else target.predict(survivors)
    )
    # the predictions win over same-named candidate columns: candidates taken from a
    # measured dataset carry the measured targets, which must not decide the screening
    pred = pd.concat(
        [
            survivors.drop(columns=[c for c in pred.columns if c in survivors.columns]).reset_index(drop=True),
            pred.reset_index(drop=True),
        ],
        axis=1,
    )
    pred["extrapolated"] = extrapolated(pred) | foreign_rows(pred, target, st.device)
    call, ok, possible = _budget_calls(pred, budgets, st)
    pred = _with_derived(pred.assign(decision=call))
    if "flops_per_image" not in pred.columns:
        from carb.families.features import compute

        pred = pred.join(compute(pred)[["flops_per_image"]])
    return pred, pred[ok].reset_index(drop=True), possible


def _budget_calls(
    pred: pd.DataFrame, budgets: Mapping[str, float], st: _Settings
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Return each config's call, whether it is feasible, and whether it may be within budget.

    Those that may be within budget are the probable front's candidates (``None`` when it does not apply). With
    three-way calls it adds ``p_within`` to ``pred``: the chance every budget is met (targets independent). A
    two-way risk calls an extrapolated config as the three-way rule does on its interval: ``measure``, or ``reject``
    where its lower bound is over a budget.
    """
    possible = None
    if st.risk == "decide":
        call = _calls(pred, budgets, st.confidence, st.rule)
        if budgets:
            pred["p_within"] = np.prod([pred[f"{t}_p_within"].to_numpy(float) for t in budgets], axis=0)
        return call, call == "accept", call != "reject"
    col = {"safe": "_hi", "point": "", "optimistic": "_lo"}[st.risk]
    ok = np.ones(len(pred), dtype=bool)
    for t, b in budgets.items():
        ok &= pred[f"{t}{col}"].to_numpy(float) <= b
    three = _calls(pred, budgets)
    ext = extrapolated(pred)
    ok &= ~ext
    if st.front == "probable":
        possible = three != "reject"
    return np.where(ext, three, np.where(ok, "accept", "reject")), ok, possible


def _objectives(objectives: Sequence[tuple[str, str]] | None, target: Predictor) -> list[tuple[str, str]]:
    """The front's objectives: those given, else the defaults the target model predicts."""
    if objectives is not None:
        return list(objectives)
    return [
        o
        for o in pareto.DEFAULT_OBJECTIVES
        if o[0] in ("flops_per_image",) or o[0].removesuffix("_per_image") in target.targets_
    ]


def _shortlist(
    pred: pd.DataFrame,
    feasible: pd.DataFrame,
    possible: np.ndarray | None,
    objs: list[tuple[str, str]],
    budgets: Mapping[str, float],
    st: _Settings,
    n: int,
    summary: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the ranked shortlist (probable or point front, capped) and ``pred``.

    ``pred`` carries the probable front's chances where it was drawn.
    """
    max_shortlist = st.max_shortlist
    if st.front == "probable" and possible is not None and possible.any():
        shortlist, pred = probable_shortlist(
            pred,
            possible,
            objs,
            budgets,
            confidence=st.confidence,
            samples=st.samples,
            seed=st.seed,
            front_min_prob=st.front_min_prob,
            summary=summary,
        )
        max_shortlist = share_cap(len(shortlist), max_shortlist, st.shortlist_share, n, summary)
    elif len(feasible):
        shortlist = point_shortlist(feasible, objs)
    else:
        shortlist = feasible.assign(rank=pd.Series(dtype=int))
    if max_shortlist is not None and len(shortlist) > max_shortlist:
        shortlist = shortlist.sort_values("rank").head(max_shortlist).reset_index(drop=True)
        summary["max_shortlist"] = max_shortlist
    return shortlist, pred
