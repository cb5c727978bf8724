"""JSON-safe values for the reports.

They have their own module so that the report's parts import it without importing the package's ``__init__``,
which imports them.
"""

from __future__ import annotations

from typing import Any

from carb.studies import analyses as analysis


def clean(v: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return analysis._jsonable(v)
