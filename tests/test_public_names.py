"""Every name a carb module exports in ``__all__`` exists (``from carb.x import *`` works)."""

import importlib
import pkgutil

import pytest

import carb


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(carb.__path__, "carb.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_all_names_exist(name: str) -> None:
    try:
        mod = importlib.import_module(name)
    except ImportError as e:  # an optional extra (ray, a GPU binding) not installed here
        pytest.skip(f"{name}: {e}")
    missing = [n for n in getattr(mod, "__all__", []) if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
