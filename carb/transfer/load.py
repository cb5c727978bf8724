"""One loader for every model directory, and one calibration call for every model.

Three kinds of model directory, told apart by the file that marks each:

- ``calibration.json``: a calibrated config model (``carb calibrate`` of a config model;
  :func:`carb.transfer.calibrate.load_calibrated`);
- ``manifest.json``: a CARB bundle (``carb train``; :func:`carb.model.load`);
- ``netmodel.json``: a network model (``carb calibrate`` of a network model, or a shipped
  one named by :data:`carb.netmodel.SHIPPED`; :func:`carb.netmodel.load`).

Example:
    >>> import carb
    >>> nm = carb.load_model("layers-cpu-avx2-1t")  # a shipped network model  # doctest: +SKIP
    >>> model = carb.load_model("models/cpu-1t")     # a CARB bundle             # doctest: +SKIP
    >>> carb.calibrate(model, measured).save("models/cpu-2t", source_dir="models/cpu-1t")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from carb.model import BundleError

from .calibrate import CALIBRATION_FILE, fit_calibrated, load_calibrated

__all__ = ["CONFIG_MODELS", "MODEL_FILES", "calibrate_from", "load_model", "machine_of", "model_kind"]


def _load_bundle(d: Path, **kwargs: Any) -> Any:
    from carb.model import load

    return load(d, **kwargs)


def _load_network(d: Path) -> Any:
    from carb.netmodel import load

    return load(d)


#: the file that marks each kind of model directory, in the order they are looked for,
#: with the loader of that kind
MODEL_FILES: dict[str, tuple[str, Callable[..., Any]]] = {
    "calibrated": (CALIBRATION_FILE, load_calibrated),
    "bundle": ("manifest.json", _load_bundle),
    "network": ("netmodel.json", _load_network),
}


def _resolve(path_or_name: str | Path) -> Path:
    """Return the directory of a model: the path itself, or a shipped network model's directory."""
    from carb.netmodel import resolve

    return resolve(path_or_name)


def model_kind(directory: str | Path) -> str | None:
    """Return which kind of model a directory holds, by the file that marks it.

    Args:
        directory: a model directory.

    Returns:
        ``"calibrated"``, ``"bundle"`` or ``"network"`` (:data:`MODEL_FILES`); None when
        it is none of them.
    """
    d = Path(directory)
    for kind, (marker, _) in MODEL_FILES.items():
        if (d / marker).is_file():
            return kind
    return None


#: the kinds of model that predict configs (``predict(DataFrame)``): what screening and config predictions take
CONFIG_MODELS = ("calibrated", "bundle")

#: how each kind's marker file is named in an error
_MADE_BY = {
    "bundle": "no manifest.json from carb train",
    "calibrated": f"no {CALIBRATION_FILE} from carb calibrate",
    "network": "no netmodel.json of a network model",
}


def load_model(path_or_name: str | Path, kinds: Sequence[str] = tuple(MODEL_FILES), n_jobs: int | None = None) -> Any:
    """Load any model directory: a CARB bundle, a calibrated model or a network model.

    No code runs from the files. A config model (bundle or calibrated) predicts configs
    with ``predict(DataFrame)``; a network model predicts networks (``predict_rows``,
    :func:`carb.netmodel.predict_module`).

    Args:
        path_or_name: a model directory, or the name of a shipped network model (e.g.
            ``layers-cpu-avx2-1t``, :data:`carb.netmodel.SHIPPED`).
        kinds: the kinds accepted (:data:`MODEL_FILES`; :data:`CONFIG_MODELS` for a config
            model); a folder of another kind is refused as no model, and only with
            ``"network"`` among them is a name looked up among the shipped network models.
        n_jobs: threads per learner of a bundle (None: as saved).

    Returns:
        The predictor: a :class:`carb.model.CARB`, a
        :class:`carb.transfer.calibrate.CalibratedModel` or a :class:`carb.netmodel.NetModel`.

    Raises:
        ValueError: (one line; :class:`carb.model.BundleError` for a folder that is no
            model, :class:`carb.netmodel.ModelError` for a broken network model) no such
            directory, none of the three marker files, or a broken or edited model.

    Example:
        >>> nm = load_model("layers-cpu-avx2-1t")  # doctest: +SKIP
        >>> type(nm).__name__                     # doctest: +SKIP
        'NetModel'
    """
    from carb.netmodel import SHIPPED

    d = _resolve(path_or_name) if "network" in kinds else Path(path_or_name)
    if not d.is_dir():
        shipped = f" (shipped network models: {', '.join(SHIPPED)})" if "network" in kinds else ""
        raise BundleError(f"{d}: no such model directory{shipped}")
    kind = model_kind(d)
    if kind is None or kind not in kinds:
        made_by = [_MADE_BY[k] for k in ("bundle", "calibrated", "network") if k in kinds]
        raise BundleError(f"{d}: not a model directory ({', '.join(made_by)})")
    loader = MODEL_FILES[kind][1]
    model = loader(d, n_jobs=n_jobs) if kind == "bundle" and n_jobs is not None else loader(d)
    try:  # where it came from: a calibration saves a config model beside a copy of this directory
        model.directory_ = d
    except AttributeError:  # a predictor with slots
        pass
    return model


