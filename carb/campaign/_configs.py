"""The configs of a campaign: read from a file, and without duplicates."""

from __future__ import annotations

from typing import Iterable

from carb.families.space import Config
from carb.measure.base import ConfigLike


def read_config_file(path: str) -> list[Config]:
    """Configs from a Parquet, CSV or JSON-lines file with parameter columns.

    Args:
        path: a ``.parquet``, ``.csv``, ``.jsonl`` or ``.json`` file naming every parameter.

    Returns:
        The file's configs, in its order.

    Raises:
        SpaceError: an unknown file type, an unreadable or empty file, a missing column, a
            config id that does not match its parameters, or a config this machine cannot
            measure (its ``check_measurable``: an ONNX file without ONNX Runtime).
    """
    import pandas as pd

    from carb.families.space import SpaceError, configs_from_frame, missing_columns, with_config_ids

    p = str(path)
    try:
        if p.endswith(".parquet"):
            df = pd.read_parquet(p)
        elif p.endswith(".csv"):
            df = pd.read_csv(p)
        elif p.endswith((".jsonl", ".json")):
            df = pd.read_json(p, lines=p.endswith(".jsonl"))
        else:
            raise SpaceError(f"{p}: unknown config file type (expected .parquet, .csv, .jsonl or .json)")
    except (OSError, ValueError) as e:
        if isinstance(e, SpaceError):
            raise
        raise SpaceError(f"{p}: cannot read configs ({str(e).splitlines()[0]})") from None
    if df.empty:
        raise SpaceError(f"{p}: no configs in the file")
    absent = missing_columns(df)  # never measure a default in place of a missing column
    if absent:
        raise SpaceError(
            f"{p}: missing column{'s' if len(absent) > 1 else ''} {', '.join(absent)} "
            "(a config file names every parameter; classes may be left out)"
        )
    try:
        if "config_id" in df.columns:
            with_config_ids(df)  # a user's ids are checked, never trusted
        configs = configs_from_frame(df)
    except SpaceError as e:
        raise SpaceError(f"{p}: {e}") from None
    for c in dict.fromkeys(configs):  # a config that needs more than torch says so before any worker starts
        if callable(check := getattr(c, "check_measurable", None)):
            check()
    return configs


def unique_configs(configs: Iterable[ConfigLike]) -> list[ConfigLike]:
    """Configs in first-seen order without duplicates."""
    return list(dict.fromkeys(configs))
