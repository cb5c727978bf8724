"""Model bundles: a directory with a JSON manifest and native model files.

Layout::

    DIR/manifest.json            schema version, carb version, the preset fitted (the one
                                 ``"auto"`` picked) and the settings, input columns, targets
                                 trained, training-data hash, cross-validated metrics (and
                                 holdout metrics when given), the structure of every
                                 target's model, and the SHA-256 of every file
    DIR/<target>.<learner>.ubj   XGBoost boosters (UBJSON)
    DIR/<target>.<learner>.txt   LightGBM boosters (LightGBM model text)
    DIR/<target>.<learner>.npz   ExtraTrees as node arrays (numpy, no pickled objects)
    DIR/<target>.<learner>.cbm   CatBoost models (CatBoost's binary model format)
    DIR/prior/                   only for a model trained with a prior (another device's
                                 model it reads): that model, a bundle of its own, tied to
                                 this one by its manifest's checksum

Loading reads JSON, UBJSON, LightGBM text, CatBoost's binary model format and ``.npz``
with ``allow_pickle=False``, so it never runs code from the files. Before reading any model
file it checks the manifest's format and schema version and each file's checksum, and
refuses a bundle that fails with one line (:class:`BundleError`). The checksums catch corruption and edits of the model
files; they are not a signature (whoever can write the files can rewrite the manifest).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from carb._safeio import read_json

from ._inputs import FAMILY_COLUMNS, input_columns
from .learners import MissingDependency, load_learner

__all__ = ["save", "load", "BundleError", "SCHEMA_VERSION", "FORMAT", "doc_checksum", "check_doc_checksum"]

FORMAT = "carb-model-bundle"
#: bump when a bundle written by this code could be misread by older code, or vice versa
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
#: the subdirectory holding a model's prior (another device's model it reads), a bundle itself
PRIOR_DIR = "prior"


class BundleError(ValueError):
    """A model bundle is missing, tampered with (checksum mismatch) or incompatible (a one-line message)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def doc_checksum(doc: dict[str, Any], key: str) -> str:
    """Return the SHA-256 of a JSON document's canonical text without its own checksum field.

    SHA-256 of a JSON document's canonical text (sorted keys, no spaces) without its own
    checksum field ``key``: every value of a manifest (blend weights, offsets, interval
    widths, maps) is covered, so a one-digit edit fails to load.
    """
    body = {k: v for k, v in doc.items() if k != key}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()).hexdigest()


