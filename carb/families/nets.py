"""Any network a user names, as a family: measured by the ordinary pipeline like a grid config.

A :class:`NetConfig` is an importable builder, spelled as for ``carb predict --module``
(``pkg.mod:callable`` or ``path/to/file.py:callable``; a callable is called without
arguments and returns a ``torch.nn.Module``), and how it is run: square input size, batch,
precision. :data:`NET` is its :class:`carb.families.Family` record. It is a built-in
family (:mod:`carb.families` registers it); a fresh measurement worker receives the build
function with the job (pickled by reference).

The builder is imported in the process that builds the network, so a file spec must be
readable from the directory the campaign runs in (store an absolute path for campaigns run
elsewhere, e.g. on Ray).

Features are frozen at measurement: :func:`measured_features` captures the network
(:func:`carb.graph.capture` on the meta device) once, when the campaign stores its row, and
the row keeps them (:data:`CAPTURED_COLUMNS`). :func:`features` reads them back from the rows
and never imports the builder, so reading a dataset or a store runs no code named in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from carb.families._base import (
    PRECISIONS,
    Family,
    SpaceError,
    _as_int,
    _py,
    row_parameters,
    run_limits_problem,
    stable_id,
)

__all__ = [
    "FAMILY",
    "PARAMETERS",
    "NetConfig",
    "NET",
    "CAPTURED_COLUMNS",
    "build",
    "capture",
    "captured_features",
    "features",
    "measured_features",
    "read_networks",
]

FAMILY = "net"
PARAMETERS: tuple[str, ...] = ("module", "input_size", "batch", "precision")
#: the features a capture gives (:func:`carb.graph.capture_features`: FLOP, count, B, B, B, count)
CAPTURED_COLUMNS: tuple[str, ...] = (
    "flops",
    "params",
    "model_bytes",
    "input_bytes",
    "live_activation_bytes",
    "n_layers",
)


@dataclass(frozen=True)
class NetConfig:
    """One user network and how it is run.

    Attributes:
        module: ``pkg.mod:callable`` or ``path/to/file.py:callable`` (see the module docstring).
        input_size: input height = width. Units: px.
        batch: images per forward (inputs are ``batch x 3 x input_size x input_size``).
        precision: ``fp32``, ``fp16`` or ``bf16``.
    """

    module: str
    input_size: int = 224
    batch: int = 1
    precision: str = "fp32"

    def __post_init__(self) -> None:
        """Normalise the fields and check the config; raises :class:`SpaceError` when it is invalid."""
        m = _py(self.module)
        if not isinstance(m, str) or ":" not in m or not m.rpartition(":")[0] or not m.rpartition(":")[2]:
            raise SpaceError(f"module: {m!r} is not pkg.module:callable or file.py:callable")
        object.__setattr__(self, "module", m)
        for name in ("input_size", "batch"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        if self.precision not in PRECISIONS:
            raise SpaceError(f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})")
        if self.batch < 1 or self.input_size < 1:
            raise SpaceError("batch and input_size must be >= 1")
        problem = run_limits_problem(self.input_size, self.batch, 1)
        if problem:
            raise SpaceError(problem)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict: ``family`` (``"net"``) and the parameters."""
        return {
            "family": FAMILY,
            "module": self.module,
            "input_size": self.input_size,
            "batch": self.batch,
            "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NetConfig":
        """A config from a mapping of its parameters; raises :class:`SpaceError` on a bad or missing key."""
        d = dict(d)
        if d.pop("family", FAMILY) != FAMILY:
            raise SpaceError(f"family: not {FAMILY}")
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        if "module" not in d:
            raise SpaceError("module: missing (pkg.module:callable or file.py:callable)")
        return cls(**d)

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id of :meth:`to_dict`."""
        return stable_id(self.to_dict())

    def label(self) -> str:
        """Short label: the builder's name, input size, batch and precision."""
        name = self.module.rpartition(":")[2]
        return f"{name}-i{self.input_size}-b{self.batch}-{self.precision}"

    def prepare(self) -> None:
        """Import the builder's module.

        The measurement worker calls this before its memory baseline, so the imported libraries are not counted as
        inference memory.

        Raises:
            carb.graph.CaptureError: the spec does not import (one line).
        """
        from carb import graph

        graph.resolve_module(self.module)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """``(batch, 3, input_size, input_size)``."""
        return (self.batch, 3, self.input_size, self.input_size)


def build(config: NetConfig | Mapping[str, Any]) -> Any:
    """The network of a config with real weights on the CPU, in eval mode.

    Its weights are fp32 unless the builder chose otherwise: the measurement worker casts it to the config's precision.

    Raises:
        carb.graph.CaptureError: the spec does not import or does not give a module (one line).
    """
    import copy

    import torch

    from carb import graph

    cfg = config if isinstance(config, NetConfig) else NetConfig.from_dict(config)
    obj = graph.resolve_module(cfg.module)
    if isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj).eval()  # the importer's object stays as it was
    return graph.build_module(obj, f"module {cfg.module!r}: {cfg.module.rpartition(':')[2]}()").eval()


