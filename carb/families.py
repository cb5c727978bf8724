"""Network families, pluggable: a family is one module that says how to read its configs
from a table row, build the network, and compute its closed-form features; registering it
here makes every part of CARB that handles configs handle it (config files and tables,
:func:`carb.arch.build`, :func:`carb.features.compute`, the measurement backends and the
campaign store).

Built in: ``cifar`` and ``imagenet`` (the ResNets of :mod:`carb.space` / :mod:`carb.arch`)
and ``fbnet`` (:mod:`carb.fbnet`). Another package adds one with an entry point in the
group ``carb.families`` that names a :class:`Family` object::

    [project.entry-points."carb.families"]
    mobilenet = "my_pkg.mobilenet:FAMILY"

or, in a running program, with :func:`register`. The contracts a family's tests must
check (as ``tests/test_fbnet.py`` does for FBNet): ``features`` gives the same FLOPs as
``torch.utils.flop_counter.FlopCounterMode`` on the built module and the module's exact
parameter count; ``config_id`` is stable and includes the family's name, so that no two
families share an id.

In a table, every row names its family in the ``family`` column; a family's own
parameters are columns of their own (FBNet: ``layer_00`` .. ``layer_21``), empty on the
other families' rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Mapping

import pandas as pd

from carb.space import FAMILIES as RESNET_FAMILIES
from carb.space import PARAMETERS, Config, SpaceError

__all__ = ["Family", "register", "get", "names", "of", "config_from_row", "to_row"]


@dataclass(frozen=True)
class Family:
    """How CARB handles one family of networks.

    Attributes:
        name: the family's value in the ``family`` column and in its configs' canonical form.
        config_type: the class of its configs: frozen, hashable, with ``config_id``,
            ``label()``, ``to_dict()``, and ``input_size``, ``batch``, ``precision`` (the
            measurement backends feed ``(batch, 3, input_size, input_size)`` inputs).
        from_row: a config from a flat table row (a mapping; other families' columns may
            be present and empty).
        to_row: the flat row of a config, ``family`` included.
        build: the network of a config (a ``torch.nn.Module`` in eval mode, fp32 weights).
        features: a table of this family's rows -> the same rows with the feature columns
            of :data:`carb.features.FEATURE_COLUMNS` that apply (same names, same units).
        description: one line for listings.
    """

    name: str
    config_type: type
    from_row: Callable[[Mapping[str, Any]], Any]
    to_row: Callable[[Any], dict[str, Any]]
    build: Callable[[Any], Any]
    features: Callable[[pd.DataFrame], pd.DataFrame]
    description: str = ""


_REGISTRY: dict[str, Family] = {}
_LOADED = False


def register(family: Family, *, replace: bool = False) -> Family:
    """Add a family; refuses to shadow another one of the same name unless ``replace``."""
    if not isinstance(family, Family):
        raise TypeError(f"register: expected a carb.families.Family, got a {type(family).__name__}")
    _load()
    if family.name in _REGISTRY and not replace:
        raise ValueError(f"family {family.name!r} is already registered")
    _REGISTRY[family.name] = family
    return family


def get(name: str) -> Family:
    """The family of this name. Raises :class:`~carb.space.SpaceError` (one line) if unknown."""
    _load()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise SpaceError(f"family: unknown value {name!r} (known: {', '.join(names())})") from None


def names() -> list[str]:
    """Names of the registered families."""
    _load()
    return sorted(_REGISTRY)


def of(config: Any) -> Family:
    """The family of a config object."""
    _load()
    for f in _REGISTRY.values():
        if isinstance(config, f.config_type):
            if f.config_type is Config:
                return _REGISTRY[config.family]
            return f
    raise SpaceError(f"not a config of a registered family: a {type(config).__name__}")


def config_from_row(row: Mapping[str, Any]) -> Any:
    """A config of any family from a flat row (``family`` missing means a ResNet)."""
    name = row.get("family")
    if name is None or (isinstance(name, float) and name != name) or name in RESNET_FAMILIES:
        return Config.from_dict({k: v for k, v in row.items() if k in PARAMETERS and not _missing(v)})
    return get(name).from_row(row)


def to_row(config: Any) -> dict[str, Any]:
    """The flat row of a config of any family (``family`` included)."""
    return config.to_dict() if isinstance(config, Config) else of(config).to_row(config)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


# -- built-in families ----------------------------------------------------------------------


def _resnet(name: str, description: str) -> Family:
    def build(config: Any) -> Any:
        from carb import arch

        return arch.build(config)

    def features(df: pd.DataFrame) -> pd.DataFrame:
        from carb.features import compute

        return compute(df)

    return Family(name=name, config_type=Config, from_row=config_from_row, to_row=Config.to_dict,
                  build=build, features=features, description=description)


def _fbnet() -> Family:
    from carb import fbnet
    from carb import help_fbnet as hf

    def from_row(row: Mapping[str, Any]) -> Any:
        d = {k: v for k, v in row.items() if not _missing(v)}
        if "ops" not in d:  # a table row (the store expands its arch JSON into these columns)
            missing = [c for c in hf.LAYER_COLUMNS if c not in d]
            if missing:
                raise SpaceError(f"fbnet: missing column {missing[0]} (needs {hf.LAYER_COLUMNS[0]} .. "
                                 f"{hf.LAYER_COLUMNS[-1]} or ops)")
            d["ops"] = [str(d[c]) for c in hf.LAYER_COLUMNS]
        keep = {k: d[k] for k in fbnet.PARAMETERS if k in d}
        return fbnet.FBNetConfig.from_dict(keep)

    def to_row(config: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"family": fbnet.FAMILY}
        row.update(zip(hf.LAYER_COLUMNS, config.ops))
        row.update(input_size=config.input_size, batch=config.batch, precision=config.precision,
                   classes=config.classes)
        return row

    return Family(name=fbnet.FAMILY, config_type=fbnet.FBNetConfig, from_row=from_row, to_row=to_row,
                  build=fbnet.build, features=lambda df: fbnet.features(df),
                  description="FBNet v1 macro-architecture, 22 searchable layers x 9 operations (HW-NAS-Bench, HELP)")


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    _REGISTRY["cifar"] = _resnet("cifar", "3-stage ResNets of He et al. 2016 (CIFAR-style)")
    _REGISTRY["imagenet"] = _resnet("imagenet", "torchvision's 4-stage ResNet-18/34/50/101/152")
    _REGISTRY["fbnet"] = _fbnet()
    for ep in metadata.entry_points(group="carb.families"):
        try:
            fam = ep.load()
        except Exception as e:  # a broken plug-in must not take CARB down; say which
            import warnings

            warnings.warn(f"carb.families entry point {ep.name!r} failed to load: {e}", stacklevel=2)
            continue
        if isinstance(fam, Family) and fam.name not in _REGISTRY:
            _REGISTRY[fam.name] = fam
