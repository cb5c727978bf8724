"""The ``carb report`` command: a thin wrapper over :func:`carb.report.write_report`.

:func:`register` adds it to the Typer app of :mod:`carb.cli`. Bad input raises
:class:`carb.cli.UsageError` (one line ``error: ...``, exit code 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ._app import UsageError, app, check_out_dir, library_errors

__all__ = ["report"]


def _usage(msg: str) -> Exception:
    return UsageError(msg)


@app.command("report")
def report(
    data: List[str] = typer.Option(
        ...,
        "--data",
        help="Dataset: a shipped name (carb dataset list) or a .parquet/.csv file; repeat for "
        "several devices. The first is the main one.",
    ),
    model: Optional[Path] = typer.Option(
        None,
        "--model",
        help="Model folder (carb train / calibrate) to check on the first dataset; default: "
        "CARB fast fitted here on a holdout split.",
    ),
    screen_dir: Optional[Path] = typer.Option(
        None,
        "--screen",
        help="Output folder of carb screen for the Pareto explorer; default: the first dataset's measured front.",
    ),
    out: Path = typer.Option(..., "--out", help="Output folder: report.html, report.json, PNG figures."),
    holdout: float = typer.Option(0.25, "--holdout", help="Share of configs held out when the model is fitted here."),
    seed: int = typer.Option(0, "--seed", help="Seed of the holdout, the transfer split and the explorer's sample."),
    no_transfer: bool = typer.Option(False, "--no-transfer", help="Skip the train-on-A, test-on-B matrix."),
    json_out: bool = typer.Option(False, "--json", help="Print report.json's summary as JSON."),
) -> None:
    """One self-contained HTML report: Pareto explorer, scaling, measured vs predicted, transfer, importance.

    Example: carb report --data cpu-1t --out report
    """
    from rich.console import Console

    from carb.report import write_report

    if model is not None and not model.is_dir():
        raise _usage(f"--model {model}: no such folder")
    if screen_dir is not None and not screen_dir.is_dir():
        raise _usage(f"--screen {screen_dir}: no such folder")
    check_out_dir(out, inputs={"--data": list(data), "--model": model, "--screen": screen_dir})
    err = Console(stderr=True)
    with library_errors(write_report):  # its rules (holdout in (0, 1)) under their flags
        path = write_report(
            out,
            data=list(data),
            model=model,
            screen_dir=screen_dir,
            holdout=holdout,
            seed=seed,
            transfer=not no_transfer,
            say=lambda m: err.print("• " + m),
        )
    doc = json.loads((out / "report.json").read_text())
    if json_out:
        keep = ("data", "model", "accuracy", "scaling", "pareto", "figures", "notes")
        print(json.dumps({k: doc.get(k) for k in keep}, indent=2))
        return
    c = Console()
    for n in doc.get("notes", []):
        c.print(f"[yellow]note[/yellow]: {n}")
    for s in doc.get("scaling", []):
        if s.get("factor") is not None:
            c.print(
                f"scaling {s['device']} {s['target']}: x{s['factor']:.3g} from batch {s['batch_min']:g} to "
                f"{s['batch_max']:g}, per image /{s['per_image_gain']:.3g}"
            )
    for t, m in doc.get("accuracy", {}).items():
        c.print(f"{t}: R²(log) {m['r2_log']:.3f}, MAPE {100 * m['mape']:.1f}% on {m['n']} rows")
    c.print(f"wrote {path} (+ report.json, {', '.join(doc.get('figures', {}).values())})")
