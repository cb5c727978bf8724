"""An ONNX file as a family: measured by ONNX Runtime through the ordinary pipeline, priced from its graph.

An :class:`OnnxConfig` names a ``.onnx`` file, the input shape it runs at, the precision its
features count, and the file's SHA-256. :data:`ONNX` is its :class:`carb.families.Family`
record (family name ``onnx``), registered with the built-in families.

The file's content is part of the config: ``sha256`` is read from the file when a config is
made without it, so a file exported again under the same name is a new config (a new id),
and the measurement worker refuses a file whose content no longer matches. A store row keeps
the hash, so reading a store never reads the file.

The runtime is ONNX Runtime, not PyTorch eager: ``OnnxConfig.runtime`` names it, and the CPU
backend measures such a config with an ``InferenceSession`` on the CPU provider
(:mod:`carb.measure._onnx_worker`); the family has no torch module (:func:`build` refuses, so
another backend records the config as ``unsupported``). Measuring needs ``onnxruntime`` and
reading the graph ``onnx`` (``pip install 'carb[onnx]'``); :meth:`OnnxConfig.check_measurable`
says so in one line before a campaign starts.

Features are frozen at measurement, as for ``net`` rows (:mod:`carb.families.nets`):
:func:`measured_features` reads the graph with :func:`carb.graph.capture_onnx` once, when the
campaign stores the row, and :func:`carb.families.nets.features` reads them back from the rows.
Reading an ONNX file never runs code: it is protobuf, parsed by ``onnx``; ONNX Runtime loads
the same file with no custom-operator library registered.

In a configs file (``carb characterize --configs``), an ``onnx`` row gives ``onnx`` (the path,
relative to the directory the campaign runs in) and either ``input_shape`` (``1x3x224x224``) or
``batch`` and ``input_size`` (a ``batch x 3 x size x size`` image), and ``precision``; the
columns ``batch``, ``input_size`` and ``precision`` are present in every configs file of
networks, empty where a row does not use them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

import pandas as pd

from carb.families import nets
from carb.families._base import PRECISIONS, Family, SpaceError, _as_int, _py, missing, row_parameters, stable_id

__all__ = [
    "FAMILY",
    "PARAMETERS",
    "RUNTIME",
    "INSTALL",
    "OnnxConfig",
    "ONNX",
    "build",
    "capture",
    "file_sha256",
    "measured_features",
    "runtime_missing",
]

FAMILY = "onnx"
PARAMETERS: tuple[str, ...] = ("onnx", "input_shape", "precision", "sha256")
#: the runtime an ``onnx`` row is measured with
RUNTIME = "onnxruntime"
#: the one line printed where ONNX Runtime or the onnx package is missing
INSTALL = "measuring ONNX files needs ONNX Runtime and the onnx package: pip install 'carb[onnx]'"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, as 64 lowercase hex digits (read in 1 MiB blocks).

    Raises:
        SpaceError: the file does not exist or cannot be read (one line naming it).
    """
    p = Path(path)
    if not p.is_file():
        raise SpaceError(f"onnx: {p}: no such file")
    h = hashlib.sha256()
    try:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise SpaceError(f"onnx: {p}: cannot be read ({e.strerror or e})") from None
    return h.hexdigest()


def runtime_missing(packages: tuple[str, ...] = (RUNTIME, "onnx")) -> str | None:
    """:data:`INSTALL` where one of ``packages`` (ONNX Runtime and ``onnx``) is not importable here; else ``None``."""
    for name in packages:
        if importlib.util.find_spec(name) is None:
            return INSTALL
    return None


def _shape_text(v: Any) -> str:
    """An input shape as ``AxBxCxD`` text, from text or a sequence of positive integers."""
    from carb import graph

    v = _py(v)
    try:
        dims = graph.parse_shape(v) if isinstance(v, str) else tuple(_as_int("input_shape", d) for d in v)
    except (graph.CaptureError, TypeError):
        raise SpaceError(f"input_shape: {v!r} is not a shape such as 1x3x224x224") from None
    if not dims or min(dims) < 1:
        raise SpaceError(f"input_shape: {v!r}: every dimension must be a positive integer")
    return "x".join(map(str, dims))


