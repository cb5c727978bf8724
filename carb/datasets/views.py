"""Views of a dataset's rows for modelling: which latency a model learns, which targets the rows have.

Example:
    >>> from carb.datasets.views import latency_view, targets_of
    >>> df, which = latency_view(carb.datasets.load("cpu-1t"), "corrected")  # doctest: +SKIP
    >>> targets_of(df)                                                          # doctest: +SKIP
    ['latency_ms', 'memory_mb']
"""

from __future__ import annotations

import pandas as pd

__all__ = ["LATENCY_CHOICES", "latency_view", "targets_of"]

#: the latencies a model may learn: ``corrected`` (at the campaign's median speed where the paired sentinel timed
#: the row) or ``raw`` (the raw medians)
LATENCY_CHOICES = ("corrected", "raw")


def latency_view(df: pd.DataFrame, latency: str) -> tuple[pd.DataFrame, str]:
    """Return the rows with ``latency_ms`` as ``latency`` asks, and a few words saying which.

    ``corrected`` puts it at the campaign's median speed in the rows timed with the paired sentinel
    (:func:`carb.campaign.speed.corrected`, the raw median kept as ``latency_ms_raw``); ``raw`` keeps the raw
    medians.

    Raises:
        ValueError: ``latency X: expected one of corrected, raw``.
    """
    from carb.campaign import speed as drift

    if latency not in LATENCY_CHOICES:
        raise ValueError(f"latency {latency}: expected one of {', '.join(LATENCY_CHOICES)}")
    if latency == "raw":
        return df, "raw medians"
    out = drift.corrected(df, paired_only=True)
    if "latency_ms_raw" not in out.columns:
        has = "latency_ms_norm" in df.columns and df["latency_ms_norm"].notna().any()
        return out, (
            "raw medians (the data's speed index comes from readings between visits, which "
            "corrected no better than raw)"
            if has
            else "raw medians (the data has no speed index)"
        )
    n = out.attrs["corrected_rows"]
    return out, (
        f"drift-corrected: latency_ms_norm, at the campaign's median speed ({n:,} of {len(out):,} rows; "
        "rows without a paired sentinel keep the raw median)"
        if n < len(out)
        else f"drift-corrected: latency_ms_norm, at the campaign's median speed (all {n:,} rows)"
    )


def targets_of(df: pd.DataFrame) -> list[str]:
    """The targets the rows have a value of, in CARB's order (``energy_j``, ``latency_ms``, ``memory_mb``)."""
    from carb.model import TARGETS

    return [t for t in TARGETS if t in df.columns and df[t].notna().any()]
