"""Graph capture: any ``torch.nn.Module`` -> a table of its layers, on the meta device.

:func:`capture` traces a module with ``torch.fx.symbolic_trace`` (standard ``torch.nn``
modules are leaves: a ``Conv2d`` is one layer, a user's ``Block`` is traced through), then
propagates shapes node by node on **meta** tensors, so no weight or activation is ever
allocated: a module whose parameters are real is first copied with every parameter and
buffer replaced by a meta tensor of the same shape and dtype (the user's module is not
touched). The common CNN nodes (conv2d, 2-D linear, pooling, BN, activations, element-wise
add/mul, cat on contiguous tensors) get their output shape and FLOP from closed forms (the
formulas ``FlopCounterMode`` uses); any other node runs on meta tensors. Each node that
produces a tensor becomes a row of :class:`LayerTable`:

- ``op``: the operator type the cost model knows (:data:`KNOWN_OPS`: ``conv``, ``linear``,
  ``matmul``, ``bn``, ``relu``, ... ``view``), or ``unknown`` (then ``kind`` says what it was);
- ``kind``: the module class, function or method name as traced (``Conv2d``, ``add``, ...);
- shapes: ``in_shape``/``out_shape`` (tuples) and the NCHW reading of them: ``batch``,
  ``cin``, ``h``, ``w`` (input), ``cout``, ``ho``, ``wo`` (output);
- ``kernel`` (kh), ``kernel_w``, ``stride``, ``padding``, ``dilation``, ``groups`` (convolutions
  and pooling; 1/0 elsewhere), ``dtype``, ``bytes_per_element`` (B);
- ``flops``: FLOP of the node, counted by the formulas of
  ``torch.utils.flop_counter`` (the ones ``FlopCounterMode`` uses) on the aten operators the
  node dispatches, so the per-layer figures add up to ``FlopCounterMode``'s total exactly;
  0 where it has no formula (element-wise operators, pooling, BN);
- ``params`` (count), ``weight_bytes`` (B: parameters and buffers the node reads);
- ``in_bytes`` (B: all tensor inputs), ``out_bytes`` (B), ``bytes`` (B: ``in_bytes +
  weight_bytes + out_bytes``, the traffic of an unfused kernel);
- ``alloc_bytes`` (B: memory the node allocates: 0 for views and in-place operators),
  ``inplace``, ``alias`` (the output shares its input's storage);
- ``live_bytes`` (B: activations alive while the node runs, from the liveness simulation).

Fused patterns. CARB's devices run PyTorch **eager** inference, which does not fuse: a
``Conv2d`` -> ``BatchNorm2d`` -> ``ReLU`` sequence is three kernels (oneDNN convolution,
the native BN kernel, ReLU, the last in place when ``inplace=True``), each reading and
writing its tensors, and the table keeps them as three rows. Runtimes that fold BN into the
convolution (``torch.jit.freeze``, ONNX Runtime, ``torch.ao`` fusion) are a different
execution: ``capture(..., fold_bn=True)`` drops each BN that directly follows a
convolution (its only user) and marks the convolution ``fused="bn"``; costs then come from
a device model measured that way. Activations are not merged either way (eager runs them).

Liveness (peak activation memory): a tensor is allocated by the node that creates it and
freed after the last node that reads it or any of its views (eager PyTorch frees a
temporary when its last reference goes); the graph's inputs stay alive throughout and are
not counted in ``live_bytes`` (the input batch is counted apart, ``input_bytes``).

This module imports torch only inside its functions (``import carb.graph`` is light) and
never imports torchvision.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["capture", "LayerTable", "CaptureError", "KNOWN_OPS", "parse_shape", "DTYPES", "dtype_of", "load_module", "build_meta", "gc_paused",
           "skip_meta_init"]


class CaptureError(ValueError):
    """A module cannot be captured (does not trace, bad example input); one line."""


#: Operator types the layer model knows (``view``: zero-cost aliasing such as flatten,
#: reshape of a contiguous tensor, dropout in eval, identity).
KNOWN_OPS: tuple[str, ...] = (
    "conv", "linear", "matmul", "bn", "layernorm", "relu", "relu6", "hardswish", "hardsigmoid",
    "sigmoid", "silu", "gelu", "tanh", "maxpool", "avgpool", "gap", "add", "mul", "cat", "copy",
    "softmax", "view",
)

#: Precision names and their torch dtypes (names, resolved lazily).
DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

_MODULE_OPS = {
    "Conv1d": "conv", "Conv2d": "conv", "Conv3d": "conv", "Linear": "linear", "LazyLinear": "linear",
    "BatchNorm1d": "bn", "BatchNorm2d": "bn", "BatchNorm3d": "bn", "LayerNorm": "layernorm",
    "ReLU": "relu", "ReLU6": "relu6", "Hardtanh": "relu6", "LeakyReLU": "relu", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "Sigmoid": "sigmoid", "SiLU": "silu", "GELU": "gelu", "Tanh": "tanh",
    "MaxPool2d": "maxpool", "AvgPool2d": "avgpool", "AdaptiveAvgPool2d": "gap", "AdaptiveAvgPool1d": "gap",
    "Softmax": "softmax", "Dropout": "view", "Dropout2d": "view", "Identity": "view", "Flatten": "view",
    "Unflatten": "view",
}
_FUNCTION_OPS = {
    "relu": "relu", "relu_": "relu", "relu6": "relu6", "hardtanh": "relu6", "hardtanh_": "relu6",
    "leaky_relu": "relu", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid", "sigmoid": "sigmoid",
    "sigmoid_": "sigmoid", "silu": "silu", "gelu": "gelu", "tanh": "tanh", "conv2d": "conv", "conv1d": "conv",
    "linear": "linear", "matmul": "matmul", "bmm": "matmul", "mm": "matmul", "batch_norm": "bn",
    "layer_norm": "layernorm", "max_pool2d": "maxpool", "avg_pool2d": "avgpool", "adaptive_avg_pool2d": "gap",
    "add": "add", "iadd": "add", "add_": "add", "sub": "add", "mul": "mul", "imul": "mul", "mul_": "mul",
    "truediv": "mul", "div": "mul", "cat": "cat", "concat": "cat", "contiguous": "copy", "clone": "copy",
    "softmax": "softmax", "mean": "gap", "dropout": "view", "flatten": "view", "view": "view",
    "reshape": "view", "transpose": "view", "permute": "view", "squeeze": "view", "unsqueeze": "view",
    "getitem": "view", "chunk": "view", "split": "view", "expand": "view", "identity": "view",
}
_ACT_FUNCS = ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh")


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
    return dims


@dataclass
class LayerTable:
    """The captured layers of one network and its totals.

    Attributes:
        layers: one row per tensor-producing node (see the module docstring for columns).
        input_shape: the example input's shape.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        input_bytes: bytes of the example input(s). Units: B.
        model_bytes: parameters and buffers of the whole module. Units: B.
        params: parameter count of the whole module.
        peak_live_bytes: peak of ``live_bytes`` (activations alive at once). Units: B.
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
        return {"input_shape": list(self.input_shape), "precision": self.precision, "n_layers": int(len(self.layers)),
                "flops": self.flops, "params": self.params, "model_bytes": self.model_bytes,
                "input_bytes": self.input_bytes, "peak_live_bytes": self.peak_live_bytes, "unknown_ops": self.unknown}


