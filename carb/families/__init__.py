"""Network families, pluggable: one module per family, registered here, makes CARB handle its configs.

A family is one module that says how to read its configs from a table row, build the network, and compute its
features; registering it here makes every part of CARB that handles configs handle it (config files and tables,
:func:`carb.families.arch.build`, :func:`carb.families.features.compute`, the measurement backends and the campaign
store).

The room:

- :mod:`~carb.families.resnet`: the ``cifar`` and ``imagenet`` ResNets (closed-form features);
  torch modules in ``_resnet_nets``, fixed tables in ``_resnet_tables``, the per-image walk of
  a forward in ``_resnet_walk``.
- :mod:`~carb.families.fbnet`: ``fbnet``, HW-NAS-Bench's FBNet space (closed-form features);
  ``_fbnet_nets``, ``_fbnet_tables``, ``_fbnet_walk``.
- :mod:`~carb.families.nb201`: ``nb201``, the NAS-Bench-201 cells (closed-form features);
  ``_nb201_nets``, ``_nb201_tables``, ``_nb201_walk``, ``_nb201_cells`` (a cell's effective DAG).
- :mod:`~carb.families.layers`: ``layers``, one CNN operator per config, for per-operator models.
- :mod:`~carb.families.zoo`: ``zoo``, published CNN designs in plain torch (``_zoo_nets``).
- :mod:`~carb.families.nets`: ``net``, any network a user names (``pkg.mod:callable``);
  ``zoo`` and ``net`` take their features from :func:`carb.graph.capture`.
- :mod:`~carb.families.onnxfile`: ``onnx``, an ONNX file, measured with ONNX Runtime and
  priced from its graph (:func:`carb.graph.capture_onnx`).
- :mod:`~carb.families.space` (TOML spaces over any family), :mod:`~carb.families.arch`
  (:func:`~carb.families.arch.build` of any config) and :mod:`~carb.families.features`
  (:func:`~carb.families.features.compute` of any table): the dispatch over families.
- :mod:`~carb.families._base`: the record and the primitives every family shares (the
  one-line :class:`SpaceError`, value coercion, the config-id hash, the steps of a
  vectorised ``features``). Of this package a family module imports ``_base`` and its own
  private modules only (``zoo`` and ``onnxfile`` also ``nets``): no family imports the space,
  the features or the builder.

Another package adds a family with an entry point in the group ``carb.families`` that names
a :class:`Family` object::

    [project.entry-points."carb.families"]
    mobilenet = "my_pkg.mobilenet:FAMILY"

or, in a running program, with :func:`register`. The contracts a family's tests check (as
the FBNet tests do): ``features`` gives the same FLOPs as
``torch.utils.flop_counter.FlopCounterMode`` on the built module and the module's exact
parameter count; ``config_id`` is stable and includes the family's name, so that no two
families share an id.

In a table, every row names its family in the ``family`` column; a family's own
parameters are columns of their own (FBNet: ``layer_00`` .. ``layer_21``), empty on the
other families' rows.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Mapping

from . import fbnet, layers, nb201, nets, onnxfile, resnet, zoo
from ._base import PRECISIONS, Family, SpaceError, missing, stable_id

__all__ = [
    "Family",
    "SpaceError",
    "PRECISIONS",
    "register",
    "get",
    "names",
    "of",
    "config_from_row",
    "to_row",
    "stable_id",
]

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
    """The family of this name. Raises :class:`SpaceError` (one line) if unknown."""
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
            if f.config_type is resnet.Config:
                return _REGISTRY[config.family]
            return f
    raise SpaceError(f"not a config of a registered family: a {type(config).__name__}")


def config_from_row(row: Mapping[str, Any]) -> Any:
    """A config of any family from a flat row (``family`` missing means a ResNet)."""
    name = row.get("family")
    if missing(name) or name in resnet.FAMILIES:
        return resnet.CIFAR.from_row(row)
    return get(name).from_row(row)


def to_row(config: Any) -> dict[str, Any]:
    """The flat row of a config of any family (``family`` included)."""
    return config.to_dict() if isinstance(config, resnet.Config) else of(config).to_row(config)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for fam in (
        resnet.CIFAR,
        resnet.IMAGENET,
        fbnet.FBNET,
        nb201.NB201,
        layers.LAYERS,
        zoo.ZOO,
        nets.NET,
        onnxfile.ONNX,
    ):
        _REGISTRY[fam.name] = fam
    for ep in metadata.entry_points(group="carb.families"):
        try:
            fam = ep.load()
        except Exception as e:  # a broken plug-in must not take CARB down; say which
            import warnings

            warnings.warn(f"carb.families entry point {ep.name!r} failed to load: {e}", stacklevel=2)
            continue
        if isinstance(fam, Family) and fam.name not in _REGISTRY:
            _REGISTRY[fam.name] = fam
