"""Graph capture: any ``torch.nn.Module`` -> a :class:`~carb.graph.table.LayerTable`, on the meta device.

:func:`capture` traces a module with ``torch.fx`` (standard ``torch.nn`` modules are
leaves: a ``Conv2d`` is one layer, a user's ``Block`` is traced through), then runs the
graph node by node on **meta** tensors (:mod:`carb.graph.nodes`), so no weight or
activation is ever allocated: a module whose parameters are real is first copied with
every parameter and buffer replaced by a meta tensor of the same shape and dtype (the
user's module is not touched). Each node that produces a tensor becomes a row.

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
"""

from __future__ import annotations

import functools
import gc
from typing import Any

import numpy as np
import pandas as pd

from carb.graph.nodes import (
    _MODULE_OPS,
    _NO_FLOPS,
    _call_op,
    _esize,
    _fast_call,
    _fast_module,
    _flop_mode,
    _meta,
    _meta_module,
    _name,
    _named_inplace,
    _root,
    _row,
    _tensors,
    _torch_own,
)
from carb.graph.table import COLUMNS, DTYPES, CaptureError, LayerTable, dtype_of

#: Use the closed forms of :mod:`carb.graph.nodes` (False: run every node on meta tensors
#: under the counting mode; the tests compare both).
_CLOSED_FORMS = True


def gc_paused(f: Any) -> Any:
    """Run ``f`` with the cyclic garbage collector paused (restored after, even on error).

    Capture and building allocate many small objects (fx nodes, proxies, modules), each of
    which the collector would otherwise traverse tens of times per network: a third of
    build + capture time. Reference counting still frees what it can; the cycles left are
    collected once the collector runs again.
    """

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

    Returns:
        The layer table: one row per tensor-producing node, and the network's totals.

    Raises:
        CaptureError: the module does not trace with ``torch.fx``, or running its graph on
            the example input fails (one line naming the cause), or an unknown precision.

    """
    inputs, dtype, precision = _meta_inputs(module, example_input, precision)
    graph = _trace(module)
    run = _GraphRun(module, inputs, dtype)
    run.run(graph)
    live = run.live_bytes(graph)
    df = pd.DataFrame(run.rows, columns=COLUMNS)
    if fold_bn:
        df = _fold_bn(df, run.node_row)
    model_bytes, params = _module_totals(module, dtype)
    return LayerTable(
        layers=df.reset_index(drop=True),
        input_shape=tuple(inputs[0].shape),
        precision=precision,
        input_bytes=int(sum(t.numel() * t.element_size() for t in inputs)),
        model_bytes=int(model_bytes),
        params=int(params),
        peak_live_bytes=int(live.max()) if len(live) else 0,
        meta={"fold_bn": fold_bn},
    )


def _meta_inputs(module: Any, example_input: Any, precision: str | None) -> tuple[tuple[Any, ...], Any, str]:
    """The example inputs as meta tensors, their dtype and the precision's name.

    Inputs are cast to ``precision``'s dtype when given (``None``: each keeps its own); the
    name is then the first input's.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got a {type(module).__name__}")
    dtype = dtype_of(precision) if precision is not None else None
    if isinstance(example_input, (tuple, list)) and example_input and all(isinstance(d, int) for d in example_input):
        example_input = torch.empty(tuple(example_input), device="meta", dtype=dtype or torch.float32)
    inputs = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise CaptureError("example input: expected a tensor, a tuple of tensors or a shape")
    inputs = tuple(
        torch.empty(t.shape, device="meta", dtype=(dtype if dtype is not None and t.is_floating_point() else t.dtype))
        for t in inputs
    )
    if precision is None:
        precision = {v: k for k, v in DTYPES.items()}.get(str(inputs[0].dtype).removeprefix("torch."), "fp32")
    return inputs, dtype, precision


def _trace(module: Any) -> Any:
    """The ``torch.fx`` graph of ``module``, traced in eval mode.

    fx reads ``self.training`` at trace time, so a module left in training mode would be
    captured with its training branches (stochastic depth's noise, dropout); the user's
    flags are put back afterwards.
    """
    import torch.fx as fx

    was_training = [(m, m.training) for m in module.modules() if m.training]
    try:
        for m, _ in was_training:
            m.training = False
        # buffers as graph attributes too (fx's default folds code on buffers into
        # constants computed at trace time, on the real tensors)
        tracer = fx.Tracer()
        tracer.proxy_buffer_attributes = True
        # the graph alone: a GraphModule would generate and compile Python code that is never
        # run (a sixth of the capture time); node targets resolve on ``module`` itself
        return tracer.trace(module)
    except Exception as e:  # noqa: BLE001 - whatever fx raises, the user gets one line
        msg = " ".join(str(e).split())[:300]
        raise CaptureError(f"module does not trace with torch.fx ({type(e).__name__}: {msg})") from None
    finally:
        for m, flag in was_training:
            m.training = flag