def check_doc_checksum(doc: dict[str, Any], key: str, where: str, remedy: str) -> None:
    """Refuse a document whose checksum field is absent or does not match.

    Refuse (one-line :class:`BundleError`) a document whose ``key`` field is absent (written
    by an older carb: ``remedy`` says what to do) or does not match :func:`doc_checksum`.
    """
    want = doc.get(key)
    if want is None:
        raise BundleError(
            f"{where}: no {key} (written by an older carb, whose files were not checksummed whole); {remedy}"
        )
    try:
        got = doc_checksum(doc, key)
    except ValueError:  # NaN or infinity edited in: not what this carb writes
        got = None
    if got != want:
        raise BundleError(f"{where}: does not match its checksum {key} (edited or corrupt); refusing to load")


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in ("carb", "xgboost-cpu", "xgboost", "lightgbm", "catboost", "scikit-learn", "numpy"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def save(
    model, directory: str | Path, holdout: dict[str, Any] | None = None, training: dict[str, Any] | None = None
) -> Path:
    """Write a fitted :class:`~carb.model.CARB` as a bundle directory.

    ``directory`` must not exist, be empty, or hold a previous bundle (replaced). The
    bundle is written beside it and renamed into place, so a crash never leaves half a
    bundle under the name. ``holdout``: metrics measured on held-out rows, stored as is.
    ``training``: more facts of the training data for the manifest's ``training`` entry
    (e.g. ``{"latency": "drift-corrected ..."}``: which latency the model learned).

    Raises:
        BundleError: the model is not fitted, or ``directory`` holds something else.
    """
    from carb._version import __version__

    if not hasattr(model, "models_"):
        raise BundleError("cannot save an unfitted CARB model: call fit first")
    out = Path(directory)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).exists())):
        raise BundleError(f"{out}: exists and is not a CARB model bundle; choose a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        prior_entry = _save_prior(model, tmp)
        targets = {t: _save_target(tmp, t, m, model.cv_metrics_.get(t, {})) for t, m in model.models_.items()}
        spec = {k: v for k, v in model.spec_.items()}
        spec["learners"] = {n: {"kind": k, "params": p} for n, (k, p) in spec["learners"].items()}
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "carb_version": __version__,
            "versions": _versions(),
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            # the recipe fitted: "auto" resolved (``params`` keeps the setting as given)
            "preset": getattr(model, "preset_", model.preset),
            # the prior is a model, not a setting: it is the "prior" entry below
            "params": {**model.get_params(deep=False), "prior": None},
            "spec": spec,
            "features": model.spec_["features"],
            # the prior's columns too: a carb that knows no prior refuses the bundle cleanly
            "input_columns": model.input_columns_ + list(getattr(model, "prior_columns_", [])),
            "prior": prior_entry,
            "targets_trained": model.targets_,
            "targets_missing": model.missing_targets_,
            "units": {"energy_j": "J", "latency_ms": "ms", "memory_mb": "MB"},
            "training": {
                "rows": model.n_train_rows_,
                "data_sha256": model.training_hash_,
                "cv_metrics": model.cv_metrics_,
                "coverage": model.coverage,
                **(training or {}),
            },
            "holdout": holdout,
            "targets": targets,
            # the training rows' ranges: predictions beyond them are flagged 'extrapolated'
            "domain": getattr(model, "domain_", None),
            "files": {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()},
        }
        # normalised through JSON first (tuples, numpy scalars), as load will read it
        manifest = json.loads(json.dumps(manifest, allow_nan=False, default=_json_default))
        manifest["manifest_sha256"] = doc_checksum(manifest, "manifest_sha256")
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _save_prior(model, tmp: Path) -> dict[str, Any] | None:
    """Write the model's prior into ``tmp`` as a bundle of its own, and return its manifest entry (None: no prior).

    Raises:
        BundleError: the prior is not a CARB model.
    """
    if not getattr(model, "prior_columns_", None):
        return None
    # the prior travels inside the bundle, as a bundle of its own (checked on load)
    if not hasattr(model.prior_, "models_"):
        raise BundleError(
            f"cannot save a model whose prior is a {type(model.prior_).__name__}: "
            "only a CARB prior can be saved inside the bundle"
        )
    save(model.prior_, tmp / PRIOR_DIR)
    return {
        "directory": PRIOR_DIR,
        "columns": list(model.prior_columns_),
        "manifest_sha256": json.loads((tmp / PRIOR_DIR / MANIFEST).read_text())["manifest_sha256"],
    }


