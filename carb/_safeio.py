"""Safe reading and writing of the files CARB touches: one reader with limits, writers that rename into place.

A model folder, a screen folder, a space file or a store may come from anyone. Python's JSON and TOML parsers
recurse once per level of nesting, so ``[[[[...]]]]`` a few thousand levels deep ends in a ``RecursionError`` (or a
``MemoryError``) far from the file that caused it, and the code that walks a parsed document recurses too. Every
such document is read here instead: one of more than :data:`MAX_JSON_BYTES` (JSON) or :data:`MAX_TOML_BYTES`
(TOML) bytes, or nested more than :data:`MAX_DEPTH` levels, is refused with a :class:`DocumentError` naming it.

What CARB writes goes to a private name beside its destination and is renamed into place once whole
(:func:`atomic_file`, :func:`atomic_dir`): a reader never sees half a file, and a failure leaves the old one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_TOML_BYTES",
    "DocumentError",
    "read_json",
    "loads_json",
    "read_toml",
    "loads_toml",
    "read_text",
    "atomic_file",
    "atomic_dir",
]

#: The deepest nesting of arrays and objects (tables) accepted. CARB's own documents nest 6 levels at most (a model
#: manifest); 32 leaves room for growth and keeps every recursive walk far from Python's recursion limit (1,000).
MAX_DEPTH = 32
#: The largest JSON document accepted, in bytes (64 MiB). CARB's documents are kilobytes: manifests, calibrations,
#: network models, screen summaries.
MAX_JSON_BYTES = 64 * 2**20
#: The largest TOML document accepted, in bytes (1 MiB): a space file is a few hundred bytes of grids and
#: constraints written by hand.
MAX_TOML_BYTES = 2**20


class DocumentError(ValueError):
    """A JSON or TOML document that is too large, nested too deeply or not valid: the message names it."""


def _check_depth(doc: Any, what: str, max_depth: int) -> None:
    """Refuse a parsed document nested deeper than ``max_depth`` levels (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > max_depth:
            raise DocumentError(f"{what}: nested deeper than {max_depth} levels (the limit)")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def _check_size(n: int, what: str, max_bytes: int) -> None:
    if n > max_bytes:
        raise DocumentError(f"{what}: {n:,} bytes, above the limit of {max_bytes:,} bytes")


def read_text(path: str | os.PathLike, max_bytes: int) -> str:
    """The text of ``path`` (UTF-8), refused beyond ``max_bytes`` bytes without reading more than that.

    Raises:
        OSError: the file cannot be read.
        DocumentError: the file is larger than ``max_bytes`` or not UTF-8.
    """
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    _check_size(len(data), str(path), max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DocumentError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def loads_json(
    text: str | bytes, what: str = "JSON document", max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """Parse JSON ``text`` within the limits; ``what`` names it in errors.

    Raises:
        DocumentError: the text is longer than ``max_bytes`` (characters, for a ``str``), nested deeper than
            ``max_depth`` levels, or not valid JSON.
    """
    _check_size(len(text), what, max_bytes)
    try:
        doc = json.loads(text)
    except (RecursionError, MemoryError):
        raise DocumentError(f"{what}: nested deeper than {max_depth} levels (the limit)") from None
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        raise DocumentError(f"{what}: not valid JSON ({' '.join(str(e).split())[:200]})") from None
    _check_depth(doc, what, max_depth)
    return doc


def read_json(path: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Read and parse the JSON file ``path`` within the limits.

    Raises:
        OSError: the file cannot be read.
        DocumentError: see :func:`loads_json`; the message names the file.
    """
    return loads_json(read_text(path, max_bytes), str(path), max_bytes, max_depth)


def loads_toml(
    text: str, what: str = "TOML document", max_bytes: int = MAX_TOML_BYTES, max_depth: int = MAX_DEPTH
) -> dict[str, Any]:
    """Parse TOML ``text`` within the limits; ``what`` names it in errors.

    Raises:
        DocumentError: the text is longer than ``max_bytes`` characters, nested deeper than ``max_depth`` levels,
            or not valid TOML.
    """
    import tomllib

    _check_size(len(text), what, max_bytes)
    try:
        doc = tomllib.loads(text)
    except (RecursionError, MemoryError):
        raise DocumentError(f"{what}: nested deeper than {max_depth} levels (the limit)") from None
    except tomllib.TOMLDecodeError as e:
        raise DocumentError(f"{what}: not valid TOML ({e})") from None
    _check_depth(doc, what, max_depth)
    return doc


def read_toml(path: str | os.PathLike, max_bytes: int = MAX_TOML_BYTES, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Read and parse the TOML file ``path`` within the limits.

    Raises:
        OSError: the file cannot be read.
        DocumentError: see :func:`loads_toml`; the message names the file.
    """
    return loads_toml(read_text(Path(path), max_bytes), str(path), max_bytes, max_depth)


def _staging_name(path: Path, suffix: str = "") -> Path:
    """A private name beside ``path`` for what is written before it is renamed into place."""
    import uuid

    return path.parent / f".carb-{uuid.uuid4().hex[:12]}.tmp{suffix}"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Write a file under a private name beside ``path`` and rename it into place when the block ends without error.

    Yields the private name (with ``path``'s suffix, for writers that choose the format by it). A reader never sees a
    half-written file, and a failure leaves ``path`` as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _staging_name(path, path.suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Write a folder's files into a private folder beside ``path`` and move them into place when the block ends.

    Yields the private folder. A new (or empty) ``path`` is the private folder renamed, in one step; into an
    existing folder each entry is renamed into place once all are written (a folder entry replaces the one of the
    same name whole), other files there are kept. A failure leaves ``path`` as it was.
    """
    import shutil

    path.parent.mkdir(parents=True, exist_ok=True)
    stage = _staging_name(path)
    stage.mkdir()
    try:
        yield stage
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        if not path.exists():
            stage.rename(path)
            return
        for entry in sorted(stage.iterdir()):
            target = path / entry.name
            if target.is_dir() and not target.is_symlink():
                old = _staging_name(path)
                target.rename(old)
                entry.rename(target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(entry, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
