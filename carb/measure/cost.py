"""Measure what a network costs on this machine, with CARB's protocol: :func:`measure_cost`.

One call measures a config of any family, an ``nn.Module`` with its input, a builder spec (``file.py:build``) or
an ONNX file, on a device and thread count, each visit in a fresh worker process (:mod:`carb.measure.cpu`,
:mod:`carb.measure.cuda`): the repeat/stop protocol (:class:`~carb.measure.base.Protocol`), the speed sentinel
timed in alternation with the network (CPU), and the backend's memory definition. The answer is a
:class:`CostMeasurement`: latency, energy where the device has a counter, peak memory, their intervals, the
machine and the provenance.

For a block of code of your own rather than a network, see :class:`carb.measure.window.CostMonitor`.

Example:
    >>> import carb, torch                                                          # doctest: +SKIP
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU())       # doctest: +SKIP
    >>> m = carb.measure_cost(net, torch.randn(1, 3, 224, 224), threads=1)          # doctest: +SKIP
    >>> m.latency_ms_lo <= m.latency_ms <= m.latency_ms_hi                          # doctest: +SKIP
    True

A script that measures needs the usual ``if __name__ == "__main__":`` guard (the workers start from a
forkserver), and an ``nn.Module`` is sent to its worker pickled: its class must be importable (defined in a
module, or in the script itself); a class defined in a notebook is not: pass a builder spec instead.
"""

from __future__ import annotations

import hashlib
import io
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from carb.params import Interval, Options, validate_params

from .base import Measurement, Protocol

__all__ = ["CostMeasurement", "ModuleConfig", "measure_cost", "build_module_config"]

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class ModuleConfig:
    """An ``nn.Module`` held in memory, sent to a measurement worker pickled, with the shape it runs at.

    The worker rebuilds the network from ``payload`` after its memory baseline, so its weights count in the
    network's memory as a built config's do, and feeds it a random input of ``shape``.

    Attributes:
        payload: the module, pickled by :func:`torch.save`.
        shape: the input's shape, batch first.
        precision: ``fp32``, ``fp16`` or ``bf16`` (the worker casts the module and its input).
        name: a short name for labels.
        modules: the Python modules the module's classes live in; the worker imports them before its memory
            baseline, so their pages do not count as the network's memory.
        files: ``(module name, file path)`` of those modules that were loaded from a file under a name no import
            finds (a ``file.py:build`` spec's, or a script's own ``importlib`` load); the worker loads each file
            under its name before it unpickles the network.
    """

    payload: bytes = field(repr=False)
    shape: tuple[int, ...]
    precision: str = "fp32"
    name: str = "module"
    modules: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, module: Any, shape: tuple[int, ...], precision: str = "fp32") -> "ModuleConfig":
        """Pickle ``module`` for a worker.

        Raises:
            ValueError: (one line) the module cannot be pickled (a lambda, a local class, an open handle...).
        """
        import sys

        import torch

        for m in module.modules():
            kind = type(m)
            where = sys.modules.get(kind.__module__)
            for part in kind.__qualname__.split("."):
                where = getattr(where, part, None)
            if "<locals>" in kind.__qualname__ or where is not kind:
                raise ValueError(
                    f"module: class {kind.__qualname__} is not importable from {kind.__module__} (defined in a "
                    "function, a notebook or under `if __name__ == '__main__':`), so a measurement worker cannot "
                    "rebuild it; define it at the top level of a module or script, or pass a builder spec "
                    "'file.py:build'"
                )
        buf = io.BytesIO()
        try:
            torch.save(module, buf)
        except Exception as e:  # noqa: BLE001 - pickling fails with many types
            raise ValueError(
                f"module: cannot be sent to a measurement worker ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                "define its classes in an importable module or the script, or pass a builder spec 'file.py:build'"
            ) from None
        mods = sorted({type(m).__module__ for m in module.modules()} - {"builtins"})
        return cls(payload=buf.getvalue(), shape=tuple(shape), precision=precision, name=type(module).__name__,
                   modules=tuple(mods), files=_files_of(mods))  # fmt: skip

    @property
    def config_id(self) -> str:
        """A stable 16-hex-digit id of the module's bytes, shape and precision."""
        h = hashlib.sha256(self.payload)
        h.update(repr((self.shape, self.precision)).encode())
        return h.hexdigest()[:16]

    @property
    def batch(self) -> int:
        """The input's first dimension."""
        return self.shape[0]

    @property
    def input_size(self) -> int:
        """The input's last dimension."""
        return self.shape[-1]

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The input's shape."""
        return self.shape

    @property
    def builder(self) -> Any:
        """The worker's build function: :func:`build_module_config` (pickled by reference)."""
        return build_module_config

    def label(self) -> str:
        """``name-AxBxCxD-precision``."""
        return f"{self.name}-{'x'.join(map(str, self.shape))}-{self.precision}"

    def prepare(self) -> None:
        """Import the module's class modules (the worker calls this before its memory baseline)."""
        import importlib
        import sys

        from carb.graph.modules import import_file

        files = dict(self.files)
        for m in self.modules:
            try:
                if m in files and m not in sys.modules:
                    import_file(m, files[m])
                else:
                    importlib.import_module(m)
            except Exception:  # noqa: BLE001 - the rebuild says what is missing
                pass


