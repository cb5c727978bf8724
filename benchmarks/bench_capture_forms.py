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
widening enters the ratios. torchvision's classification networks (``--torchvision``: a set
spanning every design, or ``all`` of ``_common.AT_224`` and ``_common.OTHER_SIZES``) join the
zoo where torchvision imports; a network that does not build or import is listed with its
reason. The summary counts, per target, the networks that meet it and names the worst gaps.
Writes ``--json`` (``_common.write_json``: the figures with their provenance).

Needs onnx, and torchvision for its half, which CARB never requires. Beside the project's
torch 2.13.0+cpu, torchvision 0.28.0's model definitions import from a folder of their own
(its C ops, built for CUDA, do not load; the classification networks do not use them)::

    pip install --no-deps --target /tmp/tvsite torchvision==0.28.0
    PYTHONPATH=/tmp/tvsite python benchmarks/bench_capture_forms.py --json benchmarks/results/capture_forms.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import _common

#: torchvision networks of the default run: every design of the classification models, one or
#: two sizes each (``--torchvision all``: every network of ``_common.AT_224`` and ``OTHER_SIZES``)
TORCHVISION = (
    "alexnet",
    "vgg11_bn",
    "resnet18",
    "resnet50",
    "resnext50_32x4d",
    "wide_resnet50_2",
    "densenet121",
    "googlenet",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "mnasnet0_5",
    "mnasnet1_0",
    "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0",
    "squeezenet1_0",
    "squeezenet1_1",
    "efficientnet_b0",
    "efficientnet_v2_s",
    "regnet_x_400mf",
    "regnet_y_400mf",
    "convnext_tiny",
    "inception_v3",
    "efficientnet_b2",
)
#: the input size of a torchvision network other than 224 px
SIZES = dict(_common.OTHER_SIZES)
#: the targets: export equals fx (latency within 0.5%); ONNX read back within 1% FLOPs, 2% latency
EXPORT_LATENCY, ONNX_FLOPS, ONNX_LATENCY = 0.005, 0.01, 0.02
#: the two schemas of torchvision's C ops defined here where its C library does not load (kept alive)
_TV_LIB = None


def _ratio(a: float, b: float) -> float:
    return float(a / b - 1.0) if b else float("nan")


def _differing(a: Any, b: Any) -> dict[str, int] | str:
    """The columns of two layer tables that differ, with how many rows differ in each."""
    if len(a) != len(b):
        return f"{len(a)} rows against {len(b)}"
    a, b = a.reset_index(drop=True).astype(str), b.reset_index(drop=True).astype(str)
    return {c: int(n) for c, n in (a != b).sum().items() if n}


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
        "columns_differing": _differing(fx.layers[cols], ex.layers[cols]),
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


def import_torchvision() -> tuple[Any, str | None]:
    """torchvision's models (``None`` and why where it does not import), also where its C ops do not load.

    torchvision registers fake kernels for two of its C ops on import; where its C library
    (built for another torch) cannot load, the two schemas are defined here first so that the
    model definitions import.
    """
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return None, "torchvision is not importable (see the docstring: PYTHONPATH=/tmp/tvsite)"
    try:
        torch.ops.load_library(str(Path(spec.submodule_search_locations[0]) / "_C.so"))
    except OSError:
        global _TV_LIB
        _TV_LIB = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _TV_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    try:
        import torchvision.models as tvm
    except Exception as e:  # noqa: BLE001 - recorded, the zoo half runs on
        return None, f"torchvision does not import: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return tvm, None


