"""A network model on disk: its directory layout, the shipped models, and its one error.

A model is a directory: ``netmodel.json`` (coefficients, classes, provenance) and
``layer_forest.npz`` (the layer model's trees as arrays,
:class:`carb.model._forest.ArrayForest`, loaded with ``allow_pickle=False``): loading runs
no code from the files. :meth:`carb.netmodel.NetModel.save` and :func:`carb.netmodel.load`
read and write it through :func:`write_model` and :func:`read_model`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

FORMAT = "carb-netmodel/1"
#: Network models shipped with carb: name -> directory under ``carb/data``.
SHIPPED = {"layers-cpu-avx2-1t": "layers-cpu-avx2-1t.netmodel", "layers-cpu-1t": "layers-cpu-1t.netmodel"}
#: The model ``carb predict --module`` uses when none is given.
DEFAULT_MODEL = "layers-cpu-avx2-1t"
#: The file of the model's coefficients, and that of the layer model's trees.
MODEL_FILE = "netmodel.json"
FOREST_FILE = "layer_forest.npz"

T = TypeVar("T")


class ModelError(ValueError):
    """A network model cannot be fitted, loaded or applied; one line."""


def resolve(model: str | Path) -> Path:
    """The directory of a network model.

    Args:
        model: a directory, or the name of one of :data:`SHIPPED`.

    Returns:
        ``model`` itself, or, when no such path exists and it names a shipped model, that
        model's directory in the installed package (found in a wheel as in a source tree).

    """
    p = Path(model)
    if not p.exists() and str(model) in SHIPPED:
        from importlib import resources

        return Path(str(resources.files("carb") / "data" / SHIPPED[str(model)]))
    return p


def write_model(directory: str | Path, doc: dict[str, Any], forest: Any) -> Path:
    """Write a model's document (``format`` added first) and its layer forest (if any).

    Returns:
        The directory, created if need be.

    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if forest is not None:
        forest.save(d / FOREST_FILE)
    (d / MODEL_FILE).write_text(json.dumps({"format": FORMAT, **doc}, indent=1))
    return d


def read_model(directory: str | Path, build: Callable[[dict[str, Any], Any], T]) -> T:
    """Read a model written by :func:`write_model` and ``build`` it from its document and forest.

    Args:
        directory: the model's directory or the name of a shipped model (:func:`resolve`).
        build: makes the model from the document and the layer forest (``None``: none saved).

    Raises:
        ModelError: not a network-model directory, or a malformed one (one line).

    """
    from carb.model._forest import ArrayForest

    d = resolve(directory)
    f = d / MODEL_FILE
    if not f.is_file():
        raise ModelError(
            f"{d}: not a network model (no {MODEL_FILE}; shipped: {', '.join(SHIPPED)}; make one "
            "with carb calibrate or carb.netmodel.fit_netmodel)"
        )
    try:
        doc = json.loads(f.read_text())
        if doc.get("format") != FORMAT:
            raise ModelError(f"{f}: format {doc.get('format')!r}, expected {FORMAT!r}")
        ly = doc["layer"]
        forest = ArrayForest.load(d / ly["forest"]) if ly.get("forest") else None
        return build(doc, forest)
    except ModelError:
        raise
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise ModelError(f"{d}: malformed network model ({type(e).__name__}: {e})") from None
