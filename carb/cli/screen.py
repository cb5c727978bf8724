"""`carb screen`: two-stage screening of a space under budgets: accept, reject or measure, and the likely front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from ._app import (
    app,
    atomic_dir,
    check_out_dir,
    console,
    fail,
    library_errors,
    load_model,
    parse_budget_options,
    refuse_inputs,
)

# The options declared once here: --precision (carb screen and carb calibrate) and the long ones of carb screen.
_Precision = Annotated[
    Optional[list[str]],
    typer.Option(
        "--precision",
        help="Only the space's configs in this precision (repeat): e.g. fp32 on a CPU without native bf16.",
    ),
]
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
    precision: _Precision = None,
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
    from carb.decide.screen import screen as run_screen
    from carb.families import space

    budgets = parse_budget_options(budget)
    objs = _check_screen_options(shortlist_share, z, out, objective)
    refuse_inputs(out, "--out", {"--target-model": target, "--source-model": source, "--space": space_name}, True)
    sp = space.load(space_name)
    frame = _space_frame(sp, precision)
    tgt = load_model(target)
    src = load_model(source) if source else None
    device, why = _check_foreign(sp.name, frame, tgt, target, device, allow_foreign)
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
            shortlist_share=None if shortlist_share >= 1 else shortlist_share,
            rule=rule,
            device=device,
            allow_foreign=allow_foreign,
            **extra,
        )
    res.summary.update(
        space=sp.name,
        space_source=sp.source,
        precisions=precision or None,
        target_model=str(target),
        source_model=str(source) if source else None,
        device=device,
        foreign_model=why,
        target_machine=_machine_text(tgt),
        # the machine's speed while the target model was calibrated: carb validate
        # reports the drift since and scores the calls at that speed too
        calibration_sentinel_ms=(getattr(tgt, "meta", None) or {}).get("sentinel_ms") or None,
    )
    _write_screen(res, out)
    if json_out:
        print(json.dumps(res.summary, indent=2, default=float))
        return
    _print_screening(res, sp.name, out)


def _machine_text(model: Any) -> str:
    """The machine the target model's measurements were taken on, by what it is."""
    from carb.transfer.load import machine_of

    fp = machine_of(model)
    return fp.describe() if fp is not None else "a machine the model does not record"


def _check_foreign(
    space_name: str, frame: Any, model: Any, path: Path, device: Optional[str], allow_foreign: bool
) -> tuple[Optional[str], Optional[str]]:
    """Refuse a target model foreign to the space unless ``--allow-foreign-model``; return the device and why.

    The device is ``--device``, else the space's name where it names a kind of device (the built-in ``cpu`` space);
    why is the line that says how the model is foreign (None: it is not).
    """
    from carb.decide.screen import device_kind, foreign_reason

    device = device or (space_name if device_kind(space_name) else None)
    why = foreign_reason(frame, model, device)
    if why and not allow_foreign:
        fail(
            f"--target-model {path}: {why}: its predictions there are extrapolations "
            "(--allow-foreign-model screens anyway: those configs are then measure or reject, never accept)"
        )
    return device, why


def _check_screen_options(shortlist_share: float, z: float, out: Path, objective: Optional[list[str]]) -> Any:
    """Check the options of ``carb screen`` that Typer does not, and return the parsed ``--objective`` (or None)."""
    from carb.decide.pareto import parse_objectives

    if not 0 < shortlist_share <= 1:
        fail(f"--shortlist-share {shortlist_share:g}: must be in (0, 1], a share of the candidates")
    check_out_dir(out)
    try:
        return parse_objectives(objective) if objective else None
    except ValueError as e:
        fail(str(e))


def _print_screening(res: Any, space_name: str, out: Path) -> None:
    """What ``carb screen`` did: the counts, the budget calls with hints, the shortlist, the files."""
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
    outside = _outside_line(s)
    if outside:
        console.print(outside)
    if "decisions" in s:
        if d["measure"] and any((s.get("measure_by_budget") or {}).values()):
            console.print(
                "to measure, by the budget their interval reaches over: "
                + ", ".join(f"{t} {k:,}" for t, k in s["measure_by_budget"].items())
            )
        for hint in (_width_hint(s, res.decisions), _crowd_hint(s)):
            if hint:
                console.print(hint)
    if "share_for_front" in s:
        console.print(
            f"hint: the probable Pareto front holds about {s['expected_front']:.0f} configs, and the "
            f"{100 * s['shortlist_share']:g}% cap ({s['shortlist_share_cap']:,} configs) leaves less than "
            f"twice that: on our benchmarks it then missed 13-27% of the true front; "
            f"--shortlist-share {s['share_for_front']:g} keeps room for it"
        )
    _print_shortlist(res.shortlist)
    console.print(
        f"wrote {out}/shortlist.parquet, shortlist.csv, feasible.parquet, "
        + ("measure.parquet, measure.csv, " if "decisions" in s else "")
        + "summary.json"
    )


def _outside_line(summary: dict) -> str | None:
    """Return the line that says how many configs the target model predicted outside its domain (None: none)."""
    e = summary.get("extrapolated") or {}
    n, m = int(e.get("configs", 0)), int(e.get("of", 0))
    if not n or not m:
        return None
    which = "configs" if m == summary.get("candidates") else "configs that Stage 1 kept"
    calls = ", ".join(f"{d} {e[d]:,}" for d in ("measure", "reject") if e.get(d))
    return (
        f"{n:,} of {m:,} {which} ({100 * n / m:.1f}%) lie outside the target model's training domain: "
        f"never accepted ({calls or 'none called'})"
    )


