"""The Typer app, the one-line error type and what every command module shares.

That is: consoles, model and budget loading, the checks made before any work (threads here; output paths in
:mod:`carb._safeio`), and the reporting of user code that ends the process (:mod:`carb.graph.usercode`). Each maps a
library's refusal to the flag it concerns (:func:`library_errors`, :func:`flag_of`).

Command modules import this module; nothing here imports them.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, Mapping, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from carb import _safeio
from carb._safeio import atomic_dir, atomic_file, release_outputs

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
    "check_out_file",
    "check_out_dir",
    "refuse_inputs",
    "lock_output",
    "release_outputs",
    "atomic_file",
    "atomic_dir",
    "check_threads",
    "check_jobs",
    "one_line",
    "frame_table",
    "Oversubscribe",
    "Precision",
    "UserInterrupt",
    "running_user_code",
    "library_errors",
    "flag_of",
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

    def invoke(self, ctx: Any) -> Any:
        # Typer turns Ctrl-C into a bare exit code 130: here it is one line that names the command
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            groups, c = [], ctx
            while c.parent is not None:  # `carb` whatever the program's name, then the groups down to this one
                groups.append(c.info_name)
                c = c.parent
            name = " ".join(["carb", *reversed(groups), *filter(None, [ctx.invoked_subcommand])])
            raise UserInterrupt(f"{name}: interrupted (Ctrl-C); an output it was writing is left as it was") from None


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
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print carb's version and exit."
    ),
) -> None:
    """CARB: energy, latency and peak memory of CNN inference, per device, before you profile.

    Example: carb demo --out carb-demo
    """
    ctx.call_on_close(release_outputs)  # when the command ends, however it ends


# 120 columns when piped (rich would use 80), so tables of configs stay readable in logs
console = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


def wide_console() -> Console:
    """A console for wide tables: piped to a file or a log, 150 columns instead of squeezing them into 80."""
    c = Console()
    return c if c.is_terminal else Console(width=150)


class UsageError(Exception):
    """Bad input from the user: reported as one line with exit code 2."""


def fail(msg: str) -> None:
    """Stop the command with ``msg`` as a one-line usage error (exit code 2)."""
    raise UsageError(msg)


def load_model(path: Path, kinds: tuple[str, ...] = ("calibrated", "bundle"), n_jobs: Optional[int] = None) -> Any:
    """:func:`carb.load_model` of the ``kinds`` given (config models by default); an unreadable one is a usage error."""
    from carb.transfer.load import load_model as load

    try:
        return load(path, kinds, n_jobs)
    except (ValueError, OSError) as e:  # BundleError is a ValueError
        fail(str(e))


def parse_budget_options(items: Optional[list[str]]) -> dict[str, float]:
    """The ``--budget TARGET=VALUE`` options as target -> budget (:func:`carb.decide.screen.parse_budgets`).

    A bad one is a usage error under ``--budget``.
    """
    from carb.decide.screen import parse_budgets

    with library_errors(parse_budgets):
        return parse_budgets(items or [])


def one_line(e: BaseException) -> str:
    """An exception as a short phrase: an OS error's reason and file, else its type and first line."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    text = " ".join(str(e).split()).split(" Stack trace:")[0]  # xgboost appends its C++ frames ...
    text = re.sub(r"^\[[\d:]+\] \S+:\d+: (Check failed: \w+: )?", "", text)  # ... after its time and source line
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


@contextlib.contextmanager
def _as_usage() -> Iterator[None]:
    """A library's refused output as the CLI's one-line usage error."""
    from carb._safeio import OutputError

    try:
        yield
    except OutputError as e:
        fail(str(e))


def check_out_file(
    path: Path, option: str = "--out", need_mb: float = 1.0, inputs: Mapping[str, Any] | None = None, lock: bool = True
) -> None:
    """:func:`carb._safeio.check_out_file` under the flag ``option``; a refusal is a usage error."""
    with _as_usage():
        _safeio.check_out_file(path, option, need_mb, inputs, lock)


def check_out_dir(
    path: Path, option: str = "--out", need_mb: float = 1.0, inputs: Mapping[str, Any] | None = None, lock: bool = True
) -> None:
    """:func:`carb._safeio.check_out_dir` under the flag ``option``; a refusal is a usage error."""
    with _as_usage():
        _safeio.check_out_dir(path, option, need_mb, inputs, lock)


def refuse_inputs(path: Path, option: str, inputs: Mapping[str, Any], folder: bool) -> None:
    """:func:`carb._safeio.refuse_inputs` under the flag ``option``; a refusal is a usage error."""
    with _as_usage():
        _safeio.refuse_inputs(path, option, inputs, folder)


