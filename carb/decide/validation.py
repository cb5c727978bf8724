"""Validating a screening: its calls scored on configs measured here, or on a dataset of the whole space.

What ``carb validate`` does, as functions: :func:`read_screen` reads a ``carb screen`` output folder,
:func:`validate_screen` scores its calls (measuring the best-ranked shortlisted configs and a random control sample
on a device, or reading a dataset that measured every config of the space) and writes ``validation.json`` beside it.

Messages name the parameters as Python passes them (``platform=``); the command line says them as its flags.

Example:
    >>> from carb.decide.validation import validate_screen                   # doctest: +SKIP
    >>> res = validate_screen("screen-out", data="nb201", platform="edgegpu")  # doctest: +SKIP
    >>> res["accuracy"], res["false_accept_rate"]                              # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb._safeio import atomic_file, read_json

from .validate import (
    budget_metrics,
    decision_metrics,
    drift_corrected_calls,
    false_accept_line,
    truly_feasible,
    validate_against_truth,
)

__all__ = [
    "Screened",
    "read_screen",
    "validation_configs",
    "validate_on_data",
    "validate_on_device",
    "validate_screen",
    "validation_rows",
]

#: the two-way figures of a validation, in the order to read them
_FIGURES = (
    "n",
    "accuracy",
    "false_accept_rate",
    "false_reject_rate",
    "pareto_recall",
    "hypervolume_ratio",
    "measure_set_measured",
    "measure_set_within_budget",
)


@dataclass
class Screened:
    """What a ``carb screen`` output folder holds, read.

    Attributes:
        summary: its ``summary.json``.
        shortlist: the shortlisted configs, best ranked first.
        budgets: target -> budget.
        objectives: ``(target, sense)`` pairs of the front.
        accepted: the ids of the configs accepted.
        to_measure: the configs the screening sent to measure (three-way calls), else ``None``.
    """

    summary: dict[str, Any]
    shortlist: pd.DataFrame
    budgets: dict[str, float]
    objectives: list[tuple[str, str]]
    accepted: set
    to_measure: pd.DataFrame | None


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:160]


def read_screen(screen_dir: str | Path, measure_first: bool = False) -> Screened:
    """A ``carb screen`` output folder, read.

    Args:
        screen_dir: the folder.
        measure_first: the caller measures the configs sent to measure first: a screening without them is refused.

    Raises:
        ValueError: not a screen output, a malformed summary, an unreadable measure set, or none with
            ``measure_first``.
    """
    screen_dir = Path(screen_dir)
    try:
        summary = read_json(screen_dir / "summary.json")
        shortlist = pd.read_parquet(screen_dir / "shortlist.parquet")
        feasible = pd.read_parquet(screen_dir / "feasible.parquet")
    except (OSError, ValueError) as e:
        raise ValueError(f"{screen_dir}: not a carb screen output ({_short(e)})") from None
    budgets, objectives = (summary.get("budgets"), summary.get("objectives")) if isinstance(summary, dict) else (0, 0)
    if not (isinstance(budgets, dict) and all(isinstance(v, (int, float)) for v in budgets.values())) or not (
        isinstance(objectives, list) and all(isinstance(o, str) and ":" in o for o in objectives)
    ):
        raise ValueError(f"{screen_dir}/summary.json: not a carb screen summary (budgets or objectives malformed)")
    to_measure = None
    if (screen_dir / "measure.parquet").is_file():  # a three-way screening
        try:
            to_measure = pd.read_parquet(screen_dir / "measure.parquet")
        except (OSError, ValueError) as e:
            raise ValueError(f"{screen_dir}/measure.parquet: unreadable ({_short(e)})") from None
    elif measure_first:
        raise ValueError(f"measure_first: {screen_dir} has no measure set (screen with risk=decide)")
    return Screened(
        summary=summary,
        shortlist=shortlist,
        budgets=budgets,
        objectives=[(o.split(":", 1)[1], o.split(":", 1)[0]) for o in objectives],
        accepted=set(feasible.config_id),
        to_measure=to_measure,
    )


def _space_frame(summary: dict[str, Any]) -> pd.DataFrame:
    from carb.families import space

    return space.load(summary.get("space_source") or summary["space"]).to_frame()


def validate_on_data(scr: Screened, data: str, platform: str | None = None) -> dict[str, Any]:
    """The screening's calls scored against a dataset that measured the whole space.

    The truth is at the campaign's median speed where the paired sentinel timed a row, as the target model learned
    it; data without a speed index gives the raw medians.

    Args:
        scr: the screening (:func:`read_screen`).
        data: a dataset's name or file.
        platform: the platform whose rows are the truth, for a dataset of several.

    Raises:
        ValueError: a platform the data lacks, several platforms and none chosen, data of another space.
    """
    from carb import datasets
    from carb.campaign import speed

    listed = datasets.platforms(data) if platform is None else None
    if listed is not None and len(listed) > 1:  # refused before the rows of every platform are read
        raise ValueError(f"data {data} holds {len(listed)} platforms ({', '.join(listed)}); choose one with platform=")
    rows = datasets.load(data, device=platform)
    col = "platform" if "platform" in rows.columns else "device"  # a dataset of one device labels it ``device``
    names = sorted(map(str, rows[col].dropna().unique())) if col in rows.columns else []
    if platform is not None and platform not in names:
        raise ValueError(f"platform {platform}: not in {data} (platforms: {', '.join(names) or 'none named'})")
    if col == "platform":  # a dataset of several platforms: the truth is one of them
        if platform is None and len(names) > 1:
            raise ValueError(
                f"data {data} holds {len(names)} platforms ({', '.join(names)}); choose one with platform="
            )
        rows = rows[rows["platform"] == (platform or names[0])]
    rows = speed.corrected(rows, paired_only=True)
    screened = _screened_rows(rows, scr.summary, data)
    res = validate_against_truth(
        list(scr.accepted),
        list(scr.shortlist.config_id),
        screened,
        scr.budgets,
        scr.objectives,
        measure_ids=list(scr.to_measure.config_id) if scr.to_measure is not None else None,
    )
    res["mode"] = f"truth: {data}"
    res["truth_latency"] = speed.CORRECTED_LATENCY if rows.attrs["corrected_rows"] else "raw medians"
    res["truth_rows_not_screened"] = int(screened.attrs.get("not_screened", 0))
    return res


def _screened_rows(data: pd.DataFrame, summary: dict[str, Any], name: str) -> pd.DataFrame:
    """The rows of a truth dataset whose configs the screen scored; one of another space only is refused."""
    from carb.families.space import SpaceError

    try:
        ids = set(_space_frame(summary).config_id)
    except (SpaceError, KeyError) as e:
        raise ValueError(f"data {name}: cannot tell which configs the screen scored ({e})") from None
    keep = data["config_id"].isin(ids) if "config_id" in data.columns else None
    if keep is None or not keep.any():
        raise ValueError(
            f"data {name}: none of its {len(data):,} rows is a config of the screened space "
            f"{summary.get('space')!r} (a dataset of another space?)"
        )
    out = data[keep].reset_index(drop=True)
    out.attrs["not_screened"] = int((~keep).sum())
    return out


def validation_configs(
    scr: Screened,
    limit: int = 20,
    control: int = 10,
    seed: int = 0,
    measure_first: bool = False,
    measure_limit: int = 50,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The configs to measure to validate a screening, and its control sample among them.

    They are the configs sent to measure (up to ``measure_limit``, with ``measure_first``), the ``limit``
    best-ranked shortlisted ones and ``control`` random configs of the rest of the space (seeded by ``seed``).
    """
    frame = _space_frame(scr.summary)
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


