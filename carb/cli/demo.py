"""`carb demo`: the whole product on this machine (:mod:`carb.demo`), with its summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ._app import Oversubscribe, app, check_out_dir, check_threads, console, fail, parse_budget_options
from ._progress import campaign_progress
from .screen import _space_frame

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
    from carb.demo import DEMO_ROUNDS, DemoSettings, default_threads, run_demo

    _check_device(device, threads, oversubscribe)
    check_out_dir(out, inputs={"--source": source})
    threads = threads or (default_threads() if device == "cpu" else None)
    rounds = rounds or DEMO_ROUNDS
    if precision:
        from carb.families import space

        _space_frame(space.load(DemoSettings.space), precision)  # an unknown precision: one line, exit 2
    if source is not None:
        _check_source(source)
    settings = DemoSettings(
        out=out,
        device=device,
        threads=threads,
        samples=samples,
        validate=validate_n,
        control=control,
        max_time=max_time,
        rounds=rounds,
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
    """Print the demo's summary table, every number measured or predicted on this machine.

    The drift comes first when it exceeds its chance variation, then the screening, the budget calls (false accepts
    both ways) and the errors.
    """
    from carb.decide.validate import false_accept_line

    t = Table("", "value", title="demo summary (every number measured or predicted on this machine)")
    sc, v = summary["screening"], summary["validation"]
    moved = summary.get("drift") or {}
    if moved.get("exceeds"):  # the machine's own drift first: it weighs on every figure below
        t.add_row("machine speed drift", moved["line"])
    ms = summary.get("machine_state") or {}
    retaken = [
        f"{d['off']} of {d['n']} {w} visits in another state, {d['back']} back after retakes"
        for w, d in (("calibration", ms.get("calibration") or {}), ("validation", ms.get("validation") or {}))
        if d.get("off")
    ]
    if retaken or ms.get("recalibrated"):
        t.add_row(
            "machine state (speed sentinel)",
            "; ".join(
                retaken
                + (
                    ["map refitted on the K measured again in validation's faster state"]
                    if ms.get("recalibrated")
                    else []
                )
            ),
        )
    t.add_row(
        "candidates -> shortlist",
        f"{sc['candidates']:,} -> {sc['shortlist']:,} ({100 * sc['pruning_ratio']:.1f}% pruned)",
    )
    for p, why in (summary.get("precisions_left_out") or {}).items():
        t.add_row(f"left out: {p}", why)
    t.add_row("budgets", ", ".join(f"{k} <= {b:g}" for k, b in summary["budgets"].items()))
    t.add_row(
        "budget accuracy (measured)",
        (f"{v['accuracy']:.3f} on {v['n']} decided configs" if v["n"] else "no config decided")
        + (f", {v['measure']} called 'measure'" if v.get("measure") else ""),
    )
    if v["n"]:  # both ways: of the over-budget configs, and of the accepted ones
        t.add_row("false accepts (decided configs)", false_accept_line(v).removeprefix("false accepts: "))
    t.add_row("false rejects", str(v["false_rejects"]))
    vc = summary.get("validation_corrected")
    if vc and v["n"]:
        t.add_row(
            "budget accuracy, drift-corrected",
            f"{vc['accuracy']:.3f} ({false_accept_line(vc)}; false rejects {vc['false_rejects']}; "
            f"latency at {vc['reference']})",
        )
    for k, e in summary["validation_median_abs_error"].items():
        t.add_row(
            f"{k}: median |error|, interval coverage",
            f"{100 * e:.1f}%, {100 * summary['validation_interval_coverage'][k]:.0f}%",
        )
    if summary.get("validation_extrapolated"):
        t.add_row(
            "validated configs extrapolated",
            f"{summary['validation_extrapolated']} (beyond the K's range or the source's domain: never accepted)",
        )
    corr = summary.get("validation_median_abs_error_corrected") or {}
    cov_corr = summary.get("validation_interval_coverage_corrected") or {}
    if "latency_ms" in corr:
        t.add_row(
            "latency_ms: median |error|, interval coverage, drift-corrected",
            f"{100 * corr['latency_ms']:.1f}%"
            + (f", {100 * cov_corr['latency_ms']:.0f}%" if "latency_ms" in cov_corr else ""),
        )
    fl = summary.get("validation_floor_median_abs_error") or {}
    fr = summary.get("validation_floor_median_abs_error_raw") or {}
    if "latency_ms" in fl:
        raw = f", {100 * fr['latency_ms']:.1f}% raw" if "latency_ms" in corr and "latency_ms" in fr else ""
        t.add_row(
            "latency_ms: this sitting's floor",
            f"{100 * fl['latency_ms']:.1f}%{' drift-corrected' if raw else ''}"
            f"{raw} (a map fitted on the validated configs themselves)",
        )
    if moved and not moved.get("exceeds"):
        t.add_row("machine speed drift", moved["line"])
    t.add_row("wall time", f"{summary['timings']['total_s']:.0f} s")
    console.print(t)
    console.print(
        f"files: {out}/summary.json, shortlist.csv, validation.csv, measured_vs_predicted.png, pareto.png, "
        "report/report.html"
    )


def _check_device(device: str, threads: Optional[int], oversubscribe: bool) -> None:
    """Refuse, before the source model is trained, a device this machine cannot measure on, or its threads."""
    import re

    if device != "cpu" and threads is not None:
        fail("--threads applies to --device cpu only")
    check_threads(threads, oversubscribe)
    d = device.strip().lower()
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if d != "cpu" and m is None:
        fail(f"--device {device!r}: unknown device (expected cpu, cuda or cuda:<index>)")
    if m is not None:
        import torch

        if int(m.group(1) or 0) >= torch.cuda.device_count():
            fail(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _check_source(source: str) -> None:
    """Refuse, before measuring, a source dataset the demo's source model cannot learn (one line, exit 2)."""
    from carb import datasets
    from carb.families.resnet import FAMILIES

    try:
        src = datasets.load(source, features=False)
    except ValueError as e:
        fail(f"--source {source}: {e}")
    if "depth" not in src.columns or "latency_ms" not in src.columns or not src["latency_ms"].notna().any():
        fail(f"--source {source}: not a dataset of the cpu space's configs with measured latency")
    others = sorted(set(map(str, src["family"].dropna())) - set(FAMILIES)) if "family" in src.columns else []
    if others:  # the source model learns the cpu space's ResNets: a net row would end its fit in a traceback
        fail(
            f"--source {source}: rows of family {', '.join(others)}; the demo's source model learns the cpu "
            f"space's configs (families {', '.join(FAMILIES)}) only"
        )