# --------------------------------------------------------------------------- capture


_SHAPE_KEEPING = frozenset({"bn", "relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh",
                            "view"}) - {"view"}


def _meta(t: Any, dtype: Any) -> Any:
    """A meta tensor like ``t`` (floating ones cast to ``dtype`` when given); other
    objects as they are."""
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    dt = dtype if dtype is not None and t.is_floating_point() else t.dtype
    if t.is_meta and t.dtype == dt:
        return t
    return torch.empty(t.shape, dtype=dt, device="meta")


def _meta_module(mod: Any, dtype: Any, shims: dict[int, Any]) -> Any:
    """A shallow copy of a leaf module whose own parameters and buffers are meta tensors
    (the user's module is never modified and no weight is copied)."""
    import torch

    got = shims.get(id(mod))
    if got is not None:
        return got
    own = list(mod._parameters.values()) + list(mod._buffers.values())
    children = any(c is not None for c in mod._modules.values())  # children() walks named_children: slow
    if not children and all(t is None or (t.is_meta and (dtype is None or not t.is_floating_point() or t.dtype == dtype))
                            for t in own):
        shim = mod
    else:
        shim = copy.copy(mod)  # leaves are called whole: a leaf with children is copied deeply
        if children:
            shim = copy.deepcopy(mod, {id(t): (torch.nn.Parameter(_meta(t, dtype), requires_grad=False)
                                               if isinstance(t, torch.nn.Parameter) else _meta(t, dtype))
                                       for t in list(mod.parameters()) + list(mod.buffers())})
        else:
            shim._parameters = {k: (None if v is None else torch.nn.Parameter(_meta(v, dtype), requires_grad=False))
                                for k, v in mod._parameters.items()}
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
# Python dispatch of every aten call was a third of the capture time.
_NO_FLOPS = frozenset(KNOWN_OPS) - {"conv", "linear", "matmul"}

