"""``carb calibrate``: parses, calls :func:`carb.transfer.here.calibrate_here`, prints the maps and the K."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
from rich.table import Table

from ._app import (
    Oversubscribe,
    app,
    check_out_dir,
    check_threads,
    console,
    err,
    fail,
    library_errors,
    running_user_code,
)
from ._progress import campaign_progress

#: room for the K measurements' store kept beside a calibrated model (a few hundred KB to 2 MB). Units: MB.
STORE_MB = 4.0

Precision = Annotated[
    Optional[list[str]],
    typer.Option(
        "--precision",
        help="Only the space's configs in this precision (repeat): e.g. fp32 on a CPU without native bf16.",
    ),
]


def _need_mb(source: Path) -> float:
    """The space a calibrated model takes in ``--out``: about its source's size and the K measurements' store (MB)."""
    src = Path(source)
    files = [src] if src.is_file() else list(src.rglob("*")) if src.is_dir() else []
    return round(sum(f.stat().st_size for f in files if f.is_file()) / 1e6 + STORE_MB, 1)


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
    rounds: int = typer.Option(
        1, "--rounds", min=1, help=("Visits per config, spread over the calibration campaign and pooled.")
    ),
    oversubscribe: Oversubscribe = False,
) -> None:
    """Measure K well-spread configs on a new device and map the source model to it.

    With a network model (e.g. the shipped layers-cpu-avx2-1t, for carb predict --module), K
    whole networks are measured instead of configs of a space; the result is also kept in your
    calibration cache for this machine, where carb predict --module finds it.

    Example: carb calibrate --model models/cpu-1t --device cpu --threads 2 --samples 10 --out models/cpu-2t
    """
    from carb.netmodel import resolve
    from carb.transfer.calibrate import check_model_out
    from carb.transfer.here import calibrate_here

    src_dir = resolve(source)  # a shipped network model may be named (layers-cpu-avx2-1t)
    check_out_dir(out, need_mb=_need_mb(src_dir), inputs={"--model": src_dir, "--networks": networks})
    check_threads(threads, oversubscribe or device != "cpu")
    try:  # before measuring anything: a calibrated model never overwrites a model or its source
        check_model_out(out, src_dir)
    except ValueError as e:
        fail(f"--out: {e}")
    if networks is not None and not (Path(src_dir) / "netmodel.json").is_file():
        fail(f"--networks: only with a network model (--model {source} is not one; the shipped layers-cpu-avx2-1t is)")
    what = f"--networks {networks}" if networks is not None else "carb calibrate"
    # a --networks file names the user's code: capturing it runs it
    with library_errors(calibrate_here), running_user_code(what):
        res = calibrate_here(
            str(source),
            samples=samples,
            device=device,
            threads=threads,
            rounds=rounds,
            max_time_s=max_time,
            method=method,
            seed=seed,
            space=space_name,
            precisions=precision,
            networks=networks,
            out=out,
            cache=True,
            progress=campaign_progress,
            say=lambda line: err.print(f"[yellow]{line}", highlight=False),
        )
    if res.kind == "network":
        on = f"{len(res.tables)} networks measured on {device}" + (
            " with ONNX Runtime" if res.runtime != "torch" else ""
        )
        _print_net_calibration(res, f"{on} ({res.model.meta.get('calibration_method', method)})")
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
    _print_maps(res.model, device)
    console.print(f"wrote {out} (a model directory: use it as --target-model of carb screen, or --model anywhere)")


def _print_maps(model: Any, device: str) -> None:
    """The calibrated model's map per target, its interval widening, and the K's range with the widening beyond it."""
    from carb.transfer.calibrate import NnlsMap

    t = Table(
        "target",
        "K",
        "map",
        "interval widening (x)",
        "measured range (K)",
        "beyond it",
        title=f"calibrated to {device}",
    )
    for name, m in model.maps_.items():
        if isinstance(m, NnlsMap):
            terms = ["%.3g" % m.intercept] + [f"{w:.3g}·{f}" for w, f in zip(m.coef, [*m.features, "s"]) if w]
            text = "y = " + " + ".join(terms)
        elif m.add:  # the additive map: a fixed amount on top of the source's prediction
            text = f"y = s {'+' if m.add > 0 else '-'} {abs(m.add):.3g}"
        else:
            terms = ["%.3g" % m.coef[0], "%.3g·log s" % m.coef[1]] + (
                ["%.3g·log batch" % m.coef[2]] if len(m.coef) == 3 else []
            )
            text = "log y = " + " + ".join(terms)
        t.add_row(name, str(m.n), text, f"{np.exp(m.q):.2f}", *_reach_cells(model.reach_.get(name), name))
    console.print(t)


def _reach_cells(r: Any, target: str) -> tuple[str, str]:
    """The K's range of source predictions and batches, and how the interval widens beyond it (flagged extrapolated)."""
    if r is None:
        return "-", "-"
    unit = target.rsplit("_", 1)[-1].replace("mb", "MB").replace("j", "J")
    rng = f"{r.s_range[0]:.3g}-{r.s_range[1]:.3g} {unit}, batch {r.batch_range[0]:g}-{r.batch_range[1]:g}"
    if r.rate is None:
        return rng, "flagged extrapolated, not widened (too few K to measure how)"
    return rng, f"flagged extrapolated; interval x{np.exp(r.rate * np.log(2)):.2f} wider per doubling beyond"


def _print_net_calibration(res: Any, title: str) -> None:
    """Print the K networks' measured and predicted latency and memory, and the source model's error on them."""
    import pandas as pd

    from carb.netmodel import network_row

    nm, model, fit_rows = res.source, res.model, res.measured
    rows_k = pd.DataFrame([network_row(t, nm.layer)[0] for t in res.tables])  # calibration keeps the layer model
    before, after = nm.predict_rows(rows_k), model.predict_rows(rows_k)
    t = Table("network", "measured ms", "source model ms", "calibrated ms", "measured MB", "calibrated MB", title=title)
    for i, (_, r) in enumerate(fit_rows.iterrows()):
        t.add_row(
            res.labels.get(r["config_id"], str(r["config_id"])),
            f"{r['latency_ms']:.2f}",
            f"{before['latency_ms'].iloc[i]:.2f}",
            f"{after['latency_ms'].iloc[i]:.2f}",
            f"{r['memory_mb']:.1f}",
            f"{after['memory_mb'].iloc[i]:.1f}",
        )
    console.print(t)
    log_err = np.abs(np.log(before["latency_ms"].to_numpy() / fit_rows["latency_ms"].to_numpy()))
    console.print(
        f"source model on these networks: median latency error {100 * (np.exp(np.median(log_err)) - 1):.1f}% "
        f"before calibration; the calibrated model's 90% latency interval is x/÷"
        f"{np.exp(model.calibration.get('latency_ms', {}).get('q', model.q.get('latency_ms', 0))):.2f}"
    )
