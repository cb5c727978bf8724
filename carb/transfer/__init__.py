"""Transfer of a cost model to a device it has not seen, from K measurements there.

- :mod:`~carb.transfer.fewshot`: the few-shot method: source models of known devices and a
  map fitted on the K target measurements (:class:`FewShotModel`, :func:`fit_fewshot`).
- :mod:`~carb.transfer.calibrate`: a config model mapped to a new device
  (:func:`~carb.transfer.calibrate.fit_calibrated`), saved and loaded as a model directory.
- :mod:`~carb.transfer.load`: one loader for every model directory
  (:func:`~carb.transfer.load.load_model`) and one calibration call for every model
  (:func:`~carb.transfer.here.calibrate`: from K rows, or measured here).
- :mod:`~carb.transfer.network`: pricing on this machine (:func:`~carb.transfer.network.price_network`,
  :func:`~carb.transfer.network.predict_configs`); :mod:`~carb.transfer.tables`: a calibration as tables.
- The maps themselves (:class:`LogMap`, :func:`fit_log_map`, ...) live in
  :mod:`carb.model.maps`, so that the network model can use them too; they are re-exported here.

The dataset protocols (HELP's FBNet and NAS-Bench-201 studies) live in :mod:`carb.studies`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from carb.model.maps import MIN_K_BATCH_TERM, LogMap, fit_additive, fit_log_map

from .fewshot import AUTO_MIN_K_NNLS, FewShotModel, ModelSource, SourceModels, fit_fewshot
from .load import load_model

__all__ = [
    "AUTO_MIN_K_NNLS",
    "MIN_K_BATCH_TERM",
    "FewShotModel",
    "LogMap",
    "ModelSource",
    "SourceModels",
    "fit_additive",
    "fit_fewshot",
    "fit_log_map",
    "load_model",
]

#: names that moved up to :mod:`carb.studies`, with their new module
_MOVED_TO_STUDIES: dict[str, str] = {
    "fewshot_help_fbnet": "carb.studies.help_fbnet",
    "HELP_PASSTHROUGH": "carb.studies.help_fbnet",
    "HELP_TRIM": "carb.studies.help_fbnet",
    "trim_middle": "carb.studies.help_fbnet",
    "fewshot_nb201": "carb.studies.nb201",
    "fewshot_help_nb201": "carb.studies.nb201",
    "NB201_PASSTHROUGH": "carb.studies.nb201",
    "NB201_METHODS": "carb.studies.nb201",
}


def __getattr__(name: str) -> Any:
    """Answer a name that moved to :mod:`carb.studies`, with a DeprecationWarning."""
    home = _MOVED_TO_STUDIES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"carb.transfer.{name} moved to {home}.{name}; the old path will be removed", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(home), name)