def capture(config: NetConfig) -> Any:
    """:func:`carb.graph.capture` of a config's network, built on the meta device."""
    from carb import graph

    return graph.capture(graph.load_module(config.module), config.input_shape, config.precision)


def captured_features(
    df: pd.DataFrame, from_row: Callable[[Mapping[str, Any]], Any], capture_config: Callable[[Any], Any]
) -> pd.DataFrame:
    """Captured features of a family's rows, from :func:`carb.graph.capture` on the meta device.

    The features are ``flops``, ``params``, ``model_bytes``, ``input_bytes``, ``live_activation_bytes`` and
    ``n_layers``.

    Args:
        df: the family's rows.
        from_row: the family's config of a row.
        capture_config: the family's :func:`carb.graph.capture` of a config.

    Returns:
        A copy of ``df`` with the captured columns.
    """
    from carb import graph

    return graph.capture_features(df, lambda r: capture_config(from_row(r)))


def measured_features(config: NetConfig) -> dict[str, float]:
    """The features of a config's network, to store with its measured row (:data:`CAPTURED_COLUMNS`).

    Imports and calls the user's builder (on the meta device): only a campaign that measures the network calls it.

    Raises:
        carb.graph.CaptureError: the spec does not import or does not give a module (one line).
    """
    row = captured_features(pd.DataFrame([config.to_dict()]), lambda _: config, capture)
    return {c: row[c].iloc[0].item() for c in CAPTURED_COLUMNS}


def features(df: pd.DataFrame) -> pd.DataFrame:
    """The features of ``net`` rows, as stored with each row when it was measured.

    Nothing is imported or built: a row without stored features (its network never built, or measured by a carb that
    did not store them) keeps them missing (NaN).

    Returns:
        A copy of ``df`` with the :data:`CAPTURED_COLUMNS`, numeric.
    """
    out = df.copy()
    for c in CAPTURED_COLUMNS:
        out[c] = pd.to_numeric(df[c], errors="coerce").astype(float) if c in df.columns else float("nan")
    return out


def read_networks(path: str | Path, onnx: Callable[[str, str, str], Any] | None = None) -> list[Any]:
    """Networks from a text file, one per line: ``SPEC INPUT [PRECISION]``.

    For example ``torchvision.models:resnet18 1x3x224x224 fp32`` (``INPUT`` is ``BATCHx3xSIZExSIZE``; precision
    ``fp32`` by default); blank lines and ``#`` comments are skipped. With ``onnx``, a ``SPEC`` ending in ``.onnx``
    is an ONNX file, made into a config by ``onnx(path, input, precision)`` (any ``INPUT`` shape; see
    :func:`carb.netmodel.read_networks`, which passes :class:`carb.families.onnxfile.OnnxConfig`).

    Raises:
        SpaceError: an unreadable file or a malformed line (one line naming the line).
        OSError: the file cannot be read.
    """
    from carb import graph

    p = Path(path)
    if not p.is_file():
        raise SpaceError(f"{p}: no such file")
    out: list[Any] = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        try:
            if len(parts) not in (2, 3):
                raise SpaceError(f"expected SPEC INPUT [PRECISION], got {len(parts)} fields")
            if onnx is not None and parts[0].lower().endswith(".onnx"):
                out.append(onnx(parts[0], parts[1], parts[2] if len(parts) == 3 else "fp32"))
                continue
            try:
                dims = graph.parse_shape(parts[1])
            except graph.CaptureError:
                dims = ()
            if len(dims) != 4 or dims[1] != 3 or dims[2] != dims[3]:
                raise SpaceError(f"input {parts[1]!r}: expected BATCHx3xSIZExSIZE (square RGB), e.g. 1x3x224x224")
            out.append(NetConfig(parts[0], dims[2], dims[0], parts[2] if len(parts) == 3 else "fp32"))
        except SpaceError as e:
            raise SpaceError(f"{p}, line {n}: {e}") from None
    return out


def _from_row(row: Mapping[str, Any]) -> NetConfig:
    return NetConfig.from_dict(row_parameters(row, PARAMETERS))


NET = Family(
    name=FAMILY,
    config_type=NetConfig,
    from_row=_from_row,
    to_row=lambda c: c.to_dict(),
    build=build,
    features=features,
    description="any network a user names (pkg.mod:callable or file.py:callable)",
    parameters=PARAMETERS,
    measured_features=measured_features,
)
