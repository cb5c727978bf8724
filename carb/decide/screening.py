"""What a screening says and writes beyond its tables: its hints, its foreign model, its folder.

:func:`hints` are the lines that explain a screening's counts (configs outside the model's domain, intervals too
wide to call, candidates crowding at a budget, a shortlist cap too tight for the probable front);
:func:`save_screen` writes its folder as ``carb screen`` does (``carb validate`` and ``carb report`` read it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb._safeio import atomic_dir

from .screen import ScreenResult, device_kind, foreign_reason

__all__ = [
    "HINT_CROWDED",
    "HINT_DECIDED",
    "check_budget_targets",
    "crowd_hint",
    "foreign_target",
    "front_share_hint",
    "hints",
    "outside_line",
    "save_screen",
    "shortlist_view",
    "width_hint",
]


def check_budget_targets(budgets: dict[str, float], df: pd.DataFrame, where: str) -> None:
    """Refuse a budget on a target the rows lack (energy on a latency-only platform).

    Args:
        budgets: target -> budget.
        df: the rows the budgets are checked on.
        where: how the rows are named in the error, e.g. ``nb201 on raspi4``.

    Raises:
        ValueError: ``budget TARGET: WHERE has no TARGET (targets there: ...)``.
    """
    from carb.datasets.views import targets_of

    present = targets_of(df)
    for t in budgets:
        if t not in present:
            raise ValueError(f"budget {t}: {where} has no {t} (targets there: {', '.join(present) or 'none'})")


def foreign_target(
    space_name: str, frame: pd.DataFrame, model: Any, device: str | None
) -> tuple[str | None, str | None]:
    """The device a screening is for and how the target model is foreign to the space (None: it is not).

    The device is ``device``, else the space's name where it names a kind of device (the built-in ``cpu`` space).
    """
    device = device or (space_name if device_kind(space_name) else None)
    return device, foreign_reason(frame, model, device)


def outside_line(summary: dict) -> str | None:
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


def width_hint(summary: dict, decisions: pd.DataFrame | None) -> str | None:
    """Return a line for a screening that left much to measure: how wide the intervals are and what narrows them.

    The width is the target model's median relative half-width per budgeted target over the Stage 2 configs.
    None when at least :data:`HINT_DECIDED` was decided.
    """
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


def crowd_hint(summary: dict) -> str | None:
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


def front_share_hint(summary: dict) -> str | None:
    """Return a line where the shortlist's share cap leaves less than twice the probable front's size (None: not)."""
    if "share_for_front" not in summary:
        return None
    s = summary
    return (
        f"hint: the probable Pareto front holds about {s['expected_front']:.0f} configs, and the "
        f"{100 * s['shortlist_share']:g}% cap ({s['shortlist_share_cap']:,} configs) leaves less than "
        f"twice that: on our benchmarks it then missed 13-27% of the true front; "
        f"--shortlist-share {s['share_for_front']:g} keeps room for it"
    )


def hints(res: ScreenResult) -> list[str]:
    """The lines that explain a screening's calls, in the order ``carb screen`` prints them after its counts.

    That is: the configs outside the target model's domain; with three-way calls, the configs to measure by
    budget, :func:`width_hint` and :func:`crowd_hint`; then :func:`front_share_hint`.
    """
    s = res.summary
    lines = [outside_line(s)]
    if "decisions" in s:
        if s["decisions"]["measure"] and any((s.get("measure_by_budget") or {}).values()):
            lines.append(
                "to measure, by the budget their interval reaches over: "
                + ", ".join(f"{t} {k:,}" for t, k in s["measure_by_budget"].items())
            )
        lines += [width_hint(s, res.decisions), crowd_hint(s)]
    lines.append(front_share_hint(s))
    return [line for line in lines if line]


def save_screen(res: ScreenResult, out: Path) -> None:
    """Write a screening's folder: shortlist.parquet/.csv, feasible.parquet, measure.parquet/.csv, summary.json.

    All are moved into place once all are written (:func:`carb._safeio.atomic_dir`); the measure files are written
    with three-way calls only, and an earlier screening's are removed otherwise.
    """
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


#: how :func:`shortlist_view` heads the calls' columns
_CALL_HEADS = {"decision": "call", "p_front": "P(front)", "extrapolated": "domain"}


def shortlist_view(df: pd.DataFrame, limit: int = 15) -> pd.DataFrame:
    """The first ``limit`` configs of a shortlist as text: rank, config, each figure with its interval, the calls.

    With three-way calls the probable front also holds configs to measure (their interval straddles a budget, or
    they lie outside the model's domain): the call, the chance of being on the front and the domain (``outside``
    where extrapolated) say which is which.
    """
    from carb.families.space import configs_from_frame

    cols = [c for c in ("energy_j", "latency_ms", "memory_mb") if c in df.columns and df[c].notna().any()]
    calls = [c for c in ("decision", "p_front") if c in df.columns]
    if "extrapolated" in df.columns and df["extrapolated"].fillna(False).astype(bool).any():
        calls.append("extrapolated")
    head = df.head(limit)
    rows = [
        [
            str(r["rank"]),
            cfg.label(),
            *[f"{r[c]:.3g} [{r[c + '_lo']:.3g}, {r[c + '_hi']:.3g}]" for c in cols],
            f"{r['flops_per_image'] / 1e9:.3g}",
            *[_cell(r, c) for c in calls],
        ]
        for cfg, r in zip(configs_from_frame(head), head.to_dict("records"))
    ]
    heads = ["rank", "config", *[f"{c} [lo, hi]" for c in cols], "GFLOP/img", *[_CALL_HEADS[c] for c in calls]]
    return pd.DataFrame(rows, columns=heads)


def _cell(row: dict, column: str) -> str:
    """A shortlist row's call, chance of being on the front, or domain (``outside`` where extrapolated) as text."""
    if column == "decision":
        return str(row[column])
    if column == "extrapolated":
        return "outside" if row[column] is True or row[column] == 1 else ""
    return f"{row[column]:.2f}"
