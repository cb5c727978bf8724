"""The Typer app, the one-line error type and what every command module shares.

That is: consoles, model and budget loading, the checks made before any work (output paths, threads), and the
reporting of user code that ends the process.

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

from carb._safeio import atomic_dir, atomic_file

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
    "Oversubscribe",
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


#: the longest file name Linux, macOS and Windows file systems take (ext4, APFS, NTFS). Units: B.
NAME_MAX = 255


def _blocking_file(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists and is not a directory, if any."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _check_writable(path: Path, option: str, need_mb: float) -> None:
    """Refuse, before any work, an output path that cannot be written or lacks ``need_mb`` MB of free space.

    Refused: a folder this process cannot write in, a file system with less than ``need_mb`` MB free. The folder
    checked is ``path`` itself when it is an existing directory (a command writes into it), else its nearest
    existing ancestor (where the command creates what is missing).
    """
    import shutil
    import tempfile

    where = path.absolute() if path.is_dir() else next(p for p in path.absolute().parents if p.exists())
    try:  # an unnamed file (O_TMPFILE where the kernel has it): nothing is left in the folder
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        fail(f"{option} {path}: cannot write in {where} ({e.strerror or e})")
    free_mb = shutil.disk_usage(where).free / 1e6
    if free_mb < need_mb:
        fail(f"{option} {path}: {free_mb:.1f} MB free on the file system of {where}; it needs at least {need_mb:g} MB")


def _check_name(path: Path, option: str) -> None:
    """Refuse a path with a name longer than file systems allow (255 bytes), before anything looks it up."""
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    if long is not None:
        fail(f"{option} {path}: a name of {len(os.fsencode(long))} bytes, above the {NAME_MAX} file systems allow")


def one_line(e: BaseException) -> str:
    """An exception as a short phrase: an OS error's reason and file, else its type and first line."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    text = " ".join(str(e).split()).split(" Stack trace:")[0]  # xgboost appends its C++ frames ...
    text = re.sub(r"^\[[\d:]+\] \S+:\d+: (Check failed: \w+: )?", "", text)  # ... after its time and source line
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def check_out_file(
    path: Path,
    option: str = "--out",
    need_mb: float = 1.0,
    inputs: Mapping[str, Any] | None = None,
    lock: bool = True,
) -> None:
    """Refuse, before any work, an output file path that is a directory or lies under a file.

    Also one that cannot be written or lies on a file system with less than ``need_mb`` MB free, one that is one of
    the command's ``inputs`` (:func:`refuse_inputs`), and, with ``lock``, one another carb is writing
    (:func:`lock_output`).
    """
    _check_name(path, option)
    if path.is_dir():
        fail(f"{option} {path}: is a directory (give a file path)")
    blocker = _blocking_file(path)
    if blocker is not None:
        fail(f"{option} {path}: {blocker} is a file, not a directory")
    _check_writable(path, option, need_mb)
    refuse_inputs(path, option, inputs or {}, folder=False)
    if lock:
        lock_output(path, option)


def check_out_dir(
    path: Path,
    option: str = "--out",
    need_mb: float = 1.0,
    inputs: Mapping[str, Any] | None = None,
    lock: bool = True,
) -> None:
    """Refuse, before any work, an output directory path that is a file or lies under one.

    Also one that cannot be written or lies on a file system with less than ``need_mb`` MB free, one that is, holds
    or lies in one of the command's ``inputs`` (:func:`refuse_inputs`), and, with ``lock``, one another carb is
    writing (:func:`lock_output`).
    """
    _check_name(path, option)
    if path.exists() and not path.is_dir():
        fail(f"{option} {path}: is a file (give a directory)")
    blocker = _blocking_file(path)
    if blocker is not None:
        fail(f"{option} {path}: {blocker} is a file, not a directory")
    _check_writable(path, option, need_mb)
    refuse_inputs(path, option, inputs or {}, folder=True)
    if lock:
        lock_output(path, option)


def refuse_inputs(path: Path, option: str, inputs: Mapping[str, Any], folder: bool) -> None:
    """Refuse an output that would overwrite what the command reads.

    Refused: an output that is one of ``inputs`` (flag -> a path, a list of paths, or None), and an output folder
    (``folder``) that holds one or lies inside one. Paths are compared after resolving symbolic links; an input that
    names no existing file or folder (a shipped dataset's or a space's name) cannot be overwritten and is skipped.
    """
    out = Path(os.path.realpath(path))
    for flag, given in inputs.items():
        for value in given if isinstance(given, (list, tuple)) else [given]:
            if value is None or not Path(value).exists():
                continue
            src = Path(os.path.realpath(value))
            if src == out:
                fail(
                    f"{option} {path}: is also {flag} {value}; writing it would destroy that input (give another path)"
                )
            if folder and out in src.parents:
                fail(f"{option} {path}: holds {flag} {value}; writing the folder could destroy it (give another path)")
            if src.is_dir() and src in out.parents:
                fail(f"{option} {path}: lies inside {flag} {value}; writing there would change that input")


