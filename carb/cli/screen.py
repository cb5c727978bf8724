"""`carb screen`: two-stage screening of a space under budgets: accept, reject or measure, and the likely front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from carb.transfer.load import machine_of

from ._app import Precision, app, check_out_dir, console, fail, library_errors, load_model, parse_budget_options

# The options declared once here: --precision (carb screen and carb calibrate) and the long ones of carb screen.
_Risk = Annotated[
    str,
    typer.Option(
        "--risk",
        help="decide (three-way: accept, measure or reject at --confidence), or the two-way safe (interval upper bound "
        "within budget), point, optimistic.",
    ),
]
_Confidence = Annotated[
    float,
    typer.Option(
        "--confidence",
        help="Coverage of the intervals the budget calls and the shortlist use, in (0, 1): with --rule interval a "
        "config is accepted when its whole interval is within every budget and rejected when it is over one budget "
        "with at least this chance, otherwise it is to measure; with --rule joint, the least chance a call is right.",
    ),
]
_Rule = Annotated[
    str,
    typer.Option(
        "--rule",
        help="With --risk decide: interval (default: accept when each target's whole --confidence interval is within "
        "its budget, reject when one target is over its budget with chance >= --confidence) or joint (accept when "
        "the chance of meeting every budget is at least --confidence, from the model's conformal scores: fewer to "
        "measure, more false accepts).",
    ),
]
_ShortlistShare = Annotated[
    float,
    typer.Option(
        "--shortlist-share",
        help="With --risk decide: keep at most this share of the candidates on the shortlist, the likeliest on the "
        "Pareto front first (default 0.10 = 90% pruning; chosen by measurement: on cpu-1t -> cpu-2t the 10% "
        "likeliest held 95-100% of the true front at every budget quantile, 8% only 90%). 1 = no share cap.",
    ),
]
_Device = Annotated[
    Optional[str],
    typer.Option(
        "--device",
        help="The device the shortlist is for: cpu, cuda, or a dataset's device label (e.g. h200). A target model "
        "measured on another kind of device is refused. Default: the space's, when its name is a kind of device (the "
        "built-in cpu space); else not checked.",
    ),
]
_AllowForeign = Annotated[
    bool,
    typer.Option(
        "--allow-foreign-model",
        help="Screen with a target model of another family of networks or kind of device than the space anyway: every "
        "config it cannot speak for is then extrapolated, called measure or reject, never accept.",
    ),
]
_FrontMinProb = Annotated[
    Optional[float],
    typer.Option(
        "--front-min-prob",
        help="With --risk decide: shortlist the configs on the sampled Pareto front at least this often "
        "(default 0.02).",
    ),
]


def _space_frame(sp: Any, precisions: Optional[list[str]]) -> Any:
    """The configs of a space, only those in ``precisions`` when given (``--precision``)."""
    from carb.families.space import SpaceError
    from carb.transfer.here import space_frame

    try:
        return space_frame(sp, precisions)
    except SpaceError as e:
        fail(f"--{e}")


@app.command()
def screen(
    space_name: str = typer.Option(..., "--space", help="Built-in space name or TOML file to screen."),
    precision: Precision = None,
    target: Path = typer.Option(
        ..., "--target-model", help=("Model directory of the target device (from carb train or carb calibrate).")
    ),
    source: Optional[Path] = typer.Option(
        None, "--source-model", help=("Model directory of a source device for Stage 1 (either kind).")
    ),
    budget: Optional[list[str]] = typer.Option(
        None, "--budget", help=("TARGET=VALUE per forward of the batch, e.g. latency_ms=20 (repeat).")
    ),
    objective: Optional[list[str]] = typer.Option(
        None,
        "--objective",
        help=("min:COLUMN or max:COLUMN (repeat); default energy per image, latency, memory, capacity."),
    ),
    risk: _Risk = "decide",
    confidence: _Confidence = 0.9,
    rule: _Rule = "interval",
    max_shortlist: Optional[int] = typer.Option(
        None,
        "--max-shortlist",
        min=1,
        help=("Keep at most this many shortlisted configs (best ranked first): your profiling budget."),
    ),
    shortlist_share: _ShortlistShare = 0.10,
    front_min_prob: _FrontMinProb = None,
    z: float = typer.Option(
        2.0, "--margin", help=("Stage 1 margin, in residual standard deviations of the source-to-target map.")
    ),
    out: Path = typer.Option(
        ..., "--out", help=("Output directory: shortlist.parquet/.csv, feasible.parquet, summary.json.")
    ),
    device: _Device = None,
    allow_foreign: _AllowForeign = False,
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Two-stage screening: rank the space with a source model, re-score survivors with the target model, keep the Pareto front.

    Example: carb screen --space screening --target-model models/cpu-1t --budget latency_ms=20 --out screen-out
    """  # noqa: E501
    from carb.decide import screening
    from carb.decide.screen import screen as run_screen
    from carb.families import space

    budgets = parse_budget_options(budget)
    objs = _objectives(objective)
    check_out_dir(out, inputs={"--target-model": target, "--source-model": source, "--space": space_name})
    sp = space.load(space_name)
    frame = _space_frame(sp, precision)
    tgt = load_model(target)
    src = load_model(source) if source else None
    device, why = screening.foreign_target(sp.name, frame, tgt, device)
    if why and not allow_foreign:
        fail(
            f"--target-model {target}: {why}: its predictions there are extrapolations "
            "(--allow-foreign-model screens anyway: those configs are then measure or reject, never accept)"
        )
    extra = {"front_min_prob": front_min_prob} if front_min_prob is not None else {}
    with library_errors(run_screen):  # the library's rules, under the flags' names (z: --margin)
        res = run_screen(
            frame,
            tgt,
            budgets,
            source=src,
            objectives=objs,
            risk=risk,
            z=z,
            confidence=confidence,
            max_shortlist=max_shortlist,
            shortlist_share=None if shortlist_share == 1 else shortlist_share,
            rule=rule,
            device=device,
            allow_foreign=allow_foreign,
            **extra,
        )
    fp = machine_of(tgt)
    res.summary.update(
        space=sp.name,
        space_source=sp.source,
        precisions=precision or None,
        target_model=str(target),
        source_model=str(source) if source else None,
        device=device,
        foreign_model=why,
        target_machine=fp.describe() if fp is not None else "a machine the model does not record",
        # the machine's speed while the target model was calibrated: carb validate
        # reports the drift since and scores the calls at that speed too
        calibration_sentinel_ms=(getattr(tgt, "meta", None) or {}).get("sentinel_ms") or None,
    )
    screening.save_screen(res, out)
    if json_out:
        print(json.dumps(res.summary, indent=2, default=float))
        return
    _print_screening(res, sp.name, out)