def _networks(per_family: int, seed: int, tv_names: list[str]) -> tuple[list[tuple[str, Any, Any, tuple]], dict]:
    """(label, builder of the real network, builder on meta, input shape) of the zoo and torchvision, and the skipped."""
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
    skipped: dict[str, str] = {}
    if not tv_names:
        return nets, skipped
    tvm, why = import_torchvision()
    if tvm is None:
        return nets, {f"torchvision.{n}": why for n in tv_names}
    from carb import graph

    for name in tv_names:
        build = getattr(tvm, name, None)
        if build is None:
            skipped[f"torchvision.{name}"] = f"torchvision {tvm.__name__} has no {name}"
            continue

        def meta(build: Any = build, name: str = name) -> Any:
            # as ``carb predict --module`` builds it: on meta, on the CPU where the builder cannot run on meta
            return graph.build_meta(build, f"torchvision.models:{name}").eval()

        size = SIZES.get(name, 224)
        nets.append((f"torchvision.{name}", (lambda build=build: build().eval()), meta, (1, 3, size, size)))
    return nets, skipped


def _median(xs: list[float]) -> float | None:
    return float(sorted(xs)[len(xs) // 2]) if xs else None


def _worst(rows: list[dict[str, Any]], get: Any) -> dict[str, Any] | None:
    """The network with the largest ``|get(row)|`` and its value."""
    vals = [(abs(v), r["label"], v) for r in rows if (v := get(r)) is not None]
    if not vals:
        return None
    _, label, v = max(vals)
    return {"network": label, "value": v}


def _targets(row: dict[str, Any]) -> dict[str, bool | None]:
    """Which targets a network meets (``None``: its form did not capture)."""
    ex, ox = row.get("export"), row.get("onnx") or {}
    out: dict[str, bool | None] = {
        "export": None
        if ex is None
        else bool(ex["flops_equal"] and ex["params_equal"] and abs(ex["latency_ratio"]) < EXPORT_LATENCY)
    }
    for key in ("bn_folded", "bn_kept"):
        o = ox.get(key)
        out[f"onnx_{key}"] = (
            None if o is None else bool(abs(o["flops_ratio"]) < ONNX_FLOPS and abs(o["latency_ratio"]) < ONNX_LATENCY)
        )
    return out


def _summary(rows: list[dict[str, Any]], skipped: dict[str, str]) -> dict[str, Any]:
    ex_rows = [r for r in rows if "export" in r]
    ex = [r["export"] for r in ex_rows]
    out: dict[str, Any] = {
        "networks": len(rows),
        "torchvision_networks": sum(r["label"].startswith("torchvision.") for r in rows),
        "zoo_networks": sum(not r["label"].startswith("torchvision.") for r in rows),
        "skipped": skipped,
        "targets_met": {
            k: {
                "met": sum(r["targets"][k] is True for r in rows),
                "of": sum(r["targets"][k] is not None for r in rows),
                "missed": [r["label"] for r in rows if r["targets"][k] is False],
            }
            for k in ("export", "onnx_bn_folded", "onnx_bn_kept")
        },
        "export": {
            "tables_equal": sum(r["table_equal"] for r in ex),
            "flops_equal": sum(r["flops_equal"] for r in ex),
            "params_equal": sum(r["params_equal"] for r in ex),
            "max_abs_latency_ratio": max((abs(r["latency_ratio"]) for r in ex), default=None),
            "worst_latency": _worst(ex_rows, lambda r: r["export"]["latency_ratio"]),
            "within_0.5pct": sum(abs(r["latency_ratio"]) < EXPORT_LATENCY for r in ex),
            "median_capture_s_fx": _median([r["capture_s_fx"] for r in ex]),
            "median_capture_s_export": _median([r["capture_s_export"] for r in ex]),
        },
    }
    for key in ("bn_folded", "bn_kept"):
        o_rows = [r for r in rows if key in (r.get("onnx") or {})]
        ox = [r["onnx"][key] for r in o_rows]
        out[f"onnx_{key}"] = {
            "max_abs_flops_ratio": max((abs(r["flops_ratio"]) for r in ox), default=None),
            "max_abs_latency_ratio": max((abs(r["latency_ratio"]) for r in ox), default=None),
            "worst_flops": _worst(o_rows, lambda r, k=key: r["onnx"][k]["flops_ratio"]),
            "worst_latency": _worst(o_rows, lambda r, k=key: r["onnx"][k]["latency_ratio"]),
            "within_1pct_flops": sum(abs(r["flops_ratio"]) < ONNX_FLOPS for r in ox),
            "within_2pct_latency": sum(abs(r["latency_ratio"]) < ONNX_LATENCY for r in ox),
            "params_equal": sum(r["params_onnx"] == r["params_module"] for r in ox),
            "unknown_ops": sorted({u for r in ox for u in r["unknown_ops"]}),
            "networks_with_unknown_ops": {
                r["label"]: r["onnx"][key]["unknown_ops"] for r in o_rows if r["onnx"][key]["unknown_ops"]
            },
            "median_read_s": _median([r["read_s"] for r in ox]),
        }
    out["errors"] = {
        r["label"]: {k: r[k] for k in r if k.startswith("error")} for r in rows if any(k.startswith("error") for k in r)
    }
    return out


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _network_row(
    label: str, build: Any, build_meta: Any, shape: tuple, nm: Any, fp: Any, folder: Path
) -> dict[str, Any]:
    """One network's forms: the export path against fx, the ONNX round trips against the module."""
    row: dict[str, Any] = {"label": label, "input_shape": list(shape)}
    try:
        meta_net = build_meta()
    except Exception as e:  # noqa: BLE001 - a network that does not build is recorded
        row["error_build"] = _one_line(e)
        return row
    try:
        row["export"] = _export_row(meta_net, shape, nm, fp)
    except Exception as e:  # noqa: BLE001
        row["error_export"] = _one_line(e)
    try:
        row["onnx"] = _onnx_rows(build(), meta_net, shape, nm, fp, folder)
    except Exception as e:  # noqa: BLE001
        row["error_onnx"] = _one_line(e)
    for f in folder.glob("*.onnx"):  # large networks: one file on disk at a time
        f.unlink()
    row["targets"] = _targets(row)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="layers-cpu-avx2-1t")
    ap.add_argument(
        "--torchvision",
        default="default",
        help="torchvision networks: default (a set spanning the designs), all, none, or NAME,NAME,...",
    )
    _common.add_json(ap, str(_common.RESULTS / "capture_forms.json"), aliases=("--out",))
    args = ap.parse_args(argv)
    tv = {
        "default": list(TORCHVISION),
        "all": list(_common.AT_224) + [n for n, _ in _common.OTHER_SIZES],
        "none": [],
    }.get(args.torchvision)
    tv = [n for n in args.torchvision.split(",") if n] if tv is None else tv

    import torch

    from carb.netmodel import load
    from carb.netmodel.domain import fingerprint_of

    torch.set_num_threads(1)
    nm = load(args.model)
    fp = fingerprint_of(nm)
    rows: list[dict[str, Any]] = []
    nets, skipped = _networks(args.per_family, args.seed, tv)
    for label, why in skipped.items():
        print(f"{label:44s} skipped: {why}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for label, build, build_meta, shape in nets:
            row = _network_row(label, build, build_meta, shape, nm, fp, Path(tmp))
            rows.append(row)
            ex, ox = row.get("export", {}), row.get("onnx", {})
            errors = " ".join(f"{k}: {v}" for k, v in row.items() if k.startswith("error"))
            print(
                f"{label:44s} export: table {'=' if ex.get('table_equal') else '!='} fx, "
                f"latency {ex.get('latency_ratio', float('nan')):+.3%} | onnx latency "
                f"{ox.get('bn_folded', {}).get('latency_ratio', float('nan')):+.3%} (BN folded) "
                f"{ox.get('bn_kept', {}).get('latency_ratio', float('nan')):+.3%} (BN kept) {errors}",
                flush=True,
            )
    summary = _summary(rows, skipped)
    doc = {
        "note": "data only: layer tables and predictions on the meta device (no timing but capture times, which are "
        "noisy on a shared 2-core VM)",
        "model": args.model,
        "sample": {"per_family": args.per_family, "seed": args.seed, "torchvision": tv},
        "targets": {"export_latency": EXPORT_LATENCY, "onnx_flops": ONNX_FLOPS, "onnx_latency": ONNX_LATENCY},
        "summary": summary,
        "networks": rows,
    }
    _common.write_json(args.json, doc, argv)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