def _save_target(tmp: Path, t: str, m: Any, cv: dict[str, float]) -> dict[str, Any]:
    """Write one target's learner files into ``tmp`` and return its manifest entry (``cv``: its CV metrics)."""
    learners = {}
    for name, learner in m.learners.items():
        entry = learner.save(tmp, f"{t}.{name}")
        entry["weight"] = m.weights[name]
        learners[name] = entry
    return {
        "upstream": m.upstream,
        "transform": m.transform,
        "halfwidth": _finite_or_none(m.halfwidth),
        "offset": m.offset.save(tmp, f"{t}.offset") if m.offset is not None else None,
        "learners": learners,
        "corrector": m.corrector.save(tmp, f"{t}.corrector") if m.corrector is not None else None,
        "corrector_batch_max": m.corrector_batch_max,
        "corrector_scale": m.corrector_scale,
        "cv": cv,
        # locally adaptive intervals (absent in older bundles, which use halfwidth)
        "interval": m.interval.to_json() if getattr(m, "interval", None) is not None else None,
    }


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _read_manifest(d: Path) -> dict[str, Any]:
    """Return a bundle's manifest, checked for format, schema version, checksum and file list."""
    if not d.is_dir():
        raise BundleError(f"{d}: no such model bundle directory")
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"{d}: not a CARB model bundle (no {MANIFEST})")
    try:
        man = read_json(mpath)
    except (OSError, ValueError) as e:  # DocumentError: not JSON, too large or nested too deeply
        raise BundleError(f"{mpath}: unreadable manifest ({' '.join(str(e).split())})") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise BundleError(f"{mpath}: not a CARB model bundle manifest")
    if man.get("schema_version") != SCHEMA_VERSION:
        raise BundleError(
            f"{d}: incompatible bundle: schema version {man.get('schema_version')!r}, "
            f"this carb reads version {SCHEMA_VERSION} (retrain with this carb)"
        )
    check_doc_checksum(man, "manifest_sha256", str(mpath), "retrain the model with carb train")
    if not isinstance(man.get("files"), dict):
        raise BundleError(f"{mpath}: malformed manifest (no file list)")
    return man


def _check_files(d: Path, files: dict[str, str]) -> None:
    """Refuse a bundle whose listed files are misnamed, missing or not matching their SHA-256."""
    for name, digest in files.items():
        p = d / name
        if Path(name).name != name or name == MANIFEST:
            raise BundleError(f"{d / MANIFEST}: malformed manifest (bad file name {name!r})")
        if not p.is_file():
            raise BundleError(f"{d}: incomplete bundle: missing file {name}")
        if _sha256(p) != digest:
            raise BundleError(f"{d}: file {name} does not match its checksum (tampered or corrupt); refusing to load")


def _load_prior(d: Path, man: dict[str, Any], n_jobs: int) -> tuple[Any, list[str]]:
    """Return the bundle's prior model (checked against its recorded checksum) and its columns."""
    if man.get("prior") is None:
        return None, []
    entry = man["prior"]
    if entry.get("directory") != PRIOR_DIR:
        raise BundleError(f"{d / MANIFEST}: malformed manifest (prior directory {entry.get('directory')!r})")
    prior = load(d / PRIOR_DIR, n_jobs=n_jobs)
    if prior.manifest_.get("manifest_sha256") != entry.get("manifest_sha256"):
        raise BundleError(
            f"{d}: its prior ({PRIOR_DIR}/) is not the one it was trained with (tampered or replaced); refusing to load"
        )
    return prior, [str(c) for c in entry["columns"]]


def _input_columns(d: Path, man: dict[str, Any], pcols: list[str]) -> list[str]:
    """Return the bundle's input columns less the prior's, checked against those this carb computes."""
    feature_set = man["features"]
    cols = man["input_columns"]
    if pcols:
        if cols[len(cols) - len(pcols) :] != pcols:
            raise BundleError(f"{d / MANIFEST}: malformed manifest (prior columns)")
        cols = cols[: len(cols) - len(pcols)]
    fams = [f for f, (c, _) in FAMILY_COLUMNS.items() if isinstance(cols, list) and c[0] in cols]
    if cols != input_columns(feature_set, sorted(fams)):
        raise BundleError(
            f"{d}: incompatible bundle: its input columns differ from those this carb "
            f"computes for feature set {feature_set!r} (retrain with this carb)"
        )
    return cols


