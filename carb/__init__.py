"""CARB: what a CNN configuration will cost to run (energy, latency, peak memory of
inference, jointly, per device), and which configurations are worth profiling at all."""

from carb._version import __version__

__all__ = ["__version__", "predict_module", "predict_modules"]


def __getattr__(name: str):
    # carb.predict_module(module, example_input, model) and carb.predict_modules (many at
    # once): imported on first use, so that `import carb` stays light (no torch, no scikit-learn)
    if name in ("predict_module", "predict_modules"):
        from carb import netmodel

        return getattr(netmodel, name)
    raise AttributeError(f"module 'carb' has no attribute {name!r}")
