"""The Typer app, the one-line error type and what every command module shares (consoles,
model and budget loading). Command modules import this module; nothing here imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

__all__ = ["app", "space_app", "dataset_app", "console", "err", "UsageError", "fail", "load_model", "parse_budget_options", "pick_option",
           "check_out_file", "check_out_dir"]

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="CARB: energy, latency and peak memory of CNN inference, per device, before you profile.")
space_app = typer.Typer(no_args_is_help=True, help="Configuration spaces: list and inspect.")
dataset_app = typer.Typer(no_args_is_help=True, help="Measured datasets: summarize and export a store.")
app.add_typer(space_app, name="space")
app.add_typer(dataset_app, name="dataset")

# 120 columns when piped (rich would use 80), so tables of configs stay readable in logs
console = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the user: reported as one line with exit code 2."""


def fail(msg: str) -> None:
    raise UsageError(msg)


def load_model(path: Path):
    from carb.calibrate import load_predictor

    try:
        return load_predictor(path)
    except (ValueError, OSError) as e:  # BundleError is a ValueError
        fail(str(e))


def parse_budget_options(items: Optional[list[str]]) -> dict[str, float]:
    from carb.screen import parse_budgets

    try:
        return parse_budgets(items or [])
    except ValueError as e:
        fail(str(e))


def _blocking_file(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists and is not a directory, if any."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def check_out_file(path: Path, option: str = "--out") -> None:
    """Refuse, before any work, an output file path that is a directory or lies under a file."""
    if path.is_dir():
        fail(f"{option} {path}: is a directory (give a file path)")
    blocker = _blocking_file(path)
    if blocker is not None:
        fail(f"{option} {path}: {blocker} is a file, not a directory")


def check_out_dir(path: Path, option: str = "--out") -> None:
    """Refuse, before any work, an output directory path that is a file or lies under one."""
    if path.exists() and not path.is_dir():
        fail(f"{option} {path}: is a file (give a directory)")
    blocker = _blocking_file(path)
    if blocker is not None:
        fail(f"{option} {path}: {blocker} is a file, not a directory")


def pick_option(new: Any, old: Any, new_name: str, old_name: str, required: bool = False) -> Any:
    """The value of an option that was renamed: ``old_name`` stays a hidden alias for one
    release. Both given is an error; neither, when ``required``, too."""
    if new is not None and old is not None:
        fail(f"{old_name} is the old name of {new_name}: give one of them")
    value = new if new is not None else old
    if value is None and required:
        fail(f"missing option {new_name}")
    return value