def _load_targets(d: Path, man: dict[str, Any], n_jobs: int) -> dict[str, Any]:
    """Return the per-target models of a bundle, in training order, from their listed learner files."""
    from .conformal import ConformalScale
    from .estimator import TARGETS, TargetModel

    files = man["files"]

    def get(entry):
        if entry is None:
            return None
        if "file" in entry and entry["file"] not in files:
            raise BundleError(f"{d}: the manifest refers to unlisted file {entry['file']!r}")
        return load_learner(d, entry, n_jobs=n_jobs)

    models = {}
    for t in man["targets_trained"]:
        e = man["targets"][t]
        if t not in TARGETS:
            raise BundleError(f"{d}: unknown target {t!r}")
        learners = {n: get(le) for n, le in e["learners"].items()}
        hw = e["halfwidth"]
        models[t] = TargetModel(
            target=t,
            upstream=list(e["upstream"]),
            offset=get(e["offset"]),
            learners=learners,
            weights={n: float(le["weight"]) for n, le in e["learners"].items()},
            corrector=get(e["corrector"]),
            corrector_batch_max=int(e["corrector_batch_max"]),
            corrector_scale=float(e["corrector_scale"]),
            halfwidth=float("inf") if hw is None else float(hw),
            transform=str(e["transform"]),
            interval=ConformalScale.from_json(e["interval"]) if e.get("interval") else None,
        )
        if any(u not in models for u in models[t].upstream):
            raise BundleError(f"{d}: malformed manifest ({t} reads a target trained after it)")
    return models


def load(directory: str | Path, n_jobs: int = 1):
    """Load a bundle written by :func:`save` as a fitted :class:`~carb.model.CARB`.

    Never runs code from the files. Checks, in order: the manifest is there and is JSON of
    this format, the schema version is the one this carb reads, every file the manifest
    lists exists with its SHA-256, the model refers to no unlisted file, and the input
    columns are those this carb computes.

    Args:
        directory: the bundle's directory.
        n_jobs: threads of the loaded learners.

    Returns:
        The fitted :class:`~carb.model.CARB`.

    Raises:
        BundleError: one line saying what is wrong (missing, tampered, incompatible).
    """
    from .estimator import CARB

    d = Path(directory)
    man = _read_manifest(d)
    _check_files(d, man["files"])
    try:
        prior, pcols = _load_prior(d, man, n_jobs)
        cols = _input_columns(d, man, pcols)
        model = CARB(**man["params"])
        models = _load_targets(d, man, model.n_jobs)
        spec = dict(man["spec"])
        spec["learners"] = {n: (v["kind"], v["params"]) for n, v in spec["learners"].items()}
        # a manifest re-checksummed after an edit passes the checksum: every field read is checked for its type
        model.preset_ = str(man.get("preset") or model.preset)
        model.spec_ = spec
        model.input_columns_ = cols
        model.prior = model.prior_ = prior
        model.prior_columns_ = pcols
        model.targets_ = [str(t) for t in man["targets_trained"]]
        model.missing_targets_ = [str(t) for t in man["targets_missing"]]
        model.models_ = models
        model.cv_metrics_ = dict(man["training"]["cv_metrics"])
        model.n_train_rows_ = int(man["training"]["rows"])
        model.training_hash_ = str(man["training"]["data_sha256"])
        model.domain_ = _checked_domain(man.get("domain"))
    except BundleError:
        raise
    except MissingDependency as e:  # a sound bundle of a learner whose package is absent here
        raise BundleError(f"{d}: {e}") from None
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise BundleError(f"{d}: malformed bundle ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    except Exception as e:  # xgboost / lightgbm parse errors have their own classes
        why = " ".join(str(e).split())[:200]
        raise BundleError(f"{d}: unreadable model file ({type(e).__name__}: {why})") from None
    model.manifest_ = man
    return model


def _checked_domain(domain: Any) -> dict[str, Any] | None:
    """A manifest's ``domain`` (None: not recorded), checked for the shape :func:`training_domain` writes.

    Raises:
        TypeError: it is not ``{"ranges": {column: [low, high]}, "categories": {column: [names]}}``.
    """
    if domain is None:
        return None
    ok = (
        isinstance(domain, dict)
        and isinstance(domain.get("ranges"), dict)
        and isinstance(domain.get("categories"), dict)
        and all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, (int, float)) for x in r)
            for r in domain["ranges"].values()
        )
        and all(isinstance(c, list) and all(isinstance(x, str) for x in c) for c in domain["categories"].values())
    )
    if not ok:
        raise TypeError("domain is not {ranges: {column: [low, high]}, categories: {column: [names]}}")
    return domain
