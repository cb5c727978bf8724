"""The geometry of one captured node: how its tensors read (batch, channels, depth, height, width), its parameters.

:func:`read` takes a node's op type, its module (or its call's arguments) and its input and
output tensors, and gives the row's reading: ``op`` (refined where the call decides it: an
interpolation's mode, an adaptive pooling's output size), ``batch``, ``cin``, ``d``, ``h``,
``w``, ``cout``, ``do``, ``ho``, ``wo``, the height-direction ``kernel``/``kernel_w``/``kernel_d``,
``stride``, ``padding``, ``dilation``, ``groups`` and ``geometry``: every parameter as the
module or call states it, in one canonical text. Each op reads the layout it computes on: a
1-D op's ``(N, C, L)`` is ``h = L``, a 3-D op's ``(N, C, D, H, W)`` keeps ``d = D`` (never
folded into the channels), a recurrent layer's ``(N, L, C)`` is ``h = L`` steps of ``C``
features. A call whose parameters cannot be read, or that runs another kernel than the op's
(a max pooling returning its indices, an antialiased or bicubic interpolation, an adaptive
pooling whose windows differ in size), is ``unknown``: priced by a fallback, never misread.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from carb.graph._layout import channels_first, channels_last, copy_text, reading  # noqa: F401 (read here)
from carb.graph._signatures import ATEN_SIGNATURES as _ATEN_SIGNATURES
from carb.graph._signatures import SIGNATURES as _SIGNATURES

#: Spatial rank of each channels-first op (2 where not listed among them).
RANK: dict[str, int] = {
    "conv1d": 1,
    "convtranspose1d": 1,
    "maxpool1d": 1,
    "avgpool1d": 1,
    "gap1d": 1,
    "conv3d": 3,
    "convtranspose3d": 3,
    "maxpool3d": 3,
    "avgpool3d": 3,
    "gap3d": 3,
}
_CONV = frozenset({"conv", "conv1d", "conv3d"})
_CONVT = frozenset({"convtranspose", "convtranspose1d", "convtranspose3d"})
_MAXPOOL = frozenset({"maxpool", "maxpool1d", "maxpool3d"})
_AVGPOOL = frozenset({"avgpool", "avgpool1d", "avgpool3d"})
_GAP = frozenset({"gap", "gap1d", "gap3d"})
#: Ops read channels first whatever their rank (the channels are dimension 1).
_CHANNELS_FIRST = frozenset(
    {"bn", "groupnorm", "instancenorm", "upsample_nearest", "upsample_bilinear", "pixelshuffle", "pixelunshuffle"}
    | {"pad", "pad_reflect", "pad_replicate"}
)
_RNN_GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _text(v: Any) -> str:
    """One value of a geometry text: ints joined by ``x``, bools as 0/1, floats as ``%g``."""
    if isinstance(v, (tuple, list)):
        return "x".join(_text(e) for e in v)
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def text(**kv: Any) -> str:
    """The canonical geometry text of ``kv`` (``k=3x3 s=2x2``), in the order given."""
    return " ".join(f"{k}={_text(v)}" for k, v in kv.items())


def _tuple(v: Any, rank: int) -> tuple[int, ...]:
    """``v`` (an int or a sequence) as ``rank`` ints."""
    if isinstance(v, (tuple, list)):
        t = tuple(int(e) for e in v)
        return t if len(t) == rank else (t * rank)[:rank] if len(t) == 1 else t
    return (int(v),) * rank


def _along_h(t: tuple[int, ...]) -> int:
    """The height-direction value of a per-dimension tuple (a 1-D op's only one)."""
    return t[-2] if len(t) >= 2 else t[0]


def _base(op: str, x: Any, y: Any) -> dict[str, Any]:
    """The reading no op-specific rule changes: the generic layout of input and output."""
    n, cin, d, h, w = reading(x.shape)
    _, cout, do, ho, wo = reading(y.shape)
    return {
        "op": op,
        "batch": n,
        "cin": cin,
        "d": d,
        "h": h,
        "w": w,
        "cout": cout,
        "do": do,
        "ho": ho,
        "wo": wo,
        "kernel": 1,
        "kernel_w": 1,
        "kernel_d": 1,
        "stride": 1,
        "padding": 0,
        "dilation": 1,
        "groups": 1,
        "geometry": "",
    }


def _cf_base(op: str, x: Any, y: Any, rank: int) -> dict[str, Any] | None:
    """:func:`_base` with both tensors read channels first at ``rank`` (``None``: another rank)."""
    a, b = channels_first(x.shape, rank), channels_first(y.shape, rank)
    if a is None or b is None:
        return None
    out = _base(op, x, y)
    out.update(batch=a[0], cin=a[1], d=a[2], h=a[3], w=a[4], cout=b[1], do=b[2], ho=b[3], wo=b[4])
    return out


def _unknown(x: Any, y: Any) -> dict[str, Any]:
    return _base("unknown", x, y)


def _windows(
    out: dict[str, Any], k: tuple[int, ...], s: tuple[int, ...], p: tuple[int, ...], d: tuple[int, ...]
) -> None:
    """Set the scalar window columns (height direction; depth kernel of a 3-D op) from full tuples."""
    out["kernel"] = _along_h(k)
    out["kernel_w"] = k[-1] if len(k) >= 2 else 1
    out["kernel_d"] = k[0] if len(k) == 3 else 1
    out["stride"], out["padding"], out["dilation"] = _along_h(s), _along_h(p), _along_h(d)


def conv(
    op: str,
    x: Any,
    y: Any,
    kernel: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    output_padding: Any = None,
    padding_mode: str = "zeros",
    padding_end: Any = None,
) -> dict[str, Any]:
    """A convolution's (or transposed one's) reading; ``unknown`` where its tensors have another rank.

    ``padding_end``: the padding after each dimension where it differs from the one before
    (an ONNX file's asymmetric ``pads``; the geometry then says ``p=before:after``).
    """
    rank = RANK.get(op, 2)
    out = _cf_base(op, x, y, rank)
    if out is None:
        return _unknown(x, y)
    k, s, d = _tuple(kernel, rank), _tuple(stride, rank), _tuple(dilation, rank)
    if isinstance(padding, str):  # "same": as much on each side as the kernel spans (the extra one after)
        p = tuple(di * (ki - 1) // 2 for ki, di in zip(k, d)) if padding == "same" else (0,) * rank
        ptext: Any = padding
    else:
        p = ptext = _tuple(padding, rank)
        if padding_end is not None and _tuple(padding_end, rank) != p:
            ptext = f"{_text(p)}:{_text(_tuple(padding_end, rank))}"
    _windows(out, k, s, p, d)
    out["groups"] = int(groups)
    g = {"k": k, "s": s, "p": ptext, "d": d, "g": int(groups)}
    if op in _CONVT:
        g["op"] = _tuple(output_padding if output_padding is not None else 0, rank)
    if padding_mode != "zeros":
        g["pm"] = padding_mode
    out["geometry"] = text(**g)
    return out


def pool(
    op: str,
    x: Any,
    y: Any,
    kernel: Any,
    stride: Any,
    padding: Any,
    dilation: Any = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    indices: bool = False,
    divisor: Any = None,
    padding_end: Any = None,
) -> dict[str, Any]:
    """A max or average pooling's reading (a missing or empty stride is the kernel, as in torch).

    ``unknown`` where it returns its indices (another kernel), divides by a fixed divisor, or
    its tensors have another rank. ``padding_end``: as :func:`conv`'s.
    """
    rank = RANK.get(op, 2)
    out = _cf_base(op, x, y, rank)
    if out is None or indices or divisor is not None:
        return _unknown(x, y)
    k = _tuple(kernel, rank)
    s = _tuple(stride if stride not in (None, [], ()) else kernel, rank)
    p, d = _tuple(padding if padding is not None else 0, rank), _tuple(dilation if dilation is not None else 1, rank)
    _windows(out, k, s, p, d)
    ptext: Any = p
    if padding_end is not None and _tuple(padding_end, rank) != p:
        ptext = f"{_text(p)}:{_text(_tuple(padding_end, rank))}"
    if op in _MAXPOOL:
        out["geometry"] = text(k=k, s=s, p=ptext, d=d, ceil=bool(ceil_mode))
    else:
        out["geometry"] = text(k=k, s=s, p=ptext, ceil=bool(ceil_mode), count_include_pad=bool(count_include_pad))
    return out


def adaptive(op: str, x: Any, y: Any) -> dict[str, Any]:
    """An adaptive average pooling: ``gap`` to one value per channel, else an average pooling of equal windows.

    An output size that divides the input's is an average pooling of kernel = stride = their
    ratio (``adaptive=1`` in its geometry); any other has windows of unequal sizes: ``unknown``.
    """
    rank = RANK.get(op, 2)
    out = _cf_base(op, x, y, rank)
    if out is None:
        return _unknown(x, y)
    ins, outs = tuple(x.shape[-rank:]), tuple(y.shape[-rank:])
    if all(o == 1 for o in outs):
        return out
    if any(o < 1 or i % o for i, o in zip(ins, outs)):
        return _unknown(x, y)
    k = tuple(i // o for i, o in zip(ins, outs))
    pooled = {"gap": "avgpool", "gap1d": "avgpool1d", "gap3d": "avgpool3d"}[op]
    out["op"] = pooled
    _windows(out, k, k, (0,) * rank, (1,) * rank)
    out["geometry"] = text(k=k, s=k, p=(0,) * rank, ceil=False, count_include_pad=True, adaptive=True)
    return out


def upsample(x: Any, y: Any, mode: str, align_corners: Any, scale: Any, size: Any, antialias: bool = False) -> dict:
    """An interpolation of a 4-D tensor: ``upsample_nearest`` or ``upsample_bilinear`` (other modes, ranks: unknown)."""
    op = {"nearest": "upsample_nearest", "bilinear": "upsample_bilinear"}.get(str(mode))
    out = _cf_base(op or "unknown", x, y, 2) if x.dim() == 4 else None
    if op is None or out is None or antialias:
        return _unknown(x, y)
    g: dict[str, Any] = {}
    if scale is not None:
        g["scale"] = tuple(float(v) for v in (scale if isinstance(scale, (tuple, list)) else (scale, scale)))
    else:
        g["size"] = (out["ho"], out["wo"])
    if op == "upsample_bilinear":
        g["align_corners"] = bool(align_corners)
    out["geometry"] = text(**g)
    return out


def norm(op: str, x: Any, y: Any, **g: Any) -> dict[str, Any]:
    """A BN, group or instance norm: channels first at the input's own rank."""
    out = _cf_base(op, x, y, min(x.dim() - 2, 3)) if x.dim() >= 3 else None
    if out is None:  # (N, C): the generic reading
        out = _base(op, x, y)
    if op == "groupnorm":
        out["groups"] = int(g["groups"])
    out["geometry"] = text(**g)
    return out


def linear(x: Any, y: Any) -> dict[str, Any]:
    """A linear layer: its features are the last dimension, the dimensions between batch and features its rows.

    ``(N, C)`` is one row per image; ``(N, L, C)`` tokens and ConvNeXt's channels-last
    ``(N, H, W, C)`` MLP are ``h = L`` (``H * W``) rows of ``C`` features.
    """
    out = _base("linear", x, y)
    if x.dim() >= 4:
        xs, ys = tuple(x.shape), tuple(y.shape)
        rows, rows_out = int(math.prod(xs[1:-1])), int(math.prod(ys[1:-1]))
        out.update(batch=xs[0], cin=xs[-1], d=1, h=rows, w=1, cout=ys[-1], do=1, ho=rows_out, wo=1)
    return out


def layernorm(x: Any, y: Any, normalized: Sequence[int], affine: bool) -> dict[str, Any]:
    """A layer norm: ``cin`` = the elements normalized together, ``h`` = how many such rows an image has.

    Channels last (``LayerNorm(C)`` on ``(N, H, W, C)``): ``cin = C``, ``h = H * W``; over a whole
    sample (``LayerNorm((C, H, W))`` on ``(N, C, H, W)``, GroupNorm(1)'s reduction): ``cin = C * H * W``, ``h = 1``.
    Of a non-contiguous view (``contiguous=0`` in its geometry) its kernel copies the input first.
    """
    out = _base("layernorm", x, y)
    feat = int(math.prod(normalized)) or 1
    n = x.shape[0] if x.dim() > len(normalized) else 1
    rows = int(x.numel() // max(n * feat, 1))
    out.update(batch=n, cin=feat, d=1, h=rows, w=1, cout=feat, do=1, ho=rows, wo=1)
    g: dict[str, Any] = {"normalized": tuple(int(v) for v in normalized), "affine": bool(affine)}
    if not x.is_contiguous():  # a permuted view (torchvision's LayerNorm2d): the kernel copies it first
        g["contiguous"] = False
    out["geometry"] = text(**g)
    return out


def softmax_dim(ndim: int, dim: Any) -> int:
    """The dimension a softmax normalizes, counted from the first.

    ``dim`` ``None``: PyTorch's implicit one (the first of a 0-, 1- or 3-D tensor, else the second).
    """
    if ndim == 0:
        return 0
    if dim is None:
        return 0 if ndim in (0, 1, 3) else 1
    return int(dim) % ndim


def softmax(x: Any, y: Any, dim: int, row: int | None = None) -> dict[str, Any]:
    """A softmax over dimension ``dim`` of ``x``: the generic layout, and its rows in the geometry.

    ``row=N``: the elements normalized together (``x.shape[dim]``, or ``row`` where a runtime
    normalizes several dimensions together); over another dimension than the last, ``inner=M``:
    the elements after it, which the kernel strides over (another kernel than the last
    dimension's, whose cost is per row: a row shorter than the vector width runs scalar).
    """
    out = _base("softmax", x, y)
    shape = tuple(int(v) for v in x.shape)
    n = row if row is not None else (shape[dim] if shape else 1)
    inner = int(math.prod(shape[dim + 1 :])) if row is None and shape else 1
    out["geometry"] = text(row=n, inner=inner) if inner > 1 else text(row=n)
    return out


def pad(op: str, x: Any, y: Any, amounts: Sequence[int], value: Any = None) -> dict[str, Any]:
    """A pad: channels first at the rank its amounts pad (two per padded dimension, the last dimension first)."""
    amounts = tuple(int(v) for v in amounts)
    rank = max(len(amounts) // 2, 1)
    out = _cf_base(op, x, y, rank) if x.dim() in (rank + 1, rank + 2) else None
    if out is None:
        out = _base(op, x, y)
    out["padding"] = amounts[0] if amounts else 0
    g: dict[str, Any] = {"pad": ",".join(map(str, amounts))}
    if op == "pad" and value not in (None, 0, 0.0):
        g["value"] = float(value)
    out["geometry"] = text(**g)
    return out


def shuffle(op: str, x: Any, y: Any, r: int) -> dict[str, Any]:
    """A pixel (un)shuffle by factor ``r``."""
    out = _cf_base(op, x, y, 2) if x.dim() in (3, 4) else None
    if out is None:
        return _unknown(x, y)
    out["geometry"] = text(r=int(r))
    return out


def sdpa(q: Any, k: Any, v: Any, y: Any, causal: bool, mask: bool) -> dict[str, Any]:
    """Scaled dot-product attention on ``(N, heads, L, E)`` (3-D: one head): ``cin`` = heads, ``h`` = L, ``w`` = E."""
    out = _base("sdpa", q, y)
    qs = tuple(q.shape)
    if len(qs) < 3:
        return _unknown(q, y)
    heads = qs[-3] if len(qs) >= 4 else 1
    n = int(math.prod(qs[:-3])) if len(qs) >= 4 else qs[0]
    lq, e, lk, ev = qs[-2], qs[-1], k.shape[-2], v.shape[-1]
    out.update(batch=n, cin=heads, d=1, h=lq, w=e, cout=heads, do=1, ho=lq, wo=ev)
    out["geometry"] = text(heads=heads, Lq=lq, Lk=lk, E=e, Ev=ev, causal=bool(causal), mask=bool(mask))
    return out


def mha(mod: Any, q: Any, k: Any, y: Any, need_weights: bool) -> dict[str, Any]:
    """``nn.MultiheadAttention``: ``cin`` = embedding, ``h`` = query length."""
    out = _base("mha", q, y)
    qs = tuple(q.shape)
    if len(qs) == 2:
        n, lq, lk = 1, qs[0], k.shape[0]
    elif len(qs) == 3:
        n, lq = (qs[0], qs[1]) if mod.batch_first else (qs[1], qs[0])
        lk = k.shape[1] if mod.batch_first else k.shape[0]
    else:
        return _unknown(q, y)
    e = int(mod.embed_dim)
    out.update(batch=n, cin=e, d=1, h=lq, w=1, cout=e, do=1, ho=lq, wo=1)
    out["geometry"] = text(
        embed=e,
        heads=int(mod.num_heads),
        Lq=lq,
        Lk=lk,
        kdim=int(mod.kdim),
        vdim=int(mod.vdim),
        batch_first=bool(mod.batch_first),
        need_weights=bool(need_weights),
    )
    return out


def recurrent(
    op: str,
    x: Any,
    y: Any,
    input_size: int,
    hidden: int,
    layers: int = 1,
    bidirectional: bool = False,
    batch_first: bool = False,
    proj: int = 0,
    bias: bool = True,
    nonlinearity: str | None = None,
) -> dict[str, Any]:
    """An LSTM, GRU or RNN: ``cin`` = input features, ``h`` = steps, ``cout`` = its output's features."""
    out = _base(op, x, y)
    s = tuple(x.shape)
    if len(s) == 2:
        n, steps = 1, s[0]
    elif len(s) == 3:
        n, steps = (s[0], s[1]) if batch_first else (s[1], s[0])
    else:
        return _unknown(x, y)
    dirs = 2 if bidirectional else 1
    out.update(batch=n, cin=int(input_size), d=1, h=steps, w=1, cout=(proj or hidden) * dirs, do=1, ho=steps, wo=1)
    g: dict[str, Any] = {
        "hidden": int(hidden),
        "layers": int(layers),
        "bidirectional": bool(bidirectional),
        "batch_first": bool(batch_first),
    }
    if proj:
        g["proj"] = int(proj)
    if not bias:
        g["bias"] = False
    if nonlinearity is not None:
        g["nonlinearity"] = str(nonlinearity)
    out["geometry"] = text(**g)
    return out


def recurrent_flops(op: str, input_size: int, hidden: int, layers: int, bidirectional: bool, steps: int, n: int) -> int:
    """FLOP of a recurrent layer: ``2 * gates * (input + hidden) * hidden`` per step, direction, layer and image.

    Layers after the first take the previous layer's output (``hidden * directions`` features);
    the count is ``FlopCounterMode``'s on the matrix products the layer runs (biases not counted).
    """
    gates, dirs = _RNN_GATES[op], 2 if bidirectional else 1
    total = 0
    for layer in range(int(layers)):
        fin = input_size if layer == 0 else hidden * dirs
        total += 2 * gates * (fin + hidden) * hidden * dirs
    return int(total * steps * n)


# --------------------------------------------------------------------------- dispatch


def _bind(node: Any, name: str) -> dict[str, Any]:
    """A traced call's arguments by name (positional ones by :data:`_SIGNATURES`), its tensors as fx nodes."""
    aten = repr(node.target).startswith("aten.")
    names = (_ATEN_SIGNATURES.get(name) if aten else None) or _SIGNATURES.get(name, ())
    out = dict(zip(names, node.args))
    out.update(node.kwargs)
    return out


def _module(op: str, mod: Any, node: Any, ins: list[Any], x: Any, y: Any) -> dict[str, Any]:
    kind = type(mod).__name__
    if op in _CONV or op in _CONVT:
        return conv(
            op,
            x,
            y,
            mod.kernel_size,
            mod.stride,
            mod.padding,
            mod.dilation,
            mod.groups,
            getattr(mod, "output_padding", None) if op in _CONVT else None,
            getattr(mod, "padding_mode", "zeros"),
        )
    if op in _MAXPOOL:
        return pool(
            op,
            x,
            y,
            mod.kernel_size,
            mod.stride,
            mod.padding,
            mod.dilation,
            mod.ceil_mode,
            indices=bool(getattr(mod, "return_indices", False)),
        )
    if op in _AVGPOOL:
        return pool(
            op,
            x,
            y,
            mod.kernel_size,
            mod.stride,
            mod.padding,
            1,
            mod.ceil_mode,
            getattr(mod, "count_include_pad", True),
            divisor=getattr(mod, "divisor_override", None),
        )
    if op in _GAP:
        return adaptive(op, x, y)
    if op == "upsample_nearest":  # nn.Upsample and its subclasses
        return upsample(x, y, mod.mode, mod.align_corners, mod.scale_factor, mod.size)
    if op == "layernorm":
        return layernorm(x, y, tuple(mod.normalized_shape), bool(mod.elementwise_affine))
    if op == "groupnorm":
        return norm(op, x, y, groups=int(mod.num_groups), affine=bool(mod.affine))
    if op == "instancenorm":
        return norm(op, x, y, track=bool(mod.track_running_stats))
    if op == "bn":
        return norm(op, x, y)
    if op in ("pixelshuffle", "pixelunshuffle"):
        return shuffle(op, x, y, getattr(mod, "upscale_factor", None) or getattr(mod, "downscale_factor", 1))
    if op in ("pad", "pad_reflect", "pad_replicate"):
        return pad(op, x, y, mod.padding, getattr(mod, "value", None))
    if op == "mha":
        a = list(node.args) + [None] * 5
        need = node.kwargs.get("need_weights", a[4] if a[4] is not None else True)
        return mha(mod, ins[0], ins[1] if len(ins) > 1 else ins[0], y, bool(need))
    if op in _RNN_GATES:
        return recurrent(
            op,
            x,
            y,
            mod.input_size,
            mod.hidden_size,
            mod.num_layers,
            mod.bidirectional,
            mod.batch_first,
            int(getattr(mod, "proj_size", 0) or 0),
            bool(mod.bias),
            mod.nonlinearity if op == "rnn" else None,
        )
    del kind
    return _base(op, x, y)


def _call(op: str, name: str, node: Any, ins: list[Any], x: Any, y: Any) -> dict[str, Any]:
    if name == "mean":  # read by the caller, which knows the dimensions it averages
        return _base(op, x, y)
    a = _bind(node, name)
    if op in _CONV or op in _CONVT:
        if len(ins) < 2:
            return _unknown(x, y)
        rank = RANK.get(op, 2)
        wt = ins[1]
        if wt.dim() != rank + 2:
            return _unknown(x, y)
        groups = a.get("groups") if a.get("groups") is not None else 1
        return conv(
            op,
            x,
            y,
            tuple(wt.shape[2:]),
            a.get("stride") if a.get("stride") is not None else 1,
            a.get("padding") if a.get("padding") is not None else 0,
            a.get("dilation") if a.get("dilation") is not None else 1,
            int(groups),
            a.get("output_padding") if a.get("output_padding") is not None else 0,
        )
    if op in _MAXPOOL or op in _AVGPOOL:
        if "kernel_size" not in a:
            return _unknown(x, y)
        maxp = op in _MAXPOOL
        return pool(
            op,
            x,
            y,
            a["kernel_size"],
            a.get("stride"),
            a.get("padding", 0),
            a.get("dilation", 1) if maxp else 1,
            bool(a.get("ceil_mode", False)),
            True if maxp else bool(a.get("count_include_pad", True)),
            indices=bool(a.get("return_indices", False)),
            divisor=None if maxp else a.get("divisor_override"),
        )
    if op in _GAP:
        return adaptive(op, x, y)
    if op in ("upsample_nearest", "upsample_bilinear"):
        if name.startswith("upsample_"):  # the ATen operator of an exported graph
            mode = "nearest" if name.startswith("upsample_nearest") else "bilinear"
            scale = a.get("scale_factors")
            return upsample(x, y, mode, a.get("align_corners"), scale, a.get("output_size"))
        return upsample(
            x, y, a.get("mode", "nearest"), a.get("align_corners"), a.get("scale_factor"), a.get("size"),
            bool(a.get("antialias", False)),
        )  # fmt: skip
    if op == "layernorm":
        ns = a.get("normalized_shape")
        if ns is None:
            return _unknown(x, y)
        ns = (int(ns),) if isinstance(ns, int) else tuple(int(v) for v in ns)
        return layernorm(x, y, ns, a.get("weight") is not None)
    if op == "groupnorm":
        if a.get("num_groups") is None:
            return _unknown(x, y)
        return norm(op, x, y, groups=int(a["num_groups"]), affine=a.get("weight") is not None)
    if op == "instancenorm":
        track = a.get("running_mean") is not None and a.get("use_input_stats") is False
        return norm(op, x, y, track=track)
    if op == "bn":
        return norm(op, x, y)
    if op in ("pixelshuffle", "pixelunshuffle"):
        r = a.get("upscale_factor", a.get("downscale_factor"))
        return shuffle(op, x, y, int(r)) if r is not None else _unknown(x, y)
    if op in ("pad", "pad_reflect", "pad_replicate"):
        amounts = a.get("pad", a.get("padding"))
        if amounts is None:
            return _unknown(x, y)
        mode = a.get("mode", "constant") or "constant"
        op = {"constant": "pad", "reflect": "pad_reflect", "replicate": "pad_replicate"}.get(mode, "unknown")
        if op == "unknown":
            return _unknown(x, y)
        return pad(op, x, y, amounts, a.get("value"))
    if op == "sdpa":
        if len(ins) < 3:
            return _unknown(x, y)
        return sdpa(ins[0], ins[1], ins[2], y, bool(a.get("is_causal", False)), a.get("attn_mask") is not None)
    return _base(op, x, y)


#: Ops whose reading :func:`read` gives by the generic layout alone.
_PLAIN: frozenset[str] = frozenset(
    {"relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh", "mish", "add", "mul", "cat"}
    | {"copy", "view", "unknown", "matmul"}
)


def read(op: str, name: str, node: Any, mod: Any, ins: list[Any], outs: list[Any]) -> dict[str, Any]:
    """The reading of one node (see the module docstring).

    A node whose data input is laid out channels last says so in its geometry (``cl=1``): many
    ops run other kernels on that layout (:data:`carb.netmodel.roofline.LAYOUT_FREE`).

    Args:
        op: the op type its module or function maps to.
        name: its function's or method's name (``interpolate``, ``upsample_nearest2d``); ignored for a module.
        node: the traced node (its call's arguments).
        mod: the module it calls, or ``None``.
        ins: its input tensors (meta), the data input first.
        outs: its output tensors (meta).

    Returns:
        ``op`` and the reading columns of :data:`carb.graph.table.COLUMNS`.

    """
    x = ins[0] if ins else outs[0]
    out = _read(op, name, node, mod, ins, x, outs[0])
    if op == "copy":
        out["geometry"] = copy_text(x)
    # a 2-D convolution runs its channels-last kernels for a channels-last weight too
    weight = getattr(mod, "weight", None) if mod is not None else (ins[1] if len(ins) > 1 else None)
    if channels_last(x) or (out["op"] in ("conv", "convtranspose") and channels_last(weight)):
        out["geometry"] = f"{out['geometry']} cl=1".lstrip()
    return out


def _read(op: str, name: str, node: Any, mod: Any, ins: list[Any], x: Any, y: Any) -> dict[str, Any]:
    if op in _PLAIN:
        return _base(op, x, y)
    if op == "softmax":
        dim = getattr(mod, "dim", None) if mod is not None else _bind(node, name).get("dim")
        return softmax(x, y, softmax_dim(x.dim(), dim))
    if op == "linear":
        return linear(x, y)
    f: Callable[..., dict[str, Any]] = _module if mod is not None else _call
    try:
        return f(op, mod, node, ins, x, y) if mod is not None else f(op, name, node, ins, x, y)
    except (AttributeError, TypeError, ValueError, IndexError):  # parameters this reader cannot tell
        return _unknown(x, y)


def channels_first_reading(op: str, x: Any, y: Any) -> dict[str, Any]:
    """``op`` with its input read channels first at its own rank, its output generically (a reduction's)."""
    out = _base(op, x, y)
    a = channels_first(x.shape, min(max(x.dim() - 2, 1), 3))
    if a is not None:
        out.update(batch=a[0], cin=a[1], d=a[2], h=a[3], w=a[4])
    return out
