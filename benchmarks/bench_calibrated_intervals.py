"""Coverage and width of calibrated 90% intervals on the shipped pair cpu-1t -> cpu-2t, old against new.

Old: the source interval mapped and widened by the map's leave-one-out error; new: the
source's locally adaptive width scaled by the conformal quantile of the map's leave-one-out
errors in units of that width; side by side in one run: K = 10, 12, 20, seeds 0-2; test =
the cpu-2t configs not measured for calibration. "new-carried": the new intervals with the
map's slope carried on outside its K's range of source predictions (before the map held its
ratio there, ``LogMap.s_range``); "new" holds it. Data only (shipped measurements): no
timing, so machine load does not change the figures.

    python benchmarks/bench_calibrated_intervals.py [--json OUT.json]
"""

from __future__ import annotations

import copy
import warnings

import _common
import numpy as np


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    from carb import datasets
    from carb.model import CARB
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    src_rows = datasets.load("cpu-1t")
    b = datasets.load("cpu-2t")
    src_rows = src_rows[src_rows.status == "ok"]
    b = b[b.status == "ok"].reset_index(drop=True)
    src = CARB(preset="default").fit(src_rows)
    out = []
    for K in (10, 12, 20):
        for seed in (0, 1, 2):
            pick = choose_samples(b, src, K, seed=seed)
            meas = b[b.config_id.isin(pick.config_id)]
            rest = b[~b.config_id.isin(pick.config_id)].reset_index(drop=True)
            cal = fit_calibrated(src, meas)
            old = copy.deepcopy(cal)
            for m in old.maps_.values():
                m.scale_q, m.s_range = None, None
            carried = copy.deepcopy(cal)  # the conformal scale, the map's slope carried outside its K's range
            for m in carried.maps_.values():
                m.s_range = None
            for name, mdl in (("old", old), ("new-carried", carried), ("new", cal)):
                p = mdl.predict(rest)
                row = [name, K, seed]
                rec: dict = {"intervals": name, "k": K, "seed": seed}
                for t in ("latency_ms", "memory_mb"):
                    y = rest[t].to_numpy()
                    cov = np.mean((y >= p[f"{t}_lo"]) & (y <= p[f"{t}_hi"]))
                    w = np.median(np.log(p[f"{t}_hi"] / p[f"{t}_lo"]) / 2)
                    mape = np.mean(np.abs(p[t].to_numpy() / y - 1))
                    row += [f"{t} cov {cov:.3f} hw {w:.3f} mape {mape:.4f}"]
                    rec[t] = {"coverage": float(cov), "median_halfwidth_log": float(w), "mape": float(mape)}
                out.append(rec)
                print(*row, flush=True)
    if a.json:
        _common.write_json(a.json, {"pair": "cpu-1t->cpu-2t", "rows": out})
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
