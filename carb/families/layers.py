"""The ``layers`` family: one layer of a CNN per config, for per-operator cost models.

A :class:`LayerConfig` is one operator at one shape: ``op`` (see :data:`OPS`), input
channels ``cin``, output channels ``cout``, input height = width ``input_size``, ``kernel``,
``stride``, ``groups``, ``batch`` and ``precision``. Measuring many of them with the
ordinary pipeline (``carb characterize --space layers``) gives the per-operator data the
network model (:mod:`carb.netmodel`) is fitted on; :func:`layer_frame` gives the same
closed-form columns as :func:`carb.graph.capture` gives for a layer of a traced network, so
one model prices both.

Operators and what their parameters mean (NCHW tensors, ``s = input_size``):

- ``conv``: ``nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups, bias=False)``
  on ``(batch, cin, s, s)``: dense (``groups=1``), grouped, depthwise (``groups == cin ==
  cout``) and pointwise (``kernel=1``). In a space grid ``cout = 0`` and ``groups = 0`` mean
  "equal to ``cin``" (a depthwise grid), resolved when the config is made;
- ``linear``: ``nn.Linear(cin, cout)`` on ``(batch, cin)`` (``s = 1``) or on tokens
  ``(batch, s*s, cin)``;
- ``matmul``: attention-style batched ``torch.matmul`` of ``(batch, groups, s*s, cin)`` by
  ``(batch, groups, cin, cout)`` (``groups`` = heads);
- ``bn``: ``nn.BatchNorm2d(cin)`` (eval); ``relu``, ``relu6``, ``hardswish``,
  ``hardsigmoid``, ``sigmoid``, ``silu``, ``gelu``: the activation modules (out of place) on
  ``(batch, cin, s, s)``;
- ``maxpool``, ``avgpool``: ``kernel``, ``stride``, ``padding = (kernel - 1) // 2``;
  ``gap``: ``nn.AdaptiveAvgPool2d(1)``;
- ``add``: ``x + y``, both ``(batch, cin, s, s)``; ``mul``: ``x * y`` with ``y`` of shape
  ``(batch, cin, 1, 1)`` (squeeze-excitation's scaling, broadcast);
- ``cat``: ``torch.cat`` along channels of ``(batch, cin, s, s)`` and ``(batch, cout, s, s)``
  (output ``cin + cout`` channels);
- ``copy``: channel shuffle of ``groups`` groups (view, transpose, ``contiguous`` copy,
  view): the only operator of it that costs is the copy;
- ``softmax``: over the last dimension of ``(batch, cin, s, s)``;
- ``se``: a whole squeeze-excitation block (global average pool, 1x1 conv ``cin -> cout``
  with bias, ReLU, 1x1 conv ``cout -> cin`` with bias, sigmoid, broadcast multiply): a
  composite, measured to check that the sum of its primitives' predictions holds.

Fields that an operator does not use are normalised (``kernel = stride = groups = 1``,
``cout = cin``) so that equal layers have equal ids.

The built module keeps its input tensors as buffers and ignores the tensor its ``forward``
receives (the measurement backends feed every family ``(batch, 3, s, s)``), so a timed
forward is this operator alone (plus one module call).

This module imports torch only when a module is built.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ._base import (
    BYTES_PER_ELEMENT,
    MAX_INPUT_SIZE,
    PRECISIONS,
    Family,
    SpaceError,
    _as_int,
    _py,
    init_weights,
    missing,
    own_parameters,
    run_limits_problem,
    stable_id,
)

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

__all__ = ["FAMILY", "OPS", "PARAMETERS", "LayerConfig", "build", "features", "layer_frame", "LAYER_COLUMNS", "LAYERS"]

FAMILY = "layers"

#: Operators of the family (see the module docstring).
OPS: tuple[str, ...] = (
    "conv",
    "linear",
    "matmul",
    "bn",
    "relu",
    "relu6",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "silu",
    "gelu",
    "maxpool",
    "avgpool",
    "gap",
    "add",
    "mul",
    "cat",
    "copy",
    "softmax",
    "se",
)
_ACTS = ("bn", "relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "softmax")
#: Operators whose ``cout`` is a free parameter.
_WITH_COUT = ("conv", "linear", "matmul", "cat", "se")
_WITH_KERNEL = ("conv", "maxpool", "avgpool")
_WITH_GROUPS = ("conv", "matmul", "copy")
#: Most channels (features) a layer may have: far above any real CNN's, low enough that
#: an absurd value is refused before anything is built or priced.
MAX_CHANNELS = 1_000_000

#: The parameters of a config (the fields of :class:`LayerConfig`).
PARAMETERS: tuple[str, ...] = ("op", "cin", "cout", "input_size", "kernel", "stride", "groups", "batch", "precision")


@dataclass(frozen=True)
class LayerConfig:
    """One layer and how it is run (see the module docstring for each operator).

    Attributes:
        op: one of :data:`OPS`.
        cin: input channels (features for ``linear``/``matmul``).
        cout: output channels (``0``: equal to ``cin``).
        input_size: input height = width (tokens side for ``linear``/``matmul``). Units: px.
        kernel: kernel side (``conv``, pools).
        stride: stride (``conv``, pools).
        groups: groups of a ``conv`` (``0``: depthwise, ``cin``), heads of a ``matmul``,
            shuffle groups of a ``copy``.
        batch: images per forward.
        precision: ``fp32``, ``fp16`` or ``bf16``.

    Raises:
        carb.families.space.SpaceError: (one line) an invalid value.
    """

    op: str
    cin: int
    cout: int = 0
    input_size: int = 1
    kernel: int = 1
    stride: int = 1
    groups: int = 1
    batch: int = 1
    precision: str = "fp32"

    def __post_init__(self) -> None:
        """Normalise the fields and check the op; raises :class:`SpaceError` on an unknown one."""
        object.__setattr__(self, "op", _py(self.op))
        for name in ("cin", "cout", "input_size", "kernel", "stride", "groups", "batch"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        op = self.op
        if not isinstance(op, str) or op not in OPS:
            raise SpaceError(f"op: unknown value {op!r} (expected one of {', '.join(OPS)})")
        # normalise the fields an operator does not use, so that equal layers hash equally
        if op not in _WITH_COUT or self.cout == 0:
            object.__setattr__(self, "cout", self.cin)
        if op not in _WITH_KERNEL:
            object.__setattr__(self, "kernel", 1)
            object.__setattr__(self, "stride", 1)
        if op not in _WITH_GROUPS:
            object.__setattr__(self, "groups", 1)
        elif self.groups == 0:
            object.__setattr__(self, "groups", self.cin)
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def problem(self) -> str | None:
        """Why this config is invalid (one line), or ``None``."""
        for name in ("cin", "cout", "input_size", "kernel", "stride", "groups", "batch"):
            if getattr(self, name) < 1:
                return f"{name}: {getattr(self, name)} must be >= 1"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        # the limits every family refuses (input side, batch), then this family's own
        limits = run_limits_problem(self.input_size, self.batch, 1)
        if limits:
            return limits
        for name in ("cin", "cout", "groups"):
            if getattr(self, name) > MAX_CHANNELS:
                return f"{name}: {getattr(self, name)} is above the limit {MAX_CHANNELS:,}"
        for name in ("kernel", "stride"):
            if getattr(self, name) > MAX_INPUT_SIZE:
                return f"{name}: {getattr(self, name)} is above the limit {MAX_INPUT_SIZE:,}"
        if self.op == "conv" and (self.cin % self.groups or self.cout % self.groups):
            return f"groups: {self.groups} must divide cin ({self.cin}) and cout ({self.cout})"
        if self.op == "copy" and self.cin % self.groups:
            return f"groups: {self.groups} must divide cin ({self.cin})"
        if self.op in ("maxpool", "avgpool") and self.kernel > self.input_size + 2 * ((self.kernel - 1) // 2):
            return f"kernel: {self.kernel} larger than the padded input ({self.input_size})"
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict: ``family`` (``"layers"``) and the parameters."""
        return {
            "family": FAMILY,
            "op": self.op,
            "cin": self.cin,
            "cout": self.cout,
            "input_size": self.input_size,
            "kernel": self.kernel,
            "stride": self.stride,
            "groups": self.groups,
            "batch": self.batch,
            "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LayerConfig":
        """A config from its parameters (``family``, if present, must be ``layers``)."""
        d = own_parameters(d, FAMILY, PARAMETERS, required=("op", "cin"))
        return cls(**d)

    def canonical(self) -> str:
        """Canonical JSON text (sorted keys, no spaces); its hash is the id."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical` (``family`` included)."""
        return stable_id(self.canonical())

    def label(self) -> str:
        """e.g. ``conv-c64x128-s28-k3s2g1-b1-fp32``."""
        return (
            f"{self.op}-c{self.cin}x{self.cout}-s{self.input_size}-k{self.kernel}s{self.stride}g{self.groups}"
            f"-b{self.batch}-{self.precision}"
        )


# --------------------------------------------------------------------------- module


@functools.cache
def _torch_classes() -> Any:
    import torch
    from torch import nn

    class Layer(nn.Module):
        """One operator on inputs held as buffers (the forward's argument is ignored)."""

        def __init__(self, cfg: LayerConfig) -> None:
            super().__init__()
            b, c, o, s, k = cfg.batch, cfg.cin, cfg.cout, cfg.input_size, cfg.kernel
            op = cfg.op
            self.op = op
            x_shape: tuple[int, ...] = (b, c, s, s)
            y_shape: tuple[int, ...] | None = None
            if op == "conv":
                self.layer = nn.Conv2d(c, o, k, cfg.stride, padding=k // 2, groups=cfg.groups, bias=False)
            elif op == "linear":
                self.layer = nn.Linear(c, o)
                x_shape = (b, c) if s == 1 else (b, s * s, c)
            elif op == "matmul":
                x_shape, y_shape = (b, cfg.groups, s * s, c), (b, cfg.groups, c, o)
            elif op == "bn":
                self.layer = nn.BatchNorm2d(c)
            elif op in ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu"):
                self.layer = {
                    "relu": nn.ReLU,
                    "relu6": nn.ReLU6,
                    "hardswish": nn.Hardswish,
                    "hardsigmoid": nn.Hardsigmoid,
                    "sigmoid": nn.Sigmoid,
                    "silu": nn.SiLU,
                    "gelu": nn.GELU,
                }[op]()
            elif op == "maxpool":
                self.layer = nn.MaxPool2d(k, cfg.stride, padding=(k - 1) // 2)
            elif op == "avgpool":
                self.layer = nn.AvgPool2d(k, cfg.stride, padding=(k - 1) // 2)
            elif op == "gap":
                self.layer = nn.AdaptiveAvgPool2d(1)
            elif op == "softmax":
                self.layer = nn.Softmax(dim=-1)
            elif op == "add":
                y_shape = x_shape
            elif op == "mul":
                y_shape = (b, c, 1, 1)
            elif op == "cat":
                y_shape = (b, o, s, s)
            elif op == "se":
                self.pool = nn.AdaptiveAvgPool2d(1)
                self.fc1 = nn.Conv2d(c, o, 1)
                self.act = nn.ReLU(inplace=True)
                self.fc2 = nn.Conv2d(o, c, 1)
                self.gate = nn.Sigmoid()
            self.groups = cfg.groups
            self.register_buffer("x", torch.randn(x_shape), persistent=False)
            if y_shape is not None:
                self.register_buffer("y", torch.randn(y_shape), persistent=False)

        def forward(self, _: Any = None) -> Any:
            op, x = self.op, self.x
            if op == "matmul":
                return torch.matmul(x, self.y)
            if op == "add":
                return x + self.y
            if op == "mul":
                return x * self.y
            if op == "cat":
                return torch.cat((x, self.y), 1)
            if op == "copy":
                n, c, h, w = x.shape
                return x.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
            if op == "se":
                s = self.pool(x)
                s = self.fc1(s)
                s = self.act(s)
                s = self.fc2(s)
                s = self.gate(s)
                return x * s
            return self.layer(x)

    return Layer


def build(config: LayerConfig | Mapping[str, Any]) -> "nn.Module":
    """The module of a layer config, in eval mode, fp32 (cast it with ``.to(dtype)``: its input buffers follow).

    Created on torch's current default device.

    Raises:
        carb.families.space.SpaceError: the config is invalid (one line).
    """
    cfg = config if isinstance(config, LayerConfig) else LayerConfig.from_dict(config)
    m = _torch_classes()(cfg)
    init_weights(m)
    return m.eval()


# --------------------------------------------------------------------------- features

#: The per-layer columns :func:`layer_frame` gives, the same as :func:`carb.graph.capture`'s
#: (``h``/``w``: input side, ``ho``/``wo``: output side, px; ``cout``: output channels;
#: FLOP, counts and B as there).
LAYER_COLUMNS: list[str] = [
    "op",
    "batch",
    "cin",
    "h",
    "w",
    "cout",
    "ho",
    "wo",
    "kernel",
    "stride",
    "groups",
    "bytes_per_element",
    "flops",
    "params",
    "weight_bytes",
    "in_bytes",
    "out_bytes",
    "bytes",
    "n_inputs",
    "broadcast",
]


def _layer_configs(configs: LayerConfig | Iterable[LayerConfig] | pd.DataFrame) -> tuple[list[LayerConfig], pd.Index]:
    """The configs of :func:`layer_frame`'s input and the index of its result."""
    if not isinstance(configs, pd.DataFrame):
        rows = [configs] if isinstance(configs, LayerConfig) else list(configs)
        return rows, pd.RangeIndex(len(rows))
    if len(configs) and "op" not in configs.columns:
        raise SpaceError("layers: a table of layer configs needs an op column")
    rows = [
        LayerConfig.from_dict({k: v for k, v in r.items() if k in PARAMETERS and not missing(v)})
        for r in configs.to_dict("records")
    ]
    return rows, configs.index


class _Columns:
    """The per-layer arrays of :func:`layer_frame`, one entry per config.

    They are set operator group by operator group (a method each); ``weights`` are elements of parameters and
    buffers.
    """

    def __init__(self, rows: list[LayerConfig]) -> None:
        n = len(rows)
        self.op = np.array([r.op for r in rows], dtype=object)
        self.b = np.array([r.batch for r in rows], dtype=np.int64)
        self.c = np.array([r.cin for r in rows], dtype=np.int64)
        self.o = np.array([r.cout for r in rows], dtype=np.int64)
        self.s = np.array([r.input_size for r in rows], dtype=np.int64)
        self.k = np.array([r.kernel for r in rows], dtype=np.int64)
        self.st = np.array([r.stride for r in rows], dtype=np.int64)
        self.g = np.array([r.groups for r in rows], dtype=np.int64)
        self.bpe = np.array([BYTES_PER_ELEMENT[r.precision] for r in rows], dtype=np.int64)
        s = self.s
        self.h, self.w, self.ho, self.wo = s.copy(), s.copy(), s.copy(), s.copy()
        self.cout = self.c.copy()
        self.flops = np.zeros(n, np.int64)
        self.params = np.zeros(n, np.int64)
        self.weights = np.zeros(n, np.int64)
        self.in_el = self.b * self.c * s * s
        self.out_el = self.in_el.copy()
        self.n_in = np.ones(n, np.int64)
        self.bcast = np.zeros(n, bool)
        self.tokens = s * s
        self.is_ = {name: self.op == name for name in OPS}

    def conv(self) -> None:
        m, b, c, o, k, g = self.is_["conv"], self.b, self.c, self.o, self.k, self.g
        pad = k // 2
        self.ho[m] = (self.s[m] + 2 * pad[m] - k[m]) // self.st[m] + 1
        self.wo[m] = self.ho[m]
        self.cout[m] = o[m]
        self.flops[m] = 2 * b[m] * (c[m] // g[m]) * o[m] * k[m] ** 2 * self.ho[m] ** 2
        self.params[m] = o[m] * (c[m] // g[m]) * k[m] ** 2
        self.weights[m] = self.params[m]
        self.out_el[m] = b[m] * o[m] * self.ho[m] ** 2

    def linear(self) -> None:
        m, b, c, o, s, tokens = self.is_["linear"], self.b, self.c, self.o, self.s, self.tokens
        self.h[m] = np.where(s[m] == 1, 1, tokens[m])
        self.w[m] = 1
        self.ho[m], self.wo[m], self.cout[m] = self.h[m], 1, o[m]
        self.flops[m] = 2 * b[m] * tokens[m] * c[m] * o[m]
        self.params[m] = c[m] * o[m] + o[m]
        self.weights[m] = self.params[m]
        self.in_el[m] = b[m] * tokens[m] * c[m]
        self.out_el[m] = b[m] * tokens[m] * o[m]

    def matmul(self) -> None:
        m, b, c, o, g, tokens = self.is_["matmul"], self.b, self.c, self.o, self.g, self.tokens
        # graph reading of (batch, heads, T, C): batch, heads as channels, T x C as h x w
        self.h[m], self.w[m] = tokens[m], c[m]
        self.ho[m], self.wo[m] = tokens[m], o[m]
        self.cout[m] = g[m]
        self.flops[m] = 2 * b[m] * g[m] * tokens[m] * c[m] * o[m]
        self.in_el[m] = b[m] * g[m] * (tokens[m] * c[m] + c[m] * o[m])
        self.out_el[m] = b[m] * g[m] * tokens[m] * o[m]
        self.n_in[m] = 2
        c[m] = g[m]

    def norm_and_pools(self) -> None:
        m, b, c = self.is_["bn"], self.b, self.c
        self.params[m] = 2 * c[m]
        self.weights[m] = 4 * c[m]  # weight, bias, running mean and variance (+ an 8-byte counter)
        for name in ("maxpool", "avgpool"):
            m = self.is_[name]
            p = (self.k[m] - 1) // 2
            self.ho[m] = (self.s[m] + 2 * p - self.k[m]) // self.st[m] + 1
            self.wo[m] = self.ho[m]
            self.out_el[m] = b[m] * c[m] * self.ho[m] ** 2
        m = self.is_["gap"]
        self.ho[m] = self.wo[m] = 1
        self.out_el[m] = b[m] * c[m]

    def two_inputs(self) -> None:
        b, c, o, s = self.b, self.c, self.o, self.s
        m = self.is_["add"]
        self.in_el[m] = 2 * b[m] * c[m] * s[m] ** 2
        self.n_in[m] = 2
        m = self.is_["mul"]
        self.in_el[m] = b[m] * c[m] * s[m] ** 2 + b[m] * c[m]
        self.n_in[m] = 2
        self.bcast[m] = True
        m = self.is_["cat"]
        self.in_el[m] = b[m] * (c[m] + o[m]) * s[m] ** 2
        self.out_el[m] = self.in_el[m]
        self.cout[m] = c[m] + o[m]
        self.n_in[m] = 2

    def se(self) -> None:
        m, b, c, o = self.is_["se"], self.b, self.c, self.o
        self.flops[m] = 2 * 2 * b[m] * c[m] * o[m]
        self.params[m] = 2 * c[m] * o[m] + c[m] + o[m]
        self.weights[m] = self.params[m]

    def frame(self, index: pd.Index) -> pd.DataFrame:
        """The :data:`LAYER_COLUMNS` table."""
        is_ = self.is_
        self.g[is_["matmul"] | is_["copy"]] = 1  # the graph reads heads as channels and a shuffle as a copy
        weight_bytes = self.weights * self.bpe + np.where(is_["bn"], 8, 0)
        in_bytes, out_bytes = self.in_el * self.bpe, self.out_el * self.bpe
        return pd.DataFrame(
            {
                "op": self.op,
                "batch": self.b,
                "cin": self.c,
                "h": self.h,
                "w": self.w,
                "cout": self.cout,
                "ho": self.ho,
                "wo": self.wo,
                "kernel": self.k,
                "stride": self.st,
                "groups": self.g,
                "bytes_per_element": self.bpe,
                "flops": self.flops,
                "params": self.params,
                "weight_bytes": weight_bytes,
                "in_bytes": in_bytes,
                "out_bytes": out_bytes,
                "bytes": in_bytes + weight_bytes + out_bytes,
                "n_inputs": self.n_in,
                "broadcast": self.bcast,
            },
            index=index,
        )


def layer_frame(configs: LayerConfig | Iterable[LayerConfig] | pd.DataFrame) -> pd.DataFrame:
    """Closed-form per-layer columns (:data:`LAYER_COLUMNS`) of layer configs, vectorised.

    The columns have the same meanings as :func:`carb.graph.capture`'s rows for the same operator (``se`` rows: its
    totals; ``op`` stays ``se``). No module is built.

    Args:
        configs: configs, or a table of rows with the parameter columns (index kept).

    Returns:
        One row per config with the :data:`LAYER_COLUMNS`.

    Raises:
        carb.families.space.SpaceError: a table without an ``op`` column or an invalid row.
    """
    rows, index = _layer_configs(configs)
    cols = _Columns(rows)
    for step in (cols.conv, cols.linear, cols.matmul, cols.norm_and_pools, cols.two_inputs, cols.se):
        step()
    return cols.frame(index)


def features(df: pd.DataFrame) -> pd.DataFrame:
    """The family's feature columns for a table of layer rows.

    These are :data:`LAYER_COLUMNS` (prefixed ``layer_`` where a name would clash with a parameter: ``layer_cin``
    ...) and the :mod:`carb.families.features` columns that apply (``flops``, ``params``, ``weight_bytes``,
    ``model_bytes``, ``input_bytes``, ``output_bytes``, ``bytes_per_element``).
    """
    lf = layer_frame(df)
    out = df.copy()
    for col in LAYER_COLUMNS:
        name = f"layer_{col}" if col in PARAMETERS or col == "op" else col
        out[name] = lf[col].to_numpy()
    out["model_bytes"] = lf["weight_bytes"].to_numpy()
    out["input_bytes"] = lf["in_bytes"].to_numpy()
    out["output_bytes"] = lf["out_bytes"].to_numpy()
    return out


def _from_row(row: Mapping[str, Any]) -> LayerConfig:
    d = {k: row[k] for k in PARAMETERS if k in row and not missing(row[k])}
    return LayerConfig.from_dict(d)


def _to_row(config: LayerConfig) -> dict[str, Any]:
    return config.to_dict()


LAYERS = Family(
    name=FAMILY,
    config_type=LayerConfig,
    from_row=_from_row,
    to_row=_to_row,
    build=build,
    features=features,
    description="single CNN layers (conv incl. depthwise/grouped, linear, matmul, BN, activations, "
    "pools, add/mul/cat, shuffle, SE) for per-operator cost models",
    parameters=tuple(p for p in PARAMETERS),
)


#: Layers per operator group in :func:`balanced_sample` (for ``n = 400``; scaled to ``n``):
#: the expensive, shape-rich convolutions get most, every operator gets some.
QUOTAS: dict[str, int] = {
    "conv_dense": 80,
    "conv_stem": 14,
    "conv_dw": 56,
    "conv_grouped": 44,
    "conv_fc": 12,
    "linear": 14,
    "matmul": 10,
    "bn": 14,
    "relu": 9,
    "relu6": 7,
    "hardswish": 7,
    "hardsigmoid": 7,
    "sigmoid": 7,
    "silu": 7,
    "gelu": 5,
    "softmax": 5,
    "gap": 9,
    "add": 12,
    "mul": 10,
    "maxpool": 9,
    "avgpool": 9,
    "cat": 12,
    "copy": 10,
    "se": 10,
}


def op_group(c: LayerConfig) -> str:
    """The sampling group of a layer: its op, with convolutions split by kind.

    The convolution groups are dense, stem (3 input channels), depthwise, grouped and fully connected (1x1 on a 1x1
    map).
    """
    if c.op != "conv":
        return c.op
    if c.cin == 3:
        return "conv_stem"
    if c.input_size == 1:
        return "conv_fc"
    if c.groups == 1:
        return "conv_dense"
    return "conv_dw" if c.groups == c.cin == c.cout else "conv_grouped"


def balanced_sample(configs: Iterable[LayerConfig], n: int = 400, seed: int = 0) -> list[LayerConfig]:
    """A sample of about ``n`` layers with :data:`QUOTAS` per operator group.

    Each group is space-filling over its own parameters (greedy farthest point on log-scaled shapes), so that cheap
    operators are not crowded out by the many convolutions of a space.
    """
    rng = np.random.default_rng(seed)
    groups: dict[str, list[LayerConfig]] = {}
    for c in configs:
        groups.setdefault(op_group(c), []).append(c)
    total = sum(QUOTAS.values())
    out: list[LayerConfig] = []
    for name in sorted(groups):
        cs = groups[name]
        k = min(len(cs), max(1, round(QUOTAS.get(name, 5) * n / total)))
        X = np.log2(
            np.array(
                [[c.cin, c.cout, c.input_size, c.kernel, c.stride, c.groups, c.batch] for c in cs], dtype=np.float64
            )
        )
        span = X.max(axis=0) - X.min(axis=0)
        X = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0) + rng.uniform(0, 1e-6, X.shape)
        first = int(rng.integers(len(cs)))
        chosen = [first]
        d = ((X - X[first]) ** 2).sum(axis=1)
        for _ in range(k - 1):
            i = int(np.argmax(d))
            chosen.append(i)
            d = np.minimum(d, ((X - X[i]) ** 2).sum(axis=1))
        out += [cs[i] for i in sorted(chosen)]
    return out
