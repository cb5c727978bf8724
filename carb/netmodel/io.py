"""A network model on disk: its directory layout, the shipped models, and its one error.

A model is a directory: ``netmodel.json`` (coefficients, classes, provenance) and
``layer_forest.npz`` (the layer model's trees as arrays,
:class:`carb.model.ArrayForest`, loaded with ``allow_pickle=False``): loading runs
no code from the files. :meth:`carb.netmodel.NetModel.save` and :func:`carb.netmodel.load`
read and write it through :func:`write_model` and :func:`read_model`.

``netmodel.json`` is also the model's manifest, as a bundle's ``manifest.json`` is
(:mod:`carb.model._bundle`): ``files`` holds the SHA-256 of every other file it names (the
forest), and ``netmodel_sha256`` the SHA-256 of the document's canonical text without that
field, so that an edited coefficient, a swapped or corrupt forest, or a file name that
leaves the folder is refused, with one line, before anything is read. The checksums catch
corruption and edits; they are not a signature. A document edited on purpose (a shipped
model's ``meta``) is sealed again with :func:`seal`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, TypeVar

from carb._safeio import read_json

FORMAT = "carb-netmodel/1"
#: Network models shipped with carb: name -> directory under ``carb/data``.
SHIPPED = {
    "layers-cpu-avx2-1t": "layers-cpu-avx2-1t.netmodel",
    "layers-cpu-epyc512-1t": "layers-cpu-epyc512-1t.netmodel",
    "layers-cpu-1t": "layers-cpu-1t.netmodel",
}
#: The model ``carb predict --module`` uses when none is given on a machine of a kind no shipped
#: model was measured on (:func:`carb.netmodel.default_model` picks the one of this machine's kind).
DEFAULT_MODEL = "layers-cpu-avx2-1t"
#: The file of the model's coefficients, and that of the layer model's trees.
MODEL_FILE = "netmodel.json"
FOREST_FILE = "layer_forest.npz"
#: the document's own checksum field (:func:`doc_checksum`)
CHECKSUM_KEY = "netmodel_sha256"

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


def doc_checksum(doc: dict[str, Any]) -> str:
    """The SHA-256 of a model document's canonical JSON text (sorted keys, no spaces) without :data:`CHECKSUM_KEY`.

    Every value is covered (coefficients, intervals, calibration, ``meta``, the file checksums), so a one-digit edit
    fails to load.
    """
    body = {k: v for k, v in doc.items() if k != CHECKSUM_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _own_file(d: Path, name: Any, what: str) -> Path:
    """``d / name`` for a plain file name of the folder; refuses any other (one line)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", "..", MODEL_FILE):
        raise ModelError(f"{d / MODEL_FILE}: {what} {name!r} is not a file name inside the model's folder; refusing")
    return d / name


def _sealed(d: Path, doc: dict[str, Any]) -> str:
    """The text of ``doc`` with the checksums of its forest (in ``d``) and of itself."""
    doc = {k: v for k, v in doc.items() if k not in ("files", CHECKSUM_KEY)}
    name = (doc.get("layer") or {}).get("forest")
    doc["files"] = {name: _sha256(_own_file(d, name, "layer forest"))} if name else {}
    doc = json.loads(json.dumps(doc))  # the checksum is of what is read back (tuples as lists, floats as text)
    doc[CHECKSUM_KEY] = doc_checksum(doc)
    return json.dumps(doc, indent=1)


def _write_text(path: Path, text: str) -> None:
    """Write then rename, so that a reader never sees half a document."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_model(directory: str | Path, doc: dict[str, Any], forest: Any) -> Path:
    """Write a model's document (``format`` added first) and its layer forest (if any), with their checksums.

    Returns:
        The directory, created if need be.

    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if forest is not None:
        forest.save(d / FOREST_FILE)
    _write_text(d / MODEL_FILE, _sealed(d, {"format": FORMAT, **doc}))
    return d


def seal(directory: str | Path) -> Path:
    """Write the checksums of a model directory as its files are now.

    For a model whose ``netmodel.json`` was edited on purpose (e.g. the ``meta`` of a shipped model) or written by a
    carb that did not checksum it. Seal only files you trust: loading checks them against these checksums from then
    on.

    Raises:
        ModelError: not a network-model directory, or its forest's name leaves the folder (one line).
    """
    d = Path(directory)
    f = d / MODEL_FILE
    doc = _read_doc(d, f)
    try:
        _write_text(f, _sealed(d, doc))
    except OSError as e:
        raise ModelError(f"{d}: cannot seal ({e.strerror or e})") from None
    return d


def _read_doc(d: Path, f: Path) -> dict[str, Any]:
    """The JSON document of a model directory, of this format (one-line :class:`ModelError` otherwise)."""
    if not f.is_file():
        raise ModelError(
            f"{d}: not a network model (no {MODEL_FILE}; shipped: {', '.join(SHIPPED)}; make one "
            "with carb calibrate or carb.netmodel.fit_netmodel)"
        )
    try:
        doc = read_json(f)
    except (OSError, ValueError) as e:  # DocumentError too: not JSON, too large or nested too deeply
        raise ModelError(f"{f}: unreadable ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise ModelError(f"{f}: format {got!r}, expected {FORMAT!r}")
    return doc


def _check(d: Path, f: Path, doc: dict[str, Any]) -> None:
    """Refuse a document without checksums or not matching them, and files that do not match theirs."""
    if not isinstance(doc.get("layer"), dict):
        raise ModelError(f"{f}: malformed network model (no layer model)")
    if CHECKSUM_KEY not in doc:
        raise ModelError(
            f"{f}: no {CHECKSUM_KEY} (written by a carb that did not checksum its models); if you trust its files, "
            f'seal them: python -c "from carb.netmodel.io import seal; seal({str(d)!r})"'
        )
    if doc.get(CHECKSUM_KEY) != doc_checksum(doc):
        raise ModelError(f"{f}: does not match its checksum {CHECKSUM_KEY} (edited or corrupt); refusing to load")
    files = doc.get("files")
    if not isinstance(files, dict):
        raise ModelError(f"{f}: malformed network model (no file list)")
    for name, digest in files.items():
        p = _own_file(d, name, "file")
        if not p.is_file():
            raise ModelError(f"{d}: incomplete network model: missing file {name}")
        if _sha256(p) != digest:
            raise ModelError(f"{d}: file {name} does not match its checksum (edited or corrupt); refusing to load")


def read_model(directory: str | Path, build: Callable[[dict[str, Any], Any], T]) -> T:
    """Read a model written by :func:`write_model` and ``build`` it from its document and forest.

    The document and every file it names are checked against their checksums before anything is built.

    Args:
        directory: the model's directory or the name of a shipped model (:func:`resolve`).
        build: makes the model from the document and the layer forest (``None``: none saved).

    Raises:
        ModelError: not a network-model directory, one without checksums, edited or corrupt, or a malformed one (one
            line).

    """
    from carb.model import ArrayForest

    d = resolve(directory)
    f = d / MODEL_FILE
    doc = _read_doc(d, f)
    _check(d, f, doc)
    try:
        ly = doc["layer"]
        name = ly.get("forest")
        if name and name not in doc["files"]:
            raise ModelError(f"{f}: layer forest {name!r} is not among its checksummed files; refusing")
        forest = ArrayForest.load(_own_file(d, name, "layer forest")) if name else None
        return build(doc, forest)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - numpy, zipfile and the builders raise many kinds for a malformed model
        raise ModelError(
            f"{d}: malformed network model ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        ) from None
