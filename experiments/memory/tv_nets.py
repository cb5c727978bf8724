"""torchvision's classification networks as ``file.py:callable`` for CARB's worker, where
torchvision's C ops (built for another torch) do not load: the import goes through
``bench_machine_shift.import_torchvision``. Needs ``PYTHONPATH=/tmp/tvsite:benchmarks``."""

from bench_machine_shift import import_torchvision


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    tv = import_torchvision()
    return getattr(tv.models, name)
