"""What a campaign store holds, read back: runs, counts by status, the speed index, how remeasurements repeated.

What ``carb dataset info`` does: :func:`store_info` reads a store (a snapshot of what a running campaign has
committed, when it is in use) into a :class:`StoreInfo`; :func:`gpu_line` and :func:`isa_line` say a run's GPU and
CPU facts from its provenance.

Example:
    >>> from carb.campaign.store_info import store_info     # doctest: +SKIP
    >>> info = store_info("tiny.duckdb")                    # doctest: +SKIP
    >>> info.summary, info.speed["readings"]                # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from carb._safeio import loads_json

__all__ = ["StoreInfo", "gpu_line", "isa_line", "store_info"]


@dataclass
class StoreInfo:
    """A campaign store, read back.

    Attributes:
        store: the store's path.
        snapshot: read from a snapshot (the store was in use by a running campaign).
        summary: per platform and status: configs, medians of the targets, latency CoV.
        runs: one row per run (id, start, platform, command, provenance).
        readings: the speed sentinel's readings.
        speed: the speed index's summary (:func:`carb.campaign.speed.speed_summary`); ``why`` says why a store of
            GPU runs has none.
        repeat: platform -> how its remeasurements repeated the first measurements.
    """

    store: Path
    snapshot: bool
    summary: pd.DataFrame
    runs: pd.DataFrame
    readings: pd.DataFrame
    speed: dict[str, Any]
    repeat: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The store, its run count, summary, speed index and remeasurements as JSON-ready data."""
        return {
            "store": str(self.store),
            "runs": len(self.runs),
            "summary": json.loads(self.summary.to_json(orient="records")),
            "speed_index": self.speed,
            "remeasure": self.repeat,
        }


def store_info(store: str | Path) -> StoreInfo:
    """Read a campaign store: runs, summary, speed index, remeasurements (read-only; a store in use: its snapshot).

    Raises:
        StoreError: not a CARB store.
    """
    from . import speed
    from .store import Store

    with Store(store, read_only=True) as st:
        snapshot = st.snapshot is not None
        summary, runs, readings = st.summary(), st.runs(), st.speed_readings()
        again = st.measurements(table="remeasurements")
        repeat = {}
        if len(again):
            first = st.measurements()
            repeat = {
                p: speed.remeasure_figures(first[first.platform == p], again[again.platform == p])
                for p in sorted(again.platform.unique())
            }
    index = speed.speed_summary(readings)
    if not index.get("readings") and len(runs) and all(gpu_line(p) for p in runs.provenance):
        index["why"] = "GPU campaigns take no sentinel readings (the sentinel tracks a CPU's speed)"
    return StoreInfo(Path(store), snapshot, summary, runs, readings, index, repeat)


def _provenance(provenance: Any) -> dict[str, Any]:
    """A run's provenance (JSON text or a mapping) as a dict; empty when unreadable."""
    try:
        p = loads_json(provenance, "a run's provenance") if isinstance(provenance, str) else dict(provenance or {})
    except (TypeError, ValueError):  # DocumentError too: too large or nested too deeply
        return {}
    return p if isinstance(p, dict) else {}


def gpu_line(provenance: Any) -> str:
    """The GPU facts of a GPU run's provenance (JSON); empty for a CPU run.

    Which GPU and driver, whether clocks were locked (and why not), the energy counter's update period and window,
    the idle power subtracted.
    """
    p = _provenance(provenance)
    if not str(p.get("device", "")).startswith("cuda"):
        return ""
    lock = p.get("clock_lock") or {}
    clocks = "clocks locked" if lock.get("applied") else f"clocks not locked ({lock.get('reason') or 'not requested'})"
    sensor = p.get("energy_sensor") or {}
    period = p.get("update_period_s")
    if sensor.get("available") and period:
        energy = (
            f"energy counter every {1e3 * period:.0f} ms, windows of >= {p.get('energy_periods', 10):g} "
            f"updates; idle {p.get('idle_power_w') or float('nan'):.1f} W subtracted"
        )
    else:
        energy = f"no energy: {sensor.get('reason') or 'no counter'}"
    return (
        f"GPU {p.get('gpu_name') or p.get('device_name') or '?'} (driver {p.get('driver') or '?'}, torch "
        f"{p.get('torch') or '?'}): {clocks}; {energy}"
    )


def isa_line(provenance: Any) -> str:
    """The CPU and its instruction-set facts of a run's provenance (JSON); empty for a run that recorded none.

    Which reduced precisions it runs natively decides what its bf16/fp16 rows mean.
    """
    p = _provenance(provenance)
    isa = p.get("cpu_isa") or {}
    if not isa.get("flags") and not isa.get("torch_capability"):
        return ""
    native = isa.get("native") or {}
    nat = ", ".join(f"{k} {'native' if v else 'NOT native'}" for k, v in native.items())
    return (
        f"CPU {p.get('cpu_model') or '?'}: flags {' '.join(isa.get('flags') or []) or '-'}; torch kernels "
        f"{isa.get('torch_capability') or '?'}" + (f"; {nat}" if nat else "")
    )
