"""Probe (issue 15, public zoo): calibrate (`refit`) on K = 10 torchvision networks of *other*
designs instead of K zoo networks, and predict each held-out design's networks: what a user
gets who calibrates with networks of the kind they deploy (`carb calibrate --networks`).
Designs: resnet (incl. resnext, wide), vgg, densenet, mobilenet, efficientnet, regnet,
shufflenet/squeezenet/mnasnet, inception/googlenet, alexnet, convnext. Needs torchvision.

    taskset -c 0 /tmp/tvenv/bin/python benchmarks/probe_own_calibration.py
"""

import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, __import__("os").path.dirname(__file__))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from bench_modules import metrics  # noqa: E402
from bench_public_zoo import MODEL, _read  # noqa: E402

from carb import families, netmodel

DESIGNS = {
    "resnet": ("resnet", "resnext", "wide_resnet"),
    "vgg": ("vgg",),
    "densenet": ("densenet",),
    "mobilenet": ("mobilenet",),
    "efficientnet": ("efficientnet",),
    "regnet": ("regnet",),
    "small": ("shufflenet", "squeezenet", "mnasnet"),
    "inception": ("inception", "googlenet"),
    "alexnet": ("alexnet",),
    "convnext": ("convnext",),
}


def design(label: str) -> str:
    return next(d for d, pre in DESIGNS.items() if label.startswith(pre))


nm = netmodel.load(MODEL)
for store in ("campaigns/public-zoo-cpu-1t.duckdb", "campaigns/public-zoo-cpu-1t-run2.duckdb"):
    df, _, _ = _read(store)
    roles = pd.read_csv(store.replace(".duckdb", ".roles.csv")).set_index("config_id")
    df = df[df.status == "ok"].reset_index(drop=True)
    pub = np.array(["public" in t for t in roles.loc[df.config_id, "role"].str.split(";")])
    df = df[pub].reset_index(drop=True)
    cfgs = [families.config_from_row(r) for r in df.to_dict("records")]
    tabs = [netmodel.capture_config(c) for c in cfgs]
    des = np.array([design(c.label()) for c in cfgs])
    y, pred, lo, hi = df.latency_ms.to_numpy(), np.zeros(len(df)), np.zeros(len(df)), np.zeros(len(df))
    for d in sorted(set(des)):
        te = des == d
        for seed in range(5):
            k = np.random.default_rng(100 + seed).choice(np.flatnonzero(~te), size=10, replace=False)
            m = netmodel.calibrate_on(nm, [tabs[i] for i in k], df.iloc[k], "refit")
            p = m.predict_rows(netmodel._network_rows([tabs[i] for i in np.flatnonzero(te)], m.layer)[0])
            pred[te] += p.latency_ms.to_numpy() / 5
            lo[te] += p.latency_ms_lo.to_numpy() / 5
            hi[te] += p.latency_ms_hi.to_numpy() / 5
    mm = metrics(y, pred, lo, hi)
    print(
        f"{store.split('/')[-1]:32s} refit on K = 10 torchvision networks of other designs: MAPE {mm['mape']:.1f}% "
        f"w10 {mm['within10']:.0f}% w20 {mm['within20']:.0f}% rho {mm['spearman']:.3f} cov {mm['coverage']:.0f}%"
    )
