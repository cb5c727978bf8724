"""Library messages said in flags: a parameter Python passes as ``device=cpu`` is ``--device cpu`` on the command line.

The library names its parameters as Python passes them; :func:`python_errors` turns such a ``ValueError`` into the
command's one-line usage error, each parameter said as its flag (:func:`carb.cli._app.flag_of`).
"""

from __future__ import annotations

import inspect
import re
from contextlib import contextmanager
from typing import Any, Iterator

from ._app import fail, flag_of

__all__ = ["python_errors"]


@contextmanager
def python_errors(*fns: Any, **flags: str) -> Iterator[None]:
    """A library call's ``ValueError`` (or ``RuntimeError``: no such device) as one line that says flags.

    The library names a parameter as Python passes it, ``device=cpu`` or a leading ``samples 5:``; here each of
    ``fns``' parameters (and each name given as a string) is said as its flag (``--device cpu``, ``--samples 5:``),
    or as ``flags`` names it where the command's flag differs from :func:`flag_of`'s (``source="--source"``).
    """
    from carb.params import InvalidParameterError

    try:
        yield
    except InvalidParameterError:  # main() says it under its flag
        raise
    except (ValueError, RuntimeError) as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        if type(e) is not ValueError:  # a space's, a device's or a cluster's own message, as it is
            fail(msg)
        params = {p for fn in fns for p in ([fn] if isinstance(fn, str) else inspect.signature(fn).parameters)}

        def flag(m: re.Match) -> str:
            return flags.get(m[1]) or flag_of(m[1])

        names = "|".join(sorted(params, key=len, reverse=True))
        if names:
            msg = re.sub(rf"\b({names})=(?=[^\s,.;)])", lambda m: flag(m) + " ", msg)
            msg = re.sub(rf"\b({names})=", flag, msg)
            msg = re.sub(rf"^({names})(?=[: ])", flag, msg)
        fail(msg)