def validate_on_device(
    scr: Screened,
    store: str | Path,
    todo: pd.DataFrame,
    ctrl: pd.DataFrame,
    device: str = "cpu",
    threads: int | None = None,
    max_time_s: float = 2.0,
    progress: Any = None,
) -> dict[str, Any]:
    """The configs of ``todo`` measured here into ``store``, and the screening's calls scored on them.

    Visits timed in another state of the machine than the calibration's (or, without its readings, than the one
    most were timed in) are measured again; the calls are scored on the raw latencies and on them at the
    calibration's speed (a config timed at a slow moment of a drifting VM is not over budget at the speed the model
    was fitted at). The state is under ``machine_state``.

    Args:
        scr: the screening (:func:`read_screen`).
        store: the DuckDB store of the measurements.
        todo: the configs to measure (:func:`validation_configs`).
        ctrl: the control sample among them.
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads (``None``: 1).
        max_time_s: sampling time per config. Units: s.
        progress: draws the campaign's progress (:data:`carb.campaign.here.Progress`); ``None``: silent.
    """
    from carb.campaign import rounds as states
    from carb.campaign.here import measure_frame

    def measure(frame: pd.DataFrame, what: str, again: bool = False) -> pd.DataFrame:
        return measure_frame(
            frame, store, device=device, threads=threads, max_time_s=max_time_s, again=again, what=what,
            progress=progress,
        )  # fmt: skip

    measured = measure(todo, "validating")
    measured = measured[measured.status == "ok"]
    cal_s = scr.summary.get("calibration_sentinel_ms")
    measured, state = states.retake_off_state(
        measured,
        lambda f: measure(
            todo[todo.config_id.isin(set(f.config_id))], "measuring again (another machine state)", again=True
        ),
        ref_ms=states.machine_state(cal_s) if cal_s else None,
    )
    feas = truly_feasible(measured, scr.budgets)
    res = budget_metrics(measured.config_id.isin(scr.accepted).to_numpy(), feas)
    res.update(
        mode=f"measured on {device}",
        shortlist_measured=int(measured.config_id.isin(set(scr.shortlist.config_id)).sum()),
        control_measured=int(measured.config_id.isin(set(ctrl.config_id)).sum()),
    )
    to_measure = scr.to_measure
    meas = (
        measured.config_id.isin(set(to_measure.config_id)).to_numpy()
        if to_measure is not None
        else np.zeros(len(measured), bool)
    )
    calls = np.where(meas, "measure", np.where(measured.config_id.isin(scr.accepted), "accept", "reject"))
    if to_measure is not None:  # the configs that were to measure, now measured: their calls are made
        res["decisions"] = decision_metrics(calls, feas)
        res.update(measure_set_measured=int(meas.sum()), measure_set_within_budget=int((meas & feas).sum()))
    res.update(drift_corrected_calls(measured, scr.budgets, calls, cal_s))
    res["machine_state"] = state
    return res


