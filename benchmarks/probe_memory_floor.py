"""How far can peak-memory predictions go? The measurement's own floor (issue 18).

Screening sends a config to ``measure`` when its interval straddles a budget; for memory
the interval can be no narrower than the measured values scatter. This probe puts the
device model's out-of-fold memory error (CARB, 5 folds by architecture, each config
predicted by the model that never saw its architecture) beside the disagreement of two
*campaigns* on the same configs: for every config measured in both datasets, the log
ratio of the two peaks less the median ratio of its (batch, precision, input size) group
(what a thread count or machine changes smoothly), as a mean absolute percentage. Both
per batch size, where the peak's scatter grows (allocator and kernel-library buffers).

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="cpu-2t")
    ap.add_argument("--other", action="append", help="another dataset with configs in common (repeat; default cpu-1t)")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    a.other = a.other or ["cpu-1t"]
    warnings.filterwarnings("ignore")
    from carb import datasets
    from carb.evaluate import GROUP_KEYS
    from carb.model import CARB

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
        out["campaigns"][other] = {"shared_configs": int(len(j)),
                                   "disagreement_abs_pct_by_batch": _by_batch(j, "dev"),
                                   "model_oof_abs_pct_by_batch_same_configs": _by_batch(sub, "model_err"),
                                   "median_ratio": float(np.exp(np.median(lr)))}
    with open(a.json, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
