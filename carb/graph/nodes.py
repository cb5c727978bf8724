"""How one traced node is run and recorded: operator types, meta copies, closed forms, rows.

A node runs on **meta** tensors, so no weight or activation is allocated. The common CNN
nodes (conv2d, 2-D linear, pooling, BN, activations, element-wise add/mul, cat on
contiguous tensors) get their output shape and FLOP from closed forms (the formulas
``FlopCounterMode`` uses); any other node runs on meta tensors, under a dispatch mode that
adds up FlopCounterMode's formulas where an operator may have one. :func:`_row` turns a node
and its tensors into a row of :class:`carb.graph.table.LayerTable`.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

from carb.graph import _geometry
from carb.graph.table import FLOP_OPS, KNOWN_OPS

_MODULE_OPS = {
    "Conv1d": "conv1d",
    "Conv2d": "conv",
    "Conv3d": "conv3d",
    "ConvTranspose1d": "convtranspose1d",
    "ConvTranspose2d": "convtranspose",
    "ConvTranspose3d": "convtranspose3d",
    "Linear": "linear",
    "LazyLinear": "linear",
    "MultiheadAttention": "mha",
    "LSTM": "lstm",
    "GRU": "gru",
    "RNN": "rnn",
    "BatchNorm1d": "bn",
    "BatchNorm2d": "bn",
    "BatchNorm3d": "bn",
    "LayerNorm": "layernorm",
    "GroupNorm": "groupnorm",
    "InstanceNorm1d": "instancenorm",
    "InstanceNorm2d": "instancenorm",
    "InstanceNorm3d": "instancenorm",
    "ReLU": "relu",
    "ReLU6": "relu6",
    "Hardtanh": "relu6",
    "LeakyReLU": "relu",
    "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid",
    "Sigmoid": "sigmoid",
    "SiLU": "silu",
    "GELU": "gelu",
    "Tanh": "tanh",
    "Mish": "mish",
    "MaxPool1d": "maxpool1d",
    "MaxPool2d": "maxpool",
    "MaxPool3d": "maxpool3d",
    "AvgPool1d": "avgpool1d",
    "AvgPool2d": "avgpool",
    "AvgPool3d": "avgpool3d",
    "AdaptiveAvgPool1d": "gap1d",
    "AdaptiveAvgPool2d": "gap",
    "AdaptiveAvgPool3d": "gap3d",
    # nn.Upsample and its subclasses; the mode decides the op (carb.graph._geometry.upsample)
    "Upsample": "upsample_nearest",
    "UpsamplingNearest2d": "upsample_nearest",
    "UpsamplingBilinear2d": "upsample_nearest",
    "PixelShuffle": "pixelshuffle",
    "PixelUnshuffle": "pixelunshuffle",
    "ZeroPad1d": "pad",
    "ZeroPad2d": "pad",
    "ZeroPad3d": "pad",
    "ConstantPad1d": "pad",
    "ConstantPad2d": "pad",
    "ConstantPad3d": "pad",
    "ReflectionPad1d": "pad_reflect",
    "ReflectionPad2d": "pad_reflect",
    "ReflectionPad3d": "pad_reflect",
    "ReplicationPad1d": "pad_replicate",
    "ReplicationPad2d": "pad_replicate",
    "ReplicationPad3d": "pad_replicate",
    "Softmax": "softmax",
    "Dropout": "view",
    "Dropout2d": "view",
    "Identity": "view",
    "Flatten": "view",
    "Unflatten": "view",
}
_FUNCTION_OPS = {
    "relu": "relu",
    "relu_": "relu",
    "relu6": "relu6",
    "hardtanh": "relu6",
    "hardtanh_": "relu6",
    "leaky_relu": "relu",
    "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid",
    "sigmoid": "sigmoid",
    "sigmoid_": "sigmoid",
    "silu": "silu",
    "silu_": "silu",
    "gelu": "gelu",
    "gelu_": "gelu",
    "tanh": "tanh",
    "tanh_": "tanh",
    "mish": "mish",
    "mish_": "mish",
    "hardswish_": "hardswish",
    "hardsigmoid_": "hardsigmoid",
    "leaky_relu_": "relu",
    "conv1d": "conv1d",
    "conv2d": "conv",
    "conv3d": "conv3d",
    "conv_transpose1d": "convtranspose1d",
    "conv_transpose2d": "convtranspose",
    "conv_transpose3d": "convtranspose3d",
    "linear": "linear",
    "matmul": "matmul",
    "bmm": "matmul",
    "mm": "matmul",
    "scaled_dot_product_attention": "sdpa",
    "batch_norm": "bn",
    "layer_norm": "layernorm",
    "group_norm": "groupnorm",
    "instance_norm": "instancenorm",
    "max_pool1d": "maxpool1d",
    "max_pool2d": "maxpool",
    "max_pool3d": "maxpool3d",
    "avg_pool1d": "avgpool1d",
    "avg_pool2d": "avgpool",
    "avg_pool3d": "avgpool3d",
    "adaptive_avg_pool1d": "gap1d",
    "adaptive_avg_pool2d": "gap",
    "adaptive_avg_pool3d": "gap3d",
    # the mode decides the op (carb.graph._geometry.upsample); the ATen names are torch.export's
    "interpolate": "upsample_nearest",
    "upsample": "upsample_nearest",
    "upsample_nearest2d": "upsample_nearest",
    "upsample_bilinear2d": "upsample_bilinear",
    "pixel_shuffle": "pixelshuffle",
    "pixel_unshuffle": "pixelunshuffle",
    # the mode decides the op (carb.graph._geometry.pad)
    "pad": "pad",
    "constant_pad_nd": "pad",
    "reflection_pad1d": "pad_reflect",
    "reflection_pad2d": "pad_reflect",
    "reflection_pad3d": "pad_reflect",
    "replication_pad1d": "pad_replicate",
    "replication_pad2d": "pad_replicate",
    "replication_pad3d": "pad_replicate",
    "add": "add",
    "iadd": "add",
    "add_": "add",
    "sub": "add",
    "mul": "mul",
    "imul": "mul",
    "mul_": "mul",
    "truediv": "mul",
    "div": "mul",
    "cat": "cat",
    "concat": "cat",
    "contiguous": "copy",
    "clone": "copy",
    "softmax": "softmax",
    "mean": "gap",
    "dropout": "view",
    "flatten": "view",
    "view": "view",
    "reshape": "view",
    "transpose": "view",
    "permute": "view",
    "squeeze": "view",
    "unsqueeze": "view",
    "getitem": "view",
    "chunk": "view",
    "split": "view",
    "expand": "view",
    "identity": "view",
}
_ACT_FUNCS = ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh", "mish")

_SHAPE_KEEPING = frozenset({"bn", *_ACT_FUNCS})


def _meta(t: Any, dtype: Any) -> Any:
    """A meta tensor like ``t`` (floating ones cast to ``dtype`` when given); other objects as they are."""
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    dt = dtype if dtype is not None and t.is_floating_point() else t.dtype
    if t.is_meta and t.dtype == dt:
        return t
    return torch.empty_strided(t.shape, t.stride(), dtype=dt, device="meta")  # a channels-last weight stays one


def _meta_module(mod: Any, dtype: Any, shims: dict[int, Any]) -> Any:
    """A shallow copy of a leaf module whose own parameters and buffers are meta tensors.

    The user's module is never modified and no weight is copied; ``shims`` caches the copies.
    """
    import torch

    got = shims.get(id(mod))
    if got is not None:
        return got
    own = list(mod._parameters.values()) + list(mod._buffers.values())
    children = any(c is not None for c in mod._modules.values())  # children() walks named_children: slow
    if not children and all(
        t is None or (t.is_meta and (dtype is None or not t.is_floating_point() or t.dtype == dtype)) for t in own
    ):
        shim = mod
    else:
        shim = copy.copy(mod)  # leaves are called whole: a leaf with children is copied deeply
        if children:
            shim = copy.deepcopy(
                mod,
                {
                    id(t): (
                        torch.nn.Parameter(_meta(t, dtype), requires_grad=False)
                        if isinstance(t, torch.nn.Parameter)
                        else _meta(t, dtype)
                    )
                    for t in list(mod.parameters()) + list(mod.buffers())
                },
            )
        else:
            shim._parameters = {
                k: (None if v is None else torch.nn.Parameter(_meta(v, dtype), requires_grad=False))
                for k, v in mod._parameters.items()
            }
            shim._buffers = {k: (None if v is None else _meta(v, dtype)) for k, v in mod._buffers.items()}
    shim.eval()
    shims[id(mod)] = shim
    return shim


def _flop_mode() -> Any:
    """A dispatch mode that adds up FlopCounterMode's formulas over the aten ops it sees."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class _Flops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.flops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            f = flop_registry.get(func._overloadpacket)
            if f is not None:
                self.flops += int(f(*args, **kwargs, out_val=out))
            return out

    del torch
    return _Flops()


