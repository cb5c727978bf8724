"""`carb validate`: a screening's calls scored on measurements taken here or on a dataset of the whole space."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.table import Table

from carb._safeio import read_json

from ._app import (
    Oversubscribe,
    app,
    atomic_file,
    check_threads,
    console,
    fail,
    library_errors,
)


@dataclass
class _Screened:
    """What ``carb validate`` reads of a ``carb screen`` output."""

    summary: dict[str, Any]
    shortlist: Any
    budgets: dict[str, float]
    objectives: list[tuple[str, str]]
    accepted: set
    to_measure: Any  # the configs the screening sent to measure (three-way calls), else None


def _read_screen(screen_dir: Path, measure_first: bool) -> _Screened:
    """A ``carb screen`` output directory, read (an unreadable one is a usage error)."""
    import pandas as pd

    try:
        summary = read_json(screen_dir / "summary.json")
        shortlist = pd.read_parquet(screen_dir / "shortlist.parquet")
        feasible = pd.read_parquet(screen_dir / "feasible.parquet")
    except (OSError, ValueError) as e:
        fail(f"{screen_dir}: not a carb screen output ({' '.join(str(e).split())[:160]})")
    budgets, objectives = (summary.get("budgets"), summary.get("objectives")) if isinstance(summary, dict) else (0, 0)
    if not (isinstance(budgets, dict) and all(isinstance(v, (int, float)) for v in budgets.values())) or not (
        isinstance(objectives, list) and all(isinstance(o, str) and ":" in o for o in objectives)
    ):
        fail(f"{screen_dir}/summary.json: not a carb screen summary (budgets or objectives malformed)")
    objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in objectives]
    accepted = set(feasible.config_id)
    to_measure = None
    if (screen_dir / "measure.parquet").is_file():  # a three-way screening
        try:
            to_measure = pd.read_parquet(screen_dir / "measure.parquet")
        except (OSError, ValueError) as e:
            fail(f"{screen_dir}/measure.parquet: unreadable ({' '.join(str(e).split())[:160]})")
    elif measure_first:
        fail(f"--measure-first: {screen_dir} has no measure set (screen with --risk decide)")
    return _Screened(
        summary=summary, shortlist=shortlist, budgets=budgets, objectives=objs, accepted=accepted, to_measure=to_measure
    )


def _validate_on_truth(scr: _Screened, truth: str, platform: Optional[str]) -> dict[str, Any]:
    """``carb validate --data``: the screening scored against a dataset of the whole space."""
    from carb import datasets
    from carb.campaign import speed as drift
    from carb.decide.validate import validate_against_truth

    rows = datasets.load(truth, device=platform)
    col = "platform" if "platform" in rows.columns else "device"  # a dataset of one device labels it ``device``
    names = sorted(map(str, rows[col].dropna().unique())) if col in rows.columns else []
    if platform is not None and platform not in names:
        fail(f"--platform {platform}: not in {truth} (platforms: {', '.join(names) or 'none named'})")
    if col == "platform":  # a dataset of several platforms: the truth is one of them
        if platform is None and len(names) > 1:
            fail(f"--data {truth} holds {len(names)} platforms ({', '.join(names)}); choose one with --platform")
        rows = rows[rows["platform"] == (platform or names[0])]

    # the truth at the campaign's median speed where the paired sentinel timed a row, as the
    # target model learned it (carb train); data without a speed index: the raw medians
    rows = drift.corrected(rows, paired_only=True)
    data = _screened_rows(rows, scr.summary, truth)
    res = validate_against_truth(
        list(scr.accepted),
        list(scr.shortlist.config_id),
        data,
        scr.budgets,
        scr.objectives,
        measure_ids=list(scr.to_measure.config_id) if scr.to_measure is not None else None,
    )
    res["mode"] = f"truth: {truth}"
    res["truth_latency"] = drift.CORRECTED_LATENCY if rows.attrs["corrected_rows"] else "raw medians"
    res["truth_rows_not_screened"] = int(data.attrs.get("not_screened", 0))
    return res


def _validation_configs(
    scr: _Screened, limit: int, control: int, seed: int, measure_first: bool, measure_limit: int
) -> tuple[Any, Any]:
    """Return the configs to measure and the control sample.

    The configs to measure are those sent to measure first when asked, the best-ranked shortlisted ones and a random
    control sample.
    """
    import pandas as pd

    from carb.families import space

    sp = space.load(scr.summary.get("space_source") or scr.summary["space"])
    frame = sp.to_frame()
    first = (
        scr.to_measure.head(measure_limit)[frame.columns]
        if measure_first and scr.to_measure is not None
        else frame.iloc[:0]
    )
    top = scr.shortlist.head(limit)
    top = top[~top.config_id.isin(set(first.config_id))]
    rest = frame[~frame.config_id.isin(set(top.config_id) | set(first.config_id))]
    ctrl = rest.sample(min(control, len(rest)), random_state=seed)
    return pd.concat([first, top[frame.columns], ctrl], ignore_index=True), ctrl


def _validate_on_device(
    scr: _Screened,
    screen_dir: Path,
    todo: Any,
    ctrl: Any,
    device: str,
    threads: Optional[int],
    max_time: float,
    json_out: bool,
) -> dict[str, Any]:
    """``carb validate --device``: the configs of ``todo`` measured here, and the screening's calls scored on them."""
    from carb.campaign import rounds as states
    from carb.campaign.here import measure_frame
    from carb.decide.validate import budget_metrics, decision_metrics, drift_corrected_calls, truly_feasible

    from ._progress import campaign_progress

    def measure(frame: Any, what: str, again: bool = False) -> Any:
        return measure_frame(
            frame, screen_dir / "validation.duckdb", device=device, threads=threads, max_time_s=max_time,
            again=again, what=what, progress=campaign_progress,
        )  # fmt: skip

    budgets, to_measure = scr.budgets, scr.to_measure
    measured = measure(todo, "validating")
    measured = measured[measured.status == "ok"]
    # visits timed in another state of the machine than the calibration's (or, without its
    # readings, than the fastest most of them were timed in) are measured again
    cal_s = scr.summary.get("calibration_sentinel_ms")
    measured, state = states.retake_off_state(
        measured,
        lambda f: measure(
            todo[todo.config_id.isin(set(f.config_id))], "measuring again (another machine state)", again=True
        ),
        ref_ms=states.machine_state(cal_s) if cal_s else None,
    )
    if (line := states.state_line(state)) and not json_out:  # with --json: under machine_state
        console.print(line)
    feas = truly_feasible(measured, budgets)
    res = budget_metrics(measured.config_id.isin(scr.accepted).to_numpy(), feas)
    res.update(
        mode=f"measured on {device}",
        shortlist_measured=int(measured.config_id.isin(set(scr.shortlist.config_id)).sum()),
        control_measured=int(measured.config_id.isin(set(ctrl.config_id)).sum()),
    )
    meas = (
        measured.config_id.isin(set(to_measure.config_id)).to_numpy()
        if to_measure is not None
        else np.zeros(len(measured), bool)
    )
    calls = np.where(meas, "measure", np.where(measured.config_id.isin(scr.accepted), "accept", "reject"))
    if to_measure is not None:
        res["decisions"] = decision_metrics(calls, feas)
        # the configs that were to measure, now measured: their calls are made
        res.update(measure_set_measured=int(meas.sum()), measure_set_within_budget=int((meas & feas).sum()))
    # the same calls against the latencies at the calibration's speed (a config timed at a
    # slow moment of a drifting VM is not over budget at the speed the model was fitted at)
    res.update(drift_corrected_calls(measured, budgets, calls, cal_s))
    res["machine_state"] = state
    return res


