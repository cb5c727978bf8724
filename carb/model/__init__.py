"""CARB models: the config cost model of one device, with intervals, saved as safe bundles.

A model predicts energy (J), latency (ms) and peak memory (MB) of CNN inference configs
on one device, with prediction intervals.

>>> from carb.model import CARB
>>> model = CARB(preset="default").fit(dataset)          # doctest: +SKIP
>>> model.predict(space.load("paper"))                   # doctest: +SKIP
>>> carb.model.save(model, "my-model"); carb.model.load("my-model")  # doctest: +SKIP

The estimator is :mod:`carb.model.estimator`; its intervals, :mod:`carb.model.conformal`; its base
learners, :mod:`carb.model.learners`; its training domain, :mod:`carb.model.domain`. Other rooms read
a bundle's checksums (:func:`doc_checksum`, :func:`check_doc_checksum`) and the network model's trees
(:class:`ArrayForest`) from here. :func:`plan_training` and :func:`train_bundle` (:mod:`carb.model.training`) are
what ``carb train`` does: fit on measured rows, score a holdout, write the bundle.
"""

from ._bundle import MANIFEST, SCHEMA_VERSION, BundleError, check_doc_checksum, doc_checksum, load, save
from ._forest import ArrayForest
from ._presets import AUTO, FAMILY_PRESETS, PRESETS, auto_preset
from .estimator import CARB, CASCADE_ORDER, TARGETS, UNITS, TargetModel, training_hash
from .training import Trained, TrainingPlan, plan_training, train_bundle

__all__ = [
    "CARB",
    "PRESETS",
    "AUTO",
    "FAMILY_PRESETS",
    "auto_preset",
    "TARGETS",
    "UNITS",
    "CASCADE_ORDER",
    "TargetModel",
    "BundleError",
    "SCHEMA_VERSION",
    "MANIFEST",
    "load",
    "save",
    "doc_checksum",
    "check_doc_checksum",
    "training_hash",
    "ArrayForest",
    "plan_training",
    "train_bundle",
    "Trained",
    "TrainingPlan",
]
