"""How far can predictions go? The measurement's own floor, memory and latency (issue 18).

Screening sends a config to ``measure`` when its interval straddles a budget; for memory
the interval can be no narrower than the measured values scatter. This probe puts the
device model's out-of-fold memory error (CARB, 5 folds by architecture, each config
predicted by the model that never saw its architecture) beside the disagreement of two
*campaigns* on the same configs: for every config measured in both datasets, the log
ratio of the two peaks less the median ratio of its (batch, precision, input size) group
(what a thread count or machine changes smoothly), as a mean absolute percentage. Both
per batch size, where the peak's scatter grows (allocator and kernel-library buffers).
Beside them, the same campaign against itself: each config's two rounds (``rounds`` in the
JSON), and the share of configs a perfect model, whose only error is that noise, would send
to ``measure`` (both targets, budgets at the 10/25/50/75% quantiles), and how crowded the
space is at each budget (``density``: the share of configs within +-3% of it).

    python benchmarks/probe_memory_floor.py --target cpu-2t --other cpu-1t [--other cpu-avx2-1t] \
        --json benchmarks/results/probe_memory_floor.json

Data only (shipped measurements); deterministic (seeds fixed, one thread per library).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import warnings

import numpy as np
import pandas as pd

KEYS = ["family", "block", "depth", "width", "early_downsample", "input_size", "batch", "precision", "classes"]


def _by_batch(df: pd.DataFrame, col: str) -> dict[str, float]:
    out = {str(b): float(g[col].abs().mean()) for b, g in df.groupby("batch")}
    out["all"] = float(df[col].abs().mean())
    return out


def _rounds(df: pd.DataFrame) -> dict:
    """Within one campaign: each config's two rounds (fresh processes at different moments of
    the campaign, ``extra.round_latency_ms`` / ``round_memory_mb``), how far apart they are; and
    the share of configs a perfect model (its only error the pooled value's noise, sd of the
    rounds' log difference / 2) would send to ``measure`` at budgets on both targets at the
    q quantiles (a 90% band: z = 1.645 on either side)."""
    ex = [json.loads(e) if isinstance(e, str) else e for e in df["extra"]]
    have = np.array(
        [len(e.get("round_latency_ms") or []) >= 2 and len(e.get("round_memory_mb") or []) >= 2 for e in ex]
    )
    d = df[have].reset_index(drop=True)
    ex = [e for e, h in zip(ex, have) if h]
    res: dict = {"configs": int(len(d))}
    sd = {}
    for t, key in (("latency_ms", "round_latency_ms"), ("memory_mb", "round_memory_mb")):
        r = np.array([e[key][:2] for e in ex], float)
        diff = np.log(r[:, 0] / r[:, 1])
        sd[t] = float(diff.std()) / 2  # the pooled (two-round) value's noise
        res[t] = {
            "sd_log_diff": float(diff.std()),
            "median_abs_diff_pct": float(100 * np.median(np.abs(np.expm1(diff)))),
            "mean_abs_diff_pct": float(100 * np.mean(np.abs(np.expm1(diff)))),
            "by_batch_mean_abs_diff_pct": {
                str(b): float(100 * np.mean(np.abs(np.expm1(diff[d.batch == b])))) for b in sorted(d.batch.unique())
            },
        }
    z, share = 1.645, {}
    for q in (0.1, 0.25, 0.5, 0.75):
        over = np.zeros(len(d), bool)
        near = np.zeros(len(d), bool)
        for t in ("latency_ms", "memory_mb"):
            lr = np.log(d[t].to_numpy() / np.quantile(d[t], q))
            over |= lr > z * sd[t]
            near |= np.abs(lr) < z * sd[t]
        share[str(q)] = float(np.mean(near & ~over))
    res["oracle_measure_share"] = share
    return res


def _density(df: pd.DataFrame, band: float) -> dict:
    """How crowded the space is at each budget: per target the sd of the log values and the
    share of configs within +-``band`` (relative) of its q-quantile budget. However good the
    model, a config that close to a budget is a call its interval cannot make once the
    interval is wider than the band, so this share, not the model, sets what ``measure`` costs
    where one target's values bunch up."""
    out: dict = {"band": band}
    for t in ("latency_ms", "memory_mb"):
        v = np.log(df[t].to_numpy())
        out[t] = {
            "log_sd": float(v.std()),
            "share_within_band": {
                str(q): float(np.mean(np.abs(v - np.quantile(v, q)) < np.log1p(band))) for q in (0.1, 0.25, 0.5, 0.75)
            },
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="cpu-2t")
    ap.add_argument("--other", action="append", help="another dataset with configs in common (repeat; default cpu-1t)")
    ap.add_argument("--preset", default="default")
    ap.add_argument(
        "--band",
        type=float,
        default=0.03,
        help="relative band around each budget for the crowding figure (default 0.03: about the "
        "memory intervals' half-width)",
    )
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    a.other = a.other or ["cpu-1t"]
    warnings.filterwarnings("ignore")
    from carb import datasets
    from carb.model import CARB
    from carb.model.evaluation import GROUP_KEYS

    tgt = datasets.load(a.target)
    tgt = tgt[tgt.status == "ok"].reset_index(drop=True)
    keys = [c for c in GROUP_KEYS if c in tgt.columns]
    groups = pd.factorize(tgt[keys].astype(str).agg("|".join, axis=1))[0]
    fold = np.random.default_rng(0).permutation(groups.max() + 1)[groups] % 5
    p = np.empty(len(tgt))
    for f in range(5):
        m = CARB(preset=a.preset, random_state=0).fit(tgt[fold != f])
        p[fold == f] = m.predict(tgt[fold == f])["memory_mb"].to_numpy()
    tgt["model_err"] = 100 * (p / tgt.memory_mb - 1)
    out = {"target": a.target, "model_oof_abs_pct_by_batch": _by_batch(tgt, "model_err"), "campaigns": {}}
    for other in a.other:
        o = datasets.load(other)
        o = o[o.status == "ok"]
        j = tgt.merge(o[KEYS + ["memory_mb"]], on=KEYS, suffixes=("", "_other"))
        lr = np.log(j.memory_mb / j.memory_mb_other)
        j["dev"] = 100 * (lr - lr.groupby([j.batch, j.precision, j.input_size]).transform("median"))
        sub = tgt[tgt.config_id.isin(j.config_id)]
        out["campaigns"][other] = {
            "shared_configs": int(len(j)),
            "disagreement_abs_pct_by_batch": _by_batch(j, "dev"),
            "model_oof_abs_pct_by_batch_same_configs": _by_batch(sub, "model_err"),
            "median_ratio": float(np.exp(np.median(lr))),
        }
    out["rounds"] = _rounds(tgt)
    out["density"] = _density(tgt, a.band)
    with open(a.json, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
