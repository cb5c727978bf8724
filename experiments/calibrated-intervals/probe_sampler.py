"""The calibration sampler: `carb calibrate`'s (quantile bins of the source's predicted
latency, the maximin config of each bin over the parameters' levels) against a random
config of each bin ("strat") and K at random, on the shipped pair cpu-1t -> cpu-2t
(issue 18, probe; data only). Source CARB `default` on all cpu-1t rows; K = 5, 10, 20, 50;
seeds 0-29; test = the cpu-2t configs not picked. Per K and sampler: latency and memory
MAPE, 90% interval coverage, median log half-width, Spearman (means over seeds), and the
seeds' SD of latency MAPE and coverage. Writes /tmp/asym/samp30.csv.

    python benchmarks/probe_sampler.py
"""

import warnings

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

warnings.simplefilter("ignore")
from carb import datasets
from carb.model import CARB
from carb.transfer.calibrate import choose_samples, fit_calibrated

a = datasets.load("cpu-1t")
b = datasets.load("cpu-2t")
a = a[a.status == "ok"]
b = b[b.status == "ok"].reset_index(drop=True)
src = CARB(preset="default").fit(a)
pred_all = np.log(src.predict(b)["latency_ms"].to_numpy(float))


def strat(k, seed):
    rng = np.random.default_rng(seed)
    order = np.argsort(pred_all + rng.uniform(0, 1e-9, len(pred_all)))
    return b.iloc[sorted(int(rng.choice(bb)) for bb in np.array_split(order, k))]


rows = []
for K in (5, 10, 20, 50):
    for seed in range(30):
        for name, pick in (
            ("active", choose_samples(b, src, K, seed=seed)),
            ("strat", strat(K, seed)),
            ("random", b.sample(K, random_state=seed)),
        ):
            meas = b[b.config_id.isin(pick.config_id)]
            rest = b[~b.config_id.isin(pick.config_id)].reset_index(drop=True)
            cal = fit_calibrated(src, meas)
            p = cal.predict(rest)
            r = dict(K=K, seed=seed, sampler=name)
            for t in ("latency_ms", "memory_mb"):
                y = rest[t].to_numpy()
                r[f"{t[:3]}_mape"] = np.mean(np.abs(p[t] / y - 1))
                r[f"{t[:3]}_cov"] = np.mean((y >= p[f"{t}_lo"]) & (y <= p[f"{t}_hi"]))
                r[f"{t[:3]}_hw"] = np.median(np.log(p[f"{t}_hi"] / p[f"{t}_lo"]) / 2)
                r[f"{t[:3]}_rho"] = spearmanr(p[t], y)[0]
            rows.append(r)
d = pd.DataFrame(rows)
pd.set_option("display.width", 220)
g = d.groupby(["K", "sampler"])
print(g.mean(numeric_only=True).drop(columns="seed").round(4))
print(g[["lat_mape", "lat_cov"]].std().round(4))
import os

os.makedirs("/tmp/asym", exist_ok=True)
d.to_csv("/tmp/asym/samp30.csv", index=False)
