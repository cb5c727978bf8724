"""A calibration that follows the user: calibrated models kept per machine in the user's cache.

``carb calibrate`` keeps what it fits in the user's cache directory
(``platformdirs.user_cache_dir("carb")/calibrations``, or ``$CARB_CACHE_DIR/calibrations``),
one entry per source model and machine kind; ``carb predict --module`` picks the entry up
when this machine's fingerprint (:mod:`carb.measure.fingerprint`) matches it, and
``carb predict --module ... --calibrate`` makes one when there is none. Nothing is measured
without being asked.

An entry is a directory: ``entry.json`` (format, the source model's name and checksum,
the machine's fingerprint, when, how many networks) beside the calibrated model in
``model/``. An entry that cannot be read, names another format, another source or another
machine, or whose model does not load is ignored with one warning line, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from carb._safeio import read_json
from carb.measure.fingerprint import KIND_FIELDS, Fingerprint

__all__ = [
    "CACHE_FORMAT",
    "CacheEntry",
    "ModelInfo",
    "cache_dir",
    "entries",
    "find",
    "list_models",
    "store",
    "source_checksum",
]

CACHE_FORMAT = "carb-calibration-cache/1"
_ENTRY = "entry.json"


def cache_dir() -> Path:
    """The directory calibrations are kept in (``$CARB_CACHE_DIR`` or the platform's user cache)."""
    root = os.environ.get("CARB_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("carb")
    return Path(root) / "calibrations"


def source_checksum(model_dir: str | Path) -> str:
    """The sha256 of a model directory's files (names and bytes, sorted): what a cache entry was calibrated from."""
    d = Path(model_dir)
    h = hashlib.sha256()
    for f in sorted(p for p in d.rglob("*") if p.is_file() and p.suffix != ".duckdb"):
        h.update(str(f.relative_to(d)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One cached calibration.

    Attributes:
        path: the calibrated model's directory (load it with :func:`carb.load_model`).
        source: the source model's name as the user gave it.
        machine: the fingerprint of the machine it was calibrated on.
        created: when (UTC, ISO 8601).
        networks: how many networks (or configs) were measured for it.

    """

    path: Path
    source: str
    machine: Fingerprint
    created: str
    networks: int | None


def _entry_dir(checksum: str, machine: Fingerprint) -> Path:
    """One entry per source model (by content) and machine kind."""
    return cache_dir() / f"{checksum[:16]}-{machine.key()}"


def _same_kind(a: Fingerprint, b: Fingerprint) -> bool:
    return a.known and b.known and all(getattr(a, k) == getattr(b, k) for k in KIND_FIELDS)


def find(source: str, source_dir: str | Path, machine: Fingerprint) -> CacheEntry | None:
    """The cached calibration of a source model for this machine kind, if one is kept and sound.

    Args:
        source: the source model's name as the user gives it (``--model``).
        source_dir: its directory (its checksum keys the entry).
        machine: this machine's fingerprint (an unknown one never matches).

    Returns:
        The entry, or ``None`` (a broken or foreign entry warns in one line and is ignored).

    """
    if not machine.known:
        return None
    checksum = source_checksum(source_dir)  # reads every file of the source: once
    d = _entry_dir(checksum, machine)
    f = d / _ENTRY
    if not f.exists():
        return None
    try:
        doc = read_json(f)
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
            raise ValueError(f"format {doc.get('format') if isinstance(doc, dict) else type(doc).__name__!r}")
        fp = Fingerprint.from_dict(doc.get("machine"))
        if not _same_kind(fp, machine):
            raise ValueError("calibrated on another machine kind")
        if doc.get("source_sha256") != checksum:
            raise ValueError("calibrated from another version of the model")
        from carb.transfer.load import load_model

        load_model(d / "model")  # loads or raises: a broken entry is never used
        n = doc.get("networks")
        return CacheEntry(
            d / "model", str(doc.get("source")), fp, str(doc.get("created")), n if isinstance(n, int) else None
        )
    except Exception as e:  # noqa: BLE001 - any broken entry is ignored, whatever broke it
        warnings.warn(f"calibration cache: ignoring {d} ({type(e).__name__}: {e})", UserWarning, stacklevel=2)
        return None


def store(
    model_dir: str | Path, source: str, source_dir: str | Path, machine: Fingerprint, networks: int | None
) -> Path:
    """Keep a calibrated model in the cache for this machine kind (replacing an older entry whole).

    Args:
        model_dir: the calibrated model's directory (copied).
        source: the source model's name as the user gave it.
        source_dir: the source model's directory (its checksum keys the entry).
        machine: the fingerprint of the machine the K were measured on.
        networks: how many were measured.

    Returns:
        The entry's model directory.

    """
    checksum = source_checksum(source_dir)
    d = _entry_dir(checksum, machine)
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=d.parent))
    try:
        shutil.copytree(model_dir, tmp / "model", ignore=shutil.ignore_patterns("*.duckdb"))
        doc = {
            "format": CACHE_FORMAT,
            "source": source,
            "source_sha256": checksum,
            "machine": machine.to_dict(),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "networks": networks,
        }
        (tmp / _ENTRY).write_text(json.dumps(doc, indent=1))
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)  # whole or not at all: a crash leaves the old entry or a .tmp- folder
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return d / "model"


def entries() -> list[CacheEntry]:
    """Every sound entry of the calibration cache, whatever its machine (for listings; broken ones left out)."""
    root = cache_dir()
    out: list[CacheEntry] = []
    for f in sorted(root.glob(f"*/{_ENTRY}")) if root.is_dir() else []:
        try:
            doc = read_json(f)
            if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
                continue
            n = doc.get("networks")
            out.append(
                CacheEntry(
                    f.parent / "model",
                    str(doc.get("source")),
                    Fingerprint.from_dict(doc.get("machine")),
                    str(doc.get("created")),
                    n if isinstance(n, int) else None,
                )
            )
        except Exception:  # noqa: BLE001 - a listing skips what it cannot read; find() warns when it matters
            continue
    return out


@dataclass(frozen=True)
class ModelInfo:
    """One model :func:`load_model` can load by name or path.

    Attributes:
        name: what to pass to :func:`load_model` (a shipped name, or the directory).
        kind: ``network``, ``bundle`` or ``calibrated`` (:data:`MODEL_FILES`).
        where: ``shipped`` (with carb) or ``cache`` (your calibration cache, :mod:`carb.transfer.cache`).
        path: its directory.
        machine: the machine it was fitted or calibrated on, in words (``""`` where unknown).
        source: for a cached calibration, the model it was calibrated from.
        created: for a cached calibration, when (UTC, ISO 8601).
    """

    name: str
    kind: str
    where: str
    path: Path
    machine: str = ""
    source: str = ""
    created: str = ""


def list_models() -> list[ModelInfo]:
    """The models carb ships and those kept in your calibration cache, each loadable with :func:`load_model`.

    Reads the models' own files (never their code: there is none). A cached calibration applies to the machine
    kind it names; ``carb predict --module`` picks it up there by itself.
    """
    from carb.netmodel import SHIPPED, resolve
    from carb.netmodel.domain import fingerprint_of

    from .load import load_model, model_kind

    out: list[ModelInfo] = []
    for name in SHIPPED:
        d = resolve(name)
        fp = fingerprint_of(load_model(name))
        out.append(ModelInfo(name, "network", "shipped", d, fp.describe() if fp is not None else ""))
    for e in entries():
        kind = model_kind(e.path) or "network"
        out.append(ModelInfo(str(e.path), kind, "cache", e.path, e.machine.describe(), e.source, e.created))
    return out
