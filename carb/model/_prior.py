"""A prior: another device's fitted model, whose predictions a model reads as inputs."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from ._target_model import TARGETS


def _resolve_prior(prior: Any) -> Any:
    """Return the prior model (None or a fitted predictor, loaded by the caller), checked."""
    if prior is None:
        return None
    if not hasattr(prior, "predict") or not hasattr(prior, "targets_"):
        hint = (
            " (load a bundle first: carb.model.load(path))"
            if isinstance(prior, (str, bytes)) or hasattr(prior, "__fspath__")
            else ""
        )
        raise ValueError(
            f"prior: expected a fitted model (with targets_ and predict), got {type(prior).__name__}{hint}"
        )
    return prior


def _prior_inputs(prior: Any, df: pd.DataFrame, first_row: int = 0) -> tuple[np.ndarray, list[str]]:
    """Return the prior's log predictions of ``df``'s configs and their column names.

    One column per target it predicts, in :data:`TARGETS` order, named ``prior_<target>``.
    Raises ValueError when a prediction is not a positive finite number (a prior must
    predict every config).
    """
    if prior is None:
        return np.zeros((len(df), 0)), []
    with warnings.catch_warnings():
        # its extrapolation warning would repeat per chunk; this model's own domain
        # (which covers the prior columns) flags such rows
        warnings.simplefilter("ignore", UserWarning)
        pred = prior.predict(df)
    names = [t for t in TARGETS if t in set(prior.targets_)]
    cols = []
    for t in names:
        v = pred[t].to_numpy(dtype=np.float64)
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"prior: its {t} prediction of row {first_row + i} is {v[i]!r}, not a positive number")
        cols.append(np.log(v))
    return (np.column_stack(cols) if cols else np.zeros((len(df), 0))), [f"prior_{t}" for t in names]
