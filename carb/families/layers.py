"""The ``layers`` family: one layer of a CNN per config, for per-operator cost models.

A :class:`LayerConfig` is one operator at one shape: ``op`` (see :data:`OPS`), input
channels ``cin``, output channels ``cout``, input height = width ``input_size``, ``kernel``,
``stride``, ``groups``, ``batch`` and ``precision``, and where an op uses them ``dilation``,
``padding``, ``ceil_mode``, ``align_corners``, ``output_size``, ``frames`` and ``kernel_d``.
Measuring many of them with the ordinary pipeline (``carb characterize --space layers``, or
``--configs`` of :func:`new_ops_sample`) gives the per-operator data the network model
(:mod:`carb.netmodel`) is fitted on; :func:`layer_frame` gives the same closed-form columns
as :func:`carb.graph.capture` gives for the layer inside a traced network, so one model
prices both.

Operators and what their parameters mean (NCHW tensors, ``s = input_size``):

- ``conv``: ``nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias=False)``
  on ``(batch, cin, s, s)``, ``padding = dilation * (kernel // 2)`` unless given: dense
  (``groups=1``), grouped, depthwise (``groups == cin == cout``), pointwise (``kernel=1``)
  and dilated. In a space grid ``cout = 0`` and ``groups = 0`` mean "equal to ``cin``" (a
  depthwise grid), resolved when the config is made;
- ``conv1d``: the same as ``nn.Conv1d`` on ``(batch, cin, s)``; ``conv3d``: as
  ``nn.Conv3d`` on ``(batch, cin, frames, s, s)``, kernel ``(kernel_d, kernel, kernel)``
  (``kernel_d = 0``: cubic) and stride ``(stride, stride, stride)``, 1 in depth where
  ``kernel_d`` is 1 (a spatial-only kernel, as R(2+1)D's);
- ``convtranspose``: ``nn.ConvTranspose2d(cin, cout, kernel, stride, padding, output_padding,
  groups, bias=False)``, ``padding = (kernel - 1) // 2`` unless given and the output padding
  that makes the output ``stride`` times the input (within ``[0, stride)``);
- ``linear``: ``nn.Linear(cin, cout)`` on ``(batch, cin)`` (``s = 1``) or on tokens
  ``(batch, s*s, cin)``;
- ``matmul``: attention-style batched ``torch.matmul`` of ``(batch, groups, s*s, cin)`` by
  ``(batch, groups, cin, cout)`` (``groups`` = heads);
- ``sdpa``: ``F.scaled_dot_product_attention`` of query, key and value ``(batch, groups,
  s*s, cin / groups)`` (``cin``: the embedding, ``groups``: heads); ``mha``:
  ``nn.MultiheadAttention(cin, groups, batch_first=True)`` on ``(batch, s*s, cin)``, its
  self-attention without weights (``need_weights=False``, as torchvision's ViT calls it);
- ``lstm``, ``gru``: ``nn.LSTM`` / ``nn.GRU(cin, cout, batch_first=True)``, one layer, on
  ``(batch, s, cin)``: ``s`` steps;
- ``bn``: ``nn.BatchNorm2d(cin)`` (eval); ``relu``, ``relu6``, ``hardswish``,
  ``hardsigmoid``, ``sigmoid``, ``silu``, ``gelu``, ``mish``: the activation modules (out of
  place) on ``(batch, cin, s, s)``;
- ``layernorm``: ``nn.LayerNorm(cin)`` channels last, on ``(batch, s, s, cin)``;
  ``groupnorm``: ``nn.GroupNorm(groups, cin)`` on ``(batch, cin, s, s)`` (``groups = 1``: a
  channels-first layer norm over ``C x H x W``, as PoolFormer's); ``instancenorm``:
  ``nn.InstanceNorm2d(cin)``;
- ``maxpool``, ``avgpool``: ``kernel``, ``stride``, ``padding = (kernel - 1) // 2`` unless
  given, ``ceil_mode``; ``maxpool3d``, ``avgpool3d``: their 3-D forms on ``(batch, cin,
  frames, s, s)`` (kernel and stride as ``conv3d``'s); ``gap``: ``nn.AdaptiveAvgPool2d(1)``;
- ``upsample_nearest``, ``upsample_bilinear``: ``nn.Upsample`` of ``(batch, cin, s, s)`` by
  ``scale_factor = stride``, or to ``output_size`` when given (then ``stride`` is 1), and
  ``align_corners`` (bilinear);
- ``pad``: ``nn.ZeroPad2d(padding)`` (1 unless given); ``pixelshuffle``:
  ``nn.PixelShuffle(stride)`` (``cin`` a multiple of ``stride**2``);
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
``cout = cin``, the later fields at their defaults) so that equal layers have equal ids; a
field at its default is left out of the config's canonical form, so the ids of the layers
measured before those fields existed stand.

The built module keeps its input tensors as buffers and ignores the tensor its ``forward``
receives (the measurement backends feed every family ``(batch, 3, s, s)``), so a timed
forward is this operator alone (plus one module call).

This module imports torch only when a module is built.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping

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
from .op_grids import NEW_OP_GRIDS, NEW_OPS_MAX_ELEMENTS, NEW_OPS_MAX_FLOPS

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

__all__ = [
    "FAMILY",
    "OPS",
    "NEW_OPS",
    "PARAMETERS",
    "LayerConfig",
    "build",
    "features",
    "layer_frame",
    "LAYER_COLUMNS",
    "LAYERS",
    "balanced_sample",
    "new_ops_sample",
    "NEW_OP_GRIDS",
]

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
    "convtranspose",
    "conv1d",
    "conv3d",
    "maxpool3d",
    "avgpool3d",
    "upsample_nearest",
    "upsample_bilinear",
    "layernorm",
    "groupnorm",
    "instancenorm",
    "mish",
    "pad",
    "pixelshuffle",
    "sdpa",
    "mha",
    "lstm",
    "gru",
)
#: The operators added to the family after its first campaigns: what :func:`new_ops_sample` samples.
NEW_OPS: tuple[str, ...] = OPS[OPS.index("convtranspose") :]
_ACTS = ("bn", "relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "softmax", "mish")
_ACT_MODULES = {
    "relu": "ReLU",
    "relu6": "ReLU6",
    "hardswish": "Hardswish",
    "hardsigmoid": "Hardsigmoid",
    "sigmoid": "Sigmoid",
    "silu": "SiLU",
    "gelu": "GELU",
    "mish": "Mish",
}
#: Operators whose ``cout`` is a free parameter.
_WITH_COUT = ("conv", "linear", "matmul", "cat", "se", "convtranspose", "conv1d", "conv3d", "lstm", "gru")
_WITH_KERNEL = ("conv", "maxpool", "avgpool", "convtranspose", "conv1d", "conv3d", "maxpool3d", "avgpool3d")
#: Operators that use ``stride`` without a kernel: an upsampling's scale, a pixel shuffle's factor.
_WITH_STRIDE = ("upsample_nearest", "upsample_bilinear", "pixelshuffle")
_WITH_GROUPS = ("conv", "matmul", "copy", "convtranspose", "conv1d", "conv3d", "groupnorm", "sdpa", "mha")
_CONVS = ("conv", "convtranspose", "conv1d", "conv3d")
_POOLS = ("maxpool", "avgpool", "maxpool3d", "avgpool3d")
_THREE_D = ("conv3d", "maxpool3d", "avgpool3d")
_UPSAMPLE = ("upsample_nearest", "upsample_bilinear")
#: The later fields, their defaults, and the operators that use each (others hold the default).
_LATER: dict[str, tuple[int, tuple[str, ...]]] = {
    "dilation": (1, ("conv", "conv1d")),
    "padding": (-1, (*_CONVS, *_POOLS, "pad")),
    "ceil_mode": (0, _POOLS),
    "align_corners": (0, ("upsample_bilinear",)),
    "output_size": (0, _UPSAMPLE),
    "frames": (1, _THREE_D),
    "kernel_d": (0, _THREE_D),
}
#: Most channels (features) a layer may have: far above any real CNN's, low enough that
#: an absurd value is refused before anything is built or priced.
MAX_CHANNELS = 1_000_000

#: The parameters of a config (the fields of :class:`LayerConfig`).
PARAMETERS: tuple[str, ...] = (
    "op",
    "cin",
    "cout",
    "input_size",
    "kernel",
    "stride",
    "groups",
    "batch",
    "precision",
    *_LATER,
)


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
            ``sdpa`` or ``mha``, groups of a ``groupnorm``, shuffle groups of a ``copy``.
        batch: images per forward.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        dilation: a ``conv``'s or ``conv1d``'s dilation.
        padding: a convolution's, pooling's or ``pad``'s padding (``-1``: the op's default).
        ceil_mode: a pooling's ``ceil_mode`` (0 or 1).
        align_corners: a bilinear upsampling's ``align_corners`` (0 or 1).
        output_size: an upsampling's output side (``0``: by the scale ``stride``). Units: px.
        frames: a 3-D op's input depth (not ``depth``: a ResNet's parameter and a store's column).
        kernel_d: a 3-D op's kernel depth (``0``: ``kernel``).

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
    dilation: int = 1
    padding: int = -1
    ceil_mode: int = 0
    align_corners: int = 0
    output_size: int = 0
    frames: int = 1
    kernel_d: int = 0

    def __post_init__(self) -> None:
        """Normalise the fields and check the op; raises :class:`SpaceError` on an unknown one."""
        object.__setattr__(self, "op", _py(self.op))
        for name in ("cin", "cout", "input_size", "kernel", "stride", "groups", "batch", *_LATER):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        op = self.op
        if not isinstance(op, str) or op not in OPS:
            raise SpaceError(f"op: unknown value {op!r} (expected one of {', '.join(OPS)})")
        # normalise the fields an operator does not use, so that equal layers hash equally
        if op not in _WITH_COUT or self.cout == 0:
            object.__setattr__(self, "cout", self.cin)
        if op not in _WITH_KERNEL:
            object.__setattr__(self, "kernel", 1)
            if op not in _WITH_STRIDE or (op in _UPSAMPLE and self.output_size > 0):
                object.__setattr__(self, "stride", 1)
        if op not in _WITH_GROUPS:
            object.__setattr__(self, "groups", 1)
        elif self.groups == 0:
            object.__setattr__(self, "groups", self.cin)
        for name, (default, ops) in _LATER.items():
            if op not in ops:
                object.__setattr__(self, name, default)
        if op in _THREE_D and self.kernel_d == self.kernel:
            object.__setattr__(self, "kernel_d", 0)  # cubic either way
        if self.padding == self.default_padding():
            object.__setattr__(self, "padding", -1)
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def default_padding(self) -> int:
        """The padding the op takes when none is given: a convolution's ``dilation * (kernel // 2)`` ("same"), a
        transposed one's or a pooling's ``(kernel - 1) // 2``, a pad's 1.
        """  # noqa: D205
        if self.op in ("conv", "conv1d", "conv3d"):
            return self.dilation * (self.kernel // 2)
        if self.op == "pad":
            return 1
        return (self.kernel - 1) // 2

    #: A worker's argument to the module: one element (it holds its inputs; a placeholder image would count in memory)
    input_shape: ClassVar[tuple[int, ...]] = (1,)

    @property
    def pad(self) -> int:
        """The padding the layer runs with (height and width; a 3-D op's depth pads by its own kernel)."""
        return self.default_padding() if self.padding < 0 else self.padding

    @property
    def kd(self) -> int:
        """A 3-D op's kernel depth."""
        return self.kernel_d or self.kernel

    @property
    def sd(self) -> int:
        """A 3-D op's stride in depth: ``stride``, 1 for a kernel of depth 1."""
        return 1 if self.kd == 1 and self.kernel_d else self.stride

    @property
    def pd(self) -> int:
        """A 3-D op's padding in depth: a convolution's ``kd // 2``, a pooling's ``(kd - 1) // 2``."""
        return self.kd // 2 if self.op == "conv3d" else (self.kd - 1) // 2

    @property
    def output_padding(self) -> int:
        """A transposed convolution's output padding: what makes its output ``stride`` times its input, in range."""
        return max(0, min(self.stride - 1, self.stride + 2 * self.pad - self.kernel))

    def problem(self) -> str | None:
        """Why this config is invalid (one line), or ``None``."""
        for name in ("cin", "cout", "input_size", "kernel", "stride", "groups", "batch", "dilation", "frames"):
            if getattr(self, name) < 1:
                return f"{name}: {getattr(self, name)} must be >= 1"
        for name in ("padding", "output_size", "kernel_d"):
            if getattr(self, name) < (-1 if name == "padding" else 0):
                return f"{name}: {getattr(self, name)} must be >= {-1 if name == 'padding' else 0}"
        for name in ("ceil_mode", "align_corners"):
            if getattr(self, name) not in (0, 1):
                return f"{name}: {getattr(self, name)} must be 0 or 1"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        # the limits every family refuses (input side, batch), then this family's own
        limits = run_limits_problem(self.input_size, self.batch, 1)
        if limits:
            return limits
        for name in ("cin", "cout", "groups"):
            if getattr(self, name) > MAX_CHANNELS:
                return f"{name}: {getattr(self, name)} is above the limit {MAX_CHANNELS:,}"
        for name in ("kernel", "stride", "dilation", "padding", "output_size", "frames", "kernel_d"):
            if getattr(self, name) > MAX_INPUT_SIZE:
                return f"{name}: {getattr(self, name)} is above the limit {MAX_INPUT_SIZE:,}"
        return self._op_problem()

    def _op_problem(self) -> str | None:
        """Why this op's own parameters do not make a layer torch runs (one line), or ``None``."""
        op, g = self.op, self.groups
        if op in _CONVS and (self.cin % g or self.cout % g):
            return f"groups: {g} must divide cin ({self.cin}) and cout ({self.cout})"
        if op in ("copy", "groupnorm", "sdpa", "mha") and self.cin % g:
            return f"groups: {g} must divide cin ({self.cin})"
        if op == "pixelshuffle" and self.cin % self.stride**2:
            return f"stride: the square of the shuffle's factor {self.stride} must divide cin ({self.cin})"
        if op in _POOLS and self.pad > self.kernel // 2:
            return f"padding: {self.pad} above half the kernel ({self.kernel})"
        if op in _THREE_D and self.kd > self.frames + 2 * self.pd:
            return f"kernel_d: {self.kd} larger than the padded depth ({self.frames})"
        if op in ("maxpool3d", "avgpool3d") and (self.kd > self.frames or self.kernel > self.input_size):
            return f"kernel: {self.kd}x{self.kernel} larger than the input ({self.frames}x{self.input_size})"
        if op in _POOLS and self.kernel > self.input_size + 2 * self.pad:
            return f"kernel: {self.kernel} larger than the padded input ({self.input_size})"
        span = self.dilation * (self.kernel - 1) + 1
        if op in ("conv", "conv1d", "conv3d") and span > self.input_size + 2 * self.pad:
            return (
                f"kernel: {self.kernel} (dilation {self.dilation}) spans more than the padded input ({self.input_size})"
            )
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
            # the later fields where they differ from their defaults: the ids of earlier layers stand
            **{k: getattr(self, k) for k, (default, _) in _LATER.items() if getattr(self, k) != default},
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
        short = {"dilation": "d", "padding": "p", "ceil_mode": "ceil", "align_corners": "ac", "output_size": "o"}
        short |= {"frames": "t", "kernel_d": "kd"}
        extra = "".join(f"{short[k]}{v}" for k, v in self.to_dict().items() if k in _LATER)
        return (
            f"{self.op}-c{self.cin}x{self.cout}-s{self.input_size}-k{self.kernel}s{self.stride}g{self.groups}"
            f"{'-' + extra if extra else ''}-b{self.batch}-{self.precision}"
        )


# --------------------------------------------------------------------------- module


@functools.cache
def _torch_classes() -> Any:
    import torch
    import torch.nn.functional as F
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
            z_shape: tuple[int, ...] | None = None
            if op == "conv":
                self.layer = nn.Conv2d(c, o, k, cfg.stride, cfg.pad, cfg.dilation, cfg.groups, bias=False)
            elif op == "conv1d":
                self.layer = nn.Conv1d(c, o, k, cfg.stride, cfg.pad, cfg.dilation, cfg.groups, bias=False)
                x_shape = (b, c, s)
            elif op == "conv3d":
                kk, ss, pp = (cfg.kd, k, k), (cfg.sd, cfg.stride, cfg.stride), (cfg.pd, cfg.pad, cfg.pad)
                self.layer = nn.Conv3d(c, o, kk, ss, pp, groups=cfg.groups, bias=False)
                x_shape = (b, c, cfg.frames, s, s)
            elif op == "convtranspose":
                self.layer = nn.ConvTranspose2d(
                    c, o, k, cfg.stride, cfg.pad, cfg.output_padding, groups=cfg.groups, bias=False
                )
            elif op == "linear":
                self.layer = nn.Linear(c, o)
                x_shape = (b, c) if s == 1 else (b, s * s, c)
            elif op == "matmul":
                x_shape, y_shape = (b, cfg.groups, s * s, c), (b, cfg.groups, c, o)
            elif op == "sdpa":
                x_shape = y_shape = z_shape = (b, cfg.groups, s * s, c // cfg.groups)
            elif op == "mha":
                self.layer = nn.MultiheadAttention(c, cfg.groups, batch_first=True)
                x_shape = (b, s * s, c)
            elif op in ("lstm", "gru"):
                self.layer = (nn.LSTM if op == "lstm" else nn.GRU)(c, o, batch_first=True)
                x_shape = (b, s, c)
            elif op == "bn":
                self.layer = nn.BatchNorm2d(c)
            elif op == "layernorm":
                self.layer = nn.LayerNorm(c)
                x_shape = (b, s, s, c)
            elif op == "groupnorm":
                self.layer = nn.GroupNorm(cfg.groups, c)
            elif op == "instancenorm":
                self.layer = nn.InstanceNorm2d(c)
            elif op in _ACT_MODULES:
                self.layer = getattr(nn, _ACT_MODULES[op])()
            elif op in ("maxpool", "avgpool"):
                pool = nn.MaxPool2d if op == "maxpool" else nn.AvgPool2d
                self.layer = pool(k, cfg.stride, padding=cfg.pad, ceil_mode=bool(cfg.ceil_mode))
            elif op in ("maxpool3d", "avgpool3d"):
                pool = nn.MaxPool3d if op == "maxpool3d" else nn.AvgPool3d
                kk, ss, pp = (cfg.kd, k, k), (cfg.sd, cfg.stride, cfg.stride), (cfg.pd, cfg.pad, cfg.pad)
                self.layer = pool(kk, ss, pp, ceil_mode=bool(cfg.ceil_mode))
                x_shape = (b, c, cfg.frames, s, s)
            elif op == "gap":
                self.layer = nn.AdaptiveAvgPool2d(1)
            elif op in _UPSAMPLE:
                mode = "nearest" if op == "upsample_nearest" else "bilinear"
                corners = bool(cfg.align_corners) if op == "upsample_bilinear" else None
                if cfg.output_size:
                    self.layer = nn.Upsample(size=cfg.output_size, mode=mode, align_corners=corners)
                else:
                    self.layer = nn.Upsample(scale_factor=float(cfg.stride), mode=mode, align_corners=corners)
            elif op == "pad":
                self.layer = nn.ZeroPad2d(cfg.pad)
            elif op == "pixelshuffle":
                self.layer = nn.PixelShuffle(cfg.stride)
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
            if z_shape is not None:
                self.register_buffer("z", torch.randn(z_shape), persistent=False)

        def forward(self, _: Any = None) -> Any:
            op, x = self.op, self.x
            if op == "matmul":
                return torch.matmul(x, self.y)
            if op == "sdpa":
                return F.scaled_dot_product_attention(x, self.y, self.z)
            if op == "mha":
                return self.layer(x, x, x, need_weights=False)[0]
            if op in ("lstm", "gru"):
                return self.layer(x)[0]
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
    "d",
    "do",
    "kernel_w",
    "kernel_d",
    "padding",
    "dilation",
    "geometry",
]


def _layer_configs(configs: LayerConfig | Iterable[LayerConfig] | pd.DataFrame) -> tuple[list[LayerConfig], pd.Index]:
    """The configs of :func:`layer_frame`'s input and the index of its result."""
    if not isinstance(configs, pd.DataFrame):
        rows = [configs] if isinstance(configs, LayerConfig) else list(configs)
        return rows, pd.RangeIndex(len(rows))
    if len(configs) and "op" not in configs.columns:
        raise SpaceError("layers: a table of layer configs needs an op column")
    params = configs[[c for c in configs.columns if c in PARAMETERS]]  # the records of these columns alone: 5x faster
    rows = [LayerConfig.from_dict({k: v for k, v in r.items() if not missing(v)}) for r in params.to_dict("records")]
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
        self.pad = np.array([r.pad for r in rows], dtype=np.int64)
        self.dil = np.array([r.dilation for r in rows], dtype=np.int64)
        self.ceil = np.array([r.ceil_mode for r in rows], dtype=np.int64)
        self.rows = rows

    def conv(self) -> None:
        m, b, c, o, k, g = self.is_["conv"], self.b, self.c, self.o, self.k, self.g
        pad, dil = self.pad, self.dil
        self.ho[m] = (self.s[m] + 2 * pad[m] - dil[m] * (k[m] - 1) - 1) // self.st[m] + 1
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
            self.ho[m] = _pool_len(self.s[m], self.k[m], self.st[m], self.pad[m], self.ceil[m])
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

    def geometry(self) -> tuple[np.ndarray, np.ndarray]:
        """The geometry text of each row (capture's canonical one) and its kernel width."""
        geo = np.full(len(self.op), "", dtype=object)
        kw = np.ones(len(self.op), np.int64)
        for i, r in enumerate(self.rows):
            k, st, p = r.kernel, r.stride, r.pad
            if r.op == "conv":
                geo[i] = f"k={k}x{k} s={st}x{st} p={p}x{p} d={r.dilation}x{r.dilation} g={r.groups}"
            elif r.op == "maxpool":
                geo[i] = f"k={k}x{k} s={st}x{st} p={p}x{p} d=1x1 ceil={r.ceil_mode}"
            elif r.op == "avgpool":
                geo[i] = f"k={k}x{k} s={st}x{st} p={p}x{p} ceil={r.ceil_mode} count_include_pad=1"
            elif r.op == "softmax":  # over the last dimension: rows of input_size
                geo[i] = f"row={r.input_size}"
                continue
            else:
                continue
            kw[i] = k
        return geo, kw

    def frame(self, index: pd.Index) -> pd.DataFrame:
        """The :data:`LAYER_COLUMNS` table."""
        is_ = self.is_
        self.g[is_["matmul"] | is_["copy"]] = 1  # the graph reads heads as channels and a shuffle as a copy
        weight_bytes = self.weights * self.bpe + np.where(is_["bn"], 8, 0)
        in_bytes, out_bytes = self.in_el * self.bpe, self.out_el * self.bpe
        geometry, kernel_w = self.geometry()
        windowed = is_["conv"] | is_["maxpool"] | is_["avgpool"]
        out = pd.DataFrame(
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
                "d": 1,
                "do": 1,
                "kernel_w": kernel_w,
                "kernel_d": 1,
                "padding": np.where(windowed, self.pad, 0),
                "dilation": np.where(is_["conv"], self.dil, 1),
                "geometry": geometry,
            },
            index=index,
        )
        new = [i for i, r in enumerate(self.rows) if r.op in NEW_OPS]
        if new:  # each row by its own formulas (few, and each op its own)
            got = pd.DataFrame([_new_op_row(self.rows[i]) for i in new], index=out.index[new])
            out.loc[out.index[new], got.columns] = got
            for col in ("op", "geometry"):
                out[col] = out[col].astype(object)
        return out


