"""Importing user code: a ``--module`` spec -> a ``torch.nn.Module``, built on the meta device."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Iterator

from carb.graph.table import CaptureError
from carb.graph.trace import gc_paused


def load_module(spec: str) -> Any:
    """The module a ``--module`` spec names, built on the meta device.

    The spec is ``pkg.mod:callable`` (an importable callable) or ``path/to/file.py:callable``;
    a callable is called without arguments and must return a ``torch.nn.Module`` (an
    ``nn.Module`` object itself is taken as it is). It is built under
    ``torch.device("meta")``, so no weights are allocated; a builder that cannot run on the
    meta device is built on the CPU instead.

    Args:
        spec: ``pkg.mod:callable`` or ``path/to/file.py:callable``.

    Returns:
        The ``torch.nn.Module``.

    Raises:
        CaptureError: a malformed spec, an import that fails, a missing name, or a callable
            that does not return a module (one line naming the cause).

    """
    return build_meta(resolve_module(spec), f"--module {spec!r}: {str(spec).rpartition(':')[2]}()")


def import_file(name: str, path: str | Path) -> Any:
    """The Python file ``path`` imported as the module ``name`` (kept in ``sys.modules``; ``None``: not importable).

    Raises:
        Exception: whatever the file's own code raises (it is then not kept).
    """
    import importlib.util
    import sys

    s = importlib.util.spec_from_file_location(name, path)
    if s is None or s.loader is None:
        return None
    module = importlib.util.module_from_spec(s)
    sys.modules[name] = module
    try:
        s.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def resolve_module(spec: str) -> Any:
    """The object a ``--module`` spec names, imported but not called.

    Args:
        spec: ``pkg.mod:callable`` or ``path/to/file.py:callable`` (see :func:`load_module`).

    Returns:
        A ``torch.nn.Module`` or a callable.

    Raises:
        CaptureError: a malformed spec, an import that fails, a missing name, or an object
            that is neither a module nor callable (one line naming the cause).

    """
    import hashlib
    import importlib

    import torch

    mod_name, sep, attr = str(spec).rpartition(":")
    if not sep or not mod_name or not attr:
        raise CaptureError(f"--module {spec!r}: expected pkg.module:callable or file.py:callable")
    try:
        if mod_name.endswith(".py") or "/" in mod_name:
            path = Path(mod_name)
            if not path.is_file():
                raise CaptureError(f"--module {spec!r}: no such file {mod_name}")
            # a name of the file's path alone (not Python's salted hash()): a measurement worker that gets
            # one of its classes pickled imports the file again under the same name
            name = f"_carb_user_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}"
            module = import_file(name, path)
            if module is None:
                raise CaptureError(f"--module {spec!r}: cannot import {mod_name}")
        else:
            module = importlib.import_module(mod_name)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's import: any error, one line
        raise CaptureError(
            f"--module {spec!r}: importing {mod_name} failed ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        ) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CaptureError(f"--module {spec!r}: {mod_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, torch.nn.Module) and not callable(obj):
        raise CaptureError(f"--module {spec!r}: {attr} is neither a torch.nn.Module nor a callable")
    return obj


_INIT_LOCK = threading.RLock()  # re-entrant: a builder may build sub-networks through this too


@contextlib.contextmanager
def skip_meta_init() -> Iterator[None]:
    """Skip ``torch.nn.init``'s initialisers on meta tensors while active.

    The in-place initialisers (``kaiming_uniform_``, ``normal_``, ``ones_``, ...) return a
    **meta** tensor untouched: it has no values, and on meta they run through slow Python
    decompositions (1.5-3x a network's build time). Any other tensor is initialised as
    usual, so a thread building real weights meanwhile is unaffected; builds under this
    context are serialised (re-entrant).
    """
    import torch.nn.init as init

    def skipping(f: Any) -> Any:
        def g(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            return tensor if getattr(tensor, "is_meta", False) else f(tensor, *args, **kwargs)

        return g

    with _INIT_LOCK:
        names = [n for n in dir(init) if n.endswith("_") and not n.startswith("_") and callable(getattr(init, n))]
        saved = {n: getattr(init, n) for n in names}
        try:
            for n, f in saved.items():
                setattr(init, n, skipping(f))
            yield
        finally:
            for n, f in saved.items():
                setattr(init, n, f)


@gc_paused
def build_meta(obj: Any, label: str = "the builder") -> Any:
    """A module from ``obj`` (a module or a builder), built on the meta device.

    ``obj`` itself if it is a ``torch.nn.Module``; else it is called (no arguments) under
    ``torch.device("meta")``, so no weights are allocated (a builder that cannot run on the
    meta device is called on the CPU instead), and must return a module.

    Args:
        obj: a ``torch.nn.Module`` or a zero-argument callable returning one.
        label: how error messages name it.

    Returns:
        The ``torch.nn.Module``.

    Raises:
        CaptureError: the call fails, or returns something else than a module (one line
            starting with ``label``).

    """
    return build_module(obj, label, meta=True)


def build_module(obj: Any, label: str = "the builder", *, meta: bool = False) -> Any:
    """A module from ``obj`` (a module or a builder), with real weights or on meta.

    ``obj`` itself if it is a ``torch.nn.Module``; else it is called (no arguments) and must
    return a module: with real weights on the CPU, or with ``meta`` under
    ``torch.device("meta")`` first (:func:`build_meta`).

    Args:
        obj: a ``torch.nn.Module`` or a zero-argument callable returning one.
        label: how error messages name it.
        meta: build on the meta device first.

    Returns:
        The ``torch.nn.Module``.

    Raises:
        CaptureError: the call fails, or returns something else than a module (one line
            starting with ``label``).

    """
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        raise CaptureError(
            f"{label}: expected a torch.nn.Module or a callable returning one, got a {type(obj).__name__}"
        )
    built: Any = None
    if meta:
        try:
            with torch.device("meta"), skip_meta_init():
                built = obj()
        except Exception:  # noqa: BLE001 - some builders need real tensors; build them on the CPU
            meta = False
    if not meta:
        try:
            built = obj()
        except Exception as e:  # noqa: BLE001 - the user's builder: any error, one line
            raise CaptureError(f"{label} failed ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if not isinstance(built, torch.nn.Module):
        raise CaptureError(f"{label} returned a {type(built).__name__}, not a torch.nn.Module")
    return built
