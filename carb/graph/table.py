"""The layer table a capture gives: :class:`LayerTable`, its columns, and the inputs it takes.

Each node of a traced module that produces a tensor is a row of :attr:`LayerTable.layers`:

- ``op``: the operator type (:data:`KNOWN_OPS`: ``conv``, ``conv3d``, ``convtranspose``,
  ``linear``, ``matmul``, ``sdpa``, ``lstm``, ``bn``, ``groupnorm``, ``relu``, ``maxpool3d``,
  ``upsample_nearest``, ``pad``, ... ``view``), each read with its geometry, or ``unknown``
  (then ``kind`` says what it was); a 1-D or 3-D convolution or pooling is an op of its own,
  never read as a 2-D one. Which of them a network model knows is the model's to say: those its
  layers measured (:meth:`carb.netmodel.LayerModel.known`);
- ``kind``: the module class, function or method name as traced (``Conv2d``, ``add``, ...);
- shapes: ``in_shape``/``out_shape`` (tuples) and the reading of them: ``batch``, ``cin``,
  ``d``, ``h``, ``w`` (input), ``cout``, ``do``, ``ho``, ``wo`` (output). Channels-first ops
  (convolutions, pooling, BN, group and instance norm, upsampling, pad, pixel shuffle) read
  ``(N, C, L)`` as ``h = L``, ``(N, C, H, W)`` as is and ``(N, C, D, H, W)`` with ``d = D``;
  channels-last ones (linear, layer norm) read the last dimension as ``cin`` and the rows per
  image as ``h``; recurrent layers read ``(N, L, C)`` (or ``(L, N, C)``) as ``cin = C``, ``h =
  L`` steps; attention reads ``(N, heads, L, E)`` as ``cin = heads``, ``h = L``, ``w = E``;
  any other 3-D tensor is ``(N, L, C)`` tokens (``cin = C``, ``h = L``);
- ``kernel`` (kh), ``kernel_w``, ``kernel_d`` (depth, 3-D ops), ``stride``, ``padding``,
  ``dilation`` (each along the height: a 1-D op's along its length), ``groups``
  (convolutions, pooling, group norm; 1/0 elsewhere), ``dtype``, ``bytes_per_element`` (B);
- ``geometry``: every parameter of the op as the module or call states it, one canonical text
  (``k=3x7x7 s=1x2x2 p=1x3x3 d=1x1x1 g=1``, ``scale=2x2 align_corners=0``, ``hidden=64
  layers=1 bidirectional=0 batch_first=1``, ...; empty where the columns say everything);
- ``flops``: FLOP of the node, counted by the formulas of
  ``torch.utils.flop_counter`` (the ones ``FlopCounterMode`` uses) on the aten operators the
  node dispatches, so the per-layer figures add up to ``FlopCounterMode``'s total exactly
  (a recurrent layer: ``2 * gates * (input + hidden) * hidden`` per step, direction and
  layer; attention: its two matrix products); 0 where it has no formula (element-wise
  operators, pooling, normalization, upsampling);
- ``params`` (count), ``weight_bytes`` (B: parameters and buffers the node reads);
- ``in_bytes`` (B: all tensor inputs), ``out_bytes`` (B), ``bytes`` (B: ``in_bytes +
  weight_bytes + out_bytes``, the traffic of an unfused kernel);
- ``n_inputs``, ``broadcast`` (an element-wise binary op one of whose inputs is broadcast);
- ``alloc_bytes`` (B: memory the node allocates: 0 for views and in-place operators),
  ``inplace``, ``alias`` (the output shares its input's storage);
- ``live_bytes`` (B: activations alive while the node runs, from the liveness simulation);
- ``fused``: ``bn`` on a convolution a following BN was folded into, else empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd


class CaptureError(ValueError):
    """A module cannot be captured (does not trace, bad example input); one line."""


#: Operator types a capture reads, each with its geometry (``view``: zero-cost aliasing such as
#: flatten, reshape of a contiguous tensor, dropout in eval, identity). A network model knows
#: those of them its layers measured; the others it prices by a measured fallback.
KNOWN_OPS: tuple[str, ...] = (
    "conv",
    "conv1d",
    "conv3d",
    "convtranspose",
    "convtranspose1d",
    "convtranspose3d",
    "linear",
    "matmul",
    "sdpa",
    "mha",
    "lstm",
    "gru",
    "rnn",
    "bn",
    "layernorm",
    "groupnorm",
    "instancenorm",
    "relu",
    "relu6",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "silu",
    "gelu",
    "tanh",
    "mish",
    "maxpool",
    "avgpool",
    "maxpool1d",
    "avgpool1d",
    "maxpool3d",
    "avgpool3d",
    "gap",
    "gap1d",
    "gap3d",
    "upsample_nearest",
    "upsample_bilinear",
    "pad",
    "pad_reflect",
    "pad_replicate",
    "pixelshuffle",
    "pixelunshuffle",
    "add",
    "mul",
    "cat",
    "copy",
    "softmax",
    "view",
)
#: Operator types whose FLOPs ``FlopCounterMode`` counts (matrix products, convolutions,
#: attention, recurrent layers); the others count 0.
FLOP_OPS: frozenset[str] = frozenset(
    {"conv", "conv1d", "conv3d", "convtranspose", "convtranspose1d", "convtranspose3d"}
    | {"linear", "matmul", "sdpa", "mha", "lstm", "gru", "rnn"}
)

#: Precision names and their torch dtypes (names, resolved lazily).
DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

#: The columns of :attr:`LayerTable.layers`, in order (see the module docstring).
COLUMNS = [
    "name",
    "target",
    "kind",
    "op",
    "in_shape",
    "out_shape",
    "batch",
    "cin",
    "h",
    "w",
    "cout",
    "ho",
    "wo",
    "d",
    "do",
    "kernel",
    "kernel_w",
    "kernel_d",
    "stride",
    "padding",
    "dilation",
    "groups",
    "geometry",
    "dtype",
    "bytes_per_element",
    "flops",
    "params",
    "weight_bytes",
    "in_bytes",
    "out_bytes",
    "bytes",
    "n_inputs",
    "broadcast",
    "alloc_bytes",
    "inplace",
    "alias",
    "live_bytes",
    "fused",
]


def dtype_of(precision: str) -> Any:
    """The torch dtype of a precision name (``fp32``, ``fp16``, ``bf16``).

    Raises:
        CaptureError: an unknown name (one line, naming the known ones).

    """
    import torch

    if precision not in DTYPES:
        raise CaptureError(f"unknown dtype {precision!r} (expected one of {', '.join(DTYPES)})")
    return getattr(torch, DTYPES[precision])


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1x3x224x224"`` -> ``(1, 3, 224, 224)``.

    Raises:
        CaptureError: not positive integers separated by ``x`` (one line).

    """
    parts = str(text).strip().lower().replace("*", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise CaptureError(f"malformed input shape {text!r} (expected e.g. 1x3x224x224)") from None
    if not dims or any(d < 1 for d in dims):
        raise CaptureError(f"malformed input shape {text!r} (every dimension must be a positive integer)")
    if math.prod(dims) > 2**63 - 1:  # a tensor's element count is a 64-bit integer
        raise CaptureError(f"input shape {text!r}: {float(math.prod(dims)):.3g} elements, beyond a 64-bit count")
    return dims


@dataclass
class LayerTable:
    """The captured layers of one network and its totals.

    Attributes:
        layers: one row per tensor-producing node (:data:`COLUMNS`, see the module docstring).
        input_shape: the example input's shape.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        input_bytes: bytes of the example input(s). Units: B.
        model_bytes: parameters and buffers of the whole module. Units: B.
        params: parameter count of the whole module.
        peak_live_bytes: peak of ``live_bytes`` (activations alive at once). Units: B.
        meta: how it was captured (``fold_bn``).

    """

    layers: pd.DataFrame
    input_shape: tuple[int, ...]
    precision: str
    input_bytes: int
    model_bytes: int
    params: int
    peak_live_bytes: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        """FLOP of one forward of the whole batch (FlopCounterMode's count). Units: FLOP."""
        return int(self.layers["flops"].sum())

    @property
    def unknown(self) -> list[str]:
        """Kinds of the nodes whose operator type is not known, distinct, in order."""
        kinds = self.layers.loc[self.layers["op"] == "unknown", "kind"]
        return list(dict.fromkeys(kinds))

    def summary(self) -> dict[str, Any]:
        """Totals as a plain dict (JSON-serialisable)."""
        return {
            "input_shape": list(self.input_shape),
            "precision": self.precision,
            "n_layers": int(len(self.layers)),
            "flops": self.flops,
            "params": self.params,
            "model_bytes": self.model_bytes,
            "input_bytes": self.input_bytes,
            "peak_live_bytes": self.peak_live_bytes,
            "unknown_ops": self.unknown,
        }


def capture_features(df: pd.DataFrame, capture_row: Callable[[Mapping[str, Any]], LayerTable]) -> pd.DataFrame:
    """The feature columns a capture gives, added to each config row.

    The columns (:data:`carb.families.features.FEATURE_COLUMNS` names and units) are
    ``flops``, ``params``, ``model_bytes``, ``input_bytes``, ``live_activation_bytes`` (the
    liveness simulation's peak) and ``n_layers``; the families of whole networks use it.

    Args:
        df: one config per row.
        capture_row: captures one row's network.

    Returns:
        A copy of ``df`` with the feature columns.

    """
    out = df.copy()
    cols: dict[str, list] = {
        k: [] for k in ("flops", "params", "model_bytes", "input_bytes", "live_activation_bytes", "n_layers")
    }
    for r in df.to_dict("records"):
        lt = capture_row(r)
        for k, v in (
            ("flops", lt.flops),
            ("params", lt.params),
            ("model_bytes", lt.model_bytes),
            ("input_bytes", lt.input_bytes),
            ("live_activation_bytes", lt.peak_live_bytes),
            ("n_layers", len(lt.layers)),
        ):
            cols[k].append(v)
    for k, v in cols.items():
        out[k] = v
    return out