def _files_of(names: list[str]) -> tuple[tuple[str, str], ...]:
    """``(name, file)`` of the loaded modules among ``names`` that no import by name would find again."""
    import importlib.machinery
    import sys

    out = []
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not path or name == "__main__" or "." in name:  # a package's module: imported through its package
            continue
        if importlib.machinery.PathFinder.find_spec(name) is None:  # not on sys.path under its name
            out.append((name, str(path)))
    return tuple(out)


def build_module_config(config: ModuleConfig) -> Any:
    """The network of a :class:`ModuleConfig`, rebuilt from its bytes in eval mode (a worker's build function)."""
    import torch

    # the bytes were pickled by this program's own parent process a moment ago (never read from a file)
    return torch.load(io.BytesIO(config.payload), weights_only=False).eval()


@dataclass(frozen=True)
class CostMeasurement:
    """What a network cost on this machine, measured.

    Attributes:
        target: the label of what was measured.
        device: ``cpu``, ``cuda:0``, ...
        threads: CPU threads of the worker (``None`` on a GPU).
        status: ``ok``, or why not (:data:`carb.measure.STATUSES`); ``message`` says more.
        message: empty when ok.
        latency_ms: median latency of one forward of the whole batch. Units: ms.
        latency_ms_lo, latency_ms_hi: the 95% interval of that median (within a visit: the order statistics'
            interval; over several visits: the widest of theirs). Units: ms.
        energy_j: net energy of one forward, where the device has a counter, else ``None``. Units: J.
        energy_j_lo, energy_j_hi: its 95% interval. Units: J.
        energy_missing_reason: why ``energy_j`` is ``None``.
        memory_mb: peak memory of inference by the backend's definition (``memory_definition``); the median
            over visits. Units: MB (10**6 bytes).
        memory_mb_lo, memory_mb_hi: the lowest and highest visit (equal with one visit). Units: MB.
        memory_definition: what ``memory_mb`` counts.
        sentinel_ms: the speed sentinel timed in alternation with the network (CPU): the machine's speed while it
            was measured (a larger value is a slower machine). Units: ms. ``None`` where not paired.
        visits: fresh worker processes the figures pool.
        machine: this machine, in words.
        fingerprint: this machine's fingerprint (:class:`carb.measure.fingerprint.Fingerprint`, as a dict).
        provenance: the backend's facts (device, software, protocol, allocator, energy sensor).
        measurements: each visit's raw :class:`~carb.measure.base.Measurement`.
    """

    target: str
    device: str
    threads: int | None
    status: str
    message: str = ""
    latency_ms: float | None = None
    latency_ms_lo: float | None = None
    latency_ms_hi: float | None = None
    energy_j: float | None = None
    energy_j_lo: float | None = None
    energy_j_hi: float | None = None
    energy_missing_reason: str | None = None
    memory_mb: float | None = None
    memory_mb_lo: float | None = None
    memory_mb_hi: float | None = None
    memory_definition: str = ""
    sentinel_ms: float | None = None
    visits: int = 1
    machine: str = ""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict, repr=False)
    measurements: list[Measurement] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """Whether every figure was measured (``status == "ok"``)."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The measurement as a JSON-ready dict."""
        return asdict(self)


