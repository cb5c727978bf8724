"""CARB models: the config cost model of one device, with intervals, saved as safe bundles.

A model predicts energy (J), latency (ms) and peak memory (MB) of CNN inference configs
on one device, with prediction intervals.

>>> from carb.model import CARB
>>> model = CARB(preset="default").fit(dataset)          # doctest: +SKIP
>>> model.predict(space.load("paper"))                   # doctest: +SKIP
>>> carb.model.save(model, "my-model"); carb.model.load("my-model")  # doctest: +SKIP
"""

from ._bundle import SCHEMA_VERSION, BundleError, load, save
from ._estimator import CARB, CASCADE_ORDER, TARGETS, UNITS, TargetModel, training_hash
from ._presets import AUTO, PRESETS, auto_preset

__all__ = [
    "CARB",
    "PRESETS",
    "AUTO",
    "auto_preset",
    "TARGETS",
    "UNITS",
    "CASCADE_ORDER",
    "TargetModel",
    "BundleError",
    "SCHEMA_VERSION",
    "load",
    "save",
    "training_hash",
]
