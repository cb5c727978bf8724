"""A size-elastic drift correction, tried for issue 16 and not adopted (benchmarks/RESULTS.md,
"A size elasticity for the drift correction?").

carb corrects a latency measured while the speed sentinel read ``sentinel_ms`` to the speed
where it reads ``ref_ms`` by the full ratio: ``latency_ms * ref_ms / sentinel_ms``. On the
AVX-512 kind, configs of 8 ms and more followed the sentinel only in part in one run (run 15),
so this module scales each config by the ratio to a power that falls with its size,

    beta = clip(1 - SLOPE * ln(max(latency_ms, REF_MS) / REF_MS), 0, 1)

(1 up to 1 ms, 0.65 at 10 ms, 0.31 at 100 ms), with the two constants fitted on the
two-campaign runs 6-15 of ``bench_drift.py``. The benchmarks score it beside carb's
correction in the same run; ``slope=0`` gives carb's correction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: latency up to which a config follows the sentinel fully. Units: ms.
REF_MS = 1.0
#: how much less per e-fold of latency above ``REF_MS``
SLOPE = 0.15


def elasticity(latency_ms: Any, slope: float = SLOPE) -> Any:
    """How far a config of raw latency ``latency_ms`` (ms; number or array) follows the
    sentinel's speed (1 = fully, 0 = not at all); unitless."""
    lat = np.maximum(np.asarray(latency_ms, float), REF_MS)
    return np.clip(1.0 - slope * np.log(lat / REF_MS), 0.0, 1.0)


def at_speed(latency_ms: Any, ref_ms: Any, sentinel_ms: Any, slope: float = SLOPE) -> Any:
    """``latency_ms * (ref_ms / sentinel_ms) ** elasticity(latency_ms)`` (ms; arrays broadcast,
    NaN in, NaN out)."""
    lat = np.asarray(latency_ms, float)
    return lat * (np.asarray(ref_ms, float) / np.asarray(sentinel_ms, float)) ** elasticity(lat, slope)
