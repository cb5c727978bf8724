"""Probe (issue 15, public zoo): the shipped layer campaign's dense convolutions timed again now
alone (1 thread), beside their recorded medians and the layer model's price: tells the machine's
speed of the day from the model's error. Caveat (RESULTS, run 3): this in-process loop is not
the pipeline's protocol, so its times are not comparable with the recorded medians; the
pipeline itself re-timed dense convolutions at 1.02x of them.

    taskset -c 1 python benchmarks/probe_layer_drift.py
"""

import sys

import pandas as pd
import torch

torch.set_num_threads(1)
from carb import graph, netmodel

sys.path.insert(0, __import__("os").path.dirname(__file__))
from bench_modules import loop_ms  # noqa: E402

from carb.families import layers as L

nm = netmodel.load("carb/data/layers-cpu-1t.netmodel")
d = pd.read_parquet("carb/data/layers-cpu-1t.parquet")
c = d[(d.op == "conv") & (d.groups == 1) & (d.latency_ms > 0.3)].sample(30, random_state=0)


def timeit(f):
    return loop_ms(f, 0.3)


rows = []
for r in c.to_dict("records"):
    cfg = L.LayerConfig.from_dict({k: r[k] for k in L.PARAMETERS if k in r and r[k] == r[k]})
    m = L.build(cfg).eval()
    shape = (cfg.batch, cfg.cin, cfg.input_size, cfg.input_size) if hasattr(cfg, "cin") else None
    t = graph.capture(m, shape)
    pred = float(nm.layer.predict(t.layers).sum())
    x = torch.randn(*shape)
    now = timeit(lambda: m(x))
    rows.append({"recorded": r["latency_ms"], "now": now, "pred": pred})
df = pd.DataFrame(rows)
print(df.describe().to_string())
print(
    "median now/recorded",
    (df.now / df.recorded).median(),
    "median pred/recorded",
    (df.pred / df.recorded).median(),
    "median pred/now",
    (df.pred / df.now).median(),
)
