"""Probe (issue 15, public zoo): `refit` with a second scale for the dense convolutions' share of
the layer sum (shrunk towards the common scale at several strengths), on the public-zoo stores.
Needs torchvision (see bench_public_zoo.py).

    taskset -c 1 /tmp/tvenv/bin/python benchmarks/probe_dense_scale.py
"""

import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
import pandas as pd
from bench_modules import metrics
from bench_public_zoo import MODEL, _read

from carb import families, netmodel
from carb.campaign import speed as drift

nm = netmodel.load(MODEL)


def feats(tables):
    rows, t_all, known, L = netmodel._network_rows(tables, nm.layer)
    cls = netmodel.op_class(L)
    sizes = np.array([len(t.layers) for t in tables])
    seg = np.repeat(np.arange(len(tables)), sizes)
    dense = np.bincount(seg, weights=np.where(cls == "conv", t_all, 0.0), minlength=len(tables))
    rows["dense_ms"] = dense
    return rows


def fit2(rows, y, strength):
    # latency = s * layer_sum + dp * dense - dm * dense + o * nodes + c ; dp, dm, o, c shrunk
    A = np.column_stack([rows.layer_sum_ms, rows.dense_ms, -rows.dense_ms, rows.nodes, np.ones(len(rows))])
    # NNLS can't take a negative column with a nonneg coef meaningfully unless we allow it: use +/- split
    coef = netmodel._nnls_rel(A, y, (0.0, 1.0, 1.0, 1.0, 1.0), strength)
    return coef


def pred2(coef, rows):
    A = np.column_stack([rows.layer_sum_ms, rows.dense_ms, -rows.dense_ms, rows.nodes, np.ones(len(rows))])
    return np.maximum(A @ np.asarray(coef), 1e-6)


for store, cs in (
    ("campaigns/public-zoo-cpu-1t.duckdb", "calibration"),
    ("campaigns/public-zoo-cpu-1t-run2.duckdb", "calibration-12"),
    ("campaigns/public-zoo-cpu-1t-run2.duckdb", "calibration-3"),
):
    df, speed, rounds = _read(store)
    roles = pd.read_csv(store.replace(".duckdb", ".roles.csv")).set_index("config_id")
    df = df[df.status == "ok"].reset_index(drop=True)
    tok = roles.loc[df.config_id, "role"].str.split(";").to_numpy()
    cal = np.array([cs in t for t in tok])
    pub = np.array(["public" in t for t in tok])
    cfgs = [families.config_from_row(r) for r in df.to_dict("records")]
    tabs = [netmodel.capture_config(c) for c in cfgs]
    fit_rows, _ = drift.at_median_speed(df[cal].reset_index(drop=True))
    rc = feats([t for t, k in zip(tabs, cal) if k])
    rp = feats([t for t, k in zip(tabs, pub) if k])
    y = df[pub].latency_ms.to_numpy()
    base = netmodel.calibrate_on(nm, [t for t, k in zip(tabs, cal) if k], fit_rows, "refit")
    pb = base.predict_rows(rp).latency_ms.to_numpy()
    print(
        store.split("/")[-1],
        cs,
        "refit:",
        round(metrics(y, pb)["mape"], 1),
        "dense share of pub",
        round(float(np.median(rp.dense_ms / rp.layer_sum_ms)), 2),
        "of cal",
        np.round((rc.dense_ms / rc.layer_sum_ms).to_numpy(), 2),
    )
    for st in (0.0, 1.0, 3.0, 10.0, 30.0):
        c = fit2(rc, fit_rows.latency_ms.to_numpy(), st)
        m = metrics(y, pred2(c, rp))
        print(
            f"   2-scale strength {st:4g}: MAPE {m['mape']:.1f} w10 {m['within10']:.0f} rho {m['spearman']:.3f} coef {np.round(c, 4)}"
        )
