"""Probe (issue 15, public zoo): a per-class speed index. A few layers of each operator class
from the shipped layer campaign are timed again in the same campaign as the K calibration
networks and the torchvision networks; each class's ratio now / recorded rescales that
class's layer prices before `refit`. Needs torchvision (see bench_public_zoo.py).

    taskset -c 1 /tmp/tvenv/bin/python benchmarks/probe_class_speed.py measure   # ~10 min
    taskset -c 0 /tmp/tvenv/bin/python benchmarks/probe_class_speed.py evaluate
"""

import random
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from bench_modules import measure_campaign, metrics  # noqa: E402
from bench_public_zoo import MODEL, ROOT, _read, public_configs  # noqa: E402

from carb import families, netmodel
from carb.campaign import speed as drift
from carb.families import layers as L  # noqa: E402

STORE = ROOT / "campaigns" / "public-zoo-cpu-1t-run3.duckdb"
CLASSES = {
    "conv": "conv",
    "conv_dw": "conv_dw",
    "conv_grouped": "conv_grouped",
    "pool": "pool",
    "bn": "elt",
    "relu": "elt",
    "add": "elt",
    "linear": "linear",
}
PER_CLASS = 4


def probe_layers() -> pd.DataFrame:
    """``PER_CLASS`` shipped layers per class, the ones nearest the class's median time among
    those of 0.2-20 ms (measurable in a visit), with their recorded medians."""
    d = pd.read_parquet(ROOT / "carb" / "data" / "layers-cpu-1t.parquet")
    d["cls"] = netmodel.op_class(L.layer_frame(d))
    d = d[d["cls"].isin(list(CLASSES)) & d["latency_ms"].between(0.2, 20)]
    out = []
    for c, g in d.groupby("cls"):
        med = np.log(g["latency_ms"]).median()
        out.append(g.iloc[np.argsort(np.abs(np.log(g["latency_ms"]) - med))[:PER_CLASS]])
    return pd.concat(out).reset_index(drop=True)


def cmd_measure() -> None:
    nm = netmodel.load(MODEL)
    probes = probe_layers()
    lcfg = [families.config_from_row(r) for r in probes.to_dict("records")]
    cal = netmodel.choose_networks(nm, 10, seed=0)
    pub = public_configs()
    roles = {**{c: "public" for c in pub}, **{c: "calibration" for c in cal}, **{c: "layer-probe" for c in lcfg}}
    configs = list(roles)
    random.Random(0).shuffle(configs)
    pd.DataFrame([{"config_id": c.config_id, "role": r, "label": c.label()} for c, r in roles.items()]).to_csv(
        STORE.with_suffix(".roles.csv"), index=False
    )
    print(f"{len(lcfg)} layer probes + {len(cal)} calibration + {len(pub)} torchvision networks -> {STORE}", flush=True)
    measure_campaign(configs, STORE, rounds=3, chunk=len(configs), max_time=2.0)


def cmd_evaluate() -> None:
    nm = netmodel.load(MODEL)
    df, _, _ = _read(STORE)
    roles = pd.read_csv(STORE.with_suffix(".roles.csv")).set_index("config_id")
    df = df[df.status == "ok"].reset_index(drop=True)
    role = roles.loc[df.config_id, "role"].to_numpy()
    probes = probe_layers().set_index("config_id")
    lp = df[role == "layer-probe"].set_index("config_id")
    ratio = (lp["latency_ms"] / probes.loc[lp.index, "latency_ms"]).rename("ratio").to_frame()
    ratio["group"] = [CLASSES[c] for c in probes.loc[lp.index, "cls"]]
    speed = ratio.groupby("group")["ratio"].median()
    print("now / recorded, per class:", speed.round(3).to_dict(), "all:", round(float(ratio.ratio.median()), 3))
    cfgs = [families.config_from_row(r) for r in df.to_dict("records")]
    cal, pub = role == "calibration", role == "public"
    tabs = {i: netmodel.capture_config(cfgs[i]) for i in np.flatnonzero(cal | pub)}
    fit_rows, _ = drift.at_median_speed(df[cal].reset_index(drop=True))
    y = df[pub].latency_ms.to_numpy()

    def rows_of(idx, scaled: bool) -> pd.DataFrame:
        ts = [tabs[i] for i in idx]
        rows, t_all, _, Lr = netmodel._network_rows(ts, nm.layer)
        if scaled:
            cls = netmodel.op_class(Lr)
            f = np.array([speed.get(CLASSES.get(c, "elt"), float(ratio.ratio.median())) for c in cls])
            seg = np.repeat(np.arange(len(ts)), [len(t.layers) for t in ts])
            rows["layer_sum_ms"] = np.bincount(seg, weights=t_all * f, minlength=len(ts))
        return rows

    for scaled in (False, True):
        rc, rp = rows_of(np.flatnonzero(cal), scaled), rows_of(np.flatnonzero(pub), scaled)
        m = netmodel.fit_netmodel(nm.layer, rc, fit_rows[["latency_ms", "memory_mb"]])
        p = m.predict_rows(rp)
        mm = metrics(y, p.latency_ms, p.latency_ms_lo, p.latency_ms_hi)
        u = metrics(y, rp.layer_sum_ms)
        print(
            f"{'per-class speed index' if scaled else 'plain':22s} refit: MAPE {mm['mape']:.1f}% w10 {mm['within10']:.0f}% "
            f"rho {mm['spearman']:.3f} cov {mm['coverage']:.0f}% | layer sum alone MAPE {u['mape']:.1f}% "
            f"| s, o, c = {np.round(m.lat_coef, 4)}"
        )


if __name__ == "__main__":
    {"measure": cmd_measure, "evaluate": cmd_evaluate}[sys.argv[1]]()
