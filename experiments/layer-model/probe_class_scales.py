"""Probe (issue 15, public zoo): per-operator-class network scales (dense / grouped / depthwise
conv, pooling, rest) fitted on the 100 quiet zoo networks, then `refit` on the class-weighted
layer sum, scored on the torchvision networks. Needs torchvision (see bench_public_zoo.py).

    taskset -c 0 /tmp/tvenv/bin/python benchmarks/probe_class_scales.py
"""

import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
import pandas as pd
from bench_modules import metrics, zoo_data
from bench_public_zoo import MODEL, _read

from carb import families, netmodel
from carb.campaign import speed as drift

nm = netmodel.load(MODEL)
GROUPS = {"dense": ["conv"], "grouped": ["conv_grouped"], "dw": ["conv_dw"], "pool": ["pool", "gap"]}


def G_of(tabs):
    rows, t_all, known, L = netmodel._network_rows(tabs, nm.layer)
    cls = netmodel.op_class(L)
    seg = np.repeat(np.arange(len(tabs)), [len(t.layers) for t in tabs])
    G = [np.bincount(seg, weights=np.where(np.isin(cls, v), t_all, 0.0), minlength=len(tabs)) for v in GROUPS.values()]
    G.append(rows.layer_sum_ms.to_numpy() - sum(G))
    return np.column_stack(G), rows


def rel_nnls(A, y, shrink=None, strength=0.0):
    return np.asarray(netmodel._nnls_rel(A, y, shrink, strength))


# 1) class scales from the quiet zoo (100 networks, run 1 store)
zdf, zcfg, ztabs, _ = zoo_data("campaigns/quiet-cpu-1t.duckdb")
Gz, rz = G_of(ztabs)
yz = zdf.latency_ms.to_numpy()
cz = rel_nnls(np.column_stack([Gz, rz.nodes, np.ones(len(yz))]), yz, (0, 0, 0, 0, 0, 1, 1), 10.0)
print("zoo class scales", np.round(cz, 3))
w = cz[:5] / cz[4]  # relative to 'rest'
for store, sets in (
    ("campaigns/public-zoo-cpu-1t.duckdb", ["calibration"]),
    ("campaigns/public-zoo-cpu-1t-run2.duckdb", ["calibration-12", "calibration-3"]),
):
    df, _, _ = _read(store)
    roles = pd.read_csv(store.replace(".duckdb", ".roles.csv")).set_index("config_id")
    df = df[df.status == "ok"].reset_index(drop=True)
    tok = roles.loc[df.config_id, "role"].str.split(";").to_numpy()
    cfgs = [families.config_from_row(r) for r in df.to_dict("records")]
    tabs = [netmodel.capture_config(c) for c in cfgs]
    pub = np.array(["public" in t for t in tok])
    Gp, rp = G_of([t for t, k in zip(tabs, pub) if k])
    y = df[pub].latency_ms.to_numpy()
    for cs in sets:
        cal = np.array([cs in t for t in tok])
        fit_rows, _ = drift.at_median_speed(df[cal].reset_index(drop=True))
        Gc, rc = G_of([t for t, k in zip(tabs, cal) if k])
        yc = fit_rows.latency_ms.to_numpy()
        base = netmodel.calibrate_on(nm, [t for t, k in zip(tabs, cal) if k], fit_rows, "refit")
        pb = base.predict_rows(rp).latency_ms.to_numpy()
        # class-weighted layer sum, then the usual refit (s free, overheads shrunk)
        Sc, Sp = Gc @ w, Gp @ w
        c = rel_nnls(np.column_stack([Sc, rc.nodes, np.ones(len(yc))]), yc, (0, 1, 1), 10.0)
        pc = np.column_stack([Sp, rp.nodes, np.ones(len(y))]) @ c
        # zoo-fitted model as is (no calibration)
        pz = np.column_stack([Gp, rp.nodes, np.ones(len(y))]) @ cz
        for name, p in (("refit (now)", pb), ("class-weighted refit", pc), ("zoo class model, uncalibrated", pz)):
            m = metrics(y, p)
            print(
                f"{store.split('/')[-1]:32s} {cs:15s} {name:30s} MAPE {m['mape']:.1f} w10 {m['within10']:.0f} rho {m['spearman']:.3f}"
            )
