"""Exporting a campaign store as a dataset file: one row per config and device, with the static features.

What ``carb dataset export`` does: :func:`export_store` runs no code named in the store (a network row keeps the
features stored when it was measured) and says how many network rows measured ok have none.

Example:
    >>> from carb.datasets.export import export_store                   # doctest: +SKIP
    >>> export_store("tiny.duckdb", "tiny.parquet").rows                # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

__all__ = ["Exported", "export_store"]


@dataclass
class Exported:
    """A dataset written from a store.

    Attributes:
        path: the file written.
        data: the rows written.
        bare_net_rows: network rows measured ok without stored features (an older carb measured them, or the
            campaign could not capture them; export runs no code, so they stay empty).
    """

    path: Path
    data: pd.DataFrame
    bare_net_rows: int = 0


def export_store(store: str | Path, out: str | Path, platform: str | None = None, features: bool = True) -> Exported:
    """Write a store's measurements (of one platform if given) as a ``.parquet`` or ``.csv`` dataset.

    Args:
        store: the DuckDB campaign store (read only).
        out: the file to write, ``.parquet`` or ``.csv``.
        platform: only this platform's rows (``None``: all).
        features: add the static features (a network row keeps those captured when it was measured).

    Raises:
        ValueError: an unknown output type, or no measurements to export.
    """
    from carb.campaign.store import Store

    from . import from_store, write

    out = Path(out)
    if out.suffix not in (".parquet", ".csv"):
        raise ValueError(f"out {out}: unknown output type (expected .parquet or .csv)")
    with Store(store, read_only=True) as st:
        df = from_store(st, platform, with_features=features)
    if df.empty:
        raise ValueError(f"{store}: no measurements{' for platform ' + platform if platform else ''}")
    write(df, out)
    bare = 0
    if "family" in df.columns and "flops" in df.columns:
        bare = int(((df["family"] == "net") & (df["status"] == "ok") & df["flops"].isna()).sum())
    return Exported(out, df, bare)