def _is_module(obj: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(obj, torch.nn.Module)


def _shape_and_precision(input: Any, precision: str | None) -> tuple[tuple[int, ...], str]:
    """The input's shape and the precision to run at: the tensor's dtype unless ``precision`` says otherwise."""
    if input is None:
        raise ValueError("input: a network needs its input, a tensor or a shape such as (1, 3, 224, 224)")
    if hasattr(input, "shape") and hasattr(input, "dtype"):
        shape = tuple(int(d) for d in input.shape)
        dt = str(input.dtype).replace("torch.", "")
        if dt not in _DTYPES:
            raise ValueError(f"input: a {dt} tensor; CARB's workers feed a random float input (fp32, fp16 or bf16)")
        precision = precision or _DTYPES[dt]
    elif isinstance(input, str):
        from carb.graph import parse_shape

        shape = tuple(parse_shape(input))
    else:
        try:
            shape = tuple(int(d) for d in input)
        except (TypeError, ValueError):
            raise ValueError(f"input: {input!r} is not a tensor or a shape") from None
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"input: shape {shape} must have dimensions >= 1")
    return shape, precision or "fp32"


def _config_of(target: Any, input: Any, precision: str | None) -> Any:
    """The config a backend measures for a target: itself, a builder's, an ONNX file's, or an in-memory module's."""
    if hasattr(target, "config_id") and hasattr(target, "batch"):
        if input is not None:
            raise ValueError("input: a config fixes its own input (batch, input_size); leave input out")
        return target
    if _is_module(target):
        shape, prec = _shape_and_precision(input, precision)
        return ModuleConfig.of(target, shape, prec)
    if isinstance(target, (str, Path)) and str(target).lower().endswith(".onnx"):
        from carb.families.onnxfile import OnnxConfig

        shape, prec = _shape_and_precision(input, precision)
        if not Path(target).is_file():
            raise ValueError(f"target: {target}: no such ONNX file")
        return OnnxConfig(onnx=str(target), input_shape="x".join(map(str, shape)), precision=prec)
    if isinstance(target, str) and ":" in target:
        from carb.families.nets import NetConfig

        shape, prec = _shape_and_precision(input, precision)
        if len(shape) == 4 and shape[1] == 3 and shape[2] == shape[3]:
            return NetConfig(module=target, input_size=shape[2], batch=shape[0], precision=prec)
        from carb.families.nets import build

        # another input than a square RGB image: built here with its weights, sent to the worker pickled
        return ModuleConfig.of(build(NetConfig(module=target)), shape, prec)
    raise ValueError(
        f"target: {type(target).__name__} {str(target)[:60]!r} is not a config, an nn.Module, a builder spec "
        "('file.py:build' or 'pkg.mod:build') or an .onnx file"
    )


def _pool(config: Any, ms: list[Measurement], backend: Any, device: str, threads: int | None) -> CostMeasurement:
    """One :class:`CostMeasurement` from the visits of a config."""
    from .fingerprint import here
    from .sentinel import paired_sentinel_ms

    fp = replace(here(device), threads=threads) if device == "cpu" else here(device)
    prov = backend.provenance()
    base = dict(
        target=config.label(), device=device, threads=threads, visits=len(ms), machine=fp.describe(),
        fingerprint=fp.to_dict(), provenance=prov, measurements=ms,
        memory_definition=str(prov.get("memory_definition", "")),
    )  # fmt: skip
    bad = [m for m in ms if m.status != "ok"]
    if bad:
        return CostMeasurement(status=bad[0].status, message=bad[0].message, **base)

    def med_ci(stats: list[Any]) -> tuple[float | None, float | None, float | None]:
        if any(s is None for s in stats):
            return None, None, None
        med = statistics.median(s.median for s in stats)
        rel = [s.ci_rel if s.ci_rel is not None and math.isfinite(s.ci_rel) else 0.0 for s in stats]
        lo = min(s.median * (1 - r) for s, r in zip(stats, rel))
        hi = max(s.median * (1 + r) for s, r in zip(stats, rel))
        return med, lo, hi

    lat, lat_lo, lat_hi = med_ci([m.latency_ms for m in ms])
    en, en_lo, en_hi = med_ci([m.energy_j for m in ms])
    mem = [m.memory_mb for m in ms if m.memory_mb is not None]
    return CostMeasurement(
        status="ok",
        latency_ms=lat,
        latency_ms_lo=lat_lo,
        latency_ms_hi=lat_hi,
        energy_j=en,
        energy_j_lo=en_lo,
        energy_j_hi=en_hi,
        energy_missing_reason=None if en is not None else ms[0].energy_missing_reason,
        memory_mb=statistics.median(mem) if mem else None,
        memory_mb_lo=min(mem) if mem else None,
        memory_mb_hi=max(mem) if mem else None,
        sentinel_ms=paired_sentinel_ms([m.extra for m in ms]),
        **base,
    )