def _objectives(objective: Optional[list[str]]) -> Any:
    """The parsed ``--objective`` options (None: the default objectives)."""
    from carb.decide.pareto import parse_objectives

    try:
        return parse_objectives(objective) if objective else None
    except ValueError as e:
        fail(str(e))


def _print_screening(res: Any, space_name: str, out: Path) -> None:
    """What ``carb screen`` did: the counts, the budget calls and their hints, the shortlist, the files."""
    from carb.decide.screening import hints

    s = res.summary
    console.print(f"priced for {s['target_machine']} (where the target model's measurements were taken)")
    console.print(
        f"[bold]{space_name}[/bold]: {s['candidates']:,} candidates -> Stage 1 {s['after_stage1']:,} "
        f"-> feasible {s['feasible']:,} -> shortlist {s['shortlist']:,} "
        f"(pruned {100 * s['pruning_ratio']:.1f}%)"
    )
    if "decisions" in s:
        d = s["decisions"]
        console.print(
            f"budget calls at {100 * s['confidence']:.0f}% confidence: accept {d['accept']:,}, "
            f"reject {d['reject']:,}, measure {d['measure']:,} ({100 * s['decided_share']:.1f}% decided; "
            f"the {d['measure']:,} to measure are in measure.csv, likeliest on the front first)"
        )
    for line in hints(res):
        console.print(line)
    _print_shortlist(res.shortlist)
    console.print(
        f"wrote {out}/shortlist.parquet, shortlist.csv, feasible.parquet, "
        + ("measure.parquet, measure.csv, " if "decisions" in s else "")
        + "summary.json"
    )


def _print_shortlist(df: Any, limit: int = 15) -> None:
    """The first ``limit`` configs of the shortlist (:func:`carb.decide.screening.shortlist_view`) as a table."""
    from rich.table import Column

    from carb.decide.screening import shortlist_view

    if df.empty:
        console.print("no config meets the budgets")
        return
    view = shortlist_view(df, limit)
    t = Table(
        *[Column(c, no_wrap=True) if c == "config" else c for c in view.columns],
        title=f"shortlist ({len(df)} configs{', first %d' % limit if len(df) > limit else ''})",
    )
    for row in view.itertuples(index=False):
        t.add_row(*row)
    console.print(t)