class _GraphRun:
    """One run of a traced graph on meta tensors.

    It records a row per tensor-producing node, and which row allocated each tensor and
    which rows read it (for the liveness simulation).
    """

    def __init__(self, module: Any, inputs: tuple[Any, ...], dtype: Any) -> None:
        import torch.fx as fx

        self.module, self.dtype = module, dtype
        self.modules = dict(module.named_modules())
        self.env: dict[Any, Any] = {}
        self.rows: list[dict[str, Any]] = []
        self.owner: dict[int, int] = {}  # id(storage root tensor) -> row index that allocated it
        self.node_row: dict[Any, int] = {}
        self.reads: dict[int, list[int]] = {}  # row -> allocating rows of the tensors it reads
        self.placeholders = iter(inputs)
        self.shims: dict[int, Any] = {}
        self.keep: list[Any] = []  # keeps every meta tensor alive, so ids stay unique
        self.mode = _flop_mode()
        self._node_type = fx.Node

    def load(self, a: Any) -> Any:
        """``a`` with the graph's nodes replaced by their values.

        fx.node.map_arg's semantics on what fx graphs hold (nodes inside tuples, lists,
        dicts and slices), without its pytree machinery (a tenth of the node loop).
        """
        if isinstance(a, self._node_type):
            return self.env[a]
        if isinstance(a, tuple):
            t = tuple(self.load(e) for e in a)
            return type(a)(*t) if hasattr(a, "_fields") else t
        if isinstance(a, list):
            return [self.load(e) for e in a]
        if isinstance(a, dict):
            return {k: self.load(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(self.load(a.start), self.load(a.stop), self.load(a.step))
        return a

    def run(self, graph: Any) -> None:
        """Run every node up to the output, recording rows.

        Raises:
            CaptureError: a node fails on the example input (one line naming it).

        """
        try:
            for node in graph.nodes:
                if node.op == "output":
                    break
                self._step(node)
        except CaptureError:
            raise
        except Exception as e:  # noqa: BLE001
            msg = " ".join(str(e).split())[:300]
            raise CaptureError(
                f"running the traced graph on the example input failed at node "
                f"{node.name!r} ({type(e).__name__}: {msg})"
            ) from None

    def _step(self, node: Any) -> None:
        """Run one node (a placeholder takes the next input) and record it if it makes tensors."""
        if node.op == "placeholder":
            try:
                self.env[node] = next(self.placeholders)
            except StopIteration:
                self.env[node] = node.args[0] if node.args else None  # a default value
            return
        args, kwargs = self.load(node.args), self.load(node.kwargs)
        if node.op == "get_attr":
            obj: Any = self.module
            for part in str(node.target).split("."):
                obj = getattr(obj, part)
            self.env[node] = _meta(obj, self.dtype)
            return
        self.mode.flops = 0
        if node.op == "call_module":
            out, mod = self._call_module(node, args, kwargs)
        elif node.op == "call_function":
            out, mod = self._call_function(node, args, kwargs), None
        else:
            out, mod = self._call_method(node, args, kwargs), None
        self.env[node] = out
        outs = _tensors(out)
        if outs:
            self.keep.append(out)
            self._record(node, mod, kwargs, _tensors(args) + _tensors(kwargs), outs)

    def _counted(self, op: str | None, f: Any, args: Any, kwargs: Any) -> Any:
        """``f(*args, **kwargs)``, under the FLOP-counting mode unless ``op`` has no FLOP formula."""
        if op in _NO_FLOPS and _CLOSED_FORMS:
            return f(*args, **kwargs)
        with self.mode:
            return f(*args, **kwargs)

    def _call_module(self, node: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
        """The output of a module call, and the module the row describes.

        The closed forms read only the module's attributes (its parameters' dtype as cast
        to ``dtype``): no meta copy of it unless it has to run.
        """
        mod = self.modules[node.target]
        op0 = _MODULE_OPS.get(type(mod).__name__)
        fast = _fast_module(mod, op0, args, kwargs, self.dtype) if _CLOSED_FORMS else None
        if fast is not None:
            out, self.mode.flops = fast
            return out, mod
        mod = _meta_module(mod, self.dtype, self.shims)
        return self._counted(op0, mod, args, kwargs), mod

    def _call_function(self, node: Any, args: Any, kwargs: Any) -> Any:
        fast = _fast_call(_name(node.target), args, kwargs) if _CLOSED_FORMS and _torch_own(node.target) else None
        if fast is not None:
            return fast
        return self._counted(_call_op(node.target), node.target, args, kwargs)

    def _call_method(self, node: Any, args: Any, kwargs: Any) -> Any:
        import torch

        self_obj, *rest = args
        fast = (
            _fast_call(str(node.target), args, kwargs) if _CLOSED_FORMS and isinstance(self_obj, torch.Tensor) else None
        )
        if fast is not None:
            return fast
        return self._counted(_call_op(node.target), getattr(self_obj, node.target), rest, kwargs)

    def _record(self, node: Any, mod: Any, kwargs: Any, ins: list[Any], outs: list[Any]) -> None:
        """Append the node's row: what it allocates, whether it is a free view, what it reads."""
        row = _row(node, mod, ins, outs, self.mode.flops, self.dtype)
        i = len(self.rows)
        alloc = self._allocate(i, ins, outs)
        row["alloc_bytes"] = int(alloc)
        row["inplace"] = any(t is x for t in outs for x in ins)
        row["alias"] = alloc == 0
        if _is_free(row, node, mod, kwargs, ins, outs):
            row["op"] = "view"
        # an out-of-place node whose output merely aliases a fresh tensor still counts
        owner = self.owner
        self.reads[i] = sorted({owner[id(_root(t))] for t in ins if id(_root(t)) in owner})
        for t in outs:  # an alias reads its base (keeps it alive)
            if id(_root(t)) in owner and owner[id(_root(t))] != i:
                self.reads[i] = sorted(set(self.reads[i]) | {owner[id(_root(t))]})
        self.rows.append(row)
        self.node_row[node] = i

    def _allocate(self, i: int, ins: list[Any], outs: list[Any]) -> int:
        """Bytes row ``i`` allocates (B), recording it as their owner.

        Its outputs' storage that is neither an input's nor allocated earlier.
        """
        in_roots = {id(_root(t)) for t in ins}
        alloc = 0
        for t in outs:
            r = _root(t)
            if id(r) in in_roots or id(t) in {id(x) for x in ins}:
                continue
            if id(r) in self.owner:  # a view of something allocated earlier (e.g. getitem of chunk)
                continue
            self.owner[id(r)] = i
            alloc += r.numel() * r.element_size() if r is t else t.numel() * t.element_size()
        return alloc

    def live_bytes(self, graph: Any) -> np.ndarray:
        """Activation bytes alive while each row's node runs (B), also set as ``live_bytes``.

        The graph's outputs stay alive to the end; freeing happens after a node returns, so
        what it frees is still alive while it runs.
        """
        n = len(self.rows)
        out_node = next(nd for nd in graph.nodes if nd.op == "output")
        final = [self.owner.get(id(_root(t))) for t in _tensors(self.load(out_node.args))]
        last = np.arange(n)
        for i, rd in self.reads.items():
            for j in rd:
                last[j] = max(last[j], i)
        for j in final:
            if j is not None:
                last[j] = n
        alloc = np.array([r["alloc_bytes"] for r in self.rows], dtype=np.int64)
        delta = np.zeros(n + 2, dtype=np.int64)
        delta[:n] += alloc
        np.add.at(delta, np.minimum(last, n) + 1, -alloc)
        live = np.cumsum(delta)[:n]
        for i, r in enumerate(self.rows):
            r["live_bytes"] = int(live[i])
        return live


def _is_free(row: dict[str, Any], node: Any, mod: Any, kwargs: Any, ins: list[Any], outs: list[Any]) -> bool:
    """Whether a recorded node is a ``view``: it costs nothing of its own."""
    alloc = row["alloc_bytes"]
    if row["alias"] and row["flops"] == 0 and row["op"] == "unknown" and not row["inplace"]:
        return True
    if (
        row["op"] == "unknown"
        and row["flops"] == 0
        and alloc == 0
        and all(any(t is x for x in ins) for t in outs)
        and not _named_inplace(node, kwargs)
        and getattr(mod, "inplace", False) is not True
    ):
        # returns its inputs themselves and is not an in-place op by name: an identity
        # (torchvision's stochastic_depth in eval) or a container of its inputs (a
        # namedtuple of outputs), free; an in-place op (``add_``, ``inplace=True``) is not
        return True
    return row["op"] == "copy" and alloc == 0  # .contiguous() of a contiguous tensor returns it as is


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


def _module_totals(module: Any, dtype: Any) -> tuple[int, int]:
    """Bytes of the module's parameters and buffers (as cast to ``dtype``; B) and its parameter count."""
    esize = _esize(dtype) or None

    def nbytes(t: Any) -> int:
        return t.numel() * (esize if esize is not None and t.is_floating_point() else t.element_size())

    ps = list(module.parameters())  # one walk of the module tree (each walk visits every submodule)
    return sum(nbytes(p) for p in ps) + sum(nbytes(b) for b in module.buffers()), sum(p.numel() for p in ps)
