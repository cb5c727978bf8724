"""``carb predict``: a model's figures for a space or a file of configs, or for any network (``--module``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import typer

from ._app import UsageError, app, check_jobs, check_out_file
from ._results import _console

__all__ = ["predict"]


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
        from carb.cli._predict import predict_cli

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
