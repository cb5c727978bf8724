"""Running the user's code in carb's own process: its ways of ending the process become exceptions that say so.

The user's code (a ``--module`` spec at import, a builder, a forward) may call ``sys.exit``, ``os._exit`` or be
interrupted. :func:`running_user_code` turns each into an exception that names what ran, so that a caller reports
the user's failure in one line instead of exiting silently with a code that reads as success.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["UserCodeExit", "UserCodeInterrupted", "running_user_code"]


class UserCodeExit(ValueError):
    """The user's code called ``sys.exit`` or ``os._exit`` while carb ran it: one line naming what ran."""


class UserCodeInterrupted(Exception):
    """A bare ``KeyboardInterrupt`` while carb ran the user's code: one line naming what ran."""


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
    """Report the user's code ending the process as its own failure.

    Args:
        what: how the caller names the code, e.g. ``--module SPEC``.

    Raises:
        UserCodeExit: the code raised ``SystemExit`` or called ``os._exit``.
        UserCodeInterrupted: a plain ``KeyboardInterrupt`` while it ran. A subclass of ``KeyboardInterrupt`` (a
            campaign of carb's own stopped) passes through as it is.
    """
    try:
        with _os_exit_raises():
            yield
    except _OsExit as e:
        raise UserCodeExit(f"{what}: the code it names called os._exit({e.code!r}) while carb ran it") from None
    except SystemExit as e:
        raise UserCodeExit(f"{what}: the code it names raised SystemExit({e.code!r}) while carb ran it") from None
    except KeyboardInterrupt as e:
        if type(e) is not KeyboardInterrupt:  # carb's own campaign stopped, not the user's code
            raise
        raise UserCodeInterrupted(f"{what}: interrupted (KeyboardInterrupt) while carb ran the code it names") from None
