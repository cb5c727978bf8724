"""Capture an ONNX file: its graph -> the same :class:`~carb.graph.table.LayerTable` a module gives.

:func:`capture_onnx` reads the file with the ``onnx`` package (``pip install 'carb[onnx]'``)
without loading weights stored as external data, fixes the input shape, runs ONNX's shape
inference, and turns each node that computes on activations into a row priced as
:func:`carb.graph.capture` prices the module that exports to it:

- operators the layer model knows map to its op types (``Conv`` with its groups and
  dilation -> ``conv``, ``Gemm`` -> ``linear``, ``Clip`` -> ``relu6``, ``Mul(x, Sigmoid(x))``
  -> one ``silu`` row, ``MatMul`` by a weight (+ ``Add`` of a bias) -> one ``linear`` row,
  ``Transpose`` -> ``copy`` (eager's ``.contiguous()`` of a permuted view), reshapes and
  slices -> ``view``); every other operator is an ``unknown`` row (``kind`` = its type),
  priced by the generic roofline as an unknown module is;
- FLOPs follow ``torch.utils.flop_counter``'s formulas (convolutions and matrix products;
  0 elsewhere), so an exported module counts what its capture counts;
- weights are the initializers a node reads (their bytes from their dims and type: none is
  loaded); nodes computing on initializers and shapes alone (shape arithmetic, constant
  folding) are not rows;
- liveness is simulated as in a capture: each output allocated by its node, views sharing
  their input's storage, freed after its last reader. ONNX has no in-place operators, so
  none is marked in place.

Reading a file never runs code: the ``onnx`` package parses it (protobuf), external data
paths must stay in the model's folder, and no tensor is read.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.graph import _geometry
from carb.graph._onnx_fold import MAX_ELEMENTS, infer
from carb.graph._onnx_gates import _attrs, _Fused, _gate, _single
from carb.graph._onnx_ops import ONNX_OPS
from carb.graph.table import COLUMNS, DTYPES, CaptureError, LayerTable, parse_shape

#: The one line printed where the ``onnx`` package is missing.
INSTALL = "reading ONNX files needs the onnx package: pip install 'carb[onnx]'"

#: Control-flow operators: their subgraphs run on values known only at run time, so a graph
#: holding one is refused rather than priced without them.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Ops whose initializer inputs are the node's weights.
_WEIGHTED = frozenset(
    {"conv", "conv1d", "conv3d", "convtranspose", "convtranspose1d", "convtranspose3d", "linear", "matmul"}
    | {"lstm", "gru", "rnn", "bn", "layernorm", "groupnorm", "instancenorm", "unknown"}
)
#: Ops whose non-scalar initializer inputs are read as inputs (a buffer added or multiplied).
_ELEMENTWISE = frozenset({"add", "mul", "cat", "sdpa"})
#: Nodes whose outputs describe a tensor, not its values: never activations.
_METADATA = frozenset({"Shape", "Size"})
_FLOATS = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}


def capture_onnx(path: str | Path, input_shape: Any = None, precision: str | None = None) -> LayerTable:
    """Read an ONNX file into a :class:`LayerTable`, priced as a captured module is.

    Args:
        path: the ``.onnx`` file (external data, if any, in its folder).
        input_shape: the input's shape (``(1, 3, 224, 224)`` or ``"1x3x224x224"``), fixing the
            graph's dynamic dimensions; a list of shapes for a graph of several inputs;
            ``None``: the shapes the file declares (all static).
        precision: ``fp32``, ``fp16`` or ``bf16``: floating tensors are counted at its element
            size; ``None``: the first input's type.

    Returns:
        The layer table; ``meta["capture"]`` is ``onnx``, and ``meta`` says how many
        BatchNormalization nodes the file holds and how many of its convolutions carry a bias
        (an exporter that folded the BNs leaves none of the first and biases on the second).

    Raises:
        CaptureError: one line naming the file: not an ONNX file (or truncated), an opset or
            IR version newer than the installed ``onnx`` reads, external data outside the
            model's folder, a dynamic dimension left unfixed, an input shape the graph
            rejects, or a tensor whose shape inference cannot tell; also the ``onnx``
            package missing (:data:`INSTALL`).

    """
    onnx = _onnx()
    path = Path(path)
    if precision is not None and precision not in DTYPES:
        raise CaptureError(f"unknown dtype {precision!r} (expected one of {', '.join(DTYPES)})")
    model = _load(onnx, path)
    _check_versions(onnx, model, path)
    _check_external(onnx, model, path)
    if len(model.functions):
        model = onnx.inliner.inline_local_functions(model)
    real = _fix_inputs(model, _shapes(input_shape), path)
    model = infer(onnx, model, path)
    if precision is None:
        etype = real[0].type.tensor_type.elem_type
        precision = {"float16": "fp16", "bfloat16": "bf16"}.get(_FLOATS.get(etype, ""), "fp32")
    g = _Graph(model, path, precision)
    rows, reads, final = g.rows()
    from carb.graph._run import live_bytes

    alloc = np.array([r["alloc_bytes"] for r in rows], dtype=np.int64)
    live = live_bytes(alloc, reads, final) if rows else np.zeros(0, np.int64)
    for i, r in enumerate(rows):
        r["live_bytes"] = int(live[i])
    return LayerTable(
        layers=pd.DataFrame(rows, columns=COLUMNS),
        input_shape=g.shape[real[0].name],
        precision=precision,
        input_bytes=int(sum(g.nbytes(i.name) for i in real)),
        model_bytes=int(sum(g.nbytes(t) for t in g.weights)),
        params=g.params(),
        peak_live_bytes=int(live.max()) if len(live) else 0,
        meta={"fold_bn": False, "capture": "onnx", **_bn_record(model.graph)},
    )


def _bn_record(graph: Any) -> dict[str, int]:
    """What a file says of its BatchNorms: ``bn_nodes``, its ``convs``, how many carry a bias (``convs_with_bias``).

    ``torch.onnx.export`` folds each BN into the convolution before it (in eval mode, its
    default): a file with no BatchNormalization node whose convolutions carry biases was
    most likely exported so, and is priced as such, where the module run eagerly runs its BNs
    as kernels of their own.
    """
    convs = [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]
    return {
        "bn_nodes": sum(n.op_type == "BatchNormalization" for n in graph.node),
        "convs": len(convs),
        "convs_with_bias": sum(len(n.input) > 2 and bool(n.input[2]) for n in convs),
    }


_ESIZE = {"fp32": 4, "fp16": 2, "bf16": 2}


def _onnx() -> Any:
    try:
        import onnx
        import onnx.inliner  # noqa: F401 - a submodule, imported for its use above
        import onnx.shape_inference  # noqa: F401
    except ImportError:
        raise CaptureError(INSTALL) from None
    return onnx


def _one_line(e: BaseException) -> str:
    first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {' '.join(first.split())[:240]}"


def _shapes(input_shape: Any) -> list[tuple[int, ...]] | None:
    """``input_shape`` as a list of shapes (``None``: none given)."""
    if input_shape is None:
        return None
    if isinstance(input_shape, str):
        return [parse_shape(input_shape)]
    items = list(input_shape)
    if items and all(isinstance(d, (int, np.integer)) for d in items):
        items = [tuple(items)]
    out = [parse_shape(s) if isinstance(s, str) else tuple(int(d) for d in s) for s in items]
    if not out or any(not s or min(s) < 1 for s in out):
        raise CaptureError(f"malformed input shape {input_shape!r} (every dimension must be a positive integer)")
    return out


def _load(onnx: Any, path: Path) -> Any:
    """The model's protobuf, external data left on disk."""
    if not path.is_file():
        raise CaptureError(f"{path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: one line
        raise CaptureError(f"{path}: not an ONNX model, or truncated ({_one_line(e)})") from None
    if not model.opset_import or not len(model.graph.node) or not model.ir_version:
        raise CaptureError(f"{path}: not an ONNX model (no graph, opset or IR version in it)")
    return model


def _check_versions(onnx: Any, model: Any, path: Path) -> None:
    """Refuse an opset or IR version newer than the installed ``onnx`` knows."""
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise CaptureError(
                f"{path}: opset {o.version} is newer than the installed onnx {onnx.__version__} reads "
                f"(up to {newest}): pip install -U onnx"
            )
    if model.ir_version > onnx.IR_VERSION:
        raise CaptureError(
            f"{path}: IR version {model.ir_version} is newer than the installed onnx {onnx.__version__} reads "
            f"(up to {onnx.IR_VERSION}): pip install -U onnx"
        )


def _tensors(graph: Any) -> Any:
    """Every tensor a graph holds: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for sub in a.graphs:
                yield from _tensors(sub)


def _check_external(onnx: Any, model: Any, path: Path) -> None:
    """Refuse external data whose path leaves the model's folder (it is never read)."""
    folder = path.parent.resolve()
    for t in _tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = {e.key: e.value for e in t.external_data}.get("location", "")
        where = (folder / loc).resolve()
        if not loc or Path(loc).is_absolute() or not where.is_relative_to(folder):
            raise CaptureError(
                f"{path}: tensor {t.name!r} keeps its data at {loc!r}, outside the model's folder (refused)"
            )


def _dims_text(dims: Any) -> str:
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _fix_inputs(model: Any, shapes: list[tuple[int, ...]] | None, path: Path) -> list[Any]:
    """Set the graph inputs' dimensions to ``shapes``; return the inputs (initializers left out).

    Raises:
        CaptureError: a shape that contradicts the file's static dimensions or rank, more
            shapes than inputs, or a dynamic dimension left unfixed.

    """
    inits = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    if not real:
        raise CaptureError(f"{path}: the graph has no input")
    if shapes is not None and len(shapes) > len(real):
        raise CaptureError(f"{path}: {len(shapes)} input shapes for a graph of {len(real)} input(s)")
    for k, vi in enumerate(real):
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        want = shapes[k] if shapes is not None and k < len(shapes) else None
        if want is None:
            if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in dims):
                what = _dims_text(dims) if tt.HasField("shape") else "no shape"
                raise CaptureError(
                    f"{path}: input {vi.name!r} has dynamic dimensions ({what}): give its shape (--input, "
                    "e.g. 1x3x224x224)"
                )
            continue
        shape_txt = "x".join(map(str, want))
        if tt.HasField("shape") and len(dims) != len(want):
            raise CaptureError(f"{path}: input {vi.name!r} is {_dims_text(dims)}, {len(dims)}-D; {shape_txt} is not")
        for d, v in zip(dims, want):
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != v:
                raise CaptureError(f"{path}: input {vi.name!r} is {_dims_text(dims)}; {shape_txt} does not fit it")
        tt.shape.Clear()
        for v in want:
            tt.shape.dim.add().dim_value = int(v)
    return real


