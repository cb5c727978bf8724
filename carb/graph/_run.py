"""One run of a traced graph on meta tensors: its rows, what each allocates and reads, liveness.

:class:`_GraphRun` runs the nodes of a ``torch.fx`` graph (or the ``torch.fx``-like graph
:mod:`carb.graph._export` makes of an exported program) one by one on meta tensors and
records a row per tensor-producing node (:func:`carb.graph.nodes._row`); :func:`live_bytes`
simulates which activations are alive while each row runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from carb.graph import _geometry
from carb.graph._layout import cpu_layout
from carb.graph.nodes import (
    _MODULE_OPS,
    _NO_FLOPS,
    _call_op,
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
from carb.graph.table import CaptureError

#: Use the closed forms of :mod:`carb.graph.nodes` (False: run every node on meta tensors
#: under the counting mode; the tests compare both).
_CLOSED_FORMS = True


def _first_layer_expects(module: Any, shape: tuple[int, ...] | None = None) -> str | None:
    """What the network's first layer of a fixed input size expects, in words, where the input disagrees.

    The first submodule (in definition order) with ``in_channels`` (a convolution) or
    ``in_features`` (a linear layer). ``None`` where none has one, or where ``shape`` (the
    first input's) already has what it expects: dimension 1 for channels, the last for
    features. The hint then would point away from the real cause.
    """
    for name, m in module.named_modules():
        for attr, what, dim in (("in_channels", "input channels", 1), ("in_features", "input features", -1)):
            want = getattr(m, attr, None)
            if isinstance(want, int) and not isinstance(want, bool) and want > 0:
                if shape is not None and len(shape) > max(dim, 0) and shape[dim] == want:
                    return None
                layer = f"{type(m).__name__} {name!r}" if name else type(m).__name__
                return f"the first layer ({layer}) expects {want} {what}"
    return None


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
        self.input_shapes = [tuple(t.shape) for t in inputs]
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
        import torch

        try:
            with torch.device("meta"):  # a tensor the forward makes itself (an anchor grid) is meta too
                for node in graph.nodes:
                    if node.op == "output":
                        break
                    self._step(node)
        except CaptureError:
            raise
        except Exception as e:  # noqa: BLE001
            msg = " ".join(str(e).split())[:300]
            shapes = ", ".join("x".join(map(str, s)) for s in self.input_shapes)
            expects = _first_layer_expects(self.module, tuple(self.input_shapes[0]) if self.input_shapes else None)
            raise CaptureError(
                f"running the traced graph on the example input {shapes} failed at node "
                f"{node.name!r} ({type(e).__name__}: {msg})" + (f"; {expects}" if expects else "")
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
        out = self._counted(op0, mod, args, kwargs)
        return cpu_layout(op0, out, args[0] if args else None, getattr(mod, "weight", None)), mod

    def _call_function(self, node: Any, args: Any, kwargs: Any) -> Any:
        fast = _fast_call(_name(node.target), args, kwargs) if _CLOSED_FORMS and _torch_own(node.target) else None
        if fast is not None:
            return fast
        op = _call_op(node.target)
        out = self._counted(op, node.target, args, kwargs)
        x = args[0] if args else kwargs.get("input")
        return cpu_layout(op, out, x, args[1] if len(args) > 1 else kwargs.get("weight"))

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
        if row["op"] == "view" and alloc > 0 and not row["inplace"]:
            # a view by name that allocates: a reshape of a strided tensor copies it (the kernel of
            # .contiguous()); an index by a tensor gathers, an op of its own
            row["op"] = "unknown" if row["kind"] == "getitem" else "copy"
            if row["op"] == "copy" and ins:
                row["geometry"] = _geometry.read("copy", row["kind"], node, None, ins, outs)["geometry"]
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
        out_node = next(nd for nd in graph.nodes if nd.op == "output")
        final = [self.owner.get(id(_root(t))) for t in _tensors(self.load(out_node.args))]
        alloc = np.array([r["alloc_bytes"] for r in self.rows], dtype=np.int64)
        live = live_bytes(alloc, self.reads, final)
        for i, r in enumerate(self.rows):
            r["live_bytes"] = int(live[i])
        return live


def live_bytes(alloc: np.ndarray, reads: dict[int, list[int]], final: list[int | None]) -> np.ndarray:
    """Activation bytes alive while each row runs (B), from what rows allocate and read.

    Args:
        alloc: bytes each row allocates (B).
        reads: row -> the rows whose allocations it reads (directly or through a view).
        final: rows whose allocations are the graph's outputs (alive to the end).

    A row's allocation is freed after the last row that reads it returns, so what a row
    frees is still alive while it runs.
    """
    n = len(alloc)
    last = np.arange(n)
    for i, rd in reads.items():
        for j in rd:
            last[j] = max(last[j], i)
    for j in final:
        if j is not None:
            last[j] = n
    delta = np.zeros(n + 2, dtype=np.int64)
    delta[:n] += alloc
    np.add.at(delta, np.minimum(last, n) + 1, -alloc)
    return np.cumsum(delta)[:n]


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