def _print_validation(res: dict[str, Any]) -> None:
    """Print the validation's table.

    The drift comes first when it exceeds its chance variation, then the two-way figures, the three-way ones on the
    decided configs and the drift-corrected calls.
    """
    from carb.decide.validate import false_accept_line

    def fa(m: dict[str, Any]) -> str:  # both shares: of the over-budget configs, of the accepts
        return false_accept_line(m).removeprefix("false accepts: ")

    moved = res.get("drift") or {}
    if moved.get("exceeds"):  # the machine's own drift first: it weighs on every latency below
        console.print(f"[yellow]{moved['line']}[/yellow]")
    t = Table("metric", "value", title=f"validation ({res['mode']})")
    d = res.get("decisions")
    for k in (
        "n",
        "accuracy",
        "false_accept_rate",
        "false_reject_rate",
        "pareto_recall",
        "hypervolume_ratio",
        "measure_set_measured",
        "measure_set_within_budget",
    ):
        if k == "false_accept_rate" and "over_budget" in res:
            t.add_row("false accepts", fa(res))
        elif k in res:
            v = res[k]
            # with three-way calls these two-way figures count a config left to measure as
            # rejected: say so, the decided ones are scored below
            label = f"{k} (measure counted as reject)" if d and k in ("accuracy", "false_reject_rate") else k
            t.add_row(label, f"{v:.3f}" if isinstance(v, float) else str(v))
    if d:  # three-way calls: scored on the decided configs, with the share left to measure beside
        t.add_row("decided share (accept or reject)", f"{d['decided']:.3f} ({d['measure']} to measure)")
        t.add_row("accuracy on decided", f"{d['accuracy']:.3f}")
        t.add_row("false accepts on decided", fa(d))
        t.add_row("false_reject_rate on decided", f"{d['false_reject_rate']:.3f}")
    c = res.get("corrected")
    if c:  # the same calls, latencies at the reference speed (drift_corrected_calls)
        lab = "on decided, " if d else ""
        t.add_row(
            f"accuracy {lab}drift-corrected",
            f"{c['accuracy']:.3f} ({false_accept_line(c)}; "
            f"false rejects {c['false_rejects']}; latency at {c['reference']})",
        )
    if moved and not moved.get("exceeds"):
        t.add_row("machine speed drift", moved["line"])
    console.print(t)


