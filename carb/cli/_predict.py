"""``carb predict --module``: price one ``torch.nn.Module`` with a network model and print it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from carb import graph
from carb.netmodel import (
    DEFAULT_MODEL,
    CaptureError,
    ModelError,
    NetModel,
    Prediction,
    allocator_of,
    load,
    predict_module,
)


def calibration_line(nm: NetModel, model_dir: Any) -> str:
    """One line on what the model's figures stand for.

    Args:
        nm: the network model.
        model_dir: how the user named it (``--model``), quoted in the hint to calibrate it.

    Returns:
        Calibrated on how many networks by which method, or not calibrated (then: how to
        calibrate it to this machine).

    """
    m = nm.meta
    if m.get("calibration_method"):
        return (
            f"calibrated ({m['calibration_method']}) on {m.get('calibrated_on', '?')} networks measured on "
            f"{m.get('calibration_device', nm.device or '?')}"
        )
    n = f"{m['networks']} networks measured " if isinstance(m.get("networks"), int) else ""
    return (
        f"not calibrated to this machine: fitted on {n}on {nm.device or 'its device'} on another day; to fit it "
        f"to this machine: carb calibrate --model {model_dir} --out NEW_DIR (K zoo networks spread over sizes "
        "and designs; --networks YOUR_NETS.txt for a few of the kind you deploy)"
    )


def predict_cli(
    module_spec: str, input_shape: str | None, precision: str, model_dir: Any, json_file: Any, top: int, usage: Any
) -> None:
    """Load, capture, predict, print (coverage first), and write JSON.

    Args:
        module_spec: ``pkg.mod:callable`` or ``file.py:callable`` (:func:`carb.graph.load_module`).
        input_shape: e.g. ``1x3x224x224``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        model_dir: the network model's directory or shipped name; ``None``: :data:`DEFAULT_MODEL`.
        json_file: where to write the JSON summary (a ``.json`` path), or ``None``.
        top: how many of the most expensive layers to list.
        usage: makes the CLI's one-line error (exit 2) from a message; raised on bad input.

    """
    if input_shape is None:
        raise usage("--module needs --input, e.g. --input 1x3x224x224")
    default = model_dir is None
    if default:
        model_dir = DEFAULT_MODEL
    if json_file is not None and Path(json_file).suffix != ".json":
        raise usage(f"--json {json_file}: expected a .json file")
    try:
        shape = graph.parse_shape(input_shape)
        graph.dtype_of(precision)
        nm = load(model_dir)
        net = graph.load_module(module_spec)
        pred = predict_module(net, shape, nm, precision=precision)
    except (CaptureError, ModelError) as e:
        raise usage(str(e)) from None
    con = Console(soft_wrap=True)  # one line per figure, whatever the terminal's width
    _print_coverage(con, pred, nm, precision)
    con.print(
        f"{module_spec} on {'x'.join(map(str, shape))} {precision}, device {nm.device or '?'}: "
        f"{pred.flops / 1e9:.3f} GFLOP, {pred.params / 1e6:.2f} M parameters, {len(pred.layers)} layers"
        + (f" (model: the shipped {DEFAULT_MODEL}; --model for another)" if default else "")
    )
    _print_figures(con, pred, nm)
    con.print(_top_layers(pred, top))
    con.print(calibration_line(nm, model_dir))
    if json_file is not None:
        Path(json_file).parent.mkdir(parents=True, exist_ok=True)
        Path(json_file).write_text(
            json.dumps(
                {
                    "module": module_spec,
                    "input": list(shape),
                    "precision": precision,
                    "allocator": allocator_of(nm),
                    **pred.to_dict(top),
                },
                indent=1,
            )
            + "\n"
        )
        con.print(f"wrote {json_file}")


def _print_coverage(con: Console, pred: Prediction, nm: NetModel, precision: str) -> None:
    """The model's coverage of the network, and a warning for a precision it did not measure."""
    cov = f"coverage: {100 * pred.coverage_layers:.1f}% of layers, {100 * pred.coverage_flops:.1f}% of FLOPs known"
    if pred.unknown_ops:
        cov += f"; unknown (generic fallback, wider interval): {', '.join(pred.unknown_ops)}"
    con.print(cov, style="bold yellow" if pred.unknown_ops else "bold")
    if pred.precision_measured is False:
        con.print(
            f"precision {precision}: not measured by this model (its layers are "
            f"{', '.join(nm.layer.precisions or [])}); priced as their work on {precision}'s bytes, which says "
            f"nothing of what this device's {precision} kernels cost (on a CPU without native {precision}, "
            "tens of times more): calibrate with networks in this precision",
            style="bold yellow",
        )


def _print_figures(con: Console, pred: Prediction, nm: NetModel) -> None:
    """Latency (ms), memory (MB) and energy (J), with their intervals."""
    pct = f"{round(100 * pred.interval)}%"
    con.print(
        f"latency  {pred.latency_ms:10.3f} ms   {pct} interval [{pred.latency_ms_lo:.3f}, {pred.latency_ms_hi:.3f}]"
    )
    if allocator_of(nm) == "retain":
        con.print(
            "         the steady state of a process that keeps freed memory (measured with allocator retain); "
            "under glibc's default malloc a forward can page-fault on fresh memory every time and take longer "
            "(a median 1.25x, up to 1.7x, on our 2-core VMs: README, How it measures)"
        )
    con.print(f"memory   {pred.memory_mb:10.1f} MB   {pct} interval [{pred.memory_mb_lo:.1f}, {pred.memory_mb_hi:.1f}]")
    con.print(
        "energy   " + (f"{pred.energy_j:.4f} J" if pred.energy_j is not None else f"- ({pred.energy_missing_reason})")
    )


def _top_layers(pred: Prediction, top: int) -> Table:
    """The ``top`` most expensive layers as a table."""
    t = Table(title=f"top {top} layers by predicted latency")
    for c in ("layer", "op", "input", "k/s/g", "GFLOP", "ms", "share", "known"):
        t.add_column(c)
    for r in pred.top(top).itertuples():
        t.add_row(
            str(r.name),
            str(r.op),
            "x".join(map(str, r.in_shape)),
            f"{r.kernel}/{r.stride}/{r.groups}",
            f"{r.flops / 1e9:.4f}",
            f"{r.latency_ms:.4f}",
            f"{100 * r.share:.1f}%",
            "yes" if r.known else "NO",
        )
    return t