def _is_network_model(model: Any) -> bool:
    from carb.netmodel import NetModel

    return isinstance(model, NetModel)


def _calibrate_network(
    nm: Any,
    measured: pd.DataFrame,
    *,
    tables: Sequence[Any] | None = None,
    method: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Any:
    """Calibrate a network model on K networks: their captures, or their network rows in ``measured``."""
    from carb import netmodel

    method = method or netmodel.DEFAULT_CALIBRATION_METHOD
    if tables is not None:
        return netmodel.calibrate_on(nm, tables, measured, method=method, meta=meta)
    need = dict.fromkeys([*netmodel.NETWORK_COLUMNS, "batch", "latency_ms", "memory_mb"])
    missing = [c for c in need if c not in measured.columns]
    if missing:
        raise netmodel.ModelError(
            f"calibrate: a network model needs the K networks' captures (tables=) or their "
            f"network rows in measured (missing columns: {', '.join(missing)})"
        )
    if method not in netmodel.CALIBRATION_METHODS:
        raise netmodel.ModelError(
            f"method: unknown value {method!r} for a network model (expected "
            f"{' or '.join(netmodel.CALIBRATION_METHODS)})"
        )
    rows = measured.reset_index(drop=True)
    out = netmodel.calibrate_rows(nm, rows, rows[["latency_ms", "memory_mb"]].astype(float), method)
    out.meta = {**out.meta, "calibration_method": method, **dict(meta or {})}
    return out


def calibrate_from(model: Any, measured: pd.DataFrame, **kwargs: Any) -> Any:
    """Map a model to a new device from K measurements taken there (:func:`carb.calibrate` with a DataFrame).

    A config model (a CARB bundle, a calibrated model, or any predictor with ``predict``
    and ``targets_``) goes to :func:`carb.transfer.calibrate.fit_calibrated`; a network
    model (:class:`carb.netmodel.NetModel`) to :func:`carb.netmodel.calibrate_on` (with
    ``tables``) or :func:`carb.netmodel.calibrate_rows` (with network rows in ``measured``).
    Nothing is written: save the result (``.save(directory, source_dir=...)`` for a config
    model, ``.save(directory)`` for a network model).

    Args:
        model: the source model, loaded, or a path or shipped name for :func:`load_model`.
        measured: the K measurements on the new device.

            - config model: one row per config, its config columns (``family``, ``block``,
              ``depth``, ``width``, ``input_size``, ``batch``, ``precision``, ...) and the
              measured ``energy_j`` (J), ``latency_ms`` (ms) and/or ``memory_mb`` (MB);
              rows with a ``status`` other than ``ok`` are ignored; K >= 2.
            - network model: one row per network, ``latency_ms`` (ms) and ``memory_mb`` (MB),
              aligned with ``tables=`` (the networks' :class:`carb.graph.LayerTable` captures,
              e.g. :func:`carb.netmodel.capture_config`); or, without ``tables``, also the
              networks' :data:`carb.netmodel.NETWORK_COLUMNS` and ``batch``
              (:func:`carb.netmodel.network_row`); K >= 3.
        **kwargs: passed on: ``method`` (config: ``log`` or ``nnls``; network: ``factor``,
            ``log`` or ``refit``), ``meta``, and ``coverage`` (config) or ``tables`` (network).

    Returns:
        A :class:`carb.transfer.calibrate.CalibratedModel` or a calibrated
        :class:`carb.netmodel.NetModel`.

    Raises:
        ValueError: (one line) too few measurements, an unknown method, or missing columns.

    Example:
        >>> src = load_model("models/cpu-1t")                              # doctest: +SKIP
        >>> cal = calibrate_from(src, measured)                            # doctest: +SKIP
        >>> cal.save("models/cpu-2t", source_dir="models/cpu-1t")          # doctest: +SKIP
    """
    if isinstance(model, (str, Path)):
        model = load_model(model)
    if _is_network_model(model):
        return _calibrate_network(model, measured, **kwargs)
    return fit_calibrated(model, measured, **kwargs)


def machine_of(model: Any) -> Any:
    """The machine a model's measurements were taken on (:class:`carb.measure.fingerprint.Fingerprint`).

    A network model and a calibrated model record it in their ``meta``, a bundle in its
    manifest's ``training`` (from its dataset: :func:`carb.datasets.fingerprint`).

    Returns:
        The fingerprint, or ``None`` where the model records none.

    """
    from carb.measure.fingerprint import Fingerprint

    meta = getattr(model, "meta", None)
    if isinstance(meta, dict) and meta.get("fingerprint") is not None:
        return Fingerprint.from_dict(meta["fingerprint"])
    manifest = getattr(model, "manifest_", None)
    fp = (manifest or {}).get("training", {}).get("fingerprint") if isinstance(manifest, dict) else None
    return Fingerprint.from_dict(fp) if fp is not None else None
