"""`carb validate`: a screening's calls scored on measurements taken here or on a dataset of the whole space."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ._app import Oversubscribe, app, check_threads, console
from ._flags import python_errors


def _print_validation(res: dict[str, Any]) -> None:
    """Print the validation's table (:func:`carb.decide.validation.validation_rows`), any drift beyond chance first."""
    from carb.decide.validation import validation_rows

    moved = res.get("drift") or {}
    if moved.get("exceeds"):  # the machine's own drift first: it weighs on every latency below
        console.print(f"[yellow]{moved['line']}[/yellow]")
    t = Table("metric", "value", title=f"validation ({res['mode']})")
    for row in validation_rows(res):
        t.add_row(*row)
    console.print(t)


@app.command()
def validate(
    screen_dir: Path = typer.Option(..., "--screen", help="Output directory of carb screen."),
    device: Optional[str] = typer.Option(None, "--device", help="Measure on this device (cpu, cuda[:i])."),
    truth: Optional[str] = typer.Option(
        None,
        "--data",
        help=("Instead of measuring: a dataset (name or file) that measured the whole space on the target."),
    ),
    platform: Optional[str] = typer.Option(
        None,
        "--platform",
        help=("With --data: the platform whose rows are the truth, for a dataset of several (nb201: e.g. edgegpu)."),
    ),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    control: int = typer.Option(
        10, "--control", min=0, help=("Random configs of the space measured besides the shortlist.")
    ),
    limit: int = typer.Option(
        20, "--limit", min=1, help=("Measure at most this many shortlisted configs (best ranked first).")
    ),
    measure_first: bool = typer.Option(
        False,
        "--measure-first",
        help=(
            "With --device: first measure the configs the screening sent to measure (up to --measure-limit), then the "
            "shortlist and the control sample."
        ),
    ),
    measure_limit: int = typer.Option(
        50,
        "--measure-limit",
        min=1,
        help=("With --measure-first: measure at most this many of them (likeliest on the front first)."),
    ),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    seed: int = typer.Option(0, "--seed", help="Seed of the control sample."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    oversubscribe: Oversubscribe = False,
) -> None:
    """Check a screening on hardware (or against a dataset of the whole space): budget accuracy, false accepts/rejects, Pareto recall.

    Example: carb validate --screen screen-out --device cpu
    """  # noqa: E501
    from carb.campaign.rounds import state_line
    from carb.decide.validation import read_screen, validate_screen
    from carb.report.progress import campaign_progress

    check_threads(threads, oversubscribe or device != "cpu")
    with python_errors(validate_screen, read_screen, "risk"):
        res = validate_screen(
            screen_dir, device, truth, platform=platform, threads=threads, control=control, limit=limit,
            measure_first=measure_first, measure_limit=measure_limit, max_time_s=max_time, seed=seed,
            progress=campaign_progress,
        )  # fmt: skip
    if json_out:
        print(json.dumps(res, indent=2, default=float))
        return
    if line := state_line(res.get("machine_state") or {}):
        console.print(line)
    _print_validation(res)
