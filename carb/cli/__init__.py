"""The ``carb`` command: thin Typer commands over the library, one module per command group.

One module per command (or command group), named as it: :mod:`.characterize`, :mod:`.dataset`, :mod:`.space`,
:mod:`.train`, :mod:`.evaluate`, :mod:`.predict`, :mod:`.calibrate`, :mod:`.screen`,
:mod:`.validate`, :mod:`.fewshot`, :mod:`.report` and :mod:`.demo`. Each registers its command with
``@app.command`` and parses its flags, calls the library, prints. The app, the error type and the checks every
command shares are in :mod:`._app`, which the command modules import (never the other way round).

Bad input (unknown space, bad value, unreadable file, store in use, a full or read-only disk, user code that
calls ``sys.exit``) prints one line ``error: ...`` on stderr and exits with code 2, never a traceback; user code
interrupted (``KeyboardInterrupt``) is one such line with exit code 130.
"""

from __future__ import annotations

import sys

import typer

from carb.families.space import SpaceError
from carb.report.progress import CampaignProgress, fmt_duration

from . import (  # noqa: F401 - importing a command module registers its commands (@app.command)
    calibrate,
    characterize,
    dataset,
    demo,
    evaluate,
    fewshot,
    predict,
    report,
    screen,
    space,
    train,
    validate,
)
from ._app import UsageError, UserInterrupt, app, atomic_dir, atomic_file, err, fail, flag_of

__all__ = [
    "app",
    "main",
    "UsageError",
    "fail",
    "flag_of",
    "atomic_file",
    "atomic_dir",
    "CampaignProgress",
    "fmt_duration",
]


def _error_exit(msg: str, code: int = 2) -> None:
    # plain print: rich would wrap a long message over several lines
    print("error: " + " ".join(msg.split()), file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Console-script entry point: runs the app and turns bad input into exit code 2."""
    import warnings

    import duckdb

    from carb.campaign.here import CampaignInterrupted
    from carb.campaign.store import StoreError
    from carb.datasets import DatasetError
    from carb.params import InvalidParameterError

    # a library warning (e.g. how many rows a model extrapolates) is one line on stderr,
    # not Python's two (file, line number and source)
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    try:
        rc = app(standalone_mode=False)
    except (UsageError, SpaceError, StoreError, DatasetError, FileNotFoundError) as e:
        _error_exit(str(e))
    except UserInterrupt as e:
        _error_exit(str(e), 130)
    except CampaignInterrupted as e:
        _error_exit(f"interrupted: {e}", 130)
    except InvalidParameterError as e:
        _error_exit(f"{flag_of(e.param)}: {e.reason}")
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit as e:
        if isinstance(e.__context__, BrokenPipeError):  # rich's answer to a closed pipe (`carb ... | head`)
            sys.exit(e.code)
        # carb's commands never exit from inside the app: the code of a library or the user's
        _error_exit(f"code that carb ran raised SystemExit({e.code!r})")
    except OSError as e:  # a path the checks did not foresee (permissions, a full disk): one line too
        _error_exit(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
    except duckdb.Error as e:  # a store the checks did not foresee failing (a full disk): one line too
        _error_exit(f"DuckDB: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as e:
        # click's usage errors (typer vendors click, so match the interface, not the class)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            if type(e).__name__ == "NoArgsIsHelpError":  # a bare `carb` or `carb space`: the help
                e.show()
                sys.exit(e.exit_code)
            ctx = getattr(e, "ctx", None)
            help_hint = f" (see {ctx.command_path} -h)" if ctx is not None else ""
            _error_exit(getattr(e, "format_message", e.__str__)() + help_hint)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