# Operator types that dispatch no aten operator with a FLOP formula (FlopCounterMode counts
# only matrix products, convolutions and attention): run without the counting mode, whose
# Python dispatch of every aten call costs a third of the capture time.
_NO_FLOPS = frozenset(KNOWN_OPS) - FLOP_OPS

# Closed forms. Running a node on meta tensors goes through torch's Python meta kernels and
# decompositions (0.1-1 ms a node); the output of the common CNN nodes is a contiguous tensor
# whose shape and FLOP count follow from a formula. Each fast path below only applies where
# its formula is exactly what the real operator gives (contiguous inputs, plain arguments);
# anything else runs on meta. tests/graph/test_graph.py checks both agree.


def _plain(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_meta and t.is_contiguous()


def _torch_own(target: Any) -> bool:
    """Whether ``target`` is a function of torch or of ``operator``, not a user's function with a torch-like name."""
    if isinstance(target, str):
        return True  # a method name: called on a tensor
    mod = getattr(target, "__module__", None) or ""
    return mod in ("_operator", "operator", "builtins") or mod == "torch" or mod.startswith("torch.")


def _like(x: Any) -> Any:
    """``torch.empty_like`` of a contiguous meta tensor.

    ``empty_like`` itself goes through a Python decomposition on meta: 50x slower.
    """
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _call_op(target: Any) -> str | None:
    """The operator type of a call_function/call_method target, if it is torch's own."""
    if not _torch_own(target):
        return None
    return _FUNCTION_OPS.get(_name(target).removeprefix("__").removesuffix("__"))


def _pool_len(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """The output length of a pooling: torch's pooling_output_shape (aten/src/ATen/native/Pool.h)."""
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    out = num // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _cast(t: Any, dtype: Any) -> Any:
    """The dtype ``t`` has once :func:`_meta` casts it to ``dtype``."""
    return dtype if dtype is not None and t.is_floating_point() else t.dtype


def _fast_module(mod: Any, op: str | None, args: Any, kwargs: Any, dtype: Any = None) -> tuple[Any, int] | None:
    """(output, FLOP) of a standard module call by formula, or None (run it instead).

    ``mod`` is the user's module; ``dtype``: the precision its floating tensors are cast to.
    """
    import torch

    if kwargs or len(args) != 1 or not _plain(args[0]):
        return None
    weight = getattr(mod, "weight", None)
    if isinstance(weight, torch.Tensor) and not weight.is_contiguous():
        return None  # a channels-last weight makes a channels-last output: run it
    x = args[0]
    if op in _SHAPE_KEEPING:
        # BN and activations keep the shape and have no FLOP formula (BN on meta tensors
        # goes through slow Python decompositions)
        return (x if getattr(mod, "inplace", False) else _like(x)), 0
    kind = type(mod).__name__
    if (
        kind == "Conv2d"
        and x.dim() == 4
        and isinstance(mod.padding, tuple)
        and mod.padding_mode == "zeros"
        and _cast(mod.weight, dtype) == x.dtype
        and x.shape[1] == mod.in_channels
    ):
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = mod.kernel_size, mod.stride, mod.padding, mod.dilation
        n, _, h, w = x.shape
        ho, wo = _pool_len(h, kh, sh, ph, dh, False), _pool_len(w, kw, sw, pw, dw, False)
        if ho < 1 or wo < 1:
            return None
        cout = mod.out_channels
        # torch.utils.flop_counter.conv_flop_count: 2 x batch x output positions x
        # filter size x c_out x c_in per group (the bias is not counted)
        flops = 2 * n * ho * wo * kh * kw * cout * (mod.in_channels // mod.groups)
        return torch.empty((n, cout, ho, wo), dtype=x.dtype, device="meta"), flops
    if kind in _CONV_RANK or kind in _CONVT_RANK:
        return _fast_conv(mod, kind, x, dtype)
    if kind in ("LSTM", "GRU", "RNN"):
        return _fast_recurrent(mod, kind, x, dtype)
    if kind == "Linear" and x.dim() == 2 and x.shape[1] == mod.in_features and _cast(mod.weight, dtype) == x.dtype:
        # addmm (bias) or mm (no bias): mm_flop = 2 m n k
        return (
            torch.empty((x.shape[0], mod.out_features), dtype=x.dtype, device="meta"),
            2 * x.shape[0] * mod.in_features * mod.out_features,
        )
    if kind in ("MaxPool2d", "AvgPool2d") and x.dim() == 4 and not getattr(mod, "return_indices", False):
        k, s, p = _pair(mod.kernel_size), _pair(mod.stride if mod.stride else mod.kernel_size), _pair(mod.padding)
        d = _pair(getattr(mod, "dilation", 1))
        n, c, h, w = x.shape
        ho = _pool_len(h, k[0], s[0], p[0], d[0], mod.ceil_mode)
        wo = _pool_len(w, k[1], s[1], p[1], d[1], mod.ceil_mode)
        if ho < 1 or wo < 1 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
            return None  # torch raises: let it
        return torch.empty((n, c, ho, wo), dtype=x.dtype, device="meta"), 0
    if kind == "AdaptiveAvgPool2d" and x.dim() == 4:
        o = mod.output_size
        o = (o, o) if not isinstance(o, (tuple, list)) else tuple(o)
        n, c, h, w = x.shape
        ho, wo = (h if o[0] is None else int(o[0])), (w if o[-1] is None else int(o[-1]))
        return torch.empty((n, c, ho, wo), dtype=x.dtype, device="meta"), 0
    return None


_CONV_RANK = {"Conv1d": 1, "Conv3d": 3}
_CONVT_RANK = {"ConvTranspose1d": 1, "ConvTranspose2d": 2, "ConvTranspose3d": 3}


def _fast_conv(mod: Any, kind: str, x: Any, dtype: Any) -> tuple[Any, int] | None:
    """(output, FLOP) of a 1-D or 3-D convolution, or a transposed one of any rank, by formula (None: run it).

    torch's output sizes; ``torch.utils.flop_counter.conv_flop_count``: 2 x batch x filter
    size x c_out x c_in per group x the output's positions (a transposed one: the input's).
    """
    import torch

    transposed = kind in _CONVT_RANK
    rank = _CONVT_RANK[kind] if transposed else _CONV_RANK[kind]
    if (
        x.dim() != rank + 2
        or not isinstance(mod.padding, tuple)
        or mod.padding_mode != "zeros"
        or _cast(mod.weight, dtype) != x.dtype
        or x.shape[1] != mod.in_channels
    ):
        return None
    n, spatial = x.shape[0], tuple(x.shape[2:])
    k, s, p, d = mod.kernel_size, mod.stride, mod.padding, mod.dilation
    if transposed:
        dims = zip(spatial, k, s, p, d, mod.output_padding)
        out = tuple((i - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 for i, ki, si, pi, di, oi in dims)
        positions = math.prod(spatial)
    else:
        out = tuple(_pool_len(i, ki, si, pi, di, False) for i, ki, si, pi, di in zip(spatial, k, s, p, d))
        positions = math.prod(out)
    if min(out) < 1:
        return None
    cout = mod.out_channels
    flops = 2 * n * positions * math.prod(k) * cout * (mod.in_channels // mod.groups)
    return torch.empty((n, cout, *out), dtype=x.dtype, device="meta"), flops


def _fast_recurrent(mod: Any, kind: str, x: Any, dtype: Any) -> tuple[Any, int] | None:
    """(outputs, FLOP) of an LSTM, GRU or RNN on one input, no initial state, by formula (None: run it).

    The output sequence and the final hidden (and cell) states, as torch returns them; the
    FLOP of the matrix products a step runs (:func:`carb.graph._geometry.recurrent_flops`).
    """
    import torch

    proj = int(getattr(mod, "proj_size", 0) or 0)
    if x.dim() not in (2, 3) or proj or x.shape[-1] != mod.input_size or _cast(mod.weight_ih_l0, dtype) != x.dtype:
        return None
    dirs, hidden, layers = (2 if mod.bidirectional else 1), int(mod.hidden_size), int(mod.num_layers)
    if x.dim() == 2:
        n, steps, lead = 1, x.shape[0], ()
        y_shape: tuple[int, ...] = (steps, dirs * hidden)
    else:
        n, steps = (x.shape[0], x.shape[1]) if mod.batch_first else (x.shape[1], x.shape[0])
        lead = (n,)
        y_shape = (n, steps, dirs * hidden) if mod.batch_first else (steps, n, dirs * hidden)
    op = kind.lower()
    flops = _geometry.recurrent_flops(op, int(mod.input_size), hidden, layers, bool(mod.bidirectional), steps, n)

    def empty(shape: tuple[int, ...]) -> Any:
        return torch.empty(shape, dtype=x.dtype, device="meta")

    state = (dirs * layers, *lead, hidden)
    y = empty(y_shape)
    return ((y, (empty(state), empty(state))) if op == "lstm" else (y, empty(state))), flops


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast shape of two shapes (len(b) <= len(a)), None if they do not broadcast.

    torch.broadcast_shapes imports sympy on its first call: seconds.
    """
    out = list(a)
    for i in range(1, len(b) + 1):
        x, y = a[-i], b[-i]
        if x == y or y == 1:
            continue
        if x == 1:
            out[-i] = y
        else:
            return None
    return tuple(out)


_BINARY = {"add": False, "iadd": True, "add_": True, "mul": False, "imul": True, "mul_": True}


def _fast_call(name: str, args: Any, kwargs: Any) -> Any | None:
    """The output of a common function/method call by formula, or None (run it instead)."""
    import torch

    key = name.removeprefix("__").removesuffix("__")
    if key in _BINARY and len(args) == 2 and not kwargs:
        a, b = args
        if not _plain(a) or not (_plain(b) or (type(b) in (int, float) and a.is_floating_point())):
            return None
        if isinstance(b, torch.Tensor) and (b.dtype != a.dtype or b.dim() > a.dim()):
            return None  # type promotion or broadcasting up: let torch decide
        shape = _broadcast(a.shape, b.shape) if isinstance(b, torch.Tensor) else a.shape
        if shape is None:
            return None
        if _BINARY[key]:
            return a if shape == a.shape else None
        return torch.empty(shape, dtype=a.dtype, device="meta")
    if key in ("cat", "concat") and args and isinstance(args[0], (list, tuple)) and args[0]:
        ts = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if len(args) > 2 or set(kwargs) - {"dim"} or not isinstance(dim, int):
            return None
        t0 = ts[0]
        if not all(_plain(t) and t.dtype == t0.dtype and t.dim() == t0.dim() for t in ts) or t0.dim() == 0:
            return None
        d = dim % t0.dim()
        if any(t.shape[:d] != t0.shape[:d] or t.shape[d + 1 :] != t0.shape[d + 1 :] for t in ts):
            return None
        shape = list(t0.shape)
        shape[d] = sum(t.shape[d] for t in ts)
        return torch.empty(shape, dtype=t0.dtype, device="meta")
    if (
        _FUNCTION_OPS.get(key) in _ACT_FUNCS
        and args
        and _plain(args[0])
        and key not in ("hardtanh", "hardtanh_")
        and all(type(a) in (bool, str) for a in args[1:])
        and set(kwargs) <= {"inplace", "approximate"}
    ):
        x = args[0]
        if not x.is_floating_point():
            return None
        inplace = key.endswith("_") or kwargs.get("inplace") is True or any(a is True for a in args[1:])
        return x if inplace else _like(x)
    return None


def _tensors(x: Any) -> list[Any]:
    import torch

    out: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            for e in v:
                walk(e)
        elif isinstance(v, dict):
            for e in v.values():
                walk(e)

    walk(x)
    return out


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return (int(v), int(v)) if v is not None else (1, 1)


def _root(t: Any) -> Any:
    return t._base if getattr(t, "_base", None) is not None else t


_ESIZE: dict[Any, int] = {}
_DTYPE_NAMES: dict[Any, str] = {}  # filled on first use: str(dtype) is slow-ish per row


def _esize(dtype: Any) -> int:
    """Bytes per element of a torch dtype (0 for ``None``), cached."""
    if dtype is None:
        return 0
    got = _ESIZE.get(dtype)
    if got is None:
        import torch

        got = _ESIZE[dtype] = torch.empty((), dtype=dtype, device="meta").element_size()
    return got


def _named_inplace(node: Any, kwargs: Any) -> bool:
    """Whether an fx node is named in-place by PyTorch's conventions.

    A trailing underscore (``relu_``, ``add_``) or an ``inplace=True`` argument, by keyword or,
    for the functional activations (``F.relu(x, True)``), as their second argument.
    """
    name = str(node.target) if node.op == "call_method" else _name(node.target)
    if name.endswith("_") or (isinstance(kwargs, dict) and kwargs.get("inplace") is True):
        return True
    return node.op == "call_function" and name in _ACT_FUNCS and len(node.args) >= 2 and node.args[1] is True


def _name(target: Any) -> str:
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", type(target).__name__)


#: Ops whose functional forms take their weights as inputs after the data (``F.conv2d(x, w, b)``).
_WEIGHTED_CALLS = frozenset(
    {"conv", "conv1d", "conv3d", "convtranspose", "convtranspose1d", "convtranspose3d", "linear"}
    | {"bn", "layernorm", "groupnorm", "instancenorm"}
)


def _row(node: Any, mod: Any, ins: list[Any], outs: list[Any], flops: int, dtype: Any = None) -> dict[str, Any]:
    if mod is not None:
        kind = type(mod).__name__
        op = _MODULE_OPS.get(kind, "unknown")
    else:
        kind = _name(node.target)
        op = _FUNCTION_OPS.get(kind.removeprefix("__").removesuffix("__"), "unknown")
    y = outs[0]
    params = weight = 0
    if mod is not None:
        # the module's own tensors, each once (parameters(recurse=False) walks the whole
        # named_members machinery: a fifth of the capture time)
        own_p = list({id(t): t for t in mod._parameters.values() if t is not None}.values())
        own_b = list({id(t): t for t in mod._buffers.values() if t is not None}.values())
        if any(c is not None for c in mod._modules.values()):  # a leaf with children (attention's projection)
            own_p, own_b = list(mod.parameters()), list(mod.buffers())
        esize = _esize(dtype)
        for p in own_p + own_b:  # as cast to ``dtype`` (the module may be the user's own)
            weight += p.numel() * (esize if esize and p.is_floating_point() else p.element_size())
        params = sum(p.numel() for p in own_p)
        geo = _geometry.read(op, kind, node, mod, ins, outs)
    else:
        geo = _geometry.read(op, kind, node, None, ins, outs)  # reads the weights' shapes too
        if op in _WEIGHTED_CALLS and len(ins) >= 2:  # functional forms: weights are inputs
            weight = sum(t.numel() * t.element_size() for t in ins[1:])
            ins = ins[:1]
        if kind == "mean":
            geo = _mean(geo, ins[0] if ins else y, y)
    x = ins[0] if ins else y
    op = geo["op"]
    if y.dtype not in _DTYPE_NAMES:
        _DTYPE_NAMES[y.dtype] = str(y.dtype).removeprefix("torch.")
    in_bytes = sum(t.numel() * t.element_size() for t in ins)
    out_bytes = sum(t.numel() * t.element_size() for t in outs)
    # an element-wise binary op one of whose inputs is broadcast (SE's x * s)
    broadcast = op in ("add", "mul") and len(ins) >= 2 and any(t.numel() < y.numel() for t in ins)
    return {
        "name": node.name,
        "target": node.target if isinstance(node.target, str) else kind,
        "kind": kind,
        # shapes are torch.Size (ints) and the figures Python ints already: no int() per field
        "in_shape": tuple(x.shape),
        "out_shape": tuple(y.shape),
        **geo,
        "dtype": _DTYPE_NAMES.get(y.dtype) or str(y.dtype).removeprefix("torch."),
        "bytes_per_element": y.element_size(),
        "flops": int(flops),
        "params": int(params),
        "weight_bytes": int(weight),
        "in_bytes": in_bytes,
        "out_bytes": out_bytes,
        "bytes": in_bytes + weight + out_bytes,
        "n_inputs": len(ins),
        "broadcast": bool(broadcast),
        "fused": "",
    }


def _mean(geo: dict[str, Any], x: Any, y: Any) -> dict[str, Any]:
    """A ``mean`` read as a global average pooling where it is one, else ``unknown``.

    Over the spatial dimensions of a 4-D map (``(N, C)`` or ``(N, C, 1, 1)`` out), or over the
    tokens of ``(N, L, C)``: ``gap``; over the depth, height and width of a 5-D one: ``gap3d``.
    """
    if x.dim() == 5 and (y.dim() == 2 or (y.dim() == 5 and tuple(y.shape[2:]) == (1, 1, 1))):
        geo = _geometry.channels_first_reading("gap3d", x, y)
    elif not (x.dim() in (3, 4) and (y.dim() == 2 or (geo["ho"], geo["wo"]) == (1, 1))):
        geo = {**geo, "op": "unknown"}
    return geo
