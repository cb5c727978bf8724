"""Folding an ONNX graph's shape arithmetic into constants, so shape inference reaches every tensor.

Exporters compute sizes at run time (``Shape -> Gather -> Div -> Mul -> Slice`` for a
``chunk``) where ONNX's shape inference propagates only some operators' values (not
``Div``): the tensors behind such a ``Slice`` get no shape. With the input shape fixed,
these computations on shapes and small constants have one value: :func:`fold` computes
them with numpy (a closed list of arithmetic operators, on at most :data:`MAX_ELEMENTS`
elements: the file's code is never run, and no weight is read) and writes each as a
``Constant`` node in place of the node that computed it. :func:`infer` alternates ONNX's
shape inference and folding until nothing more folds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from carb.graph.table import CaptureError

#: Largest tensor folded (elements): shape vectors and scalars, not weights.
MAX_ELEMENTS = 64
#: Rounds of inference and folding at most (each round folds what the last one's shapes reveal).
_ROUNDS = 8


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return (np.trunc(a / b)).astype(a.dtype)  # ONNX integer Div truncates toward zero
    return a / b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _div,
    "Max": np.maximum,
    "Min": np.minimum,
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "Mod": np.mod,
    "Pow": np.power,
}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "Identity": lambda a: a,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Neg": np.negative,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
    "Not": np.logical_not,
}


def infer(onnx: Any, model: Any, path: Path) -> Any:
    """``model`` with shapes inferred and its shape arithmetic folded into constants.

    Raises:
        CaptureError: ONNX's shape inference rejects the graph (one line naming the file).

    """
    for _ in range(_ROUNDS):
        try:
            model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        except Exception as e:  # noqa: BLE001 - whatever inference raises, one line
            first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
            msg = " ".join(first.split())[:240]
            raise CaptureError(f"{path}: ONNX shape inference failed ({type(e).__name__}: {msg})") from None
        if not fold(onnx, model):
            break
    return model


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    g = model.graph
    out: dict[str, tuple[int, ...]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if (
            vi.type.HasField("tensor_type")
            and tt.HasField("shape")
            and all(d.HasField("dim_value") for d in tt.shape.dim)
        ):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _small(onnx: Any, t: Any) -> np.ndarray | None:
    """A tensor's value if it is small and held in the file itself (never external data)."""
    from onnx import numpy_helper

    n = int(np.prod(t.dims)) if len(t.dims) else 1
    if n > MAX_ELEMENTS or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        return numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - an unreadable constant is not folded
        return None


def fold(onnx: Any, model: Any) -> int:
    """Replace each node whose outputs follow from constants and known shapes by ``Constant`` nodes.

    Returns:
        How many nodes it replaced.

    """
    from onnx import helper, numpy_helper

    g = model.graph
    shapes = _shapes(model)
    known: dict[str, np.ndarray] = {}
    for t in g.initializer:
        v = _small(onnx, t)
        if v is not None:
            known[t.name] = v
    replaced = 0
    nodes = list(g.node)
    new_nodes = []
    for node in nodes:
        vals = _eval(onnx, node, known, shapes)
        if vals is None or any(v.size > MAX_ELEMENTS for v in vals):
            new_nodes.append(node)
            continue
        for name, v in zip(node.output, vals):
            known[name] = v
        if node.op_type == "Constant":
            new_nodes.append(node)
            continue
        replaced += 1
        for name, v in zip(node.output, vals):
            if name:
                new_nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [name],
                        name=f"{node.name or name}_folded",
                        value=numpy_helper.from_array(np.asarray(v), name),
                    )
                )
    if replaced:
        del g.node[:]
        g.node.extend(new_nodes)
    return replaced


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _eval(
    onnx: Any, node: Any, known: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]
) -> list[np.ndarray] | None:
    """The values of a node's outputs, if they follow from known values (``None``: they do not)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op, a = node.op_type, _attrs(node)
    if op == "Constant":
        if "value" in a:
            v = _small(onnx, a["value"])
            return None if v is None else [v]
        for k in ("value_int", "value_float", "value_ints", "value_floats"):
            if k in a:
                return [np.asarray(a[k], dtype=np.int64 if "int" in k else np.float32)]
        return None
    if op in ("Shape", "Size"):
        s = shapes.get(node.input[0])
        if s is None:
            return None
        if op == "Size":
            return [np.asarray(int(np.prod(s)), dtype=np.int64)]
        start, end = a.get("start", 0), a.get("end", None)
        return [np.asarray(s[start:end], dtype=np.int64)]
    ins = [known.get(i) if i else None for i in node.input]
    if any(v is None for v, i in zip(ins, node.input) if i):
        return None
    try:
        return _compute(op, a, ins)
    except Exception:  # noqa: BLE001 - an operator we cannot compute here is left to the graph
        return None


def _compute(op: str, a: dict[str, Any], ins: list[Any]) -> list[np.ndarray] | None:
    """One arithmetic operator on numpy values (``None``: not one of those folded)."""
    if op in _BINARY:
        return [np.asarray(_BINARY[op](ins[0], ins[1]))]
    if op in _UNARY:
        return [np.asarray(_UNARY[op](ins[0]))]
    if op == "Cast":
        from onnx import helper

        return [ins[0].astype(helper.tensor_dtype_to_np_dtype(a["to"]))]
    if op == "Gather":
        return [np.take(ins[0], ins[1].astype(np.int64), axis=a.get("axis", 0))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(v) for v in ins], axis=a.get("axis", 0))]
    if op in ("Unsqueeze", "Squeeze"):
        axes = a.get("axes") if "axes" in a else (ins[1].tolist() if len(ins) > 1 and ins[1] is not None else None)
        if op == "Squeeze":
            return [np.squeeze(ins[0], axis=tuple(axes) if axes is not None else None)]
        v = ins[0]
        for ax in sorted(int(x) % (v.ndim + len(axes)) for x in axes):
            v = np.expand_dims(v, ax)
        return [v]
    if op == "Slice":
        starts, ends = ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 and ins[3] is not None else np.arange(len(starts))
        steps = ins[4] if len(ins) > 4 and ins[4] is not None else np.ones(len(starts), np.int64)
        idx = [slice(None)] * ins[0].ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            idx[int(ax)] = slice(int(s), int(e), int(st))
        return [ins[0][tuple(idx)]]
    if op == "Transpose":
        perm = a.get("perm")
        return [np.transpose(ins[0], perm if perm is None else [int(v) for v in perm])]
    if op == "Reshape":
        shape = [d if d != 0 else ins[0].shape[i] for i, d in enumerate(ins[1].tolist())]
        return [ins[0].reshape(shape)]
    if op == "Range":
        if abs(float(ins[1]) - float(ins[0])) > MAX_ELEMENTS * abs(float(ins[2])):
            return None  # never allocates more than it may fold
        return [np.arange(ins[0], ins[1], ins[2])]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op == "ConstantOfShape":
        from onnx import numpy_helper

        if int(np.prod(ins[0])) > MAX_ELEMENTS:
            return None
        fill = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full(ins[0].astype(np.int64), fill.reshape(-1)[0], dtype=fill.dtype)]
    return None
