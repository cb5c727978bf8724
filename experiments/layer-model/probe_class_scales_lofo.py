"""Probe (issue 15): the same per-class scales in the zoo's leave-one-family-out (weights from the
90 networks of the other families, then K = 10 refit on the weighted sum, 5 draws).

    taskset -c 0 python benchmarks/probe_class_scales_lofo.py campaigns/quiet-cpu-1t.duckdb
"""

import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np
from bench_modules import layer_data, metrics, zoo_data

from carb import netmodel

store = sys.argv[1]
GROUPS = {"dense": ["conv"], "grouped": ["conv_grouped"], "dw": ["conv_dw"], "pool": ["pool", "gap"]}
if store.endswith("quiet-cpu-1t.duckdb"):
    lm = netmodel.load("carb/data/layers-cpu-1t.netmodel").layer
else:
    lf, ly, _, _ = layer_data(store, "latency_ms")
    lm = netmodel.LayerModel.fit(lf, ly, trees=200)
zdf, zcfg, ztabs, _ = zoo_data(store)
rows, t_all, known, L = netmodel._network_rows(ztabs, lm)
cls = netmodel.op_class(L)
seg = np.repeat(np.arange(len(ztabs)), [len(t.layers) for t in ztabs])
G = [np.bincount(seg, weights=np.where(np.isin(cls, v), t_all, 0.0), minlength=len(ztabs)) for v in GROUPS.values()]
G.append(rows.layer_sum_ms.to_numpy() - sum(G))
G = np.column_stack(G)
y = zdf.latency_ms.to_numpy()
arch = np.array([c.arch for c in zcfg])


def nn(A, yy, sh=None, st=0.0):
    return np.asarray(netmodel._nnls_rel(A, yy, sh, st))


res = {"base": [], "class": []}
for fam in sorted(set(arch)):
    te, tr = arch == fam, arch != fam
    cz = nn(np.column_stack([G[tr], rows.nodes[tr], np.ones(tr.sum())]), y[tr], (0, 0, 0, 0, 0, 1, 1), 10.0)
    w = cz[:5] / max(cz[4], 1e-9)
    S = G @ w
    pb = np.zeros(te.sum())
    pc = np.zeros(te.sum())
    for seed in range(5):
        r = np.random.default_rng(100 + seed)
        k = r.choice(np.flatnonzero(tr), size=10, replace=False)
        A = np.column_stack([rows.layer_sum_ms, rows.nodes, np.ones(len(y))])
        cb = nn(A[k], y[k], (0, 1, 1), 10.0)
        pb += (A[te] @ cb) / 5
        Aw = np.column_stack([S, rows.nodes, np.ones(len(y))])
        cc = nn(Aw[k], y[k], (0, 1, 1), 10.0)
        pc += (Aw[te] @ cc) / 5
    res["base"] += list(zip(y[te], pb))
    res["class"] += list(zip(y[te], pc))
    mb, mc = metrics(y[te], pb), metrics(y[te], pc)
    print(f"{fam:13s} base {mb['mape']:5.1f} class {mc['mape']:5.1f}  w={np.round(w, 2)}")
for k, v in res.items():
    a = np.array(v)
    m = metrics(a[:, 0], a[:, 1])
    print(k, f"pooled MAPE {m['mape']:.1f} w10 {m['within10']:.0f} rho {m['spearman']:.3f}")
