"""Safe reading and writing of the files CARB touches: one reader with limits, writers that rename into place.

A model folder, a screen folder, a space file or a store may come from anyone. Python's JSON and TOML parsers
recurse once per level of nesting, so ``[[[[...]]]]`` a few thousand levels deep ends in a ``RecursionError`` (or a
``MemoryError``) far from the file that caused it, and the code that walks a parsed document recurses too. Every
such document is read here instead: one of more than :data:`MAX_JSON_BYTES` (JSON) or :data:`MAX_TOML_BYTES`
(TOML) bytes, or nested more than :data:`MAX_DEPTH` levels, is refused with a :class:`DocumentError` naming it.

What CARB writes goes to a private name beside its destination and is renamed into place once whole
(:func:`atomic_file`, :func:`atomic_dir`): a reader never sees half a file, and a failure leaves the old one.
An output is checked before any work (:func:`check_out_file`, :func:`check_out_dir`: writable, room enough, none of
the inputs) and locked while it is written (:func:`lock_output`), so that two writers never replace each other.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
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
    "NAME_MAX",
    "OutputError",
    "check_out_file",
    "check_out_dir",
    "refuse_inputs",
    "lock_output",
    "release_outputs",
    "size_mb",
    "write_json",
    "json_ready",
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
def created_whole(path: Path) -> Iterator[Path]:
    """Make a new file under a private name beside ``path`` and link it into place when the block ends without error.

    As :func:`atomic_file`, but never over a file at ``path``: one another process made meanwhile is kept. Yields the
    private name (with ``path``'s suffix).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _staging_name(path, path.suffix)
    try:
        yield tmp
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        for f in (tmp, Path(f"{tmp}.wal")):  # and a database's write-ahead log
            with contextlib.suppress(OSError):
                f.unlink()


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


# -- outputs checked before any work, and locked while they are written --------------------------------------------

#: the longest file name Linux, macOS and Windows file systems take (ext4, APFS, NTFS). Units: B.
NAME_MAX = 255


class OutputError(ValueError):
    """An output path refused before any work: one line naming the path and why."""


def _blocking_file(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists and is not a directory, if any."""
    for parent in path.absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _check_writable(path: Path, option: str, need_mb: float) -> None:
    """Refuse an output path that cannot be written or lacks ``need_mb`` MB of free space.

    The folder checked is ``path`` itself when it is an existing directory (a command writes into it), else its
    nearest existing ancestor (where the command creates what is missing).
    """
    import shutil
    import tempfile

    where = path.absolute() if path.is_dir() else next(p for p in path.absolute().parents if p.exists())
    try:  # an unnamed file (O_TMPFILE where the kernel has it): nothing is left in the folder
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write in {where} ({e.strerror or e})") from None
    free_mb = shutil.disk_usage(where).free / 1e6
    if free_mb < need_mb:
        raise OutputError(
            f"{option} {path}: {free_mb:.1f} MB free on the file system of {where}; it needs at least {need_mb:g} MB"
        )


def _check_path(path: Path, option: str, folder: bool, need_mb: float, inputs: Mapping[str, Any], lock: bool) -> None:
    """The checks :func:`check_out_file` and :func:`check_out_dir` share; ``folder``: the output is a directory."""
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    if long is not None:
        raise OutputError(
            f"{option} {path}: a name of {len(os.fsencode(long))} bytes, above the {NAME_MAX} file systems allow"
        )
    if not folder and path.is_dir():
        raise OutputError(f"{option} {path}: is a directory (give a file path)")
    if folder and path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: is a file (give a directory)")
    blocker = _blocking_file(path)
    if blocker is not None:
        raise OutputError(f"{option} {path}: {blocker} is a file, not a directory")
    _check_writable(path, option, need_mb)
    refuse_inputs(path, option, inputs, folder=folder)
    if lock:
        lock_output(path, option)


def check_out_file(
    path: Path, option: str = "out", need_mb: float = 1.0, inputs: Mapping[str, Any] | None = None, lock: bool = True
) -> None:
    """Refuse, before any work, an output file path that cannot be written.

    Refused: a name longer than file systems allow (255 bytes), a directory, a path under a file, a folder this
    process cannot write in, a file system with less than ``need_mb`` MB free, one of ``inputs``
    (:func:`refuse_inputs`), and, with ``lock``, a file another process is writing (:func:`lock_output`).

    Args:
        path: the output file.
        option: how the caller names the output in the error (the CLI: its flag, e.g. ``--out``).
        need_mb: the free space it needs (MB).
        inputs: what the caller reads, name -> a path, a list of paths, or None.
        lock: hold the output's lock until :func:`release_outputs`.

    Raises:
        OutputError: one line naming ``option`` and the path.
    """
    _check_path(Path(path), option, False, need_mb, inputs or {}, lock)


def check_out_dir(
    path: Path, option: str = "out", need_mb: float = 1.0, inputs: Mapping[str, Any] | None = None, lock: bool = True
) -> None:
    """Refuse, before any work, an output directory path that cannot be written.

    As :func:`check_out_file`, for a folder: refused also when it is a file, and when it holds or lies in one of
    ``inputs``.

    Raises:
        OutputError: one line naming ``option`` and the path.
    """
    _check_path(Path(path), option, True, need_mb, inputs or {}, lock)


def refuse_inputs(path: Path, option: str, inputs: Mapping[str, Any], folder: bool) -> None:
    """Refuse an output that would overwrite what the caller reads.

    Refused: an output that is one of ``inputs`` (name -> a path, a list of paths, or None), and an output folder
    (``folder``) that holds one or lies inside one. Paths are compared after resolving symbolic links; an input that
    names no existing file or folder (a shipped dataset's or a space's name) cannot be overwritten and is skipped.

    Raises:
        OutputError: one line naming ``option``, the path and the input.
    """
    out = Path(os.path.realpath(path))
    for flag, given in inputs.items():
        for value in given if isinstance(given, (list, tuple)) else [given]:
            if value is None or not Path(value).exists():
                continue
            src = Path(os.path.realpath(value))
            if src == out:
                raise OutputError(
                    f"{option} {path}: is also {flag} {value}; writing it would destroy that input (give another path)"
                )
            if folder and out in src.parents:
                raise OutputError(
                    f"{option} {path}: holds {flag} {value}; writing the folder could destroy it (give another path)"
                )
            if src.is_dir() and src in out.parents:
                raise OutputError(f"{option} {path}: lies inside {flag} {value}; writing there would change that input")


#: the outputs this process holds the lock of: resolved path -> (lock file, its descriptor, folders made for it)
_LOCKS: dict[Path, tuple[Path, int, list[Path]]] = {}


def _lock_file(path: Path) -> Path:
    """The lock file of an output: hidden, beside it (a short name of its own where its name is long)."""
    import hashlib

    name = f".{path.name}.lock"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".carb-{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]}.lock"
    return path.parent / name


def lock_output(path: Path, option: str = "out") -> None:
    """Hold, until :func:`release_outputs`, the exclusive lock of an output; refuse one another process holds.

    The lock is ``flock`` on a hidden file beside the output (``.NAME.lock``), removed on release; a process that
    dies drops its lock with it. Two commands writing one output would both report success while one's result
    replaced the other's: the second is refused in one line. Folders made to hold the lock file are removed again
    when left empty.

    Raises:
        OutputError: the lock is held, or its folder cannot be made.
    """
    import fcntl

    key = Path(os.path.realpath(path))
    if key in _LOCKS:
        return
    made = [p for p in reversed(key.parents) if not p.exists()]
    try:
        key.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot create its folder ({e.strerror or e})") from None
    lock = _lock_file(key)
    for _ in range(10):  # a lock file removed by the holder between our open and flock is retried
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            _remove_empty(made)
            raise OutputError(
                f"{option} {path}: another carb command is writing it (it holds {lock}); wait for it to end or "
                "give another path"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _LOCKS[key] = (lock, fd, made)
            return
        os.close(fd)
    raise OutputError(f"{option} {path}: its lock file {lock} keeps changing; try again")


def _remove_empty(folders: list[Path]) -> None:
    """Remove the ``folders`` (outermost first in the list) that are empty, innermost first."""
    for d in reversed(folders):
        with contextlib.suppress(OSError):
            d.rmdir()


def release_outputs() -> None:
    """Release every output lock this process holds: remove the lock files, then the folders made for them if empty.

    Each lock file is removed while still locked, so that no other process can take a lock on a file that is gone.
    """
    while _LOCKS:
        _, (lock, fd, made) = _LOCKS.popitem()
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
        _remove_empty(made)


def size_mb(path: Path) -> float:
    """The size of a file, or of every file under a folder, in MB (0 where nothing is): the room a copy needs."""
    path = Path(path)
    files = [path] if path.is_file() else list(path.rglob("*")) if path.is_dir() else []
    return sum(f.stat().st_size for f in files if f.is_file()) / 1e6


def json_ready(o: Any) -> Any:
    """A JSON-ready copy of ``o``: numpy scalars as Python numbers, tuples as lists, NaN and infinities as null."""
    import math

    if isinstance(o, dict):
        return {str(k): json_ready(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_ready(v) for v in o]
    if hasattr(o, "item") and type(o).__module__ == "numpy":  # a numpy scalar, without importing numpy
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` to ``path`` as indented JSON (:func:`json_ready`: NaN as null), renamed into place whole."""
    with atomic_file(Path(path)) as tmp:
        tmp.write_text(json.dumps(json_ready(doc), indent=2, allow_nan=False) + "\n")