#: the outputs this process holds the lock of: resolved path -> (lock file, its descriptor, folders made for it)
_LOCKS: dict[Path, tuple[Path, int, list[Path]]] = {}


def _lock_file(path: Path) -> Path:
    """The lock file of an output: hidden, beside it (a short name of its own where its name is long)."""
    import hashlib

    name = f".{path.name}.lock"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".carb-{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]}.lock"
    return path.parent / name


def lock_output(path: Path, option: str = "--out") -> None:
    """Hold, until the command ends (:func:`release_outputs`), the exclusive lock of an output; refuse one held.

    The lock is ``flock`` on a hidden file beside the output (``.NAME.lock``), made for the command and removed when
    it ends; a process that dies drops its lock with it. Two commands writing one output would both report success
    while one's result replaced the other's: the second is refused in one line. Folders made to hold the lock file
    are removed again when left empty.
    """
    import fcntl

    key = Path(os.path.realpath(path))
    if key in _LOCKS:
        return
    made = [p for p in reversed(key.parents) if not p.exists()]
    try:
        key.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"{option} {path}: cannot create its folder ({e.strerror or e})")
    lock = _lock_file(key)
    for _ in range(10):  # a lock file removed by the holder between our open and flock is retried
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            _remove_empty(made)
            fail(
                f"{option} {path}: another carb command is writing it (it holds {lock}); wait for it to end or "
                "give another path"
            )
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _LOCKS[key] = (lock, fd, made)
            return
        os.close(fd)
    fail(f"{option} {path}: its lock file {lock} keeps changing; try again")


def _remove_empty(folders: list[Path]) -> None:
    """Remove the ``folders`` (outermost first in the list) that are empty, innermost first."""
    for d in reversed(folders):
        with contextlib.suppress(OSError):
            d.rmdir()


def release_outputs() -> None:
    """Release every output lock this process holds: remove the lock files, then the folders made for them if empty.

    Each lock file is removed while still locked, so that no other process can take a lock on a file that is gone.
    """
    while _LOCKS:
        _, (lock, fd, made) = _LOCKS.popitem()
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
        _remove_empty(made)


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


#: ``--oversubscribe``, of the commands that measure with ``--threads``
Oversubscribe = Annotated[
    bool,
    typer.Option(
        "--oversubscribe",
        help="Measure with more --threads than the CPUs this process may use (refused otherwise: the threads then "
        "wait for each other).",
    ),
]


class UserInterrupt(Exception):
    """A ``KeyboardInterrupt`` while carb ran the user's code: one line ``error: ...``, exit code 130."""


class _OsExit(SystemExit):
    """``os._exit(code)`` called by the user's code in carb's own process, raised instead of ending it."""


@contextlib.contextmanager
def _os_exit_raises() -> Iterator[None]:
    """While the user's code runs, ``os._exit`` in this process raises :class:`_OsExit` instead of ending it.

    ``os._exit`` ends a process at once, silently and with the code it is given (0 reads as success), before any
    handler runs. A process the user's code forks still exits as it asks.
    """
    real, pid = os._exit, os.getpid()

    def _exit(code: int) -> None:
        if os.getpid() != pid:
            real(code)
        raise _OsExit(code)

    os._exit = _exit  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


@contextlib.contextmanager
def running_user_code(what: str) -> Iterator[None]:
    """Report the user's code ending the process as its own failure, in one line.

    ``SystemExit`` (``sys.exit`` at import, in a builder or in a forward) becomes a usage error (exit code 2) and
    ``KeyboardInterrupt`` a :class:`UserInterrupt` (exit code 130), both naming ``what`` (e.g. ``--module SPEC``).
    """
    from carb.campaign.here import CampaignInterrupted

    try:
        with _os_exit_raises():
            yield
    except _OsExit as e:
        fail(f"{what}: the code it names called os._exit({e.code!r}) while carb ran it")
    except SystemExit as e:
        fail(f"{what}: the code it names raised SystemExit({e.code!r}) while carb ran it")
    except CampaignInterrupted:  # carb's own campaign stopped, not the user's code: main() says so
        raise
    except KeyboardInterrupt:
        raise UserInterrupt(f"{what}: interrupted (KeyboardInterrupt) while carb ran the code it names") from None


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
}


def flag_of(param: str) -> str:
    """The command-line flag of a library function's parameter (``max_time_s`` -> ``--max-time``)."""
    return FLAGS.get(param, "--" + param.replace("_", "-"))


@contextlib.contextmanager
def library_errors(fn: Any = None) -> Iterator[None]:
    """A library call's bad input as the CLI's one line.

    A parameter's rule is said under its flag; any other ``ValueError`` (CARB's one-line errors: a bad model,
    space, capture or data) as it is, its leading parameter name (``samples: ...``), where it is one of ``fn``'s
    parameters, as its flag.
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
        if head and (head.group(1) in FLAGS or (fn is not None and head.group(1) in inspect.signature(fn).parameters)):
            msg = flag_of(head.group(1)) + msg[len(head.group(1)) :]
        fail(msg)