def validate_screen(
    screen_dir: str | Path,
    device: str | None = None,
    data: str | None = None,
    *,
    platform: str | None = None,
    threads: int | None = None,
    control: int = 10,
    limit: int = 20,
    measure_first: bool = False,
    measure_limit: int = 50,
    max_time_s: float = 2.0,
    seed: int = 0,
    progress: Any = None,
) -> dict[str, Any]:
    """Score a screening's calls on hardware or on a dataset of the whole space; write ``validation.json`` beside it.

    Args:
        screen_dir: a ``carb screen`` output folder.
        device: measure on this device (``cpu``, ``cuda[:i]``), into ``validation.duckdb`` in the folder
            (:func:`validation_configs`).
        data: instead of measuring: a dataset (name or file) that measured the whole space on the target.
        platform: with ``data``: the platform whose rows are the truth, for a dataset of several.
        threads: CPU threads (``None``: 1).
        control: random configs of the space measured besides the shortlist.
        limit: measure at most this many shortlisted configs, best ranked first.
        measure_first: first measure the configs the screening sent to measure.
        measure_limit: with ``measure_first``: at most this many of them.
        max_time_s: sampling time per config. Units: s.
        seed: the control sample's seed.
        progress: draws the measuring's progress (:data:`carb.campaign.here.Progress`); ``None``: silent.

    Returns:
        The scores: accuracy, false accepts and rejects, Pareto recall, ... (:func:`validate_on_device`,
        :func:`validate_on_data`).

    Raises:
        ValueError: not exactly one of ``device`` and ``data``, a folder that is not a screen output, data that does
            not fit the screening.
    """
    if (device is None) == (data is None):
        raise ValueError("give exactly one of device= or data=")
    screen_dir = Path(screen_dir)
    scr = read_screen(screen_dir, measure_first)
    if data is not None:
        res = validate_on_data(scr, data, platform)
    else:
        todo, ctrl = validation_configs(scr, limit, control, seed, measure_first, measure_limit)
        res = validate_on_device(
            scr, screen_dir / "validation.duckdb", todo, ctrl, device, threads, max_time_s, progress
        )
    with atomic_file(screen_dir / "validation.json") as tmp:
        tmp.write_text(json.dumps(res, indent=2, default=float))
    return res


def validation_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    """A validation's scores (:func:`validate_screen`'s) as ``(metric, value)`` rows, in the order to read them.

    The two-way figures first (with three-way calls they count a config left to measure as rejected, and say so),
    then the three-way ones on the decided configs, the drift-corrected calls, and the machine's drift when it is
    within its chance variation (beyond it, a caller says it first: it weighs on every latency).
    """

    def fa(m: dict[str, Any]) -> str:  # both shares: of the over-budget configs, of the accepts
        return false_accept_line(m).removeprefix("false accepts: ")

    d = res.get("decisions")
    rows = []
    for k in _FIGURES:
        if k == "false_accept_rate" and "over_budget" in res:
            rows.append(("false accepts", fa(res)))
        elif k in res:
            v = res[k]
            label = f"{k} (measure counted as reject)" if d and k in ("accuracy", "false_reject_rate") else k
            rows.append((label, f"{v:.3f}" if isinstance(v, float) else str(v)))
    if d:  # three-way calls: scored on the decided configs, with the share left to measure beside
        rows += [
            ("decided share (accept or reject)", f"{d['decided']:.3f} ({d['measure']} to measure)"),
            ("accuracy on decided", f"{d['accuracy']:.3f}"),
            ("false accepts on decided", fa(d)),
            ("false_reject_rate on decided", f"{d['false_reject_rate']:.3f}"),
        ]
    c = res.get("corrected")
    if c:  # the same calls, latencies at the reference speed (drift_corrected_calls)
        rows.append(
            (
                f"accuracy {'on decided, ' if d else ''}drift-corrected",
                f"{c['accuracy']:.3f} ({false_accept_line(c)}; false rejects {c['false_rejects']}; "
                f"latency at {c['reference']})",
            )
        )
    moved = res.get("drift") or {}
    if moved and not moved.get("exceeds"):
        rows.append(("machine speed drift", moved["line"]))
    return rows
