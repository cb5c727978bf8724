"""Does a network model calibrated on ONNX Runtime measurements price ONNX files it never saw?

Through the CLI, as a user would, in one sitting on this machine:

1. export K carb.zoo networks (``carb.netmodel.choose_networks``, seed 0) and a set of torchvision
   classification CNNs to ONNX (legacy TorchScript exporter, BN kept);
2. ``carb characterize --configs`` the torchvision files (family onnx: ONNX Runtime, 1 thread);
3. ``carb calibrate --model layers-cpu-avx2-1t --networks <the K zoo files>`` (ONNX Runtime);
4. ``carb predict --onnx FILE --json`` with the calibrated model and with the shipped model
   (PyTorch eager, uncalibrated), against step 2's measured latency.

Needs torchvision's model definitions importable (``PYTHONPATH=/tmp/tvsite``, a ``pip install
--no-deps --target`` of torchvision 0.28) and ``carb[onnx]``.

    PYTHONPATH=/tmp/tvsite python experiments/onnx-runtime/ort_calibration.py --work /tmp/ortcal \
        --json experiments/onnx-runtime/results/ort_calibration.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

TV = [
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "densenet121",
    "regnet_y_800mf",
    "shufflenet_v2_x1_0",
    "squeezenet1_1",
    "mnasnet1_0",
    "googlenet",
    "convnext_tiny",
]


def _tv():
    import torch

    spec = importlib.util.find_spec("torchvision")
    try:
        torch.ops.load_library(str(Path(spec.submodule_search_locations[0]) / "_C.so"))
    except OSError:
        lib = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _tv.lib = lib
    import torchvision.models as tvm

    return tvm


def _export(net, path: Path, shape) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (torch.randn(*shape),), str(path), dynamo=False)


def _carb(*args, cwd: Path) -> str:
    p = subprocess.run(["carb", *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        raise SystemExit(f"carb {' '.join(map(str, args))}: {p.stderr[-1500:]}")
    return p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-time", type=float, default=1.0)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from carb import netmodel
    from carb.families import zoo

    nm = netmodel.load("layers-cpu-avx2-1t")
    lines = []
    for c in netmodel.choose_networks(nm, a.k, seed=0):
        f = work / f"zoo-{c.label()}.onnx"
        shape = (c.batch, 3, c.input_size, c.input_size)
        _export(zoo.build(c), f, shape)
        lines.append(f"{f} {'x'.join(map(str, shape))}")
    (work / "zoo.txt").write_text("\n".join(lines) + "\n")
    tvm = _tv()
    rows = ["family,onnx,input_shape,batch,input_size,precision"]
    for name in TV:
        f = work / f"tv-{name}.onnx"
        _export(getattr(tvm, name)(weights=None), f, (1, 3, 224, 224))
        rows.append(f"onnx,{f},1x3x224x224,,,fp32")
    (work / "truth.csv").write_text("\n".join(rows) + "\n")
    common = ("--threads", "1", "--max-time", str(a.max_time))
    _carb("characterize", "--configs", "truth.csv", "--store", "truth.duckdb", *common, cwd=work)
    _carb("calibrate", "--model", "layers-cpu-avx2-1t", "--networks", "zoo.txt", *common, "--out", "cal", cwd=work)
    _carb("dataset", "export", "--store", "truth.duckdb", "--out", "truth.parquet", cwd=work)
    import pandas as pd

    truth = pd.read_parquet(work / "truth.parquet")
    truth = truth[truth.status == "ok"]
    out = []
    for _, r in truth.iterrows():
        got = {}
        for tag, model in (("calibrated", "cal"), ("shipped", "layers-cpu-avx2-1t")):
            j = work / f"p-{tag}-{Path(r['onnx']).stem}.json"
            _carb("predict", "--onnx", r["onnx"], "--input", "1x3x224x224", "--model", model, "--json", j, cwd=work)
            d = json.loads(j.read_text())
            lat = d["latency_ms"]
            got[tag] = {
                "latency_ms": lat["value"],
                "latency_ms_lo": lat["lo"],
                "latency_ms_hi": lat["hi"] if lat["hi"] is not None else float("inf"),
                "memory_mb": d["memory_mb"]["value"],
            }
        out.append(
            {
                "network": Path(r["onnx"]).stem,
                "latency_ms": float(r["latency_ms"]),
                "memory_mb": float(r["memory_mb"]),
                **got,
            }
        )

    def score(tag: str) -> dict:
        y = np.array([o["latency_ms"] for o in out])
        p = np.array([o[tag]["latency_ms"] for o in out])
        lo = np.array([o[tag]["latency_ms_lo"] for o in out])
        hi = np.array([o[tag]["latency_ms_hi"] for o in out])
        from scipy.stats import spearmanr

        e = np.abs(p / y - 1)
        return {
            "n": len(y),
            "mape": float(e.mean()),
            "within10": float((e <= 0.1).mean()),
            "spearman": float(spearmanr(y, p).statistic),
            "coverage": float(((lo <= y) & (y <= hi)).mean()),
        }

    cal = json.loads((work / "cal" / "netmodel.json").read_text())["meta"]
    doc = {
        "command": " ".join(sys.argv),
        "k": a.k,
        "max_time_s": a.max_time,
        "runtime": cal.get("runtime"),
        "runtime_version": cal.get("runtime_version"),
        "calibration": cal.get("calibration_method"),
        "latency": {t: score(t) for t in ("calibrated", "shipped")},
        "networks": out,
    }
    Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["latency"], indent=1))


if __name__ == "__main__":
    main()