def lock_output(path: Path, option: str = "--out") -> None:
    """:func:`carb._safeio.lock_output` under the flag ``option``; a lock held elsewhere is a usage error."""
    with _as_usage():
        _safeio.lock_output(path, option)


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask; all of the machine's where the OS has none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_threads(threads: Optional[int], oversubscribe: bool, option: str = "--threads") -> None:
    """Refuse, before measuring, more threads than the CPUs this process may use, unless ``oversubscribe``.

    Threads beyond the CPUs wait for each other: the timings measure the contention, not the config.
    """
    n = usable_cpus()
    if threads is not None and threads > n and not oversubscribe:
        fail(
            f"{option} {threads}: this process may use {n} CPU(s) (os.sched_getaffinity); more threads than CPUs "
            f"time their contention, not the config: give {option} {n} or less, or --oversubscribe to measure so"
        )


def check_jobs(jobs: int, option: str = "--jobs") -> None:
    """Refuse more learner threads than the CPUs this process may use.

    The extra threads only wait for a CPU, and a number far beyond them (``--jobs 100000``) asks the learners for as
    many threads.
    """
    n = usable_cpus()
    if jobs > n:
        fail(f"{option} {jobs}: this process may use {n} CPU(s) (os.sched_getaffinity); give {option} {n} or less")


def frame_table(frame: Any, title: str) -> Any:
    """A frame of text cells (a library's table, e.g. :func:`carb.transfer.tables.maps_table`) as a rich table."""
    from rich.table import Table

    t = Table(*frame.columns, title=title)
    for row in frame.itertuples(index=False):
        t.add_row(*row)
    return t


#: ``--oversubscribe``, of the commands that measure with ``--threads``
Oversubscribe = Annotated[
    bool,
    typer.Option(
        "--oversubscribe",
        help="Measure with more --threads than the CPUs this process may use (refused otherwise: the threads then "
        "wait for each other).",
    ),
]


#: ``--precision``, of the commands that take a space's configs
Precision = Annotated[
    Optional[list[str]],
    typer.Option(
        "--precision",
        help="Only the space's configs in this precision (repeat): e.g. fp32 on a CPU without native bf16.",
    ),
]


class UserInterrupt(Exception):
    """A ``KeyboardInterrupt`` while carb ran the user's code: one line ``error: ...``, exit code 130."""


@contextlib.contextmanager
def running_user_code(what: str) -> Iterator[None]:
    """:func:`carb.graph.usercode.running_user_code`: its exit a usage error, its interrupt a :class:`UserInterrupt`."""
    from carb.graph.usercode import UserCodeExit, UserCodeInterrupted
    from carb.graph.usercode import running_user_code as running

    try:
        with running(what):
            yield
    except UserCodeExit as e:
        fail(str(e))
    except UserCodeInterrupted as e:
        raise UserInterrupt(str(e)) from None


#: the flag of a library parameter whose flag is not ``--`` and its name with dashes
FLAGS: dict[str, str] = {
    "max_time_s": "--max-time",
    "precisions": "--precision",
    "precision": "--precision",
    "space": "--space",
    "source": "--model",
    "model": "--model",
    "measured": "--data",
    "visits": "--rounds",
    "z": "--margin",
    "budget": "--budget",
}


def flag_of(param: str) -> str:
    """The command-line flag of a library function's parameter (``max_time_s`` -> ``--max-time``)."""
    return FLAGS.get(param, "--" + param.replace("_", "-"))


@contextlib.contextmanager
def library_errors(fn: Any = None, only_params: bool = False) -> Iterator[None]:
    """A library call's bad input as the CLI's one line.

    A parameter's rule is said under its flag; any other ``ValueError`` (CARB's one-line errors: a bad model,
    space, capture or data) as it is, its leading parameter name (``samples: ...``), where it is one of ``fn``'s
    parameters (or, unless ``only_params``, of :data:`FLAGS`), as its flag.
    """
    import inspect

    from carb.params import InvalidParameterError

    try:
        yield
    except InvalidParameterError as e:
        fail(f"{flag_of(e.param)}: {e.reason}")
    except ValueError as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        head = re.match(r"([a-z_]+)([: ])", msg)
        params = inspect.signature(fn).parameters if fn is not None else {}
        if head and ((head.group(1) in FLAGS and not only_params) or head.group(1) in params):
            msg = flag_of(head.group(1)) + msg[len(head.group(1)) :]
        fail(msg)
