"""What ``carb train``, ``evaluate`` and ``report`` share: reading a dataset, its latency view, budgets, presets."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

from ._app import UsageError, atomic_file

__all__ = [
    "load_data",
    "parse_budgets",
    "latency_view",
    "check_budget_targets",
    "check_power_latency",
    "check_preset",
    "load_prior",
    "usage",
    "write_json",
]


LATENCY_CHOICES = ("corrected", "raw")
LATENCY_HELP = (
    "corrected (default): for rows timed with the paired speed sentinel, use their latency at the "
    "campaign's median speed (latency_ms_norm); other rows keep the raw median; raw: the raw medians. "
    "Chosen by measurement: on cpu-avx2-1t a model trained on the corrected values predicted a later "
    "campaign's corrected values with 9.6% MAPE against 11.2%."
)


def usage(msg: str) -> Exception:
    return UsageError(msg)


def load_data(spec: str, platform: str | None = None):
    """Load a dataset by registry name (``carb.datasets.load``) or Parquet/CSV file path, restricted to one platform.

    The platform is its ``platform`` column, or ``device`` in datasets that name it so: ``platform`` if given, else
    the only one present.
    """
    from carb import datasets

    try:
        # a dataset that can load one platform alone does (nb201: 640,625 rows in all)
        df = datasets.load(spec, device=platform)
    except ValueError as e:  # DatasetError and friends (nb201: an unknown platform, naming the 29)
        raise usage(str(e)) from None
    col = "platform" if "platform" in df.columns else "device" if "device" in df.columns else None
    if col is not None:
        names = sorted(map(str, df[col].dropna().unique()))
        if platform is not None:
            if platform not in names:
                raise usage(f"--platform {platform}: not in {spec} (platforms: {', '.join(names)})")
            df = df[df[col] == platform]
        elif len(names) > 1:
            raise usage(f"{spec} holds {len(names)} platforms ({', '.join(names)}); choose one with --platform")
    elif platform is not None:
        raise usage(f"--platform {platform}: {spec} has no platform column")
    return df.reset_index(drop=True)


def latency_view(df, latency: str):
    """Return the rows with ``latency_ms`` as ``--latency`` asks, and a few words saying which.

    ``corrected`` puts it at the campaign's median speed in the rows timed with the paired sentinel
    (:func:`carb.campaign.speed.corrected`, the raw median kept as ``latency_ms_raw``).
    """
    from carb.campaign import speed as drift

    if latency not in LATENCY_CHOICES:
        raise usage(f"--latency {latency}: expected one of {', '.join(LATENCY_CHOICES)}")
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


def parse_budgets(items: list[str] | None) -> dict[str, float]:
    """Parse ``["energy_j=75", "latency_ms=3"]`` into ``{"energy_j": 75.0, "latency_ms": 3.0}``.

    This is carb.decide.screen's parser; its ValueError becomes a usage error.
    """
    from carb.decide.screen import parse_budgets as parse

    from ._app import refuse_repeated_budgets

    refuse_repeated_budgets(items)
    try:
        return parse(items or [])
    except ValueError as e:
        raise usage(f"--budget: {e}") from None


def check_preset(names: list[str]) -> None:
    from carb.model import AUTO, PRESETS
    from carb.model.evaluation import BASELINES

    for p in names:
        if p not in PRESETS and p not in BASELINES and p != AUTO:
            raise usage(f"--preset {p}: unknown preset (expected one of {', '.join([AUTO, *PRESETS, *BASELINES])})")


def present_targets(df) -> list[str]:
    """The targets the rows have a value of, in CARB's order."""
    from carb.model import TARGETS

    return [t for t in TARGETS if t in df.columns and df[t].notna().any()]


def check_budget_targets(budgets: dict[str, float], df, where: str) -> None:
    """Refuse a budget on a target the rows lack (energy on a latency-only platform).

    It is a usage error naming the targets there are.
    """
    present = present_targets(df)
    for t in budgets:
        if t not in present:
            raise usage(f"--budget {t}: {where} has no {t} (targets there: {', '.join(present) or 'none'})")


def check_power_latency(df, where: str) -> None:
    """Refuse ``--preset power-latency`` asked for by name on rows without energy or latency.

    On such rows (a latency-only platform, our CPUs) it is a usage error naming the targets there are: the baseline
    is an energy prediction (a model's latency x the median power), and would otherwise leave an empty table.
    """
    present = present_targets(df)
    lacking = [t for t in ("energy_j", "latency_ms") if t not in present]
    if lacking:
        raise usage(
            f"--preset power-latency: {where} has no {' and '.join(lacking)} (targets there: "
            f"{', '.join(present) or 'none'}); the baseline predicts energy from latency"
        )


def load_prior(prior: Optional[Path], n_jobs: int) -> Any:
    """The ``--prior`` bundle, loaded (None without one); bad input is a usage error."""
    if prior is None:
        return None
    from carb.model import BundleError, load
    from carb.transfer.calibrate import CALIBRATION_FILE

    if (prior / CALIBRATION_FILE).is_file():
        raise usage(
            f"--prior: {prior} is a calibrated model (carb calibrate); a prior is a bundle "
            "from carb train, e.g. the calibration's source model"
        )
    try:
        return load(prior, n_jobs=n_jobs)
    except BundleError as e:
        raise usage(f"--prior: {e}") from None


def write_json(res: dict[str, Any], json_out: Path, console: Any) -> None:
    """Write ``res`` to ``json_out`` as JSON (NaN as null) and say so."""
    with atomic_file(json_out) as tmp:
        tmp.write_text(json.dumps(_clean(res), indent=2, allow_nan=False) + "\n")
    console.print(f"wrote {json_out}")


def _clean(o: Any) -> Any:
    """JSON-ready copy: numpy scalars as Python numbers, NaN and infinities as null."""
    import numpy as np

    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o