#: Use the closed forms below (False: run every node on meta tensors under the counting
#: mode, as before; the tests compare both).
_CLOSED_FORMS = True

# Closed forms. Running a node on meta tensors goes through torch's Python meta kernels and
# decompositions (0.1-1 ms a node); the output of the common CNN nodes is a contiguous tensor
# whose shape and FLOP count follow from a formula. Each fast path below only applies where
# its formula is exactly what the real operator gives (contiguous inputs, plain arguments);
# anything else runs on meta as before. tests/test_graph.py checks both agree.


def _plain(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_meta and t.is_contiguous()


def _torch_own(target: Any) -> bool:
    """A function of torch or of the ``operator`` module (not a user's wrapped function
    that merely has a torch-like name)."""
    if isinstance(target, str):
        return True  # a method name: called on a tensor
    mod = getattr(target, "__module__", None) or ""
    return mod in ("_operator", "operator", "builtins") or mod == "torch" or mod.startswith("torch.")


def _like(x: Any) -> Any:
    """``torch.empty_like`` of a contiguous meta tensor (empty_like itself goes through a
    Python decomposition on meta: 50x slower)."""
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _call_op(target: Any) -> str | None:
    """The operator type of a call_function/call_method target, if it is torch's own."""
    if not _torch_own(target):
        return None
    return _FUNCTION_OPS.get(_name(target).removeprefix("__").removesuffix("__"))


def _pool_len(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """torch's pooling_output_shape (aten/src/ATen/native/Pool.h)."""
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
    ``mod`` is the user's module; ``dtype``: the precision its floating tensors are cast to."""
    import torch

    if kwargs or len(args) != 1 or not _plain(args[0]):
        return None
    x = args[0]
    if op in _SHAPE_KEEPING:
        # BN and activations keep the shape and have no FLOP formula (BN on meta tensors
        # goes through slow Python decompositions)
        return (x if getattr(mod, "inplace", False) else _like(x)), 0
    kind = type(mod).__name__
    if kind == "Conv2d" and x.dim() == 4 and isinstance(mod.padding, tuple) and mod.padding_mode == "zeros" \
            and _cast(mod.weight, dtype) == x.dtype and x.shape[1] == mod.in_channels:
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
    if kind == "Linear" and x.dim() == 2 and x.shape[1] == mod.in_features and _cast(mod.weight, dtype) == x.dtype:
        # addmm (bias) or mm (no bias): mm_flop = 2 m n k
        return (torch.empty((x.shape[0], mod.out_features), dtype=x.dtype, device="meta"),
                2 * x.shape[0] * mod.in_features * mod.out_features)
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


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast shape of two shapes (len(b) <= len(a)), None if they do not broadcast
    (torch.broadcast_shapes imports sympy on its first call: seconds)."""
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
        if any(t.shape[:d] != t0.shape[:d] or t.shape[d + 1:] != t0.shape[d + 1:] for t in ts):
            return None
        shape = list(t0.shape)
        shape[d] = sum(t.shape[d] for t in ts)
        return torch.empty(shape, dtype=t0.dtype, device="meta")
    if _FUNCTION_OPS.get(key) in _ACT_FUNCS and args and _plain(args[0]) and key not in ("hardtanh", "hardtanh_") \
            and all(type(a) in (bool, str) for a in args[1:]) and set(kwargs) <= {"inplace", "approximate"}:
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


def gc_paused(f: Any) -> Any:
    """Run ``f`` with the cyclic garbage collector paused (restored after, even on error).
    Capture and building allocate many small objects (fx nodes, proxies, modules), each of
    which the collector would otherwise traverse tens of times per network: a third of
    build + capture time (43-53 ms -> 32-34 ms a network). Reference counting still frees
    what it can; the cycles left are collected once the collector runs again."""
    import functools
    import gc

    @functools.wraps(f)
    def g(*args: Any, **kwargs: Any) -> Any:
        was = gc.isenabled()
        gc.disable()
        try:
            return f(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return g


@gc_paused
def capture(module: Any, example_input: Any, precision: str | None = None, *, fold_bn: bool = False) -> LayerTable:
    """Trace ``module`` on the meta device into a :class:`LayerTable`.

    Args:
        module: any ``torch.nn.Module`` (in eval mode or not: it is captured as in eval).
        example_input: a tensor (any device: only its shape and dtype are used), a tuple of
            tensors, or a shape (tuple of ints: an fp32/``precision`` tensor of that shape).
        precision: ``fp32``, ``fp16`` or ``bf16``: weights and inputs are cast to it; ``None``
            keeps the example input's dtype.
        fold_bn: fold each BN that directly follows a convolution into it (runtimes that
            fold; eager PyTorch does not).

    Raises:
        CaptureError: the module does not trace with ``torch.fx``, or running its graph on
            the example input fails (one line naming the cause), or an unknown precision.
    """
    import torch
    import torch.fx as fx

    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got a {type(module).__name__}")
    dtype = dtype_of(precision) if precision is not None else None
    if isinstance(example_input, (tuple, list)) and example_input and all(isinstance(d, int) for d in example_input):
        example_input = torch.empty(tuple(example_input), device="meta", dtype=dtype or torch.float32)
    inputs = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise CaptureError("example input: expected a tensor, a tuple of tensors or a shape")
    inputs = tuple(torch.empty(t.shape, device="meta",
                               dtype=(dtype if dtype is not None and t.is_floating_point() else t.dtype))
                   for t in inputs)
    if precision is None:
        precision = {v: k for k, v in DTYPES.items()}.get(str(inputs[0].dtype).removeprefix("torch."), "fp32")
    work = module
    # traced in eval mode: fx reads ``self.training`` at trace time, so a module left in
    # training mode would be captured with its training branches (stochastic depth's noise,
    # dropout); the user's flags are put back afterwards
    was_training = [(m, m.training) for m in work.modules() if m.training]
    try:
        for m, _ in was_training:
            m.training = False
        # buffers as graph attributes too (fx's default folds code on buffers into
        # constants computed at trace time, on the real tensors)
        tracer = fx.Tracer()
        tracer.proxy_buffer_attributes = True
        # the graph alone: a GraphModule would generate and compile Python code we never
        # run (a sixth of the capture time); node targets resolve on ``work`` itself
        graph_ = tracer.trace(work)
    except Exception as e:  # noqa: BLE001 - whatever fx raises, the user gets one line
        msg = " ".join(str(e).split())[:300]
        raise CaptureError(f"module does not trace with torch.fx ({type(e).__name__}: {msg})") from None
    finally:
        for m, flag in was_training:
            m.training = flag

    modules = dict(work.named_modules())
    env: dict[Any, Any] = {}
    rows: list[dict[str, Any]] = []
    owner: dict[int, int] = {}        # id(storage root tensor) -> row index that allocated it
    node_row: dict[Any, int] = {}
    reads: dict[int, list[int]] = {}  # row -> allocating rows of the tensors it reads
    placeholders = iter(inputs)
    shims: dict[int, Any] = {}
    keep: list[Any] = []              # keeps every meta tensor alive, so ids stay unique
    mode = _flop_mode()

    Node = fx.Node

    def load(a: Any) -> Any:
        # fx.node.map_arg's semantics on what fx graphs hold (nodes inside tuples, lists,
        # dicts and slices), without its pytree machinery (a tenth of the node loop)
        if isinstance(a, Node):
            return env[a]
        if isinstance(a, tuple):
            t = tuple(load(e) for e in a)
            return type(a)(*t) if hasattr(a, "_fields") else t
        if isinstance(a, list):
            return [load(e) for e in a]
        if isinstance(a, dict):
            return {k: load(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(load(a.start), load(a.stop), load(a.step))
        return a

    try:
        for node in graph_.nodes:
            if node.op == "placeholder":
                try:
                    env[node] = next(placeholders)
                except StopIteration:
                    env[node] = node.args[0] if node.args else None  # a default value
                continue
            if node.op == "output":
                break
            args, kwargs = load(node.args), load(node.kwargs)
            if node.op == "get_attr":
                obj: Any = work
                for part in str(node.target).split("."):
                    obj = getattr(obj, part)
                env[node] = _meta(obj, dtype)
                continue
            mode.flops = 0
            if node.op == "call_module":
                # the closed forms read only the module's attributes (its parameters' dtype
                # as cast to ``dtype``): no meta copy of it unless it has to run
                mod = modules[node.target]
                op0 = _MODULE_OPS.get(type(mod).__name__)
                fast = _fast_module(mod, op0, args, kwargs, dtype) if _CLOSED_FORMS else None
                if fast is None:
                    mod = _meta_module(mod, dtype, shims)
                if fast is not None:
                    out, mode.flops = fast
                elif op0 in _NO_FLOPS and _CLOSED_FORMS:
                    out = mod(*args, **kwargs)  # no FLOP formula applies: no counting mode
                else:
                    with mode:
                        out = mod(*args, **kwargs)
            elif node.op == "call_function":
                mod = None
                fast = (_fast_call(_name(node.target), args, kwargs)
                        if _CLOSED_FORMS and _torch_own(node.target) else None)
                if fast is not None:
                    out = fast
                elif _call_op(node.target) in _NO_FLOPS and _CLOSED_FORMS:
                    out = node.target(*args, **kwargs)
                else:
                    with mode:
                        out = node.target(*args, **kwargs)
            else:  # call_method
                mod = None
                self_obj, *rest = args
                fast = (_fast_call(str(node.target), args, kwargs)
                        if _CLOSED_FORMS and isinstance(self_obj, torch.Tensor) else None)
                if fast is not None:
                    out = fast
                elif _call_op(node.target) in _NO_FLOPS and _CLOSED_FORMS:
                    out = getattr(self_obj, node.target)(*rest, **kwargs)
                else:
                    with mode:
                        out = getattr(self_obj, node.target)(*rest, **kwargs)
            env[node] = out
            outs = _tensors(out)
            if not outs:
                continue
            keep.append(out)
            ins = _tensors(args) + _tensors(kwargs)
            row = _row(node, mod, ins, outs, mode.flops, dtype)
            i = len(rows)
            in_roots = {id(_root(t)) for t in ins}
            alloc = 0
            for t in outs:
                r = _root(t)
                if id(r) in in_roots or id(t) in {id(x) for x in ins}:
                    continue
                if id(r) in owner:  # a view of something allocated earlier (e.g. getitem of chunk)
                    continue
                owner[id(r)] = i
                alloc += r.numel() * r.element_size() if r is t else t.numel() * t.element_size()
            row["alloc_bytes"] = int(alloc)
            row["inplace"] = any(t is x for t in outs for x in ins)
            row["alias"] = alloc == 0
            if row["alias"] and row["flops"] == 0 and row["op"] == "unknown" and not row["inplace"]:
                row["op"] = "view"
            elif (row["op"] == "unknown" and row["flops"] == 0 and alloc == 0
                  and all(any(t is x for x in ins) for t in outs) and not _named_inplace(node, kwargs)
                  and getattr(mod, "inplace", False) is not True):
                # returns its inputs themselves and is not an in-place op by name: an identity
                # (torchvision's stochastic_depth in eval) or a container of its inputs (a
                # namedtuple of outputs), free; an in-place op (``add_``, ``inplace=True``) is not
                row["op"] = "view"
            if row["op"] == "copy" and alloc == 0:
                row["op"] = "view"  # .contiguous() of a contiguous tensor returns it as is
            # an out-of-place node whose output merely aliases a fresh tensor still counts
            reads[i] = sorted({owner[id(_root(t))] for t in ins if id(_root(t)) in owner})
            for t in outs:  # an alias reads its base (keeps it alive)
                if id(_root(t)) in owner and owner[id(_root(t))] != i:
                    reads[i] = sorted(set(reads[i]) | {owner[id(_root(t))]})
            rows.append(row)
            node_row[node] = i
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:300]
        raise CaptureError(f"running the traced graph on the example input failed at node "
                           f"{node.name!r} ({type(e).__name__}: {msg})") from None

    # graph outputs stay alive to the end
    n = len(rows)
    out_node = next(nd for nd in graph_.nodes if nd.op == "output")
    final = [owner.get(id(_root(t))) for t in _tensors(load(out_node.args))]
    last = np.arange(n)
    for i, rd in reads.items():
        for j in rd:
            last[j] = max(last[j], i)
    for j in final:
        if j is not None:
            last[j] = n
    alloc = np.array([r["alloc_bytes"] for r in rows], dtype=np.int64)
    delta = np.zeros(n + 2, dtype=np.int64)
    delta[:n] += alloc
    np.add.at(delta, np.minimum(last, n) + 1, -alloc)
    live = np.cumsum(delta)[:n]
    # freeing happens after a node returns, so what it frees is still alive while it runs
    for i, r in enumerate(rows):
        r["live_bytes"] = int(live[i])
    df = pd.DataFrame(rows, columns=_COLUMNS)
    if fold_bn:
        df = _fold_bn(df, node_row)
    esize = _esize(dtype) or None

    def nbytes(t: Any) -> int:
        return t.numel() * (esize if esize is not None and t.is_floating_point() else t.element_size())

    ps = list(work.parameters())  # one walk of the module tree (each walk visits every submodule)
    model_bytes = sum(nbytes(p) for p in ps) + sum(nbytes(b) for b in work.buffers())
    params = sum(p.numel() for p in ps)
    return LayerTable(layers=df.reset_index(drop=True), input_shape=tuple(inputs[0].shape), precision=precision,
                      input_bytes=int(sum(t.numel() * t.element_size() for t in inputs)),
                      model_bytes=int(model_bytes), params=int(params),
                      peak_live_bytes=int(live.max()) if n else 0, meta={"fold_bn": fold_bn})


_COLUMNS = ["name", "target", "kind", "op", "in_shape", "out_shape", "batch", "cin", "h", "w", "cout", "ho", "wo",
            "kernel", "kernel_w", "stride", "padding", "dilation", "groups", "dtype", "bytes_per_element",
            "flops", "params", "weight_bytes", "in_bytes", "out_bytes", "bytes", "n_inputs", "broadcast",
            "alloc_bytes", "inplace", "alias", "live_bytes", "fused"]


def _nchw(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(N, C, H, W) reading of a shape: 4-D as is, 3-D (N, L, C) tokens as N, C, L, 1,
    2-D (N, C) as N, C, 1, 1, 5-D and more with the middle dimensions as channels."""
    s = tuple(shape)  # a torch.Size holds ints already
    if len(s) == 4:
        return s
    if len(s) == 3:
        return s[0], s[2], s[1], 1
    if len(s) == 2:
        return s[0], s[1], 1, 1
    if len(s) == 1:
        return 1, s[0], 1, 1
    if len(s) == 0:
        return 1, 1, 1, 1
    return s[0], int(math.prod(s[1:-2])), s[-2], s[-1]  # 5-D and more: the middle dimensions as channels


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
    """An fx node named as in-place by PyTorch's conventions: a trailing underscore
    (``relu_``, ``add_``) or an ``inplace=True`` argument."""
    name = str(node.target) if node.op == "call_method" else _name(node.target)
    return name.endswith("_") or (isinstance(kwargs, dict) and kwargs.get("inplace") is True)


def _name(target: Any) -> str:
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", type(target).__name__)


def _row(node: Any, mod: Any, ins: list[Any], outs: list[Any], flops: int, dtype: Any = None) -> dict[str, Any]:
    if mod is not None:
        kind = type(mod).__name__
        op = _MODULE_OPS.get(kind, "unknown")
    else:
        kind = _name(node.target)
        op = _FUNCTION_OPS.get(kind.removeprefix("__").removesuffix("__"), "unknown")
    x = ins[0] if ins else outs[0]
    y = outs[0]
    n, cin, h, w = _nchw(x.shape)
    _, cout, ho, wo = _nchw(y.shape)
    kernel = kernel_w = stride = dilation = groups = 1
    padding = 0
    params = weight = 0
    if mod is not None:
        # the module's own tensors, each once (parameters(recurse=False) walks the whole
        # named_members machinery: a fifth of the capture time)
        own_p = list({id(t): t for t in mod._parameters.values() if t is not None}.values())
        own_b = list({id(t): t for t in mod._buffers.values() if t is not None}.values())
        esize = _esize(dtype)
        for p in own_p + own_b:  # as cast to ``dtype`` (the module may be the user's own)
            weight += p.numel() * (esize if esize and p.is_floating_point() else p.element_size())
        params = sum(p.numel() for p in own_p)
        if op == "conv":
            kernel, kernel_w = _pair(mod.kernel_size)
            stride, padding, dilation = _pair(mod.stride)[0], _pair(mod.padding if not isinstance(mod.padding, str) else 0)[0], _pair(mod.dilation)[0]
            groups = int(mod.groups)
        elif op in ("maxpool", "avgpool"):
            kernel, kernel_w = _pair(mod.kernel_size)
            stride = _pair(mod.stride if mod.stride is not None else mod.kernel_size)[0]
            padding = _pair(mod.padding)[0]
    elif op == "conv" and len(ins) >= 2:  # F.conv2d(x, weight, bias, stride, padding, dilation, groups)
        wt = ins[1]
        kernel, kernel_w = int(wt.shape[2]), int(wt.shape[-1]) if wt.dim() > 3 else 1
        a = list(node.args) + [None] * 7
        kw = node.kwargs
        stride = _pair(kw.get("stride", a[3] if a[3] is not None else 1))[0]
        pad = kw.get("padding", a[4] if a[4] is not None else 0)
        padding = _pair(pad if not isinstance(pad, str) else 0)[0]
        dilation = _pair(kw.get("dilation", a[5] if a[5] is not None else 1))[0]
        groups = int(kw.get("groups", a[6] if a[6] is not None else 1))
        weight = sum(t.numel() * t.element_size() for t in ins[1:])
        ins = ins[:1]
    elif op in ("linear", "bn", "layernorm") and len(ins) >= 2:  # functional forms: weights are inputs
        weight = sum(t.numel() * t.element_size() for t in ins[1:])
        ins = ins[:1]
    elif op == "gap" and kind == "mean" and (ho, wo) != (1, 1) and y.dim() != 2:
        op = "unknown"  # a mean over something else than the spatial dimensions
    if op == "gap" and mod is not None and (ho, wo) != (1, 1):
        op = "avgpool"  # an adaptive pool to more than 1x1 is a pooling
    if op == "conv":
        n, cin, h, w = _nchw(x.shape)
    elif op in ("linear", "layernorm") and x.dim() >= 4:
        # the features are the last dimension (channels-last tokens, e.g. ConvNeXt's MLP on
        # N x H x W x C), not dimension 1: the middle dimensions are rows, read as H x 1
        # (as a 3-D N x L x C input already is)
        n, cin, h, w = x.shape[0], x.shape[-1], math.prod(x.shape[1:-1]), 1
        cout, ho, wo = y.shape[-1], math.prod(y.shape[1:-1]), 1
    if y.dtype not in _DTYPE_NAMES:
        _DTYPE_NAMES[y.dtype] = str(y.dtype).removeprefix("torch.")
    in_bytes = sum(t.numel() * t.element_size() for t in ins)
    out_bytes = sum(t.numel() * t.element_size() for t in outs)
    # an element-wise binary op one of whose inputs is broadcast (SE's x * s)
    broadcast = op in ("add", "mul") and len(ins) >= 2 and any(t.numel() < y.numel() for t in ins)
    return {"name": node.name, "target": node.target if isinstance(node.target, str) else kind, "kind": kind,
            # shapes are torch.Size (ints) and the figures Python ints already: no int() per field
            "op": op, "in_shape": tuple(x.shape), "out_shape": tuple(y.shape),
            "batch": n, "cin": cin, "h": h, "w": w, "cout": cout, "ho": ho,
            "wo": wo, "kernel": int(kernel), "kernel_w": int(kernel_w), "stride": int(stride),
            "padding": int(padding), "dilation": int(dilation), "groups": int(groups),
            "dtype": _DTYPE_NAMES.get(y.dtype) or str(y.dtype).removeprefix("torch."), "bytes_per_element": y.element_size(),
            "flops": int(flops), "params": int(params), "weight_bytes": int(weight), "in_bytes": in_bytes,
            "out_bytes": out_bytes, "bytes": in_bytes + weight + out_bytes, "n_inputs": len(ins),
            "broadcast": bool(broadcast), "fused": ""}


def _fold_bn(df: pd.DataFrame, node_row: dict[Any, int]) -> pd.DataFrame:
    """Drop each BN row whose input is a convolution's output used only by that BN."""
    drop = []
    for node, i in node_row.items():
        if df.at[i, "op"] != "bn" or not node.args:
            continue
        src = node.args[0]
        j = node_row.get(src)
        if j is not None and df.at[j, "op"] == "conv" and len(src.users) == 1:
            df.at[j, "fused"] = "bn"
            df.at[j, "weight_bytes"] += df.at[i, "weight_bytes"]
            df.at[j, "params"] += df.at[i, "params"]
            drop.append(i)
    return df.drop(index=drop)


def capture_features(df: pd.DataFrame, capture_row: Callable[[Mapping[str, Any]], "LayerTable"]) -> pd.DataFrame:
    """``df`` with the feature columns a capture gives (:data:`carb.families.features.FEATURE_COLUMNS`
    names and units): ``flops``, ``params``, ``model_bytes``, ``input_bytes``,
    ``live_activation_bytes`` (the liveness simulation's peak), ``n_layers``;
    ``capture_row`` captures one row's network (the families of whole networks use it)."""
    out = df.copy()
    cols: dict[str, list] = {k: [] for k in ("flops", "params", "model_bytes", "input_bytes", "live_activation_bytes",
                                              "n_layers")}
    for r in df.to_dict("records"):
        lt = capture_row(r)
        for k, v in (("flops", lt.flops), ("params", lt.params), ("model_bytes", lt.model_bytes),
                     ("input_bytes", lt.input_bytes), ("live_activation_bytes", lt.peak_live_bytes),
                     ("n_layers", len(lt.layers))):
            cols[k].append(v)
    for k, v in cols.items():
        out[k] = v
    return out


def load_module(spec: str) -> Any:
    """The module a ``--module`` spec names: ``pkg.mod:callable`` (an importable callable)
    or ``path/to/file.py:callable``; a callable is called without arguments and must return
    a ``torch.nn.Module`` (an ``nn.Module`` object itself is taken as it is). It is built
    under ``torch.device("meta")``, so no weights are allocated; a builder that cannot run
    on the meta device is built on the CPU instead.

    Raises:
        CaptureError: a malformed spec, an import that fails, a missing name, or a callable
            that does not return a module (one line naming the cause).
    """
    return build_meta(resolve_module(spec), f"--module {spec!r}: {str(spec).rpartition(':')[2]}()")


def resolve_module(spec: str) -> Any:
    """The object a ``--module`` spec names, imported but not called: a ``torch.nn.Module``
    or a callable (see :func:`load_module`).

    Raises:
        CaptureError: a malformed spec, an import that fails, a missing name, or an object
            that is neither a module nor callable (one line naming the cause).
    """
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    import torch

    mod_name, sep, attr = str(spec).rpartition(":")
    if not sep or not mod_name or not attr:
        raise CaptureError(f"--module {spec!r}: expected pkg.module:callable or file.py:callable")
    try:
        if mod_name.endswith(".py") or "/" in mod_name:
            path = Path(mod_name)
            if not path.is_file():
                raise CaptureError(f"--module {spec!r}: no such file {mod_name}")
            name = f"_carb_user_{abs(hash(str(path.resolve())))}"
            s = importlib.util.spec_from_file_location(name, path)
            if s is None or s.loader is None:
                raise CaptureError(f"--module {spec!r}: cannot import {mod_name}")
            module = importlib.util.module_from_spec(s)
            sys.modules[name] = module
            s.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's import: any error, one line
        raise CaptureError(f"--module {spec!r}: importing {mod_name} failed ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:200]})") from None
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
    """While active, ``torch.nn.init``'s in-place initialisers (``kaiming_uniform_``,
    ``normal_``, ``ones_``, ...) return a **meta** tensor untouched: it has no values, and on
    meta they run through slow Python decompositions (building a network on meta took 1.5-3x
    longer with them). Any other tensor is initialised as usual, so a thread building real
    weights meanwhile is unaffected; builds under this context are serialised (re-entrant)."""
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
    """``obj`` itself if it is a ``torch.nn.Module``; else call it (no arguments) under
    ``torch.device("meta")``, so no weights are allocated (a builder that cannot run on the
    meta device is called on the CPU instead) and check it returned a module.

    Raises:
        CaptureError: the call fails, or returns something else than a module (one line
            starting with ``label``).
    """
    return build_module(obj, label, meta=True)


def build_module(obj: Any, label: str = "the builder", *, meta: bool = False) -> Any:
    """``obj`` itself if it is a ``torch.nn.Module``; else call it (no arguments) and check
    it returned a module: with real weights on the CPU, or with ``meta`` under
    ``torch.device("meta")`` first (:func:`build_meta`).

    Raises:
        CaptureError: the call fails, or returns something else than a module (one line
            starting with ``label``).
    """
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        raise CaptureError(f"{label}: expected a torch.nn.Module or a callable returning one, "
                           f"got a {type(obj).__name__}")
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
