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

from carb.graph._onnx_fold import MAX_ELEMENTS, infer
from carb.graph.nodes import _nchw, _pair
from carb.graph.table import COLUMNS, DTYPES, CaptureError, LayerTable, parse_shape

#: The one line printed where the ``onnx`` package is missing.
INSTALL = "reading ONNX files needs the onnx package: pip install 'carb[onnx]'"

#: ONNX operator -> op type of the layer model (:data:`carb.graph.table.KNOWN_OPS`).
ONNX_OPS: dict[str, str] = {
    "Conv": "conv",
    "Gemm": "linear",
    "MatMul": "matmul",
    "BatchNormalization": "bn",
    "LayerNormalization": "layernorm",
    "Relu": "relu",
    "LeakyRelu": "relu",
    "Clip": "relu6",
    "HardSwish": "hardswish",
    "HardSigmoid": "hardsigmoid",
    "Sigmoid": "sigmoid",
    "Gelu": "gelu",
    "Tanh": "tanh",
    "Softmax": "softmax",
    "MaxPool": "maxpool",
    "AveragePool": "avgpool",
    "GlobalAveragePool": "gap",
    "ReduceMean": "gap",
    "Add": "add",
    "Sub": "add",
    "Mul": "mul",
    "Div": "mul",
    "Concat": "cat",
    "Transpose": "copy",
    "Cast": "copy",
    "Flatten": "view",
    "Reshape": "view",
    "Squeeze": "view",
    "Unsqueeze": "view",
    "Identity": "view",
    "Dropout": "view",
    "Slice": "view",
    "Split": "view",
    "Expand": "view",
}
#: Ops whose initializer inputs are the node's weights.
_WEIGHTED = frozenset({"conv", "linear", "matmul", "bn", "layernorm", "unknown"})
#: Ops whose non-scalar initializer inputs are read as inputs (a buffer added or multiplied).
_ELEMENTWISE = frozenset({"add", "mul", "cat"})
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
        The layer table; ``meta["capture"]`` is ``onnx``.

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
        meta={"fold_bn": False, "capture": "onnx"},
    )


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

    def rows(self) -> tuple[list[dict[str, Any]], dict[int, list[int]], list[int | None]]:
        """The rows of the nodes computing on activations, what each reads, and the outputs' owners."""
        g, act = self.model.graph, self.act
        fused = _fusions(g, self.uses, act, self.producer)
        rows: list[dict[str, Any]] = []
        owner: dict[str, int] = {}  # activation -> row that allocated its storage
        reads: dict[int, list[int]] = {}
        for node in g.node:
            if node.op_type in _METADATA or not any(i in act for i in node.input if i):
                continue
            outs = [o for o in node.output if o]
            if fused.get(id(node)) == "skip":
                continue
            first, op, kind = fused.get(id(node)) or (node, _op_of(node), _kind(node))
            for o in outs:
                if o not in self.shape:
                    raise CaptureError(
                        f"{self.path}: ONNX shape inference cannot tell the shape of {o!r} "
                        f"(output of {_kind(node)} node {node.name!r})"
                    )
            row, ins = self._row(node, first, op, kind, act, outs)
            i = len(rows)
            rows.append(row)
            reads[i] = sorted({owner[t] for t in ins if t in owner})
            for o in outs:
                if row["alias"] and ins and ins[0] in owner:
                    owner[o] = owner[ins[0]]
                else:
                    owner[o] = i
        return rows, reads, [owner.get(o.name) for o in g.output]

    def _row(
        self, node: Any, first: Any, op: str, kind: str, act: set[str], outs: list[str]
    ) -> tuple[dict[str, Any], list[str]]:
        """One node's row (a fused pattern's: from its first node's inputs to the last's outputs)."""
        inputs = [i for i in first.input if i]
        if node is not first:  # a fused pair: the second node's other inputs
            inputs += [i for i in node.input if i and i not in first.input and i not in first.output]
        ins = [i for i in inputs if i in act]
        consts = [i for i in inputs if i not in act and i in self.shape]
        if op == "matmul" and any(c == first.input[1] for c in consts):
            op = "linear"  # a product by a weight: a linear layer without its bias
        weights: list[str] = []
        if op in _WEIGHTED:
            # an unknown operator's weights: its floating constants larger than the sizes,
            # scales and bounds of shape arithmetic (Resize's scales are no weights)
            weights = [
                c for c in consts if op != "unknown" or (self.etype.get(c) in _FLOATS and self.numel(c) > MAX_ELEMENTS)
            ]
        elif op in _ELEMENTWISE:
            ins += [c for c in consts if self.numel(c) > 1]
        self.weights.update(dict.fromkeys(weights))
        xs, ys = self.shape[ins[0]] if ins else self.shape[outs[0]], self.shape[outs[0]]
        n, cin, h, w = _nchw(xs)
        _, cout, ho, wo = _nchw(ys)
        if op in ("linear", "layernorm") and len(xs) >= 4:
            n, cin, h, w = xs[0], xs[-1], math.prod(xs[1:-1]), 1
            cout, ho, wo = ys[-1], math.prod(ys[1:-1]), 1
        if op == "gap" and node.op_type == "ReduceMean" and (ho, wo) != (1, 1) and len(ys) != 2:
            op = "unknown"  # a mean over something else than the spatial dimensions
        geo = _geometry(first, op, self.shape.get(first.input[1]) if len(first.input) > 1 else None)
        in_b = sum(self.nbytes(t) for t in ins)
        out_b = sum(self.nbytes(t) for t in outs)
        wt_b = sum(self.nbytes(t) for t in weights)
        view = op == "view"
        row = {
            "name": node.name or outs[0],
            "target": node.op_type,
            "kind": kind,
            "op": op,
            "in_shape": xs,
            "out_shape": ys,
            "batch": n,
            "cin": cin,
            "h": h,
            "w": w,
            "cout": cout,
            "ho": ho,
            "wo": wo,
            **geo,
            "dtype": self.dtype(outs[0]),
            "bytes_per_element": self.esize(outs[0]),
            "flops": _flops(first, node, op, xs, ys, self.shape),
            "params": sum(self.numel(t) for t in weights if self.etype.get(t) in _FLOATS and t not in self.bn_stats),
            "weight_bytes": wt_b,
            "in_bytes": in_b,
            "out_bytes": out_b,
            "bytes": in_b + wt_b + out_b,
            "n_inputs": len(ins),
            "broadcast": bool(
                op in ("add", "mul") and len(ins) >= 2 and any(self.numel(t) < math.prod(ys) for t in ins)
            ),
            "alloc_bytes": 0 if view else out_b,
            "inplace": False,
            "alias": view,
            "live_bytes": 0,
            "fused": "",
        }
        return row, ins


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _kind(node: Any) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _op_of(node: Any) -> str:
    if node.domain not in ("", "ai.onnx"):
        return "unknown"
    return ONNX_OPS.get(node.op_type, "unknown")


