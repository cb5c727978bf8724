"""The Typer app, the one-line error type and what every command module shares (consoles, model and budget loading).

Command modules import this module; nothing here imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

__all__ = [
    "app",
    "space_app",
    "dataset_app",
    "console",
    "err",
    "UsageError",
    "fail",
    "load_model",
    "parse_budget_options",
    "pick_option",
    "check_out_file",
    "check_out_dir",
]


def _untyped_flags(cmd: Any, ctx: Any) -> None:
    # Typer 0.29's rich help prints every option's value type, flags included ("<bool>"
    # on --json, --help, --sentinel/--no-sentinel ...), although its plain formatter skips
    # flags: a flag takes no value. An empty metavar is what its renderer prints instead.
    for p in cmd.get_params(ctx):
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""


class _Group(TyperGroup):
    """The command groups of ``carb``: flags shown without a value type in help."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _untyped_flags(cmd, ctx)
        return cmd

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _untyped_flags(self, ctx)
        super().format_help(ctx, formatter)


_CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    cls=_Group,
    context_settings=_CONTEXT,
    help="CARB: energy, latency and peak memory of CNN inference, per device, before you profile.",
)
space_app = typer.Typer(
    no_args_is_help=True, cls=_Group, context_settings=_CONTEXT, help="Configuration spaces: list and inspect."
)
dataset_app = typer.Typer(
    no_args_is_help=True, cls=_Group, context_settings=_CONTEXT, help="Measured datasets: summarize and export a store."
)
app.add_typer(space_app, name="space")
app.add_typer(dataset_app, name="dataset")


def _print_version(value: bool) -> None:
    if value:
        from carb._version import __version__

        print(f"carb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print carb's version and exit."
    ),
) -> None:
    """CARB: energy, latency and peak memory of CNN inference, per device, before you profile.

    Example: carb demo --out carb-demo
    """


# 120 columns when piped (rich would use 80), so tables of configs stay readable in logs
console = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the user: reported as one line with exit code 2."""


def fail(msg: str) -> None:
    """Stop the command with ``msg`` as a one-line usage error (exit code 2)."""
    raise UsageError(msg)


def load_model(path: Path):
    """Any model directory (a bundle or a calibrated model); an unreadable one is a usage error."""
    from carb.transfer.calibrate import load_predictor

    try:
        return load_predictor(path)
    except (ValueError, OSError) as e:  # BundleError is a ValueError
        fail(str(e))


def parse_budget_options(items: Optional[list[str]]) -> dict[str, float]:
    """The ``--budget TARGET=VALUE`` options as target -> budget; bad ones are a usage error."""
    from carb.decide.screen import parse_budgets

    refuse_repeated_budgets(items)
    try:
        return parse_budgets(items or [])
    except ValueError as e:
        fail(str(e))


def refuse_repeated_budgets(items: Optional[list[str]]) -> None:
    """Refuse two ``--budget`` values for one target as an error.

    The later one silently winning would screen against a budget the user may not mean.
    """
    seen: dict[str, str] = {}
    for s in items or []:
        key = s.partition("=")[0].strip()
        if key in seen:
            fail(f"--budget {key} given twice ({seen[key]} and {s}): give one budget per target")
        seen[key] = s


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
    """The value of an option that was renamed: ``old_name`` stays a hidden alias for one release.

    Both given is an error; neither, when ``required``, too.
    """
    if new is not None and old is not None:
        fail(f"{old_name} is the old name of {new_name}: give one of them")
    value = new if new is not None else old
    if value is None and required:
        fail(f"missing option {new_name}")
    return value
