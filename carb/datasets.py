"""Datasets: the measured rows of a store as one flat table, one row per config and
device, ready for modelling.

Columns: ``config_id``, ``device`` (the platform label, e.g. ``cpu-1t``), the config
parameters, ``status``, ``message``, the target medians ``latency_ms`` (ms), ``energy_j``
(J, net of idle), ``energy_gross_j`` (J), ``memory_mb`` (MB) with their spread columns
(``<target>_mean``, ``_p5``, ``_p95``, ``_cov``, ``_n``, ``_ci_rel``),
``energy_missing_reason``, ``timed_s``, ``wall_s``, ``run_id``, ``measured_at``, ``extra``
(JSON telemetry), and the static features of :func:`carb.features.compute`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from carb.store import Store

__all__ = ["from_store", "write"]


def from_store(store: Store, platform: str | None = None, with_features: bool = True) -> pd.DataFrame:
    """The store's measurements (of one platform if given) as a dataset DataFrame."""
    df = store.measurements(platform).rename(columns={"platform": "device"})
    if with_features and len(df):
        from carb.features import compute

        df = compute(df)
    return df.reset_index(drop=True)


def write(df: pd.DataFrame, out: str | Path) -> Path:
    """Write a dataset to ``.parquet`` or ``.csv`` (by the file's suffix); returns the path."""
    out = Path(out)
    if out.suffix not in (".parquet", ".csv"):
        raise ValueError(f"{out}: unknown output type {out.suffix or '(none)'!r} (expected .parquet or .csv)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    # write then rename, so that an interrupted export never leaves a half file behind
    if out.suffix == ".parquet":
        df.to_parquet(tmp, index=False)
    else:
        df.to_csv(tmp, index=False)
    tmp.replace(out)
    return out