def _pool_len(n: Any, k: Any, s: Any, p: Any, ceil: Any) -> Any:
    """A pooling's output length, torch's ``pooling_output_shape`` (dilation 1; arrays or ints)."""
    n, k, s, p, ceil = (np.asarray(v, np.int64) for v in (n, k, s, p, ceil))
    out = (n + 2 * p - (k - 1) - 1 + np.where(ceil > 0, s - 1, 0)) // s + 1
    out = np.where((ceil > 0) & ((out - 1) * s >= n + p), out - 1, out)
    return out if out.ndim else int(out)


def _new_op_row(r: LayerConfig) -> dict[str, Any]:
    """The :data:`LAYER_COLUMNS` of one layer of :data:`NEW_OPS`, as :func:`carb.graph.capture` reads it."""
    b, c, o, s, k, st, g, p = r.batch, r.cin, r.cout, r.input_size, r.kernel, r.stride, r.groups, r.pad
    bpe = BYTES_PER_ELEMENT[r.precision]
    op = r.op
    x = {"batch": b, "cin": c, "d": 1, "h": s, "w": s, "cout": c, "do": 1, "ho": s, "wo": s}
    x |= {"kernel": 1, "kernel_w": 1, "kernel_d": 1, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    flops = params = 0
    in_el, out_el, n_in, geo = b * c * s * s, b * c * s * s, 1, ""
    if op == "conv1d":
        lo = (s + 2 * p - r.dilation * (k - 1) - 1) // st + 1
        x |= {"w": 1, "cout": o, "ho": lo, "wo": 1, "kernel": k, "stride": st, "padding": p, "dilation": r.dilation}
        x["groups"] = g
        flops, params = 2 * b * (c // g) * o * k * lo, o * (c // g) * k
        in_el, out_el = b * c * s, b * o * lo
        geo = f"k={k} s={st} p={p} d={r.dilation} g={g}"
    elif op == "conv3d":
        do, ho = (r.frames + 2 * r.pd - r.kd) // r.sd + 1, (s + 2 * p - k) // st + 1
        x |= {"d": r.frames, "cout": o, "do": do, "ho": ho, "wo": ho, "kernel": k, "kernel_w": k, "kernel_d": r.kd}
        x |= {"stride": st, "padding": p, "groups": g}
        flops, params = 2 * b * (c // g) * o * r.kd * k * k * do * ho * ho, o * (c // g) * r.kd * k * k
        in_el, out_el = b * c * r.frames * s * s, b * o * do * ho * ho
        geo = f"k={r.kd}x{k}x{k} s={r.sd}x{st}x{st} p={r.pd}x{p}x{p} d=1x1x1 g={g}"
    elif op == "convtranspose":
        ho = (s - 1) * st - 2 * p + (k - 1) + r.output_padding + 1
        x |= {"cout": o, "ho": ho, "wo": ho, "kernel": k, "kernel_w": k, "stride": st, "padding": p, "groups": g}
        flops, params = 2 * b * c * (o // g) * k * k * s * s, c * (o // g) * k * k
        out_el = b * o * ho * ho
        geo = f"k={k}x{k} s={st}x{st} p={p}x{p} d=1x1 g={g} op={r.output_padding}x{r.output_padding}"
    elif op in ("maxpool3d", "avgpool3d"):
        do, ho = _pool_len(r.frames, r.kd, r.sd, r.pd, r.ceil_mode), _pool_len(s, k, st, p, r.ceil_mode)
        x |= {"d": r.frames, "do": do, "ho": ho, "wo": ho, "kernel": k, "kernel_w": k, "kernel_d": r.kd}
        x |= {"stride": st, "padding": p}
        in_el, out_el = b * c * r.frames * s * s, b * c * do * ho * ho
        geo = f"k={r.kd}x{k}x{k} s={r.sd}x{st}x{st} p={r.pd}x{p}x{p} "
        geo += f"d=1x1x1 ceil={r.ceil_mode}" if op == "maxpool3d" else f"ceil={r.ceil_mode} count_include_pad=1"
    elif op in _UPSAMPLE:
        ho = r.output_size or s * st
        x |= {"ho": ho, "wo": ho}
        out_el = b * c * ho * ho
        geo = f"size={ho}x{ho}" if r.output_size else f"scale={st}x{st}"
        geo += f" align_corners={r.align_corners}" if op == "upsample_bilinear" else ""
    elif op == "layernorm":
        x |= {"h": s * s, "w": 1, "ho": s * s, "wo": 1}
        params, geo = 2 * c, f"normalized={c} affine=1"
    elif op == "groupnorm":
        x["groups"] = g
        params, geo = 2 * c, f"groups={g} affine=1"
    elif op == "instancenorm":
        geo = "track=0"
    elif op == "pad":
        x |= {"ho": s + 2 * p, "wo": s + 2 * p, "padding": p}
        out_el, geo = b * c * (s + 2 * p) ** 2, f"pad={p},{p},{p},{p}"
    elif op == "pixelshuffle":
        x |= {"cout": c // st**2, "ho": s * st, "wo": s * st}
        geo = f"r={st}"
    elif op == "sdpa":
        t, dh = s * s, c // g
        x |= {"cin": g, "h": t, "w": dh, "cout": g, "ho": t, "wo": dh}
        flops, in_el, out_el, n_in = 4 * b * g * t * t * dh, 3 * b * c * t, b * c * t, 3
        geo = f"heads={g} Lq={t} Lk={t} E={dh} Ev={dh} causal=0 mask=0"
    elif op == "mha":
        t = s * s
        x |= {"h": t, "w": 1, "ho": t, "wo": 1}
        flops, params = 8 * b * t * c * c + 4 * b * t * t * c, 4 * c * c + 4 * c
        in_el, out_el, n_in = 3 * b * t * c, b * t * c, 3
        geo = f"embed={c} heads={g} Lq={t} Lk={t} kdim={c} vdim={c} batch_first=1 need_weights=0"
    elif op in ("lstm", "gru"):
        gates = 4 if op == "lstm" else 3
        x |= {"w": 1, "cout": o, "wo": 1}
        flops, params = 2 * gates * (c + o) * o * s * b, gates * o * (c + o) + 2 * gates * o
        in_el, out_el = b * s * c, b * s * o + (2 if op == "lstm" else 1) * b * o
        geo = f"hidden={o} layers=1 bidirectional=0 batch_first=1"
    in_bytes, out_bytes, weight_bytes = in_el * bpe, out_el * bpe, params * bpe
    return {
        "op": op,
        **x,
        "bytes_per_element": bpe,
        "flops": flops,
        "params": params,
        "weight_bytes": weight_bytes,
        "in_bytes": in_bytes,
        "out_bytes": out_bytes,
        "bytes": in_bytes + weight_bytes + out_bytes,
        "n_inputs": n_in,
        "broadcast": False,
        "geometry": geo,
    }


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
    description="single CNN layers (conv incl. depthwise/grouped/dilated, 1-D, 3-D and transposed, linear, matmul, "
    "attention, LSTM/GRU, BN/layer/group/instance norms, activations, pools incl. 3-D, upsampling, pad, pixel "
    "shuffle, add/mul/cat, shuffle, SE) for per-operator cost models",
    parameters=tuple(p for p in PARAMETERS),
    optional_parameters=tuple(_LATER),
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


def _shape_of(c: LayerConfig) -> list[int]:
    """The parameters :func:`balanced_sample` spreads a group's layers over."""
    return [c.cin, c.cout, c.input_size, c.kernel, c.stride, c.groups, c.batch]


def _new_shape_of(c: LayerConfig) -> list[int]:
    """:func:`_shape_of` and the later fields (shifted to be positive): what :func:`new_ops_sample` spreads over."""
    return _shape_of(c) + [
        c.dilation,
        c.padding + 2,
        c.ceil_mode + 1,
        c.align_corners + 1,
        c.output_size + 1,
        c.frames,
        c.kernel_d + 1,
    ]


def _spread(cs: list[LayerConfig], k: int, rng: np.random.Generator, shape: Any = _shape_of) -> list[LayerConfig]:
    """``k`` of ``cs``, space-filling: greedy farthest point on their log-scaled ``shape``, in their order."""
    X = np.log2(np.array([shape(c) for c in cs], dtype=np.float64))
    span = X.max(axis=0) - X.min(axis=0)
    X = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0) + rng.uniform(0, 1e-6, X.shape)
    first = int(rng.integers(len(cs)))
    chosen = [first]
    d = ((X - X[first]) ** 2).sum(axis=1)
    for _ in range(k - 1):
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, ((X - X[i]) ** 2).sum(axis=1))
    return [cs[i] for i in sorted(chosen)]


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
        out += _spread(cs, k, rng)
    return out


@functools.cache
def new_op_configs(group: str) -> tuple[LayerConfig, ...]:
    """Every valid config of one group of :data:`NEW_OP_GRIDS` within the layers space's budget.

    The budget: at most :data:`NEW_OPS_MAX_FLOPS` FLOP and :data:`NEW_OPS_MAX_ELEMENTS`
    input and output elements (invalid combinations, a pooling's padding above half its
    kernel, left out).
    """
    out: list[LayerConfig] = []
    for grid in NEW_OP_GRIDS[group]:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            with contextlib.suppress(SpaceError):  # an invalid combination is left out
                out.append(LayerConfig(**dict(zip(keys, values))))
    if not out:
        return ()
    lf = layer_frame(out)
    bpe = lf["bytes_per_element"].to_numpy(np.float64)
    elements = (lf["in_bytes"] + lf["out_bytes"]).to_numpy(np.float64) / bpe
    ok = (lf["flops"].to_numpy(np.float64) <= NEW_OPS_MAX_FLOPS) & (elements <= NEW_OPS_MAX_ELEMENTS)
    return tuple(dict.fromkeys(c for c, keep in zip(out, ok) if keep))


def new_ops_sample(n_per_op: int | dict[str, int] = 25, seed: int = 0) -> list[LayerConfig]:
    """A balanced, space-filling sample of the new op kinds: ``n_per_op`` layers of each group of :data:`NEW_OP_GRIDS`.

    Each group is sampled on its own (greedy farthest point on log-scaled parameters, as
    :func:`balanced_sample`), so a cheap op is not crowded out by the many shapes of another.

    Args:
        n_per_op: layers per group, or a count per group name (a group left out: 0).
        seed: seeds the draw (the same seed, the same sample).

    Returns:
        The configs, group by group in :data:`NEW_OP_GRIDS`'s order.

    """
    rng = np.random.default_rng(seed)
    out: list[LayerConfig] = []
    for name in NEW_OP_GRIDS:
        k = n_per_op.get(name, 0) if isinstance(n_per_op, dict) else int(n_per_op)
        if k > 0:
            cs = new_op_configs(name)
            out += _spread(list(cs), min(k, len(cs)), rng, _new_shape_of)
    return out
