"""The measured steps beyond a model's domain, as the files under ``carb/data`` hold them.

A step is what was measured about predicting one kind of step outside a model's domain
(another machine kind, beyond the fitted range, another precision): per target, the 90%
quantile of |log(measured / predicted)| (``q90_abs_log``) and how many rows measured it
(``n``). Config models read theirs from ``carb/data/domain_steps.json``
(:mod:`carb.model.domain`), network models from their document's ``meta``
(:mod:`carb.netmodel.domain`); both read them with :func:`read_steps` and size a step with
:func:`half_width`. Reading a steps file runs no code from it: it is JSON.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

from carb._safeio import read_json

__all__ = ["data_file", "half_width", "read_steps"]


def data_file(name: str) -> Path:
    """The path of a file shipped under ``carb/data``."""
    return Path(str(resources.files("carb") / "data" / name))


def read_steps(path: str | Path, *keys: str) -> dict[str, Any]:
    """The steps a JSON file holds under ``keys`` (e.g. ``"meta", "domain_steps"``).

    Args:
        path: the JSON file.
        *keys: the path of objects down to the steps (none: the whole document).

    Returns:
        Step kind -> target -> ``{"q90_abs_log", "n"}``; empty where the file cannot be read,
        is not JSON, or holds no object there.

    """
    try:
        doc: Any = read_json(path)
    except (OSError, ValueError):  # DocumentError too: not JSON, too large or nested too deeply
        return {}
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def half_width(steps: dict[str, Any], kind: str, target: str) -> float:
    """One step's 90% half-width (log) for a target; ``inf`` where none is measured, or it is not a size."""
    try:
        v = float(steps[kind][target]["q90_abs_log"])
    except (KeyError, TypeError, ValueError):
        return math.inf
    return v if math.isfinite(v) and v >= 0 else math.inf
