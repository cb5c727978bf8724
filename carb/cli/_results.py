"""The tables of ``carb evaluate`` (:mod:`carb.report.evaluation`) and the console the model commands print on."""

from __future__ import annotations

from carb.report.evaluation import fmt_share as _pct
from carb.report.evaluation import fmt_value as _fmt
from carb.report.evaluation import print_results

__all__ = ["_console", "_fmt", "_pct", "print_results"]


def _console():
    from rich.console import Console

    c = Console()
    # piped to a file or a log: do not squeeze the tables into 80 columns
    return c if c.is_terminal else Console(width=150)