@dataclass(frozen=True)
class OnnxConfig:
    """One ONNX file and the input it runs at.

    Attributes:
        onnx: path of the ``.onnx`` file (external data, if any, in its folder).
        input_shape: the input's shape, ``AxBxCxD`` (e.g. ``1x3x224x224``): fixes the graph's
            dynamic dimensions; the first dimension is the batch.
        precision: ``fp32``, ``fp16`` or ``bf16``: the element size the features count (the
            runtime runs the file's own types).
        sha256: the file's SHA-256 (64 hex digits); read from the file when empty.
    """

    onnx: str
    input_shape: str
    precision: str = "fp32"
    sha256: str = ""
    #: the runtime the backends measure this config with (not PyTorch eager)
    runtime: ClassVar[str] = RUNTIME

    def __post_init__(self) -> None:
        """Normalise the fields and check the config; raises :class:`SpaceError` when it is invalid."""
        path = _py(self.onnx)
        if not isinstance(path, str) or not path.strip():
            raise SpaceError(f"onnx: {path!r} is not a file path")
        object.__setattr__(self, "onnx", path)
        object.__setattr__(self, "input_shape", _shape_text(self.input_shape))
        if self.precision not in PRECISIONS:
            raise SpaceError(f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})")
        digest = _py(self.sha256)
        if missing(digest) or digest == "":
            digest = file_sha256(path)
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
            raise SpaceError(f"sha256: {digest!r} is not 64 hex digits")
        object.__setattr__(self, "sha256", digest.lower())

    @property
    def dims(self) -> tuple[int, ...]:
        """The input shape as integers."""
        return tuple(int(d) for d in self.input_shape.split("x"))

    @property
    def batch(self) -> int:
        """The input's first dimension. Units: images (samples)."""
        return self.dims[0]

    @property
    def input_size(self) -> int:
        """The input's last dimension (an image's width). Units: px."""
        return self.dims[-1]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict: ``family`` (``"onnx"``) and the parameters (the canonical form)."""
        return {
            "family": FAMILY,
            "onnx": self.onnx,
            "input_shape": self.input_shape,
            "precision": self.precision,
            "sha256": self.sha256,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OnnxConfig":
        """A config from a mapping of its parameters.

        ``batch`` and ``input_size`` stand for ``input_shape`` ``batch x 3 x input_size x input_size``; given beside
        it, they must agree with it.

        Raises:
            SpaceError: a bad, missing or unknown key (one line).
        """
        d = {k: v for k, v in dict(d).items() if not missing(v)}
        if d.pop("family", FAMILY) != FAMILY:
            raise SpaceError(f"family: not {FAMILY}")
        batch, size = d.pop("batch", None), d.pop("input_size", None)
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        if "onnx" not in d:
            raise SpaceError("onnx: missing (the path of an .onnx file)")
        if "input_shape" not in d:
            if batch is None or size is None:
                raise SpaceError("input_shape: missing (e.g. 1x3x224x224, or give batch and input_size)")
            d["input_shape"] = (
                f"{_as_int('batch', batch)}x3x{_as_int('input_size', size)}x{_as_int('input_size', size)}"
            )
        cfg = cls(**d)
        if (batch is not None and _as_int("batch", batch) != cfg.batch) or (
            size is not None and _as_int("input_size", size) != cfg.input_size
        ):
            raise SpaceError(f"batch {batch} and input_size {size} disagree with input_shape {cfg.input_shape}")
        return cfg

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id of :meth:`to_dict` (the file's content included)."""
        return stable_id(self.to_dict())

    def label(self) -> str:
        """Short label: the file's name, input shape and precision."""
        return f"{Path(self.onnx).stem}-{self.input_shape}-{self.precision}"

    def check_measurable(self) -> None:
        """Check, before a campaign, that this machine can measure the config.

        ONNX Runtime and ``onnx`` are installed, the file still has its hash, and its graph reads at the input shape
        (:func:`capture`; no code runs).

        Raises:
            SpaceError: one line naming what is missing or wrong.
        """
        need = runtime_missing()
        if need:
            raise SpaceError(need)
        if file_sha256(self.onnx) != self.sha256:
            raise SpaceError(f"onnx: {self.onnx}: its content is not the one of sha256 {self.sha256[:12]}...")
        from carb import graph

        try:
            capture(self)
        except graph.CaptureError as e:
            raise SpaceError(str(e)) from None


def capture(config: OnnxConfig) -> Any:
    """:func:`carb.graph.capture_onnx` of a config's file at its input shape and precision."""
    from carb import graph

    return graph.capture_onnx(config.onnx, config.dims, config.precision)


def build(config: OnnxConfig | Mapping[str, Any]) -> Any:
    """Refuse: an ONNX file has no torch module; the CPU backend runs it with ONNX Runtime.

    Raises:
        NotImplementedError: always (a backend records the config as ``unsupported``).
    """
    raise NotImplementedError(
        "an onnx config is measured with ONNX Runtime by the CPU backend (--device cpu); it has no torch module"
    )


def measured_features(config: OnnxConfig) -> dict[str, float]:
    """The features of a config's graph, to store with its measured row (:data:`carb.families.nets.CAPTURED_COLUMNS`).

    Raises:
        carb.graph.CaptureError: the file does not read (one line naming it).
    """
    row = nets.captured_features(pd.DataFrame([config.to_dict()]), lambda _: config, capture)
    return {c: row[c].iloc[0].item() for c in nets.CAPTURED_COLUMNS}


def _from_row(row: Mapping[str, Any]) -> OnnxConfig:
    return OnnxConfig.from_dict(row_parameters(row, PARAMETERS + ("batch", "input_size")))


def _to_row(config: OnnxConfig) -> dict[str, Any]:
    """The flat row: the parameters, and ``batch`` and ``input_size`` of the input shape (the store's columns)."""
    return {**config.to_dict(), "batch": config.batch, "input_size": config.input_size}


ONNX = Family(
    name=FAMILY,
    config_type=OnnxConfig,
    from_row=_from_row,
    to_row=_to_row,
    build=build,
    features=nets.features,
    description="an ONNX file, measured with ONNX Runtime on the CPU",
    parameters=PARAMETERS,
    measured_features=measured_features,
)
