"""CARB predicts the energy, latency and peak memory of CNN inference, per device, before you profile.

It tells which configurations of a deployment space are worth profiling at all. The package has
one folder per stage of the pipeline; each imports only the ones below it:

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

The whole workflow through the front door, on this machine (names load on first use, so ``import carb`` is
light; what is measured here takes about a minute):

>>> import carb, torch
>>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU())
>>> x = torch.randn(1, 3, 224, 224)
>>> m = carb.measure_cost(net, x, max_time_s=0.5)          # measured here: latency (ms), memory (MB), energy (J)
>>> m.latency_ms_lo <= m.latency_ms <= m.latency_ms_hi
True
>>> here = carb.calibrate("layers-cpu-avx2-1t", "here", samples=3, max_time_s=0.3)  # K = 3 networks timed here
>>> p = carb.predict_module(net, x, here)                  # any nn.Module, priced layer by layer
>>> p.latency_ms_lo < p.latency_ms < p.latency_ms_hi
True
>>> source = carb.CARB(preset="fast").fit(carb.load_dataset("cpu-1t"))  # configs measured on one machine
>>> space = carb.load_space("cpu").to_frame().query("precision == 'fp32'")
>>> target = carb.calibrate(source, "here", samples=4, precisions=["fp32"], max_time_s=0.3)  # K = 4 configs here
>>> result = carb.screen(space, target, {"latency_ms": 20.0}, source=source)
>>> set(result.summary["decisions"]) <= {"accept", "reject", "measure"}  # each config's call
True

For a block of code of your own, :class:`CostMonitor` measures windows (``begin_window`` / ``end_window``);
:class:`Campaign` measures a space into a store; ``carb demo`` runs the whole loop.
"""

from __future__ import annotations

import importlib
from typing import Any

from carb._version import __version__

#: the public names: name -> (module, attribute)
_FRONT_DOOR: dict[str, tuple[str, str]] = {
    "load_dataset": ("carb.datasets", "load"),
    "CARB": ("carb.model", "CARB"),
    "load_space": ("carb.families.space", "load"),
    "get_backend": ("carb.measure", "get_backend"),
    "measure_cost": ("carb.measure.cost", "measure_cost"),
    "CostMonitor": ("carb.measure.window", "CostMonitor"),
    "Campaign": ("carb.campaign.runner", "Campaign"),
    "load_model": ("carb.transfer.load", "load_model"),
    "list_models": ("carb.transfer.cache", "list_models"),
    "calibrate": ("carb.transfer.here", "calibrate"),
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
