"""Is the calibrated model's latency over-coverage (93-95% at nominal 90%) the leave-one-out
residuals' leverage inflation? (issue 18, probe; data only, shipped cpu-1t -> cpu-2t)

For K = 10, 20, 30 and sampler seeds 0-4, ``carb calibrate``'s intervals as shipped beside
leverage-studentized ones: scores ``|loo| * sqrt(1 - h_i) / hw_i`` (the internally
studentized residual in units of the source's local half-width), interval ``q * hw(x) *
sqrt(1 + h0(x))`` with ``h0`` the new config's leverage under the chosen map (identity:
0; factor and additive: 1/K). Coverage and median log half-width on the cpu-2t configs not
measured for calibration.

    python benchmarks/probe_calibrated_leverage.py
"""

import warnings

import numpy as np
import pandas as pd

warnings.simplefilter("ignore")
from carb.model._conformal import conformal_quantile

from carb import datasets
from carb.model import CARB
from carb.transfer.calibrate import _log_halfwidth, choose_samples, fit_calibrated

a = datasets.load("cpu-1t")
b = datasets.load("cpu-2t")
a = a[a.status == "ok"]
b = b[b.status == "ok"].reset_index(drop=True)
src = CARB(preset="default").fit(a)
rows = []
for K in (10, 20, 30):
    for seed in range(5):
        pick = choose_samples(b, src, K, seed=seed)
        meas = b[b.config_id.isin(pick.config_id)].reset_index(drop=True)
        rest = b[~b.config_id.isin(pick.config_id)].reset_index(drop=True)
        cal = fit_calibrated(src, meas)
        p = cal.predict(rest)
        sm, sr = src.predict(meas), src.predict(rest)
        for t in ("latency_ms", "memory_mb"):
            m = cal.maps_[t]
            y = rest[t].to_numpy()
            cov0 = np.mean((y >= p[f"{t}_lo"]) & (y <= p[f"{t}_hi"]))
            hw0 = np.median(np.log(p[f"{t}_hi"] / p[f"{t}_lo"]) / 2)
            ls = np.log(sm[t].to_numpy())
            lb = np.log(meas.batch.to_numpy(float))
            n = len(ls)
            lo_r, hi_r = np.log(m.s_range[0]), np.log(m.s_range[1])
            ls0 = np.clip(np.log(sr[t].to_numpy()), lo_r, hi_r)
            lb0 = np.log(rest.batch.to_numpy(float))
            if m.add or (len(m.coef) == 2 and m.coef == [0.0, 1.0]):
                kind = "add" if m.add else "identity"
                h = np.full(n, 1.0 / n if m.add else 0.0)
                h0 = np.full(len(rest), h[0])
            else:
                if len(m.coef) == 2 and m.coef[1] == 1.0:
                    X = np.ones((n, 1))
                    X0 = np.ones((len(rest), 1))
                    kind = "factor"
                elif len(m.coef) == 2:
                    X = np.column_stack([np.ones(n), ls])
                    X0 = np.column_stack([np.ones(len(rest)), ls0])
                    kind = "line"
                else:
                    X = np.column_stack([np.ones(n), ls, lb])
                    X0 = np.column_stack([np.ones(len(rest)), ls0, lb0])
                    kind = "line+batch"
                G = np.linalg.pinv(X.T @ X)
                h = np.einsum("ij,jk,ik->i", X, G, X)
                h0 = np.einsum("ij,jk,ik->i", X0, G, X0)
            hwk = _log_halfwidth(sm, t)
            hwr = _log_halfwidth(sr, t)
            sc = np.sort(np.abs(np.asarray(m.loo)) * np.sqrt(1 - h) / np.maximum(hwk, 1e-9))
            q = conformal_quantile(sc, 0.9)
            hw1 = hwr * q * np.sqrt(1 + h0)
            pt = np.log(p[t].to_numpy())
            cov1 = np.mean(np.abs(np.log(y) - pt) <= hw1)
            rows.append(
                dict(
                    K=K,
                    seed=seed,
                    t=t,
                    kind=kind,
                    cov_now=cov0,
                    hw_now=hw0,
                    cov_stud=cov1,
                    hw_stud=np.median(hw1),
                    maxh=h.max(),
                )
            )
d = pd.DataFrame(rows)
pd.set_option("display.width", 200)
print(d.round(3).to_string())
print(d.groupby(["K", "t"])[["cov_now", "cov_stud", "hw_now", "hw_stud"]].mean().round(3))