@validate_params(
    {
        "device": [str],
        "threads": [None, Interval(int, 1, None)],
        "precision": [None, Options({"fp32", "fp16", "bf16"})],
        "visits": [Interval(int, 1, 100)],
        "max_time_s": [Interval(float, 0.05, 3600)],
        "allocator": [Options({"default", "retain"})],
        "sentinel": [bool],
    }
)
def measure_cost(
    target: Any,
    input: Any = None,
    *,
    device: str = "cpu",
    threads: int | None = None,
    precision: str | None = None,
    visits: int = 1,
    max_time_s: float = 2.0,
    allocator: str = "default",
    sentinel: bool = True,
    protocol: Protocol | None = None,
) -> CostMeasurement:
    """Measure a network's latency, energy and peak memory on this machine with CARB's protocol.

    Args:
        target: what to measure: an ``nn.Module`` (with ``input``), a builder spec ``file.py:build`` or
            ``pkg.mod:build`` (with ``input``; its code is imported and run), the path of an ``.onnx`` file (with
            ``input``; run with ONNX Runtime), or a config of any family (:mod:`carb.families`; no ``input``).
        input: a tensor (its shape and dtype are used; the worker feeds a random tensor of that shape) or a shape
            such as ``(1, 3, 224, 224)`` or ``"1x3x224x224"``.
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads of the worker (``None``: 1); ignored on a GPU.
        precision: ``fp32``, ``fp16`` or ``bf16`` (default: the input tensor's dtype, else fp32).
        visits: fresh worker processes to measure in, one after another, pooled.
        max_time_s: sampling time of one visit. Units: s.
        allocator: the CPU worker's C allocator (:data:`carb.measure.cpu.ALLOCATORS`): ``default`` or
            ``retain`` (what CARB's network models were measured with).
        sentinel: time the CPU speed sentinel in alternation with the network, so ``sentinel_ms`` says how fast
            the machine was meanwhile (half of each visit's sampling time goes to that phase).
        protocol: the repeat/stop protocol (default: :meth:`Protocol.default_for` the device, with ``max_time_s``).

    Returns:
        The measurement (:class:`CostMeasurement`); a network that fails to run (out of memory, an exception, a
        timeout, a crash) comes back with that ``status`` and a ``message``, never raised.

    Raises:
        ValueError: (one line; :class:`carb.params.InvalidParameterError` for a parameter's rule) a bad target,
            input, device or option.
        RuntimeError: a device that is absent or whose worker cannot start.
    """
    from . import get_backend
    from .sentinel import CPU_SENTINEL

    config = _config_of(target, input, precision)
    d = device.strip().lower()
    proto = protocol or replace(Protocol.default_for(d), max_time_s=max_time_s)
    opts: dict[str, Any] = {"threads": threads or 1, "allocator": allocator} if d == "cpu" else {"lock_clocks": False}
    with get_backend(d, protocol=proto, **opts) as backend:
        if d == "cpu" and sentinel and getattr(config, "runtime", None) is None:
            backend.paired_sentinel = CPU_SENTINEL.pairing()  # type: ignore[attr-defined]
        ms = [backend.measure(config) for _ in range(visits)]
        return _pool(config, ms, backend, d, (threads or 1) if d == "cpu" else None)
