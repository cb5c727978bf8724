"""Probe (issue 15, public zoo): a torchvision network's layers priced by the shipped layer
model beside the same layers timed alone (1 thread), to tell the layer model's error from
the network's context. Needs torchvision (see bench_public_zoo.py for its venv).

    taskset -c 1 /tmp/tvenv/bin/python benchmarks/probe_public_layers.py resnet50 [224]
"""

import sys
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import torch
import torchvision

torch.set_num_threads(1)
from carb import graph, netmodel

sys.path.insert(0, __import__("os").path.dirname(__file__))
from bench_modules import loop_ms  # noqa: E402

nm = netmodel.load("carb/data/layers-cpu-1t.netmodel")
name = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 224
net = getattr(torchvision.models, name)().eval()
t = graph.capture(net, (1, 3, size, size))
L = t.layers
pred = nm.layer.predict(L)
cls = netmodel.op_class(L)
mods = dict(net.named_modules())


def timeit(f):
    return loop_ms(f, 0.4)


x = torch.randn(1, 3, size, size)
whole = timeit(lambda: net(x))
print(f"{name}: whole net {whole:.1f} ms; sum of predicted layers {pred.sum():.1f} ms; by class:")
import pandas as pd

df = pd.DataFrame({"cls": cls, "pred": pred, "name": L["name"], "op": L["op"], "in": L["in_shape"]})
print(df.groupby("cls")["pred"].agg(["sum", "count"]).sort_values("sum", ascending=False).head(8).to_string())
# time the top conv/linear modules alone
rows = []
for i in np.argsort(-pred)[:25]:
    r = L.iloc[i]
    m = mods.get(r["target"])
    if m is None or not isinstance(
        m,
        (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d, torch.nn.ReLU, torch.nn.MaxPool2d, torch.nn.LayerNorm),
    ):
        continue
    xi = torch.randn(*r["in_shape"])
    ms = timeit(lambda: m(xi))
    rows.append((r["name"], cls[i], tuple(r["in_shape"]), int(r["kernel"]), int(r["groups"]), pred[i], ms))
for n, c, s, k, g, p, ms in rows:
    print(f"{n:28s} {c:13s} {str(s):22s} k{k} g{g} pred {p:7.2f} alone {ms:7.2f} ratio {p / ms:5.2f}")
r = np.array([p / ms for *_, p, ms in rows])
print("median pred/alone", np.median(r))
