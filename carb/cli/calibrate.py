"""``carb calibrate``: parses, calls :func:`carb.transfer.here.calibrate_here`, prints the maps and the K."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from carb.report.progress import campaign_progress
from carb.transfer.tables import maps_table, networks_table

from ._app import (
    Oversubscribe,
    Precision,
    app,
    check_out_dir,
    check_threads,
    console,
    err,
    fail,
    frame_table,
    library_errors,
    running_user_code,
)

#: room for the K measurements' store kept beside a calibrated model (a few hundred KB to 2 MB). Units: MB.
STORE_MB = 4.0


_Rounds = Annotated[
    int,
    typer.Option(
        "--rounds",
        min=1,
        help="Visits per config at different moments, pooled; their spread widens the calibrated interval.",
    ),
]
_Force = Annotated[
    bool, typer.Option("--force", help="Measure and keep the calibration even when the machine is busy or unsteady.")
]
_Ops = Annotated[
    bool,
    typer.Option(
        "--ops",
        help=(
            "With a shipped network model: first measure again 3 layers per op its campaigns measured and price each "
            "op by its speed here against the convolutions' (about 2 more minutes), then the K networks."
        ),
    ),
]


@app.command()
def calibrate(
    source: Path = typer.Option(
        ..., "--model", help=("Model directory of the source device (from carb train or carb calibrate).")
    ),
    device: str = typer.Option("cpu", "--device", help="The new device: cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    samples: int = typer.Option(10, "--samples", min=2, help="How many configs to measure (K)."),
    space_name: str = typer.Option("cpu", "--space", help="Space to choose the K configs from."),
    precision: Precision = None,
    seed: int = typer.Option(0, "--seed", help="Seed of the sampler."),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    out: Path = typer.Option(..., "--out", help="Directory of the calibrated model."),
    method: Optional[str] = typer.Option(
        None,
        "--method",
        help=(
            "Map: log (default; log-space map of the source prediction) or nnls (HELP-style, with cost features; "
            "carb.transfer); for a network model factor (default; one device factor, or none where it does not help), "
            "log (also a slope and a batch term) or refit (its network terms refitted on the K networks)."
        ),
    ),
    networks: Optional[Path] = typer.Option(
        None,
        "--networks",
        help=(
            "With a network model: a text file of the networks to measure, one per line: SPEC INPUT [PRECISION], e.g. "
            "torchvision.models:resnet18 1x3x224x224 fp32 (default: K networks of carb.families.zoo spread over the "
            "model's predicted latency). It imports and runs each network's module. A SPEC ending in .onnx is an "
            "ONNX file measured with ONNX Runtime: a list of them calibrates the model to ONNX Runtime's cost."
        ),
    ),
    rounds: _Rounds = 2,
    force: _Force = False,
    ops: _Ops = False,
    oversubscribe: Oversubscribe = False,
) -> None:
    """Measure K well-spread configs on a new device and map the source model to it.

    With a network model (e.g. the shipped layers-cpu-avx2-1t, for carb predict --module), K
    whole networks are measured instead of configs of a space; the result is also kept in your
    calibration cache for this machine, where carb predict --module finds it.

    Example: carb calibrate --model models/cpu-1t --device cpu --threads 2 --samples 10 --out models/cpu-2t
    """
    from carb._safeio import size_mb
    from carb.netmodel import resolve
    from carb.transfer.calibrate import check_model_out
    from carb.transfer.here import calibrate_here

    src_dir = resolve(source)  # a shipped network model may be named (layers-cpu-avx2-1t)
    # a calibrated model takes about its source's size and the K measurements' store
    need_mb = round(size_mb(src_dir) + STORE_MB, 1)
    check_out_dir(out, need_mb=need_mb, inputs={"--model": src_dir, "--networks": networks})
    check_threads(threads, oversubscribe or device != "cpu")
    try:  # before measuring anything: a calibrated model never overwrites a model or its source
        check_model_out(out, src_dir)
    except ValueError as e:
        fail(f"--out: {e}")
    if (networks is not None or ops) and not (Path(src_dir) / "netmodel.json").is_file():
        flag = "--networks" if networks is not None else "--ops"
        fail(f"{flag}: only with a network model (--model {source} is not one; the shipped layers-cpu-avx2-1t is)")
    what = f"--networks {networks}" if networks is not None else "carb calibrate"
    # a --networks file names the user's code: capturing it runs it
    with library_errors(calibrate_here), running_user_code(what):
        res = calibrate_here(
            str(source), samples=samples, device=device, threads=threads, rounds=rounds, force=force,
            max_time_s=max_time, method=method, seed=seed, space=space_name, precisions=precision,
            networks=networks, out=out, cache=True, ops=ops, progress=campaign_progress,
            say=lambda line: err.print(f"[yellow]{line}", highlight=False),
        )  # fmt: skip
    if res.kind == "network":
        on = f"{len(res.tables)} networks measured on {device}" + (
            " with ONNX Runtime" if res.runtime != "torch" else ""
        )
        table, line = networks_table(res)
        console.print(frame_table(table, f"{on} ({res.model.meta.get('calibration_method', method)})"))
        console.print(line)
        use = "--onnx FILE.onnx --input SHAPE" if res.runtime != "torch" else "--module ..."
        console.print(f"wrote {out} (a network model: carb predict {use} --model {shlex.quote(str(out))})")
        if res.cached is not None:
            console.print(
                f"kept for this machine in your calibration cache ({res.cached.parent}): carb predict --module "
                f"--model {shlex.quote(str(source))} uses it here"
            )
        elif res.not_cached:
            console.print(f"not kept in your calibration cache: {res.not_cached}; pass --model {shlex.quote(str(out))}")
        return
    console.print(frame_table(maps_table(res.model), f"calibrated to {device}"))
    console.print(f"wrote {out} (a model directory: use it as --target-model of carb screen, or --model anywhere)")
