"""`carb demo`: the whole product on this machine (:mod:`carb.demo`), with its summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from carb.report.progress import campaign_progress

from ._app import Oversubscribe, app, check_out_dir, check_threads, console, parse_budget_options
from ._flags import python_errors

__all__ = ["demo"]


@app.command()
def demo(
    out: Path = typer.Option(Path("carb-demo"), "--out", help="Output folder (tables, summary.json, PNG figures)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(
        None, "--threads", min=1, help=("CPU threads (default: cores available, at most 4).")
    ),
    samples: int = typer.Option(12, "--samples", min=2, help="Configs measured to calibrate (K)."),
    validate_n: int = typer.Option(8, "--validate", min=1, help="Shortlisted configs measured to validate."),
    control: int = typer.Option(8, "--control", min=0, help="Random configs measured to validate."),
    max_time: float = typer.Option(1.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    rounds: Optional[int] = typer.Option(
        None,
        "--rounds",
        min=1,
        help=(
            "Visits per config in each sitting, spread over it and pooled, the sampling time split among them "
            "(default: "
            "carb.demo.DEMO_ROUNDS, 1)."
        ),
    ),
    budget: Optional[list[str]] = typer.Option(
        None, "--budget", help=("TARGET=VALUE (repeat); default: the space's median prediction.")
    ),
    seed: int = typer.Option(0, "--seed"),
    precision: Optional[list[str]] = typer.Option(
        None,
        "--precision",
        help=(
            "Only these precisions of the space (repeat); default: those this CPU runs natively (bf16 needs "
            "AVX512_BF16 "
            "or AMX)."
        ),
    ),
    source: Optional[str] = typer.Option(
        None,
        "--source",
        help=(
            "Dataset the source model is trained on: a shipped name (carb dataset list) or a .parquet/.csv file of "
            "cpu-space configs (default: cpu-1t)."
        ),
    ),
    retakes: Optional[int] = typer.Option(
        None,
        "--retakes",
        min=0,
        help=(
            "Times a visit timed in another state of the machine (its paired speed sentinel beyond x1.25 of the state "
            "the sitting is scored in: the faster of calibration's and validation's) is measured again; 0: never "
            "(default: carb.campaign.rounds.RETAKES, 2)."
        ),
    ),
    oversubscribe: Oversubscribe = False,
) -> None:
    """The whole product on this machine in minutes: train, characterize, calibrate, screen, validate, report.

    Example: carb demo --out carb-demo
    """
    from carb.demo import DEMO_ROUNDS, DemoSettings, check_demo, default_threads, run_demo

    with python_errors(check_demo, "precision", source="--source"):
        check_demo(device, threads)
        check_threads(threads, oversubscribe)
        check_out_dir(out, inputs={"--source": source})
        check_demo(source=source, precisions=precision)  # after the output's checks: it reads --source
    threads = threads or (default_threads() if device == "cpu" else None)
    settings = DemoSettings(
        out=out,
        device=device,
        threads=threads,
        samples=samples,
        validate=validate_n,
        control=control,
        max_time=max_time,
        rounds=rounds or DEMO_ROUNDS,
        budgets=parse_budget_options(budget),
        seed=seed,
        precisions=tuple(precision) if precision else None,
        source=source,
        **({} if retakes is None else {"retakes": retakes}),
    )
    console.print(
        f"[bold]carb demo[/bold] on {device}" + (f" with {threads} thread(s)" if threads else "") + f", writing {out}/"
    )
    summary = run_demo(settings, say=lambda m: console.print("• " + m), progress=campaign_progress)
    _print_summary(summary, out)


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    """Print the demo's summary table (:func:`carb.demo.summary_rows`), every number measured or predicted here."""
    from carb.demo import summary_rows

    t = Table("", "value", title="demo summary (every number measured or predicted on this machine)")
    for row in summary_rows(summary):
        t.add_row(*row)
    console.print(t)
    console.print(
        f"files: {out}/summary.json, shortlist.csv, validation.csv, measured_vs_predicted.png, pareto.png, "
        "report/report.html"
    )
