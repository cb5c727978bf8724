"""How a captured tensor is laid out: its (N, C, D, H, W) reading, channels last or first, strided copies.

Many CPU kernels run otherwise on a channels-last tensor (NHWC, NDHWC), so the capture keeps each
input's strides on the meta device and each node's output in the layout torch's CPU kernels give it
(:func:`cpu_layout`); a node that reads a channels-last tensor says so in its geometry.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Sequence


def reading(shape: Sequence[int]) -> tuple[int, int, int, int, int]:
    """The (N, C, D, H, W) reading of a tensor no op-specific layout applies to.

    4-D as is; 3-D ``(N, L, C)`` tokens as ``C`` channels of ``L`` rows; 2-D ``(N, C)``; 1-D
    ``(C,)``; more dimensions with those between the batch and the last two as channels (an
    element-wise op costs its elements, whatever their layout; a 3-D op reads its depth apart,
    :func:`channels_first`).
    """
    s = tuple(shape)
    k = len(s)
    if k == 4:
        return s[0], s[1], 1, s[2], s[3]
    if k == 3:
        return s[0], s[2], 1, s[1], 1
    if k == 2:
        return s[0], s[1], 1, 1, 1
    if k == 1:
        return 1, s[0], 1, 1, 1
    if k == 0:
        return 1, 1, 1, 1, 1
    return s[0], int(math.prod(s[1:-2])), 1, s[-2], s[-1]


def channels_first(shape: Sequence[int], rank: int) -> tuple[int, int, int, int, int] | None:
    """The (N, C, D, H, W) reading of a channels-first tensor of ``rank`` spatial dimensions.

    An unbatched one (``(C, *spatial)``) has ``N = 1``; ``None`` where the shape has another rank.
    """
    s = tuple(shape)
    if len(s) == rank + 1:
        s = (1, *s)
    if len(s) != rank + 2 or rank < 1 or rank > 3:
        return None
    n, c, sp = s[0], s[1], s[2:]
    if rank == 1:
        return n, c, 1, sp[0], 1
    if rank == 2:
        return n, c, 1, sp[0], sp[1]
    return n, c, sp[0], sp[1], sp[2]


def channels_last(x: Any) -> bool:
    """Whether tensor ``x`` is laid out channels last (NHWC, NDHWC), as torch's CPU kernels suggest it.

    By its strides' order (ATen's ``suggest_memory_format``): the channels innermost, then the
    width, the height (the depth), the batch, dimensions of size 1 aside; so a channel slice of a
    channels-last map is one too (a convolution reads it as one). A tensor laid out both ways (one
    channel, or one position) reads alike either way: not channels last. Anything without strides
    (an ONNX value) is not.
    """
    torch = sys.modules.get("torch")  # not imported: x is no tensor
    if torch is None or not isinstance(x, torch.Tensor) or x.dim() not in (4, 5):
        return False
    last = (1, 4, 3, 2, 0) if x.dim() == 5 else (1, 3, 2, 0)
    first = tuple(range(x.dim() - 1, -1, -1))
    return _ordered(x, last) and not _ordered(x, first)


def _ordered(x: Any, inner_first: Sequence[int]) -> bool:
    """Whether ``x``'s strides grow along ``inner_first`` (dimensions of size 1 aside)."""
    prev = 1
    for d in inner_first:
        if x.shape[d] == 1:
            continue
        if x.stride(d) < prev:
            return False
        prev = x.stride(d)
    return True


def copy_text(x: Any, perm: Sequence[int] | None = None) -> str:
    """A copy's geometry: ``strided=1`` where the view it copies strides over its last dimension.

    Such a copy gathers element by element (a transpose of the last two dimensions, then a
    reshape: 3x the time of a channel shuffle's copy of the same bytes, whose rows are runs).
    ``perm``: an ONNX Transpose's permutation of ``x`` (whose values have no strides; ``[]``: the
    default, the axes reversed).
    """
    if perm is not None:
        perm = list(perm) or list(range(x.dim()))[::-1]
        axes = [p for p in perm if x.shape[p] > 1]  # the output's axes that hold more than one element
        inner = [i for i in range(x.dim()) if x.shape[i] > 1]
        return "strided=1" if axes and axes[-1] != inner[-1] else ""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return ""
    sides = [i for i in range(x.dim()) if x.shape[i] > 1]
    return "strided=1" if sides and x.stride(sides[-1]) != 1 else ""


#: The convolutions whose CPU kernels take a channels-last layout from the input or the weight
#: (a 3-D one writes channels first whatever it reads).
_LAYOUT_CONVS = frozenset({"conv", "convtranspose"})
#: Ops whose CPU kernels keep a channels-last input's layout where their meta kernels write
#: channels first (the others' meta kernels follow the CPU's; tests/graph/test_layout.py).
_LAYOUT_KEEPING = frozenset({"groupnorm", "pixelshuffle", "pad", "pad_reflect", "pad_replicate"})


def cpu_layout(op: str | None, out: Any, x: Any, weight: Any = None) -> Any:
    """A node's meta output in the layout torch's CPU kernels give it.

    On the CPU a 2-D convolution writes channels last where its input or its weight is
    channels last (``mkldnn_conv_use_channels_last``), and the ops of :data:`_LAYOUT_KEEPING`
    keep a channels-last input's layout; their meta kernels write channels first.
    """
    import torch

    if not isinstance(out, torch.Tensor) or out.dim() not in (4, 5) or not out.is_contiguous():
        return out
    fmt = torch.channels_last if out.dim() == 4 else torch.channels_last_3d
    if op in _LAYOUT_CONVS:
        sources = (x, weight)
    elif op in _LAYOUT_KEEPING:
        sources = (x,)
    else:
        return out
    if any(isinstance(t, torch.Tensor) and t.dim() == out.dim() and channels_last(t) for t in sources):
        return out.contiguous(memory_format=fmt)
    return out
