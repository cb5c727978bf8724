"""``carb predict``: a model's figures for a space or a file of configs, or for any network or ONNX file."""

from __future__ import annotations

import json
import shlex
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from carb import graph
from carb.measure.fingerprint import compare, here
from carb.netmodel import (
    DEFAULT_MODEL,
    CaptureError,
    ModelError,
    NetModel,
    Prediction,
    allocator_of,
    load,
    physical_memory_bytes,
    predict_module,
    resolve,
)
from carb.netmodel.domain import fingerprint_of

from ._app import UsageError, app, atomic_file, check_jobs, check_out_file, running_user_code
from ._results import _console

__all__ = ["predict", "predict_cli", "calibration_line"]


def _usage(msg: str) -> Exception:
    return UsageError(msg)


@app.command("predict")
def predict(
    model_dir: Optional[Path] = typer.Option(
        None,
        "--model",
        help=(
            "Model directory (from carb train or carb calibrate); with --module, a network model (default: the shipped "
            "layers-cpu-avx2-1t)."
        ),
    ),
    space_name: Optional[str] = typer.Option(None, "--space", help="Built-in space name or TOML file."),
    configs_file: Optional[Path] = typer.Option(None, "--configs", help="Parquet/CSV file of configs."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output .parquet or .csv file (with --space/--configs)."),
    n_jobs: int = typer.Option(1, "--jobs", min=1, help="Threads per learner."),
    module: Optional[str] = typer.Option(
        None,
        "--module",
        help=(
            "Any network: pkg.mod:callable or file.py:callable returning an nn.Module (needs a network model: "
            "carb.netmodel). Imports and runs this code."
        ),
    ),
    onnx_file: Optional[Path] = typer.Option(
        None,
        "--onnx",
        help=(
            "A network as an ONNX file, priced like --module (needs carb[onnx]; reading it runs no code). A file "
            "exported with BN folded into the convolutions is priced as folded."
        ),
    ),
    input_shape: Optional[str] = typer.Option(
        None, "--input", help="With --module or --onnx: input shape, e.g. 1x3x224x224."
    ),
    precision: str = typer.Option("fp32", "--precision", help="With --module: fp32, fp16 or bf16."),
    json_file: Optional[Path] = typer.Option(
        None, "--json", help=("With --module: also write the prediction as JSON here.")
    ),
    top: int = typer.Option(10, "--top", min=1, help="With --module: layers shown, most expensive first."),
    calibrate_first: bool = typer.Option(
        False,
        "--calibrate",
        help=(
            "With --module: when no calibration of the model for this machine is cached, measure K networks here "
            "first (about a minute) and keep the result in your calibration cache."
        ),
    ),
    use_cache: bool = typer.Option(
        True,
        "--cache/--no-cache",
        help="With --module: use your cached calibration of the model for this machine, if there is one.",
    ),
) -> None:
    """Predict energy, latency and memory (with intervals) for a space or a file of configs, or for any network (--module).

    Example: carb predict --model models/cpu-1t --space screening --out predictions.parquet
    """  # noqa: E501
    if module is not None and onnx_file is not None:
        raise _usage("give --module or --onnx, not both")
    if module is not None or onnx_file is not None:
        flag = "--module" if module is not None else "--onnx"
        if space_name is not None or configs_file is not None or out is not None:
            raise _usage(f"{flag} predicts one network: give it without --space, --configs or --out")
        if onnx_file is not None and onnx_file.suffix != ".onnx":
            raise _usage(f"--onnx {onnx_file}: expected a .onnx file")
        predict_cli(
            module if module is not None else onnx_file,
            input_shape,
            precision,
            model_dir,
            json_file,
            top,
            _usage,
            calibrate=calibrate_first,
            cache=use_cache,
        )
        return
    if calibrate_first:
        raise _usage("--calibrate: only with --module (a config model calibrates with carb calibrate)")
    check_jobs(n_jobs)
    _predict_configs(model_dir, space_name, configs_file, out, n_jobs)


def _predict_configs(
    model_dir: Optional[Path], space_name: Optional[str], configs_file: Optional[Path], out: Optional[Path], n_jobs: int
) -> None:
    """``carb predict --space/--configs``: a config model's predictions of every config, written to ``out``."""
    import pandas as pd

    from carb.families import space
    from carb.model import BundleError, load

    if model_dir is None:
        raise _usage("missing option --model (a model directory from carb train or carb calibrate)")
    if out is None:
        raise _usage("give --out (with --space or --configs)")
    if (space_name is None) == (configs_file is None):
        raise _usage("give exactly one of --space or --configs")
    if out.suffix not in (".parquet", ".csv"):
        raise _usage(f"--out {out}: unknown output type (expected .parquet or .csv)")
    check_out_file(out, inputs={"--configs": configs_file, "--model": model_dir, "--space": space_name})
    from carb.transfer.calibrate import load_predictor

    try:
        model = (
            load(model_dir, n_jobs=n_jobs)
            if not (model_dir / "calibration.json").exists()
            else load_predictor(model_dir)
        )
    except (BundleError, ValueError, OSError) as e:
        raise _usage(str(e)) from None
    frame = space.load(space_name).to_frame() if space_name is not None else _read_configs(configs_file)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            pred = model.predict(frame)
        except ValueError as e:
            raise _usage(f"{configs_file or space_name}: {e}") from None
    from carb.transfer.load import machine_of

    fp = machine_of(model)
    _console().print(
        f"priced for {fp.describe() if fp is not None else 'a machine the model does not record'} "
        "(where the model's measurements were taken)",
        highlight=False,
        soft_wrap=True,
    )
    for w in caught:  # e.g. how many rows lie outside the training domain
        _console().print(f"[yellow]warning[/yellow]: {w.message}", highlight=False, soft_wrap=True)
    result = pd.concat([frame, pred], axis=1)
    from carb.datasets import write

    write(result, out)
    missing = getattr(model, "missing_targets_", [])
    _console().print(
        f"wrote {len(result):,} predictions to {out} (targets: {', '.join(model.targets_)}"
        + (f"; NaN for untrained {', '.join(missing)})" if missing else ")")
    )


def _read_configs(configs_file: Path) -> Any:
    """``carb predict --configs``: the configs of a Parquet/CSV file, their ids computed (or verified)."""
    import pandas as pd

    from carb.families import space
    from carb.families.space import PARAMETERS

    if configs_file.suffix not in (".parquet", ".csv"):
        raise _usage(f"--configs {configs_file}: unknown file type (expected .parquet or .csv)")
    if not configs_file.exists():
        raise _usage(f"--configs {configs_file}: no such file")
    try:
        frame = pd.read_parquet(configs_file) if configs_file.suffix == ".parquet" else pd.read_csv(configs_file)
    except Exception as e:
        raise _usage(f"--configs {configs_file}: unreadable ({' '.join(str(e).split())[:200]})") from None
    frame = frame[[c for c in ("config_id", *PARAMETERS) if c in frame.columns]].reset_index(drop=True)
    if len(frame) and {"family", "depth"} <= set(frame.columns):
        try:  # computed (vectorized) or, when the file has them, verified
            frame = space.with_config_ids(frame)
        except ValueError as e:
            raise _usage(f"--configs {configs_file}: {e}") from None
    return frame


#: How many networks ``carb predict --module --calibrate`` measures (``carb calibrate``'s default K).
CALIBRATE_SAMPLES = 10


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
    fp = fingerprint_of(nm)
    where = fp.describe() if fp is not None else (nm.device or "its device")
    if m.get("calibration_method"):
        rt = f" with {m['runtime']} {m.get('runtime_version') or ''}".rstrip() if m.get("runtime") else ""
        return (
            f"calibrated ({m['calibration_method']}) on {m.get('calibrated_on', '?')} networks measured{rt} on {where}"
        )
    n = f"{m['networks']} networks measured " if isinstance(m.get("networks"), int) else ""
    return (
        f"not calibrated to this machine: fitted on {n}on {where} on another day; to fit it "
        f"to this machine: carb calibrate --model {shlex.quote(str(model_dir))} --out NEW_DIR (K zoo networks spread "
        "over sizes and designs; --networks YOUR_NETS.txt for a few of the kind you deploy)"
    )


def predict_cli(
    module_spec: str | Path,
    input_shape: str | None,
    precision: str,
    model_dir: Any,
    json_file: Any,
    top: int,
    usage: Any,
    calibrate: bool = False,
    cache: bool = True,
) -> None:
    """Load, capture, predict, print (the machine and coverage first), and write JSON.

    Args:
        module_spec: ``pkg.mod:callable`` or ``file.py:callable`` (:func:`carb.graph.load_module`), or the
            path of an ONNX file (:func:`carb.graph.capture_onnx`).
        input_shape: e.g. ``1x3x224x224``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        model_dir: the network model's directory or shipped name; ``None``: :data:`DEFAULT_MODEL`.
        json_file: where to write the JSON summary (a ``.json`` path), or ``None``.
        top: how many of the most expensive layers to list.
        usage: makes the CLI's one-line error (exit 2) from a message; raised on bad input.
        calibrate: with no cached calibration for this machine, measure K networks here first and keep it.
        cache: use the cached calibration of the model for this machine, if any.

    """
    flag = "--onnx" if isinstance(module_spec, Path) or str(module_spec).endswith(".onnx") else "--module"
    if input_shape is None:
        raise usage(f"{flag} needs --input, e.g. --input 1x3x224x224")
    default = model_dir is None
    if default:
        model_dir = DEFAULT_MODEL
    if json_file is not None and Path(json_file).suffix != ".json":
        raise usage(f"--json {json_file}: expected a .json file")
    if json_file is not None:  # never the ONNX file, the network's source or the model it reads
        source = str(module_spec).rpartition(":")[0] if flag == "--module" else module_spec
        check_out_file(Path(json_file), "--json", inputs={flag: source, "--model": model_dir})
    con = Console(soft_wrap=True)  # one line per figure, whatever the terminal's width
    try:
        shape = graph.parse_shape(input_shape)
        graph.dtype_of(precision)
        nm = load(model_dir)
        # an ONNX file is read, never imported: predict_module captures it with carb.graph.capture_onnx
        what = f"--onnx {module_spec}" if isinstance(module_spec, Path) else f"--module {module_spec!r}"
        with running_user_code(what):
            net = module_spec if isinstance(module_spec, Path) else graph.load_module(module_spec)
        machine = here()  # read once: the cache's key, the prediction's machine and the first line's
        nm, used = _calibrated_here(con, nm, model_dir, calibrate, cache, machine)
        with running_user_code(what):  # the capture runs the module's forward
            # a network this machine could not hold is refused, as the measuring commands refuse one
            pred = predict_module(
                net, shape, nm, precision=precision, machine=machine, max_bytes=physical_memory_bytes()
            )
    except (CaptureError, ModelError) as e:
        raise usage(str(e)) from None
    shape = pred.input_shape
    # one line, first: the machines by what they are, and this very command with --calibrate
    line = compare(fingerprint_of(nm), machine).line(
        _calibrate_command(module_spec, shape, precision, None if default else model_dir)
    )
    if line:
        con.print(line, style="bold yellow")
    runtime_line = _runtime_line(nm, module_spec)
    if runtime_line:
        con.print(runtime_line, style="bold yellow")
    _print_coverage(con, pred, nm, precision)
    folded = _folded_bn_line(pred)
    if folded:
        con.print(folded, style="bold yellow")
    con.print(
        f"{module_spec} on {'x'.join(map(str, shape))} {precision}: "
        f"{pred.flops / 1e9:.3f} GFLOP, {pred.params / 1e6:.2f} M parameters, {len(pred.layers)} layers; "
        f"priced for {pred.machine}"
        + (f" (model: the shipped {DEFAULT_MODEL}; --model for another)" if default and used is None else "")
    )
    _print_figures(con, pred, nm)
    con.print(_top_layers(pred, top))
    con.print(calibration_line(nm, model_dir))
    if json_file is not None:
        with atomic_file(Path(json_file)) as tmp:
            tmp.write_text(
                json.dumps(
                    {
                        "module": str(module_spec),
                        "input": list(shape),
                        "precision": precision,
                        "allocator": allocator_of(nm),
                        "capture": pred.capture,
                        **pred.to_dict(top),
                    },
                    indent=1,
                )
                + "\n"
            )
        con.print(f"wrote {json_file}")


def _runtime_line(nm: NetModel, module_spec: str | Path) -> str | None:
    """A line where the model prices another runtime than the one the network is held for, else ``None``.

    A network model prices PyTorch eager unless it was calibrated on ONNX files measured with ONNX
    Runtime (``meta["runtime"]``); then a module is priced as ONNX Runtime would run its export.
    """
    runtime = nm.meta.get("runtime")
    if runtime and not isinstance(module_spec, Path):
        return (
            f"this model is calibrated for {runtime} (ONNX files measured here): it prices the module as "
            f"{runtime} would run its ONNX export, not as PyTorch eager runs it"
        )
    return None


def _calibrate_command(module_spec: str | Path, shape: tuple[int, ...], precision: str, model_dir: Any) -> str:
    """This prediction's own command with ``--calibrate``: it measures K networks here first and keeps the result.

    ``model_dir``: ``None`` for the shipped default model.
    """
    flag = "--onnx" if isinstance(module_spec, Path) else "--module"
    args = ["carb", "predict", flag, str(module_spec), "--input", "x".join(map(str, shape))]
    args += [] if precision == "fp32" else ["--precision", precision]
    args += [] if model_dir is None else ["--model", str(model_dir)]
    return f"{shlex.join([*args, '--calibrate'])} (about a minute: {CALIBRATE_SAMPLES} networks measured here)"


def _calibrated_here(
    con: Console, nm: NetModel, model_dir: Any, calibrate: bool, cache: bool, machine: Any
) -> tuple[NetModel, Any]:
    """The model to price with: the cached calibration of ``model_dir`` for this machine, made first if asked.

    Returns:
        The model and the cache entry used (``None``: the model as given).

    """
    from carb.transfer import cache as calibrations

    if compare(fingerprint_of(nm), machine).same_kind or not (cache or calibrate):
        return nm, None
    source_dir = resolve(model_dir)
    entry = calibrations.find(str(model_dir), source_dir, machine) if cache else None
    if entry is None and calibrate:
        entry = _calibrate_now(con, model_dir, source_dir, machine)
    if entry is None:
        return nm, None
    con.print(
        f"using your calibration of {model_dir} for this machine ({entry.networks or '?'} networks measured here, "
        f"{entry.created}; {entry.path}); --no-cache for the model as fitted",
        style="bold",
    )
    return load(entry.path), entry


def _calibrate_now(con: Console, model_dir: Any, source_dir: Path, machine: Any) -> Any:
    """Measure K networks on this machine, calibrate ``model_dir`` and keep it in the cache; the new entry."""
    from carb.transfer import cache as calibrations
    from carb.transfer.here import calibrate_here

    from ._progress import campaign_progress

    k, max_time, rounds = CALIBRATE_SAMPLES, 1.2, 1
    con.print(
        f"no calibration of {model_dir} for this machine yet: measuring {k} networks here first "
        f"(about {round(k * (max_time + 3.5) * rounds / 60 + 0.4)} min; Ctrl-C stops it, nothing is kept)",
        style="bold",
    )
    res = calibrate_here(
        str(model_dir), samples=k, device="cpu", threads=1, rounds=rounds, max_time_s=max_time, cache=True,
        progress=campaign_progress, say=lambda line: con.print(line, style="yellow"),
    )  # fmt: skip
    if res.cached is None:
        con.print(f"not kept in your calibration cache: {res.not_cached}", style="yellow")
    else:
        con.print(f"kept for this machine in your calibration cache ({res.cached.parent})")
    return calibrations.find(str(model_dir), source_dir, machine)


def _folded_bn_line(pred: Prediction) -> str | None:
    """A line where an ONNX file holds no BatchNorm but convolutions with biases (its exporter folded), or ``None``."""
    cap = pred.capture
    if cap.get("capture") != "onnx" or cap.get("bn_nodes") or not cap.get("convs_with_bias"):
        return None
    return (
        f"BatchNorm folded into convs by the exporter: the file has no BatchNormalization node and "
        f"{cap['convs_with_bias']} of its {cap['convs']} convolutions carry a bias (torch.onnx.export folds each BN "
        "into the convolution before it in eval mode); priced as folded, where the module run eagerly runs its BNs "
        "as kernels of their own (carb predict --module prices those)"
    )


def _print_coverage(con: Console, pred: Prediction, nm: NetModel, precision: str) -> None:
    """The model's coverage of the network (layers, FLOPs, bytes), what a fallback prices, and a precision's warning."""
    cov = (
        f"coverage: {100 * pred.coverage_layers:.1f}% of layers, {100 * pred.coverage_flops:.1f}% of FLOPs, "
        f"{100 * pred.coverage_bytes:.1f}% of bytes known"
    )
    if pred.unknown_ops:
        cov += (
            f"; unknown (priced by the measured fallback of their class, wider interval; "
            f"{100 * pred.unknown_share:.0f}% of the latency): {', '.join(pred.unknown_ops)}"
        )
    con.print(cov, style="bold yellow" if pred.unknown_ops else "bold")
    if pred.no_decision:
        con.print(f"no latency budget decision for this network: {pred.no_decision}", style="bold yellow")
    if pred.precision_measured is False:
        con.print(
            f"precision {precision}: not measured by this model (its layers are "
            f"{', '.join(nm.layer.precisions or [])}); priced as their work on {precision}'s bytes, which says "
            f"nothing of what this device's {precision} kernels cost (on a CPU without native {precision}, "
            "tens of times more): calibrate with networks in this precision",
            style="bold yellow",
        )


def _hi(x: float, fmt: str) -> str:
    """An upper bound as text: ``no upper bound`` where nothing measured bounds it."""
    return format(x, fmt) if np.isfinite(x) else "no upper bound"


def _print_figures(con: Console, pred: Prediction, nm: NetModel) -> None:
    """Latency (ms), memory (MB) and energy (J), with their intervals, and why they are widened."""
    pct = f"{round(100 * pred.interval)}%"
    if pred.outside:
        con.print(
            f"outside the model's domain ({'; '.join(pred.outside)}): the intervals are widened by the measured "
            "size of such a step (carb.netmodel.domain)",
            style="bold yellow",
        )
    con.print(
        f"latency  {pred.latency_ms:10.3f} ms   {pct} interval [{pred.latency_ms_lo:.3f}, "
        f"{_hi(pred.latency_ms_hi, '.3f')}]"
    )
    if allocator_of(nm) == "retain":
        con.print(
            "         the steady state of a process that keeps freed memory (measured with allocator retain); "
            "under glibc's default malloc a forward can page-fault on fresh memory every time and take longer "
            "(a median 1.25x, up to 1.7x, on our 2-core VMs: README, How it measures)"
        )
    con.print(
        f"memory   {pred.memory_mb:10.1f} MB   {pct} interval "
        f"[{pred.memory_mb_lo:.1f}, {_hi(pred.memory_mb_hi, '.1f')}]"
    )
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
            _kernel_stride_groups(r),
            f"{r.flops / 1e9:.4f}",
            f"{r.latency_ms:.4f}",
            f"{100 * r.share:.1f}%",
            "yes" if r.known else "NO",
        )
    return t


def _kernel_stride_groups(r: Any) -> str:
    """A layer's kernel, stride and groups, each as its geometry states it (``3x7x7/1x2x2/1``), else its columns."""
    geo = dict(kv.split("=", 1) for kv in str(getattr(r, "geometry", "") or "").split() if "=" in kv)
    if "k" in geo:
        return f"{geo['k']}/{geo.get('s', r.stride)}/{geo.get('g', r.groups)}"
    return f"{r.kernel}/{r.stride}/{r.groups}"
