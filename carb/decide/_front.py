"""The shortlist of a screening: the point front, or the probable front under uncertainty.

:func:`carb.decide.screen.screen` builds its shortlist here; the module docstring of :mod:`carb.decide.screen` says
how the probable front draws the true costs and keeps the configs likeliest on it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from carb.decide import pareto
from carb.model import TARGETS

#: degrees of freedom of the Student t the probable front draws log-cost errors from
TAIL_DF = 3.0
#: coverage of the intervals of the "dominated with high probability" filter
PREFILTER_COVERAGE = 0.99
#: room a shortlist needs for the true Pareto front, in units of the probable front's expected
#: size (``expected_front``): the shortlists that kept >= 95% of the true front held 1.9-2.5x it.
#: Below it, the screening says which ``shortlist_share`` would give that room.
FRONT_ROOM = 2.0


def probable_shortlist(
    pred: pd.DataFrame,
    possible: np.ndarray,
    objs: list[tuple[str, str]],
    budgets: Mapping[str, float],
    *,
    confidence: float,
    samples: int,
    seed: int,
    front_min_prob: float,
    summary: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return the configs likeliest on the front, ranked (``p_front``), and ``pred``.

    ``pred`` carries each config's ``p_feasible`` and ``p_front``; ``summary`` gets the probable front's settings,
    its candidates and its expected size.
    """
    cand = pred[possible].reset_index(drop=True)
    p_front, p_feas = probable_front(cand, objs, budgets, confidence, samples, seed)
    cand = cand.assign(p_feasible=p_feas, p_front=p_front)
    pred = pred.drop(columns=["p_feasible", "p_front"], errors="ignore")
    pred = (
        pred.merge(cand[["config_id", "p_feasible", "p_front"]], on="config_id", how="left")
        if "config_id" in pred.columns
        else pred
    )
    pick = cand[cand["p_front"] >= max(front_min_prob, 1e-12)].copy()
    # most likely on the front first; ties by the mean of the per-objective ranks
    ranks = np.column_stack([pick[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
    pick["_tie"] = ranks.mean(axis=1) if len(pick) else []
    shortlist = pick.sort_values(["p_front", "_tie"], ascending=[False, True]).drop(columns="_tie")
    shortlist = shortlist.assign(rank=np.arange(1, len(shortlist) + 1)).reset_index(drop=True)
    summary["front_min_prob"] = front_min_prob
    summary["samples"] = samples
    summary["front_candidates"] = int(len(cand))
    # the sampled fronts' mean size (0.64-0.87x the true front on two CPU pairs)
    summary["expected_front"] = float(np.sum(p_front))
    return shortlist, pred


def share_cap(
    size: int, max_shortlist: int | None, shortlist_share: float | None, n: int, summary: dict[str, Any]
) -> int | None:
    """Return the shortlist cap once ``shortlist_share`` applies to a probable shortlist of ``size`` configs.

    When the cap cuts into the front, it says in ``summary`` which share would leave the front room.
    """
    if shortlist_share is None:
        return max_shortlist
    cap = max(1, math.ceil(shortlist_share * n))
    summary["shortlist_share"] = shortlist_share
    if size > cap:
        summary["shortlist_share_cap"] = cap
        max_shortlist = cap if max_shortlist is None else min(max_shortlist, cap)
        if cap < FRONT_ROOM * summary["expected_front"]:
            # a small space's front is a large share of it: the cap cuts into it
            summary["share_for_front"] = min(1.0, math.ceil(100 * FRONT_ROOM * summary["expected_front"] / n) / 100)
    return max_shortlist


def point_shortlist(feasible: pd.DataFrame, objs: list[tuple[str, str]]) -> pd.DataFrame:
    """Return the Pareto front of the feasible configs' predicted values, ranked.

    The rank is that of the mean of the per-objective ranks (1 = best): a simple, explainable order.
    """
    front_rows = feasible[pareto.front_mask(feasible, objs)].copy()
    ranks = np.column_stack([front_rows[c].rank(ascending=(d == "min")).to_numpy() for c, d in objs])
    front_rows["rank"] = pd.Series(ranks.mean(axis=1), index=front_rows.index).rank(method="first").astype(int)
    return front_rows.sort_values("rank").reset_index(drop=True)


def probable_front(
    cand: pd.DataFrame,
    objs: Sequence[tuple[str, str]],
    budgets: Mapping[str, float],
    confidence: float,
    samples: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Return each candidate's chance of being on the front of the feasible configs, and of being within budget.

    Both come from Monte-Carlo draws of the true costs (log-Student-t per config and target, spread from its
    ``confidence`` interval). Configs that an accepted config dominates even at the ends of both intervals get 0
    without being drawn; an extrapolated config is never accepted, so it never prunes another this way.
    """
    from scipy.stats import t as student

    # heavy tails: CARB's normalized out-of-fold scores have q99/q90 of 2-3, as a t with 3 degrees of freedom
    zc = float(student.ppf((1 + confidence) / 2, TAIL_DF))
    cost = [
        t
        for t in TARGETS
        if t in cand.columns
        and f"{t}_lo" in cand.columns
        and (t in budgets or any(c.removesuffix("_per_image") == t for c, _ in objs))
    ]
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
    sig = {
        t: np.clip((np.log(k[f"{t}_hi"].to_numpy(float)) - np.log(k[f"{t}_lo"].to_numpy(float))) / (2 * zc), 0.0, 5.0)
        for t in cost
    }
    sig = {t: np.where(np.isfinite(v), v, 5.0) for t, v in sig.items()}
    fixed_objs = [o for o in objs if o[0].removesuffix("_per_image") not in cost]
    # every objective may be a predicted target (e.g. latency alone): then no column is fixed
    fixed = pareto.oriented(k, fixed_objs) if fixed_objs else np.empty((len(k), 0))
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