#: below this decided share, `carb screen` says why so much is left to measure
HINT_DECIDED = 0.8
#: ... and names a budget the candidates crowd at when at least this share of them is
#: predicted within an interval's half-width of it
HINT_CROWDED = 0.1


def _width_hint(summary: dict, decisions) -> str | None:
    """Return a line for a screening that left much to measure: how wide the intervals are and what narrows them.

    The width is the target model's median relative half-width per budgeted target over the Stage 2 configs.
    None when at least :data:`HINT_DECIDED` was decided.
    """
    import numpy as np

    # configs left to measure because they lie outside the model's domain are not a width's doing
    outside = (summary.get("extrapolated") or {}).get("measure", 0) / max(summary.get("candidates", 1), 1)
    if summary.get("decided_share", 1.0) + outside >= HINT_DECIDED or decisions is None or decisions.empty:
        return None
    widths = []
    for t in summary.get("budgets", {}):
        if f"{t}_lo" in decisions.columns and f"{t}_hi" in decisions.columns:
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.sqrt(decisions[f"{t}_hi"].to_numpy(float) / decisions[f"{t}_lo"].to_numpy(float))
            f = f[np.isfinite(f)]
            if len(f):
                m = float(np.median(f))  # the interval is [p / m, p * m]: a factor, ± only while small
                widths.append(f"{t} ±{100 * (m - 1):.0f}%" if m < 1.5 else f"{t} x/÷{m:.1f}")
    if not widths:
        return None
    return (
        f"hint: {100 * (1 - summary['decided_share']):.0f}% were too close to a budget to call: the target "
        f"model's {100 * summary['confidence']:.0f}% intervals are {', '.join(widths)} (median); more "
        "calibration measurements (carb calibrate --samples 20) or a model trained on this device "
        "narrow them, and carb validate --measure-first measures the rest"
    )


def _crowd_hint(summary: dict) -> str | None:
    """Return a line for a space whose candidates crowd at a budget.

    Crowding is at least :data:`HINT_CROWDED` of them predicted within the intervals' median half-width of it
    (``summary["crowding"]`` of :func:`carb.decide.screen.screen`). Narrower intervals call few of those; None when
    no budget crowds or nothing is left to measure.
    """
    if not (summary.get("decisions") or {}).get("measure"):
        return None
    crowded = [
        f"{100 * c['share_within']:.0f}% of the candidates are predicted within ±"
        f"{100 * c['half_width_rel']:.1f}% of the {t} budget"
        for t, c in (summary.get("crowding") or {}).items()
        if c.get("share_within", 0) >= HINT_CROWDED
    ]
    if not crowded:
        return None
    return (
        f"hint: the space crowds at a budget ({'; '.join(crowded)}): narrower intervals decide few of "
        "those; a budget a few percent away does, or measure them"
    )


def _write_screen(res, out: Path) -> None:
    """Write the screening's files into ``out``, all moved into place once all are written (:func:`atomic_dir`)."""
    from carb.datasets import write

    with atomic_dir(out) as stage:
        write(res.shortlist, stage / "shortlist.parquet")
        write(res.shortlist, stage / "shortlist.csv")
        write(res.feasible, stage / "feasible.parquet")
        if "decisions" in res.summary:  # three-way calls: the configs to measure, in order
            write(res.measure, stage / "measure.parquet")
            write(res.measure, stage / "measure.csv")
        (stage / "summary.json").write_text(json.dumps(res.summary, indent=2, default=float))
    if "decisions" not in res.summary:  # an earlier three-way screening's measure set is not this one's
        for name in ("measure.parquet", "measure.csv"):
            (out / name).unlink(missing_ok=True)


def _print_shortlist(df, limit: int = 15) -> None:
    from rich.table import Column

    from carb.families.space import configs_from_frame

    if df.empty:
        console.print("no config meets the budgets")
        return
    cols = [c for c in ("energy_j", "latency_ms", "memory_mb") if c in df.columns and df[c].notna().any()]
    # with three-way calls the probable front also holds configs to measure (their interval
    # straddles a budget, or they lie outside the model's domain): the call, the chance of being
    # on the front and the domain say which is which
    calls = [c for c in ("decision", "p_front") if c in df.columns]
    if "extrapolated" in df.columns and df["extrapolated"].fillna(False).astype(bool).any():
        calls.append("extrapolated")
    t = Table(
        "rank",
        Column("config", no_wrap=True),
        *[f"{c} [lo, hi]" for c in cols],
        "GFLOP/img",
        *[{"decision": "call", "p_front": "P(front)", "extrapolated": "domain"}[c] for c in calls],
        title=f"shortlist ({len(df)} configs{', first %d' % limit if len(df) > limit else ''})",
    )
    for cfg, r in zip(configs_from_frame(df.head(limit)), df.head(limit).to_dict("records")):
        t.add_row(
            str(r["rank"]),
            cfg.label(),
            *[f"{r[c]:.3g} [{r[c + '_lo']:.3g}, {r[c + '_hi']:.3g}]" for c in cols],
            f"{r['flops_per_image'] / 1e9:.3g}",
            *[_cell(r, c) for c in calls],
        )
    console.print(t)


def _cell(row: dict, column: str) -> str:
    """A shortlist row's call, chance of being on the front, or domain (``outside`` where extrapolated) as printed."""
    if column == "decision":
        return str(row[column])
    if column == "extrapolated":
        return "outside" if row[column] is True or row[column] == 1 else ""
    return f"{row[column]:.2f}"
