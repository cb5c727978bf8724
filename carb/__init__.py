"""CARB: what a CNN will cost to run (energy, latency and peak memory of inference, jointly,
per device), and which configurations of a space are worth profiling at all.

The package, one folder per stage of the pipeline (each imports only the ones below it):

- :mod:`carb.cli`, :mod:`carb.demo`, :mod:`carb.report`: the commands, the demo, reports and figures.
- :mod:`carb.studies`: published protocols (HELP, NAS-Bench-201) and analyses.
- :mod:`carb.decide`: budgets, two-stage screening, the Pareto front, validation.
- :mod:`carb.transfer`: calibration to a new machine, few-shot maps, one loader of model folders.
- :mod:`carb.netmodel`: the network model, pricing any ``nn.Module`` layer by layer.
- :mod:`carb.datasets`: shipped measured datasets, loading by name, their cards.
- :mod:`carb.model`: the config model (:class:`CARB`), its learners and safe bundles.
- :mod:`carb.campaign`: campaigns (rounds, retakes, speed index), the DuckDB store, Ray.
- :mod:`carb.measure`: one backend interface per device kind, the repeat/stop protocol.
- :mod:`carb.families`: configs, spaces, builders and closed-form features of every family.
- :mod:`carb.graph`: capture of any module into a layer table; importing user code.

The whole workflow from here (names load on first use, so ``import carb`` stays light)::

    import carb

    data = carb.load_dataset("cpu-1t")                       # measured configs
    source = carb.CARB(preset="fast").fit(data)               # energy, latency, memory
    backend = carb.get_backend("cpu", threads=2)              # this machine
    ...                                                       # measure K configs: carb.Campaign
    target = carb.calibrate(source, measured)                 # the source mapped to this machine
    result = carb.screen(space_frame, target, {"latency_ms": 20.0})
    carb.predict_module(my_net, torch.randn(1, 3, 224, 224), "layers-cpu-avx2-1t")
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from carb import _compat
from carb._version import __version__

#: the public names: name -> (module, attribute)
_FRONT_DOOR: dict[str, tuple[str, str]] = {
    "load_dataset": ("carb.datasets", "load"),
    "CARB": ("carb.model", "CARB"),
    "get_backend": ("carb.measure", "get_backend"),
    "Campaign": ("carb.campaign.runner", "Campaign"),
    "load_model": ("carb.transfer.load", "load_model"),
    "calibrate": ("carb.transfer.load", "calibrate"),
    "screen": ("carb.decide.screen", "screen"),
    "predict_module": ("carb.netmodel", "predict_module"),
    "predict_modules": ("carb.netmodel", "predict_modules"),
}

__all__ = ["__version__", *_FRONT_DOOR]


def __getattr__(name: str) -> Any:
    if name in _FRONT_DOOR:
        module, attr = _FRONT_DOOR[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'carb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FRONT_DOOR))


class _Package(types.ModuleType):
    """Keeps the front door's names when an old module path of the same name is imported."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FRONT_DOOR and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
_compat.install()