def _geometry(node: Any, op: str, wshape: tuple[int, ...] | None) -> dict[str, int]:
    """Kernel, stride, padding, dilation and groups of a convolution or pooling (1/0 elsewhere)."""
    a = _attrs(node) if op in ("conv", "maxpool", "avgpool") else {}
    kernel = kernel_w = stride = dilation = groups = 1
    padding = 0
    if op == "conv" and wshape is not None and len(wshape) > 2:
        kernel, kernel_w = _pair(list(a.get("kernel_shape") or wshape[2:]))
        stride, dilation = _pair(list(a.get("strides") or [1]))[0], _pair(list(a.get("dilations") or [1]))[0]
        padding, groups = int((a.get("pads") or [0])[0]), int(a.get("group", 1))
    elif op in ("maxpool", "avgpool") and a.get("kernel_shape"):
        kernel, kernel_w = _pair(list(a["kernel_shape"]))
        stride, padding = _pair(list(a.get("strides") or [1]))[0], int((a.get("pads") or [0])[0])
    return {
        "kernel": int(kernel),
        "kernel_w": int(kernel_w),
        "stride": int(stride),
        "padding": int(padding),
        "dilation": int(dilation),
        "groups": int(groups),
    }


def _flops(first: Any, node: Any, op: str, xs: Sequence[int], ys: Sequence[int], shape: dict[str, Any]) -> int:
    """FLOP of a node by ``torch.utils.flop_counter``'s formulas (convolutions and matrix products only)."""
    t = first.op_type
    if t in ("Conv", "ConvTranspose") and len(first.input) > 1 and first.input[1] in shape:
        w = shape[first.input[1]]
        spatial = xs[2:] if t == "ConvTranspose" else ys[2:]  # conv_flop_count: the input's for a transposed one
        return int(2 * ys[0] * math.prod(w) * math.prod(spatial))
    if t == "Gemm":
        k = xs[0] if _attrs(first).get("transA", 0) else xs[-1]
        return int(2 * math.prod(ys) * k)
    if t == "MatMul" and xs:
        return int(2 * math.prod(ys) * xs[-1])
    return 0


def _fusions(g: Any, uses: Counter, act: set[str], producer: dict[str, Any]) -> dict[int, Any]:
    """Node pairs an exporter writes for one PyTorch module, to price as that module.

    ``Mul(x, Sigmoid(x))`` -> ``silu`` (``nn.SiLU``), ``Mul(x, HardSigmoid(x))`` ->
    ``hardswish``, ``MatMul(x, W) + b`` -> ``linear`` (``nn.Linear`` on more than 2-D
    input), where the first node's output feeds only the second. Returns ``id(node)`` ->
    ``"skip"`` for the first node and ``(first node, op, kind)`` for the second.
    """
    out: dict[int, Any] = {}
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        a, b = node.input
        if node.op_type == "Mul":
            for x, s in ((a, b), (b, a)):
                p = producer.get(s)
                if p is None or uses[s] != 1 or list(p.input) != [x]:
                    continue
                if p.op_type == "Sigmoid":
                    out[id(p)], out[id(node)] = "skip", (p, "silu", "Silu")
                elif p.op_type == "HardSigmoid" and _is_hardswish_gate(p):
                    out[id(p)], out[id(node)] = "skip", (p, "hardswish", "HardSwish")
                break
        elif node.op_type == "Add":
            for m, bias in ((a, b), (b, a)):
                p = producer.get(m)
                if (
                    p is not None
                    and p.op_type == "MatMul"
                    and uses[m] == 1
                    and bias not in act
                    and p.input[1] not in act
                    and p.input[0] in act
                ):
                    out[id(p)], out[id(node)] = "skip", (p, "linear", "Linear")
                    break
    return out


def _is_hardswish_gate(node: Any) -> bool:
    a = _attrs(node)
    return abs(float(a.get("alpha", 0.2)) - 1 / 6) < 1e-6 and abs(float(a.get("beta", 0.5)) - 0.5) < 1e-6
