"""CARB: what a CNN configuration will cost to run (energy, latency, peak memory of
inference, jointly, per device), and which configurations are worth profiling at all."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("carb")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
