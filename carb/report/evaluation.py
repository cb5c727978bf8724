"""The tables of an evaluation (:func:`carb.model.evaluation` results: presets compared per target), printed.

``carb evaluate`` prints them; a Python user passes a rich console.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_share", "fmt_value", "print_results"]


def fmt_value(v: Any, spec: str) -> str:
    """A value as ``spec`` formats it; a dash where it is missing or not finite."""
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def fmt_share(v: Any, spec: str) -> str:
    """A share (0..1) as a percentage; a dash where it is missing or not finite."""
    return "—" if v is None or not math.isfinite(v) else format(100 * v, spec) + "%"


def print_results(res: dict[str, Any], console: Any) -> None:
    """One rich table per target: models as rows, metrics as columns.

    The row of ``res["recommended_preset"]`` (set by ``carb evaluate`` when it picks the data's
    family preset) is marked ``*``; each table's caption says what the false-accept columns count.
    """
    from rich.table import Table

    from carb.model import UNITS

    rows = res["rows"]
    recommended = res.get("recommended_preset")
    console.print(
        f"split [bold]{res['split']}[/bold] (seed {res['seed']}): {rows['train']} train / "
        f"{rows['test']} test of {rows['ok']} ok rows; intervals at "
        f"{100 * res['coverage_nominal']:g}% nominal coverage; R² on the original scale"
        + (
            f"; {rows['duplicates']:,} row(s) repeat a config, kept on one side with it"
            if rows.get("duplicates")
            else ""
        )
    )
    for t in res["targets"]:
        u = UNITS[t]
        table = Table(
            "model",
            "R²",
            "R² log",
            f"MAE {u}",
            "MAPE",
            "±10%",
            "ρ",
            "cover",
            f"width {u}",
            f"acc@{res['budgets'][t]:.3g}",
            "FA/over",
            "FA/acc",
            "fit s",
            title=f"{t} ({u}); budget {res['budgets'][t]:.4g} {u}",
            caption=_caption(recommended if recommended in res["results"] else None),
        )
        for model, by_target in res["results"].items():
            m = by_target[t]
            table.add_row(
                f"{model} *" if model == recommended else model,
                fmt_value(m["r2"], ".3f"),
                fmt_value(m["r2_log"], ".3f"),
                fmt_value(m["mae"], ".3g"),
                fmt_share(m["mape"], ".1f"),
                fmt_share(m["within_10pct"], ".0f"),
                fmt_value(m["spearman"], ".3f"),
                fmt_share(m["coverage"], ".0f"),
                fmt_value(m["mean_width"], ".3g"),
                fmt_share(m["budget_accuracy"], ".0f"),
                fmt_share(m["false_accept_rate"], ".1f"),
                fmt_share(m.get("false_discovery_rate"), ".1f"),
                f"{res['fit_seconds'][model]:.1f}",
            )
        console.print(table)
    skipped = {m: [t for t in res["targets"] if t not in tr] for m, tr in res["trained"].items()}
    for m, ts in skipped.items():
        if ts:
            console.print(f"{m}: not trained for {', '.join(ts)}")
    for m, why in res.get("skipped", {}).items():
        console.print(f"{m}: not run ({why})")


def _caption(recommended: str | None) -> str:
    """The caption under each ``carb evaluate`` table: the false-accept columns, and the ``*`` row if any."""
    lines = ["FA/over: share of the over-budget configs accepted", "FA/acc: share of the accepted configs over budget"]
    if recommended:
        lines.append(f"* {recommended}: the recommended preset for these data")
    return "\n".join(lines)
