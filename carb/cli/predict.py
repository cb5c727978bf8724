"""``carb predict``: a model's figures for a space or a file of configs, or for any network or ONNX file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from carb.netmodel import CaptureError, ModelError
from carb.transfer.here import MIN_NETWORKS
from carb.transfer.network import CALIBRATE_SAMPLES

from ._app import (
    UsageError,
    app,
    atomic_file,
    check_jobs,
    check_out_file,
    frame_table,
    library_errors,
    load_model,
    running_user_code,
)
from ._app import wide_console as _console

__all__ = ["predict", "predict_cli"]


def _usage(msg: str) -> Exception:
    return UsageError(msg)


# the options of --module's calibration here
_Calibrate = Annotated[
    bool,
    typer.Option(
        "--calibrate",
        help=(
            "With --module: when no calibration of the model for this machine is cached, measure K networks here "
            "first (about a minute) and keep the result in your calibration cache."
        ),
    ),
]
_Cache = Annotated[
    bool,
    typer.Option(
        "--cache/--no-cache",
        help="With --module: use your cached calibration of the model for this machine, if there is one.",
    ),
]
_Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="With --calibrate: measure and keep the calibration even when the machine is busy or its speed unsteady.",
    ),
]
_Ops = Annotated[
    bool,
    typer.Option(
        "--ops",
        help=(
            "With --calibrate: calibrate anew, first measuring 3 layers per op the model's campaigns measured, each op "
            "priced by its speed here against the convolutions' (about 2 more minutes; carb calibrate --ops)."
        ),
    ),
]
_Samples = Annotated[
    Optional[int],
    typer.Option(
        "--samples",
        min=MIN_NETWORKS,
        help=(
            f"With --calibrate: how many networks to measure here (K, default {CALIBRATE_SAMPLES}; as carb calibrate "
            "--samples): fewer take less time and leave a wider interval."
        ),
    ),
]


@app.command("predict")
def predict(
    model_dir: Optional[Path] = typer.Option(
        None,
        "--model",
        help=(
            "Model directory (from carb train or carb calibrate); with --module, a network model (default: the shipped "
            "one measured on this machine's kind, else layers-cpu-avx2-1t)."
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
    calibrate_first: _Calibrate = False,
    use_cache: _Cache = True,
    force: _Force = False,
    ops: _Ops = False,
    samples: _Samples = None,
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
        if samples is not None and not calibrate_first:
            raise _usage(f"--samples: only with {flag} ... --calibrate")
        predict_cli(
            module if module is not None else onnx_file,
            input_shape,
            precision,
            model_dir,
            json_file,
            top,
            calibrate=calibrate_first,
            cache=use_cache,
            force=force,
            ops=ops,
            samples=CALIBRATE_SAMPLES if samples is None else samples,
        )
        return
    if calibrate_first:
        raise _usage("--calibrate: only with --module (a config model calibrates with carb calibrate)")
    if force or ops or samples is not None:
        flag = "--force" if force else "--ops" if ops else "--samples"
        raise _usage(f"{flag}: only with --module ... --calibrate")
    check_jobs(n_jobs)
    _predict_configs(model_dir, space_name, configs_file, out, n_jobs)


def _predict_configs(
    model_dir: Optional[Path], space_name: Optional[str], configs_file: Optional[Path], out: Optional[Path], n_jobs: int
) -> None:
    """``carb predict --space/--configs``: :func:`carb.transfer.network.predict_configs`, written to ``out``."""
    from carb.datasets import write
    from carb.transfer.network import predict_configs

    if model_dir is None:
        raise _usage("missing option --model (a model directory from carb train or carb calibrate)")
    if out is None:
        raise _usage("give --out (with --space or --configs)")
    if (space_name is None) == (configs_file is None):
        raise _usage("give exactly one of --space or --configs")
    if out.suffix not in (".parquet", ".csv"):
        raise _usage(f"--out {out}: unknown output type (expected .parquet or .csv)")
    check_out_file(out, inputs={"--configs": configs_file, "--model": model_dir, "--space": space_name})
    model = load_model(model_dir, n_jobs=n_jobs)
    with library_errors(predict_configs):
        res = predict_configs(model, space_name, configs_file)
    c = _console()
    c.print(f"priced for {res.machine} (where the model's measurements were taken)", highlight=False, soft_wrap=True)
    for w in res.warnings:  # e.g. how many rows lie outside the training domain
        c.print(f"[yellow]warning[/yellow]: {w}", highlight=False, soft_wrap=True)
    write(res.frame, out)
    c.print(
        f"wrote {len(res.frame):,} predictions to {out} (targets: {', '.join(model.targets_)}"
        + (f"; NaN for untrained {', '.join(res.missing)})" if res.missing else ")")
    )


#: how each kind of step of :func:`carb.transfer.network.price_network` is printed
_STYLES = {"step": "bold", "warning": "yellow", "info": None}


def predict_cli(
    module_spec: str | Path,
    input_shape: str | None,
    precision: str,
    model_dir: Any,
    json_file: Any,
    top: int,
    calibrate: bool = False,
    cache: bool = True,
    force: bool = False,
    ops: bool = False,
    samples: int = CALIBRATE_SAMPLES,
) -> None:
    """``carb predict --module/--onnx``: :func:`carb.transfer.network.price_network`, printed and written as JSON.

    Args:
        module_spec: ``pkg.mod:callable`` or ``file.py:callable``, or the path of an ONNX file.
        input_shape: e.g. ``1x3x224x224``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        model_dir: the network model's directory or shipped name; None: the shipped default.
        json_file: where to write the JSON summary (a ``.json`` path), or None.
        top: how many of the most expensive layers to list.
        calibrate: with no cached calibration for this machine, measure K networks here first and keep it.
        cache: use the cached calibration of the model for this machine, if any.
        force: with ``calibrate``, keep a calibration taken while the machine is disturbed.
        ops: with ``calibrate``, calibrate anew with each op's speed here (:func:`carb.transfer.here.calibrate_here`).
        samples: with ``calibrate``, how many networks to measure here (K).
    """
    from carb.measure.fingerprint import compare
    from carb.netmodel import default_model
    from carb.netmodel.domain import fingerprint_of
    from carb.report.progress import campaign_progress
    from carb.transfer import network as priced_here

    flag = "--onnx" if isinstance(module_spec, Path) or str(module_spec).endswith(".onnx") else "--module"
    if input_shape is None:
        raise _usage(f"{flag} needs --input, e.g. --input 1x3x224x224")
    if json_file is not None and Path(json_file).suffix != ".json":
        raise _usage(f"--json {json_file}: expected a .json file")
    if json_file is not None:  # never the ONNX file, the network's source or the model it reads
        source = str(module_spec).rpartition(":")[0] if flag == "--module" else module_spec
        check_out_file(Path(json_file), "--json", inputs={flag: source, "--model": model_dir or default_model()})
    con = Console(soft_wrap=True)  # one line per figure, whatever the terminal's width
    what = f"--onnx {module_spec}" if isinstance(module_spec, Path) else f"--module {module_spec!r}"
    try:
        with running_user_code(what):  # importing the module and capturing its forward run its code
            p = priced_here.price_network(
                module_spec, input_shape, precision, model_dir, calibrate=calibrate, cache=cache, force=force, ops=ops,
                samples=samples, progress=campaign_progress,
                say=lambda text, kind: con.print(text, style=_STYLES[kind]),
            )  # fmt: skip
    except (CaptureError, ModelError) as e:
        raise _usage(str(e)) from None
    pred, nm, shape = p.prediction, p.model, p.prediction.input_shape
    # one line, first: the machines by what they are, and this very command with --calibrate
    notes = [
        compare(fingerprint_of(nm), p.machine).line(
            priced_here.calibrate_command(module_spec, shape, precision, model_dir)
        ),
        priced_here.runtime_line(nm, module_spec),
    ]
    for line in filter(None, notes):
        con.print(line, style="bold yellow")
    for line, warn in priced_here.coverage_lines(pred, nm, precision):
        con.print(line, style="bold yellow" if warn else "bold")
    folded = priced_here.folded_bn_line(pred)
    if folded:
        con.print(folded, style="bold yellow")
    con.print(
        f"{module_spec} on {'x'.join(map(str, shape))} {precision}: "
        f"{pred.flops / 1e9:.3f} GFLOP, {pred.params / 1e6:.2f} M parameters, {len(pred.layers)} layers; "
        f"priced for {pred.machine}"
        + (f" (model: the shipped {p.model_name}; --model for another)" if p.default and p.cached is None else "")
    )
    for line, warn in priced_here.figure_lines(pred, nm):
        con.print(line, style="bold yellow" if warn else None)
    con.print(frame_table(priced_here.top_layers(pred, top), f"top {top} layers by predicted latency"))
    con.print(priced_here.calibration_line(nm, p.model_name))
    if json_file is not None:
        with atomic_file(Path(json_file)) as tmp:
            tmp.write_text(json.dumps(priced_here.prediction_json(p, module_spec, precision, top), indent=1) + "\n")
        con.print(f"wrote {json_file}")
