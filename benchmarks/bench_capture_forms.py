"""Every form a user holds a network in, priced alike: torch.fx, torch.export, and ONNX files.

Over ``carb.families.zoo`` (``zoo.sample_configs(per_family, seed)``: every family), per network:

- ``export``: :func:`carb.graph.capture` through ``torch.export`` (``via="export"``) against
  ``torch.fx``: the layer tables compared column for column (all but the node names), FLOPs
  and parameters, and the latency the shipped network model predicts (target: equal FLOPs
  and parameters, latency within 0.5%);
- ``onnx``: the network exported with ``torch.onnx.export`` (TorchScript exporter, to a
  temporary folder) and read back with :func:`carb.graph.capture_onnx`, twice: BN folded
  into the convolutions (the exporter's default in eval mode), against the module captured
  with ``fold_bn=True``; and BN kept (``TrainingMode.PRESERVE``), against the eager module
  (target: FLOPs within 1%, latency within 2%, unknown operators listed).

Predictions use ``--model`` with its own machine fingerprint, so that no machine-kind
widening enters the ratios. torchvision's classification models join where torchvision
imports. Writes ``--out`` JSON.

Run (repository root)::

    python benchmarks/bench_capture_forms.py --out benchmarks/results/capture_forms.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _ratio(a: float, b: float) -> float:
    return float(a / b - 1.0) if b else float("nan")


def _export_row(meta_net: Any, shape: tuple[int, ...], nm: Any, fp: Any) -> dict[str, Any]:
    """torch.export against torch.fx on one network (built on meta)."""
    from carb import graph
    from carb.graph.table import COLUMNS
    from carb.netmodel.predict import predict_table

    t0 = time.perf_counter()
    fx = graph.capture(meta_net, shape, via="fx")
    t1 = time.perf_counter()
    ex = graph.capture(meta_net, shape, via="export")
    t2 = time.perf_counter()
    cols = [c for c in COLUMNS if c not in ("name", "target", "kind")]
    pa, pb = predict_table(fx, nm, fp), predict_table(ex, nm, fp)
    return {
        "rows_fx": len(fx.layers),
        "rows_export": len(ex.layers),
        "table_equal": bool(fx.layers[cols].equals(ex.layers[cols])),
        "flops_equal": fx.flops == ex.flops,
        "params_equal": fx.params == ex.params,
        "peak_live_equal": fx.peak_live_bytes == ex.peak_live_bytes,
        "latency_ratio": _ratio(pb.latency_ms, pa.latency_ms),
        "capture_s_fx": round(t1 - t0, 3),
        "capture_s_export": round(t2 - t1, 3),
    }


def _onnx_rows(net: Any, meta_net: Any, shape: tuple[int, ...], nm: Any, fp: Any, folder: Path) -> dict[str, Any]:
    """The network exported to ONNX (BN folded, BN kept) and read back, against its module."""
    import torch

    from carb import graph
    from carb.netmodel.predict import predict_table

    out: dict[str, Any] = {}
    for keep_bn in (False, True):
        path = folder / f"net-{keep_bn}.onnx"
        mode = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (torch.randn(*shape),), str(path), dynamo=False, training=mode)
        t1 = time.perf_counter()
        t = graph.capture_onnx(path, shape)
        t2 = time.perf_counter()
        mod = graph.capture(meta_net, shape, fold_bn=not keep_bn)
        pa, pb = predict_table(mod, nm, fp), predict_table(t, nm, fp)
        out["bn_kept" if keep_bn else "bn_folded"] = {
            "rows_module": len(mod.layers),
            "rows_onnx": len(t.layers),
            "flops_ratio": _ratio(t.flops, mod.flops),
            "params_module": mod.params,
            "params_onnx": t.params,
            "latency_ratio": _ratio(pb.latency_ms, pa.latency_ms),
            "memory_ratio": _ratio(pb.memory_mb, pa.memory_mb),
            "unknown_ops": t.unknown,
            "export_s": round(t1 - t0, 3),
            "read_s": round(t2 - t1, 3),
        }
    return out


def _networks(per_family: int, seed: int) -> list[tuple[str, Any, Any, tuple[int, ...]]]:
    """(label, builder of the real network, builder on meta, input shape) for the zoo and torchvision."""
    from carb.families import zoo

    nets = [
        (
            c.label(),
            (lambda c=c: zoo.build(c)),
            (lambda c=c: zoo._meta_build(c)),
            (c.batch, 3, c.input_size, c.input_size),
        )
        for c in zoo.sample_configs(per_family=per_family, seed=seed)
    ]
    try:
        import torchvision.models as tvm
    except ImportError:
        return nets
    import torch

    for name in ("resnet18", "mobilenet_v3_small", "shufflenet_v2_x1_0", "efficientnet_b0", "regnet_x_400mf"):
        build = getattr(tvm, name)

        def meta(build: Any = build) -> Any:
            with torch.device("meta"):
                return build().eval()

        nets.append((f"torchvision.{name}", (lambda build=build: build().eval()), meta, (1, 3, 224, 224)))
    return nets


def _median(xs: list[float]) -> float | None:
    return float(sorted(xs)[len(xs) // 2]) if xs else None


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ex = [r["export"] for r in rows if "export" in r]
    out: dict[str, Any] = {
        "networks": len(rows),
        "export": {
            "tables_equal": sum(r["table_equal"] for r in ex),
            "flops_equal": sum(r["flops_equal"] for r in ex),
            "params_equal": sum(r["params_equal"] for r in ex),
            "max_abs_latency_ratio": max((abs(r["latency_ratio"]) for r in ex), default=None),
            "within_0.5pct": sum(abs(r["latency_ratio"]) < 0.005 for r in ex),
            "median_capture_s_fx": _median([r["capture_s_fx"] for r in ex]),
            "median_capture_s_export": _median([r["capture_s_export"] for r in ex]),
        },
    }
    for key in ("bn_folded", "bn_kept"):
        ox = [r["onnx"][key] for r in rows if "onnx" in r]
        out[f"onnx_{key}"] = {
            "max_abs_flops_ratio": max((abs(r["flops_ratio"]) for r in ox), default=None),
            "max_abs_latency_ratio": max((abs(r["latency_ratio"]) for r in ox), default=None),
            "within_1pct_flops": sum(abs(r["flops_ratio"]) < 0.01 for r in ox),
            "within_2pct_latency": sum(abs(r["latency_ratio"]) < 0.02 for r in ox),
            "params_equal": sum(r["params_onnx"] == r["params_module"] for r in ox),
            "unknown_ops": sorted({u for r in ox for u in r["unknown_ops"]}),
            "median_read_s": _median([r["read_s"] for r in ox]),
        }
    out["errors"] = [r["label"] for r in rows if "error" in r]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="layers-cpu-avx2-1t")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "capture_forms.json")
    args = ap.parse_args(argv)

    import onnx
    import torch

    from carb import graph
    from carb.netmodel import load
    from carb.netmodel.domain import fingerprint_of

    torch.set_num_threads(1)
    nm = load(args.model)
    fp = fingerprint_of(nm)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, build, build_meta, shape in _networks(args.per_family, args.seed):
            row: dict[str, Any] = {"label": label, "input_shape": list(shape)}
            try:
                meta_net = build_meta()
                row["export"] = _export_row(meta_net, shape, nm, fp)
                row["onnx"] = _onnx_rows(build(), meta_net, shape, nm, fp, Path(tmp))
            except graph.CaptureError as e:
                row["error"] = str(e)
            rows.append(row)
            ex, ox = row.get("export", {}), row.get("onnx", {})
            print(
                f"{label:44s} export: table {'=' if ex.get('table_equal') else '!='} fx, "
                f"latency {ex.get('latency_ratio', float('nan')):+.3%} | onnx latency "
                f"{ox.get('bn_folded', {}).get('latency_ratio', float('nan')):+.3%} (BN folded) "
                f"{ox.get('bn_kept', {}).get('latency_ratio', float('nan')):+.3%} (BN kept) {row.get('error', '')}",
                flush=True,
            )
    doc = {
        "command": "python benchmarks/bench_capture_forms.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
        + " (shared 2-core VM; capture times are noisy)",
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "python": platform.python_version()},
        "model": args.model,
        "sample": {"per_family": args.per_family, "seed": args.seed},
        "summary": _summary(rows),
        "networks": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