def _screened_rows(data, summary: dict, name: str):
    """Return the rows of a truth dataset whose configs the screen scored (its space's configs).

    A dataset of another or a larger space is scored on the screened configs only, and one that holds none of them
    is refused.
    """
    from carb.families import space
    from carb.families.space import SpaceError

    try:
        ids = set(space.load(summary.get("space_source") or summary["space"]).to_frame().config_id)
    except (SpaceError, KeyError) as e:
        fail(f"--data {name}: cannot tell which configs the screen scored ({e})")
    keep = data["config_id"].isin(ids) if "config_id" in data.columns else None
    if keep is None or not keep.any():
        fail(
            f"--data {name}: none of its {len(data):,} rows is a config of the screened space "
            f"{summary.get('space')!r} (a dataset of another space?)"
        )
    out = data[keep].reset_index(drop=True)
    out.attrs["not_screened"] = int((~keep).sum())
    return out


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
    if (device is None) == (truth is None):
        fail("give exactly one of --device or --data")
    check_threads(threads, oversubscribe or device != "cpu")
    scr = _read_screen(screen_dir, measure_first)
    if truth is not None:
        res = _validate_on_truth(scr, truth, platform)
    else:
        todo, ctrl = _validation_configs(scr, limit, control, seed, measure_first, measure_limit)
        with library_errors():  # a device that is absent, an option it does not take: one line
            res = _validate_on_device(scr, screen_dir, todo, ctrl, device, threads, max_time, json_out)
    with atomic_file(screen_dir / "validation.json") as tmp:
        tmp.write_text(json.dumps(res, indent=2, default=float))
    if json_out:
        print(json.dumps(res, indent=2, default=float))
        return
    _print_validation(res)
