"""Old import paths of modules that moved into the stage packages.

``import carb.space`` keeps working and warns with the module's new home. A moved module
that was split answers each name from the first new module that has it. ``carb.calibrate``
and ``carb.screen`` are both old module paths and front-door functions: one object serves
both, callable as the function, with the old module's names as (deprecated) attributes.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

#: old module -> the modules that now hold its names, searched in order
MOVED: dict[str, tuple[str, ...]] = {
    "carb.zoo": ("carb.families.zoo",),
    "carb.nets": ("carb.families.nets",),
    "carb.fbnet": ("carb.families.fbnet",),
    "carb.space": ("carb.families.space",),
    "carb.arch": ("carb.families.arch",),
    "carb.features": ("carb.families.features",),
    "carb.store": ("carb.campaign.store",),
    "carb.ray_executor": ("carb.campaign.ray_executor",),
    "carb.drift": ("carb.campaign.speed", "carb.campaign.rounds", "carb.report.figures"),
    "carb.screen": ("carb.decide.screen",),
    "carb.pareto": ("carb.decide.pareto",),
    "carb.validate": ("carb.decide.validate",),
    "carb.analysis": ("carb.studies.analyses", "carb.studies.nb201", "carb.studies.help_fbnet", "carb.model.gbm"),
    "carb.calibrate": ("carb.transfer.calibrate", "carb.transfer.load"),
    "carb.evaluate": ("carb.model.evaluation",),
}


#: old module paths that are also front-door functions: path -> (module, function)
CALLABLE: dict[str, tuple[str, str]] = {
    "carb.calibrate": ("carb.transfer.load", "calibrate"),
    "carb.screen": ("carb.decide.screen", "screen"),
}


class _Alias(types.ModuleType):
    """A module object that answers names from the modules that now hold them."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in MOVED[self.__name__]:
            module = importlib.import_module(target)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        names: set[str] = set()
        for target in MOVED[self.__name__]:
            names.update(dir(importlib.import_module(target)))
        return sorted(names)


class _CallableAlias(_Alias):
    """An old module path that is also a front-door function: calling it calls the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":
            module, function = CALLABLE[self.__name__]
            return getattr(importlib.import_module(module), function)
        if not name.startswith("__"):
            warnings.warn(
                f"{self.__name__}.{name}: the module moved to {MOVED[self.__name__][0]}",
                DeprecationWarning,
                stacklevel=2,
            )
        return super().__getattr__(name)


def front_door(path: str) -> _CallableAlias:
    """The one object behind ``carb.calibrate`` / ``carb.screen`` (created once, no warning)."""
    if not isinstance(sys.modules.get(path), _CallableAlias):
        alias = _CallableAlias(path)
        module, function = CALLABLE[path]
        alias.__doc__ = getattr(importlib.import_module(module), function).__doc__
        sys.modules[path] = alias
    return sys.modules[path]


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name in CALLABLE:
            return front_door(spec.name)
        new = ", ".join(MOVED[spec.name])
        warnings.warn(f"{spec.name} moved to {new}; the old path will be removed", DeprecationWarning, stacklevel=3)
        if len(MOVED[spec.name]) == 1:
            module = importlib.import_module(MOVED[spec.name][0])
            self._specs[module.__name__] = module.__spec__
            return module
        return _Alias(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system stamps the old path's spec on the module it is handed: give the
        # real module its own spec back
        if module.__name__ in self._specs:
            module.__spec__ = self._specs[module.__name__]


def install() -> None:
    """Put the old paths' finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
