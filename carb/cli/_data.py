"""What ``carb train``, ``evaluate`` and ``report`` share: reading a dataset, its latency view, budgets, presets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ._app import UsageError

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
        listed = datasets.platforms(spec) if platform is None else None
        if listed is not None and len(listed) > 1:  # refused before 640,625 rows are read (nb201)
            raise usage(f"{spec} holds {len(listed)} platforms ({', '.join(listed)}); choose one with --platform")
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
    """:func:`carb.datasets.views.latency_view`: the rows with ``latency_ms`` as ``--latency`` asks, and which."""
    from carb.datasets.views import latency_view as view

    from ._app import library_errors

    with library_errors(view):
        return view(df, latency)


def parse_budgets(items: list[str] | None) -> dict[str, float]:
    """Parse ``["energy_j=75", "latency_ms=3"]`` into ``{"energy_j": 75.0, "latency_ms": 3.0}``.

    This is carb.decide.screen's parser; its ValueError becomes a usage error under ``--budget``.
    """
    from ._app import parse_budget_options

    return parse_budget_options(items)


def check_preset(names: list[str]) -> None:
    from carb.model import AUTO, PRESETS
    from carb.model.evaluation import BASELINES

    for p in names:
        if p not in PRESETS and p not in BASELINES and p != AUTO:
            raise usage(f"--preset {p}: unknown preset (expected one of {', '.join([AUTO, *PRESETS, *BASELINES])})")


def check_budget_targets(budgets: dict[str, float], df, where: str) -> None:
    """Refuse a budget on a target the rows lack (:func:`carb.decide.screening.check_budget_targets`) under --budget."""
    from carb.decide.screening import check_budget_targets as check

    from ._app import library_errors

    with library_errors(check):
        check(budgets, df, where)


def check_power_latency(df, where: str) -> None:
    """Refuse ``--preset power-latency`` asked for by name on rows without energy or latency.

    On such rows (a latency-only platform, our CPUs) it is a usage error naming the targets there are: the baseline
    is an energy prediction (a model's latency x the median power), and would otherwise leave an empty table.
    """
    from carb.datasets.views import targets_of

    present = targets_of(df)
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
    """Write ``res`` to ``json_out`` as JSON (NaN as null: :func:`carb._safeio.write_json`) and say so."""
    from carb._safeio import write_json as write

    write(json_out, res)
    console.print(f"wrote {json_out}")
