"""What CARB computes stays what it computed when the snapshot was recorded.

``tests/data/behaviour.json.gz`` holds features of every built-in space, both shipped network
models' predictions on configs of every space and on 50 zoo networks, and the screening calls
of the demo's pair (``tests/_behaviour.py`` says what exactly). On the machine kind it was
recorded on, every value must match to the last digit; elsewhere BLAS and the tree learners'
kernels may move the last digits, so floats are compared to 1e-9 relative and every call,
stage, id and count still exactly.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from tests import _behaviour

GOLDEN = Path(__file__).parent / "data" / "behaviour.json.gz"
#: the machine kind the snapshot was recorded on (``model name`` of /proc/cpuinfo)
RECORDED_ON = "Intel(R) Xeon(R) Processor"


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def _diff(a: Any, b: Any, path: str, rel: float, out: list[str]) -> None:
    """Append to ``out`` the paths where ``b`` differs from ``a`` (floats within ``rel``)."""
    if len(out) >= 20:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'new' if k in b else 'recorded'}")
            else:
                _diff(a[k], b[k], f"{path}/{k}", rel, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items recorded, {len(b)} now")
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", rel, out)
    elif isinstance(a, float) and isinstance(b, float) and rel > 0:
        if not math.isclose(a, b, rel_tol=rel, abs_tol=1e-300):
            out.append(f"{path}: {a!r} recorded, {b!r} now")
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: {a!r} recorded, {b!r} now")


def test_diff_finds_a_change_in_the_last_digit() -> None:
    out: list[str] = []
    _diff({"a": [1.0, "x"]}, {"a": [1.0000000000000002, "x"]}, "", 0.0, out)
    assert out == ["/a[0]: 1.0 recorded, 1.0000000000000002 now"]
    out = []
    _diff({"a": [1.0, "accept"]}, {"a": [1.0000000000000002, "measure"]}, "", 1e-9, out)
    assert out == ["/a[1]: 'accept' recorded, 'measure' now"]


def test_features_predictions_and_screening_calls_are_unchanged() -> None:
    recorded = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    now = json.loads(_behaviour.dumps(_behaviour.compute()))
    rel = 0.0 if RECORDED_ON in _cpu() else 1e-9
    out: list[str] = []
    _diff(recorded, now, "", rel, out)
    assert not out, "behaviour changed:\n" + "\n".join(out)