class _Graph:
    """An inferred ONNX graph: tensor shapes and types, which tensors are activations, and its rows."""

    def __init__(self, model: Any, path: Path, precision: str) -> None:
        from onnx import helper

        self.path, self.model = path, model
        g = model.graph
        self.shape: dict[str, tuple[int, ...]] = {}
        self.etype: dict[str, int] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.HasField("shape"):
                if all(d.HasField("dim_value") for d in tt.shape.dim):
                    self.shape[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
                self.etype[vi.name] = tt.elem_type
        for t in g.initializer:
            self.shape[t.name], self.etype[t.name] = tuple(int(d) for d in t.dims), t.data_type
        self.inits = {t.name for t in g.initializer}
        self.float_esize, self.float_name = _ESIZE[precision], DTYPES[precision]
        self._np = helper.tensor_dtype_to_np_dtype
        self.uses = Counter([i for n in g.node for i in n.input if i] + [o.name for o in g.output])
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.bn_stats = {i for n in g.node if n.op_type == "BatchNormalization" for i in n.input[3:5]}
        self.act = self._activations()
        self.weights: dict[str, None] = {}  # the tensors rows read as weights, distinct, in order

    def _activations(self) -> set[str]:
        """The tensors computed from the graph's inputs' values (not from initializers and shapes alone)."""
        g = self.model.graph
        act = {i.name for i in g.input if i.name not in self.inits}
        for node in g.node:
            if node.op_type not in _METADATA and any(i in act for i in node.input if i):
                act.update(o for o in node.output if o)
        return act

    def esize(self, name: str) -> int:
        """Bytes per element of a tensor (floating ones at the capture's precision)."""
        t = self.etype.get(name, 1)
        if t in _FLOATS:
            return self.float_esize
        try:
            return int(np.dtype(self._np(t)).itemsize)
        except Exception:  # noqa: BLE001 - strings, unknown types: one byte
            return 1

    def dtype(self, name: str) -> str:
        """The torch name of a tensor's element type (floating ones at the capture's precision)."""
        t = self.etype.get(name, 1)
        return self.float_name if t in _FLOATS else str(np.dtype(self._np(t)))

    def numel(self, name: str) -> int:
        return int(math.prod(self.shape[name]))

    def nbytes(self, name: str) -> int:
        return self.numel(name) * self.esize(name) if name in self.shape else 0

    def params(self) -> int:
        """Elements of the floating weights the rows read, BN's running statistics left out (buffers, not parameters).

        Counted per tensor a node reads: an exporter that stores equal initializers once
        (fresh BN weights) and reads the copy through ``Identity`` nodes still counts each
        layer's own, as the module does.
        """
        return int(sum(self.numel(t) for t in self.weights if self.etype.get(t) in _FLOATS and t not in self.bn_stats))

    def const(self, name: str) -> np.ndarray | None:
        """The value of a small constant (an initializer or a ``Constant`` node's output in the file), else ``None``."""
        if not hasattr(self, "_consts"):
            import onnx

            from carb.graph._onnx_fold import _small

            vals: dict[str, np.ndarray] = {}
            g = self.model.graph
            for t in g.initializer:
                v = _small(onnx, t)
                if v is not None:
                    vals[t.name] = v
            for node in g.node:
                if node.op_type == "Constant" and node.output:
                    a = _attrs(node)
                    if "value" in a:
                        v = _small(onnx, a["value"])
                    else:
                        keys = ("value_int", "value_float", "value_ints", "value_floats")
                        raw = next((a[k] for k in keys if k in a), None)
                        v = None if raw is None else np.asarray(raw)
                    if v is not None:
                        vals[node.output[0]] = v
            self._consts = vals
        return self._consts.get(name)

    def rows(self) -> tuple[list[dict[str, Any]], dict[int, list[int]], list[int | None]]:
        """The rows of the nodes computing on activations, what each reads, and the outputs' owners.

        Raises:
            CaptureError: a control-flow node (``If``, ``Loop``, ``Scan``), or an activation whose
                shape inference cannot tell.

        """
        g, act = self.model.graph, self.act
        for node in g.node:
            if node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx"):
                raise CaptureError(
                    f"{self.path}: {node.op_type} node {node.name or node.output[0]!r}: control flow is not read "
                    "(what it runs depends on values known only at run time, and pricing the graph without it would "
                    "leave its work out); export a graph without it (torch.onnx.export traces the path of the "
                    "example input)"
                )
        fused = _fusions(self)
        rows: list[dict[str, Any]] = []
        owner: dict[str, int] = {}  # activation -> row that allocated its storage
        reads: dict[int, list[int]] = {}
        for node in g.node:
            if node.op_type in _METADATA or not any(i in act for i in node.input if i):
                continue
            outs = [o for o in node.output if o]
            f = fused.get(id(node))
            if f == "skip":
                continue
            group = f if f is not None else _Fused([node], _op_of(node), _kind(node))
            for o in outs:
                if o not in self.shape:
                    raise CaptureError(
                        f"{self.path}: ONNX shape inference cannot tell the shape of {o!r} "
                        f"(output of {_kind(node)} node {node.name!r})"
                    )
            row, ins = self._row(group, act, outs)
            i = len(rows)
            rows.append(row)
            reads[i] = sorted({owner[t] for t in ins if t in owner})
            for o in outs:
                if row["alias"] and ins and ins[0] in owner:
                    owner[o] = owner[ins[0]]
                else:
                    owner[o] = i
        return rows, reads, [owner.get(o.name) for o in g.output]

    def _row(self, group: "_Fused", act: set[str], outs: list[str]) -> tuple[dict[str, Any], list[str]]:
        """One row: a node's, or a fused pattern's (from its nodes' outside inputs to its last node's outputs)."""
        nodes, op, kind = group.nodes, group.op, group.kind
        first = nodes[0]
        made = {o for n in nodes for o in n.output if o}
        skip = set(group.not_weights)
        inputs = list(dict.fromkeys(i for n in nodes for i in n.input if i and i not in made and i not in skip))
        if group.first_inputs:  # as the call takes them (an attention's query, key and value, the same or not)
            inputs = [*group.first_inputs, *(i for i in inputs if i not in group.first_inputs)]
        ins = [i for i in inputs if i in act]
        consts = [i for i in inputs if i not in act and i in self.shape]
        if op == "matmul" and len(first.input) > 1 and first.input[1] in consts:
            op = "linear"  # a product by a weight: a linear layer without its bias
        if first.op_type == "Gather" and len(first.input) > 1 and first.input[1] in consts:
            if self.shape.get(first.input[1]) == ():
                op = "view"  # one index along an axis: a select (torch's x[0], a view), not a lookup
        weights: list[str] = []
        if op in _WEIGHTED:
            # an unknown operator's weights: its floating constants larger than the sizes,
            # scales and bounds of shape arithmetic (Resize's scales are no weights)
            weights = [
                c for c in consts if op != "unknown" or (self.etype.get(c) in _FLOATS and self.numel(c) > MAX_ELEMENTS)
            ]
            if op in ("lstm", "gru", "rnn"):  # W, R and B; the initial states are zeros made at run time
                weights = [c for c in weights if c in first.input[1:4]]
        elif op in _ELEMENTWISE:
            ins += [c for c in consts if self.numel(c) > 1]
        self.weights.update(dict.fromkeys(weights))
        geo = self._read(op, group, ins, outs)
        in_b = sum(self.nbytes(t) for t in ins)
        out_b = sum(self.nbytes(t) for t in outs)
        wt_b = sum(self.nbytes(t) for t in weights)
        view = geo["op"] == "view"
        ys = self.shape[outs[0]]
        row = {
            "name": nodes[-1].name or outs[0],
            "target": nodes[-1].op_type,
            "kind": kind,
            "in_shape": self.shape[ins[0]] if ins else ys,
            "out_shape": ys,
            **geo,
            "dtype": self.dtype(outs[0]),
            "bytes_per_element": self.esize(outs[0]),
            "flops": sum(_flops(n, self.shape) for n in nodes),
            "params": sum(self.numel(t) for t in weights if self.etype.get(t) in _FLOATS and t not in self.bn_stats),
            "weight_bytes": wt_b,
            "in_bytes": in_b,
            "out_bytes": out_b,
            "bytes": in_b + wt_b + out_b,
            "n_inputs": len(ins),
            "broadcast": bool(
                geo["op"] in ("add", "mul") and len(ins) >= 2 and any(self.numel(t) < math.prod(ys) for t in ins)
            ),
            "alloc_bytes": 0 if view else out_b,
            "inplace": False,
            "alias": view,
            "live_bytes": 0,
            "fused": "",
        }
        return row, ins

    def _read(self, op: str, group: "_Fused", ins: list[str], outs: list[str]) -> dict[str, Any]:
        """The reading of a row (:func:`carb.graph._geometry.read`'s columns), as the module exported reads."""
        first = group.nodes[0]
        x = _T(self.shape[ins[0]] if ins else self.shape[outs[0]])
        y = _T(self.shape[outs[0]])
        a = _attrs(first)
        t = first.op_type
        try:
            if t in ("Conv", "ConvTranspose"):
                return self._conv(op, first, a, x, y)
            if t in ("MaxPool", "AveragePool"):
                return self._pool(op, first, a, x, y)
            if t == "GlobalAveragePool":
                return _geometry.adaptive({3: "gap1d", 4: "gap", 5: "gap3d"}.get(x.dim(), "unknown"), x, y)
            if t == "ReduceMean" and op == "gap":
                if x.dim() == 5 and (y.dim() == 2 or (y.dim() == 5 and y.shape[2:] == (1, 1, 1))):
                    return _geometry.channels_first_reading("gap3d", x, y)
                geo = _geometry.reading(y.shape)
                if x.dim() in (3, 4) and (y.dim() == 2 or geo[3:] == (1, 1)):
                    return _geometry.read("gap", "", None, None, [x], [y])
                return _geometry.read("unknown", "", None, None, [x], [y])
            if t == "Resize":
                return self._resize(first, a, x, y)
            if t == "Softmax":
                return self._softmax(a, x, y)
            if t == "LayerNormalization":
                axis = int(a.get("axis", -1)) % x.dim()
                return _geometry.layernorm(x, y, x.shape[axis:], True)
            if op == "groupnorm" and t == "Reshape":  # the exporter's GroupNorm (_fusions)
                return _geometry.norm("groupnorm", x, y, groups=group.groups, affine=group.affine)
            if t == "InstanceNormalization":
                return _geometry.norm("instancenorm", x, y, track=False)
            if t == "GroupNormalization":
                return _geometry.norm("groupnorm", x, y, groups=int(a["num_groups"]), affine=True)
            if t == "BatchNormalization":
                return _geometry.norm("bn", x, y)
            if t in ("LSTM", "GRU", "RNN"):
                return self._recurrent(op, first, a, x, y)
            if t == "DepthToSpace":
                mode = _str(a.get("mode", "DCR"))
                return _geometry.shuffle("pixelshuffle", x, y, int(a["blocksize"])) if mode == "CRD" else _unknown(x, y)
            if t == "Pad":
                return self._pad(first, a, x, y)
            if op == "sdpa":
                q, k, v = (_T(self.shape[n]) for n in ins[:3])
                if not group.k_transposed:  # the key as the product reads it: (..., E, Lk)
                    k = _T((*k.shape[:-2], k.shape[-1], k.shape[-2]))
                return _geometry.sdpa(q, k, v, y, False, group.mask)
        except (KeyError, IndexError, TypeError, ValueError):
            return _unknown(x, y)
        out = _geometry.read(op, "", None, None, [x], [y])
        return {**out, "geometry": _geometry.copy_text(x, a.get("perm", []))} if t == "Transpose" else out

    def _softmax(self, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        """A Softmax: over ``axis`` (-1 by default) from opset 13.

        Before opset 13, over the 2-D coercion at ``axis`` (1 by default): every dimension from
        ``axis`` on normalized together, one row.
        """
        opset = max((int(o.version) for o in self.model.opset_import if o.domain in ("", "ai.onnx")), default=13)
        if opset >= 13:
            return _geometry.softmax(x, y, int(a.get("axis", -1)) % max(x.dim(), 1))
        axis = int(a.get("axis", 1)) % max(x.dim(), 1)
        return _geometry.softmax(x, y, axis, row=int(math.prod(x.shape[axis:])))

    def _conv(self, op: str, node: Any, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        wshape = self.shape.get(node.input[1]) if len(node.input) > 1 else None
        if not wshape or len(wshape) < 3:
            return _unknown(x, y)
        rank = len(wshape) - 2
        op = {1: f"{op}1d", 2: op, 3: f"{op}3d"}.get(rank, "unknown")
        if op == "unknown":
            return _unknown(x, y)
        k = list(a.get("kernel_shape") or wshape[2:])
        begin, end, same = self._pads(a, rank)
        return _geometry.conv(
            op,
            x,
            y,
            k,
            list(a.get("strides") or [1] * rank),
            "same" if same else begin,
            list(a.get("dilations") or [1] * rank),
            int(a.get("group", 1)),
            list(a.get("output_padding") or [0] * rank),
            padding_end=None if same else end,
        )

    def _pool(self, op: str, node: Any, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        k = list(a["kernel_shape"])
        rank = len(k)
        op = {1: f"{op}1d", 2: op, 3: f"{op}3d"}.get(rank, "unknown")
        begin, end, same = self._pads(a, rank)
        if op == "unknown" or same:
            return _unknown(x, y)
        maxp = node.op_type == "MaxPool"
        return _geometry.pool(
            op,
            x,
            y,
            k,
            list(a.get("strides") or [1] * rank),
            begin,
            list(a.get("dilations") or [1] * rank) if maxp else 1,
            bool(a.get("ceil_mode", 0)),
            True if maxp else bool(a.get("count_include_pad", 0)),
            indices=maxp and len(node.output) > 1 and bool(node.output[1]),
            padding_end=end,
        )

    @staticmethod
    def _pads(a: dict[str, Any], rank: int) -> tuple[list[int], list[int], bool]:
        """Padding before and after each spatial dimension, and whether ``auto_pad`` asks for "same"."""
        auto = _str(a.get("auto_pad", "NOTSET"))
        pads = list(a.get("pads") or [0] * 2 * rank)
        if auto == "VALID":
            pads = [0] * 2 * rank
        return pads[:rank], pads[rank:], auto in ("SAME_UPPER", "SAME_LOWER")

    def _resize(self, node: Any, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        """``Resize`` as torch's interpolation exports it: nearest (asymmetric, floor) or bilinear, on H and W only."""
        mode = _str(a.get("mode", "nearest"))
        coord = _str(a.get("coordinate_transformation_mode", "half_pixel"))
        if x.dim() != 4 or tuple(y.shape[:2]) != tuple(x.shape[:2]):
            return _unknown(x, y)
        nearest = _str(a.get("nearest_mode", "round_prefer_floor"))
        if mode == "nearest" and (coord != "asymmetric" or nearest != "floor"):
            return _unknown(x, y)  # another kernel than torch's nearest (nearest-exact, rounding)
        if mode == "linear" and coord not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
            return _unknown(x, y)
        scales = self.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        scale = None
        if scales is not None and scales.size == 4:
            scale = tuple(float(v) for v in scales.reshape(-1)[2:])
        mode = {"nearest": "nearest", "linear": "bilinear"}.get(mode, mode)
        return _geometry.upsample(x, y, mode, coord == "align_corners", scale, None)

    def _recurrent(self, op: str, node: Any, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        w = self.shape[node.input[1]]  # (directions, gates * hidden, input)
        hidden = int(a.get("hidden_size") or w[1] // {"lstm": 4, "gru": 3, "rnn": 1}[op])
        bidir = _str(a.get("direction", "forward")) == "bidirectional"
        batch_first = int(a.get("layout", 0)) == 1
        return _geometry.recurrent(op, x, y, int(w[2]), hidden, 1, bidir, batch_first)

    def _pad(self, node: Any, a: dict[str, Any], x: "_T", y: "_T") -> dict[str, Any]:
        """``Pad``: its amounts in torch's order (the last dimension first, before then after), its mode."""
        op = {"constant": "pad", "reflect": "pad_reflect", "edge": "pad_replicate"}.get(
            _str(a.get("mode", "constant")), "unknown"
        )
        pads = self.const(node.input[1]) if len(node.input) > 1 else None
        if op == "unknown" or pads is None or (len(node.input) > 3 and node.input[3]):
            return _unknown(x, y)
        rank = x.dim()
        p = [int(v) for v in pads.reshape(-1)]
        begin, end = p[:rank], p[rank:]
        lead = next((i for i in range(rank) if begin[i] or end[i]), rank)
        first = min(lead, 2) if rank >= 3 else lead
        amounts = [v for d in reversed(range(first, rank)) for v in (begin[d], end[d])]
        value = self.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        return _geometry.pad(op, x, y, amounts, None if value is None else float(value.reshape(-1)[0]))


class _T:
    """A tensor's shape, as :mod:`carb.graph._geometry`'s readers take a tensor."""

    __slots__ = ("shape",)

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(int(v) for v in shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(math.prod(self.shape))

    def is_contiguous(self) -> bool:  # an ONNX tensor has no strides: each node's output is its own
        return True


def _unknown(x: _T, y: _T) -> dict[str, Any]:
    return _geometry.read("unknown", "", None, None, [x], [y])


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _kind(node: Any) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _op_of(node: Any) -> str:
    if node.domain not in ("", "ai.onnx"):
        return "unknown"
    return ONNX_OPS.get(node.op_type, "unknown")


def _flops(node: Any, shape: dict[str, Any]) -> int:
    """FLOP of a node by ``torch.utils.flop_counter``'s formulas (convolutions, matrix products, recurrent layers).

    A recurrent layer counts its input and hidden matrix products per step, as its module's
    capture does (:func:`carb.graph._geometry.recurrent_flops`).
    """
    t = node.op_type
    if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] not in shape or not node.output:
        return 0
    xs, ys = shape[node.input[0]], shape.get(node.output[0])
    if ys is None:
        return 0
    if t in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in shape:
        w = shape[node.input[1]]
        spatial = xs[2:] if t == "ConvTranspose" else ys[2:]  # conv_flop_count: the input's for a transposed one
        return int(2 * ys[0] * math.prod(w) * math.prod(spatial))
    if t == "Gemm":
        k = xs[0] if _attrs(node).get("transA", 0) else xs[-1]
        return int(2 * math.prod(ys) * k)
    if t == "MatMul" and xs:
        return int(2 * math.prod(ys) * xs[-1])
    if t in ("LSTM", "GRU", "RNN") and len(node.input) > 1 and node.input[1] in shape:
        w = shape[node.input[1]]
        a = _attrs(node)
        op = t.lower()
        hidden = int(a.get("hidden_size") or w[1] // {"lstm": 4, "gru": 3, "rnn": 1}[op])
        steps, n = (xs[1], xs[0]) if int(a.get("layout", 0)) == 1 else (xs[0], xs[1])
        bidir = _str(a.get("direction", "forward")) == "bidirectional"
        return _geometry.recurrent_flops(op, int(w[2]), hidden, 1, bidir, steps, n)
    return 0


def _fusions(g: "_Graph") -> dict[int, Any]:
    """Node groups an exporter writes for one PyTorch module, to price as that module.

    ``Mul(x, Sigmoid(x))`` -> ``silu`` (``nn.SiLU``), ``Mul(x, HardSigmoid(x))`` ->
    ``hardswish``, ``Mul(x, Tanh(Softplus(x)))`` -> ``mish``, the exact GELU of opsets before 20
    -> ``gelu`` (:func:`carb.graph._onnx_gates._gate`), ``MatMul(x, W) + b`` -> ``linear``
    (``nn.Linear`` on more than 2-D input), ``Reshape -> InstanceNormalization -> Reshape (->
    Mul -> Add)`` -> ``groupnorm`` (``nn.GroupNorm``), and attention: ``MatMul(q, k) (-> Mul,
    Div, Add, Where) -> Softmax -> MatMul(., v)``, with the scaling and transposing of q and k
    before it -> ``sdpa`` (``F.scaled_dot_product_attention``; the core of
    ``nn.MultiheadAttention``, whose projections read as linear layers). Each node but the last
    feeds only the next. Returns ``id(node)`` -> ``"skip"`` for every node of a group but its
    last, and the :class:`_Fused` group for its last.
    """
    groups: list[_Fused] = []
    model = g.model.graph
    for node in model.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        t = node.op_type
        if t == "Mul" and len(node.input) == 2:
            got = _gate(g, node)
            if got is not None:
                groups.append(got)
        elif t == "Add" and len(node.input) == 2:
            for m, bias in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
                p = g.producer.get(m)
                if (
                    p is not None
                    and p.op_type == "MatMul"
                    and g.uses[m] == 1
                    and bias not in g.act
                    and p.input[1] not in g.act
                    and p.input[0] in g.act
                ):
                    groups.append(_Fused([p, node], "linear", "Linear"))
                    break
        elif t == "InstanceNormalization":
            got = _group_norm(g, node)
            if got is not None:
                groups.append(got)
        elif t == "Softmax":
            got = _attention(g, node)
            if got is not None:
                groups.append(got)
    order = {id(n): i for i, n in enumerate(model.node)}
    out: dict[int, Any] = {}
    taken: set[int] = set()
    for grp in groups:
        ids = {id(n) for n in grp.nodes}
        if ids & taken:  # a node in two patterns: the first found keeps it
            continue
        taken |= ids
        grp.nodes.sort(key=lambda n: order[id(n)])
        for n in grp.nodes[:-1]:
            out[id(n)] = "skip"
        out[id(grp.nodes[-1])] = grp
    return out


def _group_norm(g: "_Graph", node: Any) -> "_Fused | None":
    """Torch's export of ``nn.GroupNorm``: ``Reshape(x, (N, G, -1)) -> InstanceNormalization -> Reshape, Mul, Add``."""
    r1 = _single(g, node.input[0])
    if r1 is None or r1.op_type != "Reshape" or r1.input[0] not in g.act:
        return None
    xs, gs = g.shape.get(r1.input[0]), g.shape.get(r1.output[0])
    if not xs or not gs or len(gs) != 3 or len(xs) < 3 or gs[1] >= xs[1]:
        return None
    users = [n for n in g.model.graph.node if node.output[0] in n.input]
    if len(users) != 1 or users[0].op_type != "Reshape" or g.shape.get(users[0].output[0]) != xs:
        return None
    nodes, last = [r1, node, users[0]], users[0].output[0]
    for t in ("Mul", "Add"):
        nxt = [n for n in g.model.graph.node if last in n.input]
        if g.uses[last] != 1 or len(nxt) != 1 or nxt[0].op_type != t:
            break
        other = [i for i in nxt[0].input if i != last]
        if len(other) != 1 or other[0] in g.act:
            break
        nodes.append(nxt[0])
        last = nxt[0].output[0]
    return _Fused(
        nodes,
        "groupnorm",
        "GroupNorm",
        groups=int(gs[1]),
        affine=len(nodes) == 5,
        not_weights=[i for i in node.input[1:] if i],
    )


def _attention(g: "_Graph", softmax: Any) -> "_Fused | None":
    """``MatMul(q, k) -> (Mul | Div | Add | Where)* -> Softmax -> MatMul(., v)``, q's and k's scaling included."""
    nodes, mask = [softmax], False
    src = softmax.input[0]
    while True:
        p = _single(g, src)
        if p is None:
            return None
        if p.op_type == "MatMul":
            break
        if p.op_type not in ("Mul", "Div", "Add", "Where", "Sub"):
            return None
        acts = [i for i in p.input if i in g.act]
        if len(acts) != 1:
            return None
        mask = mask or p.op_type in ("Add", "Where", "Sub")
        nodes.append(p)
        src = acts[0]
    m1 = p
    if not all(i in g.act for i in m1.input):
        return None
    users = [n for n in g.model.graph.node if softmax.output[0] in n.input]
    if g.uses[softmax.output[0]] != 1 or len(users) != 1 or users[0].op_type != "MatMul":
        return None
    m2 = users[0]
    if m2.input[0] != softmax.output[0] or m2.input[1] not in g.act:
        return None
    nodes += [m1, m2]
    ends, transposed = [], [False, False]
    for side in (0, 1):
        name = m1.input[side]
        while True:
            p = _single(g, name)
            if p is None:
                break
            acts = [i for i in p.input if i in g.act]
            scalar = (
                p.op_type in ("Mul", "Div")
                and len(acts) == 1
                and all(g.numel(i) <= 1 for i in p.input if i not in g.act and i in g.shape)
            )
            swap = p.op_type == "Transpose" and len(g.shape.get(p.output[0], ())) >= 2 and _swaps_last_two(p)
            if not (scalar or swap):
                break
            transposed[side] ^= swap
            nodes.append(p)
            name = acts[0]
        ends.append(name)
    return _Fused(
        nodes,
        "sdpa",
        "Attention",
        first_inputs=[ends[0], ends[1], m2.input[1]],
        mask=mask,
        k_transposed=transposed[1],
    )


def _swaps_last_two(node: Any) -> bool:
    perm = list(_attrs(node).get("perm") or [])
    n = len(perm)
    return n >= 2 and perm == [*range(n - 2), n - 1, n - 2]
