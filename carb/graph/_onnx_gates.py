"""The ONNX node groups an exporter writes for one element-wise PyTorch module: its gates.

:func:`_gate` reads ``Mul(x, gate(x))``: SiLU, Hardswish, Mish, and the exact GELU torch's
exporter writes before opset 20 (``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``); a group is a
:class:`_Fused`, priced as one row of its op.
"""

from __future__ import annotations

from typing import Any


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class _Fused:
    """Nodes an exporter writes for one PyTorch module or call, priced as one row of ``op``.

    ``first_inputs``: the activations the row reads first (an attention's query, key and value),
    ``not_weights``: constants of the pattern that are the exporter's, not the module's (the
    ones and zeros of a GroupNorm's instance norm); a GroupNorm's ``groups`` and ``affine``, an
    attention's ``mask`` and whether its key is transposed inside the pattern.
    """

    def __init__(self, nodes: list[Any], op: str, kind: str, **kw: Any) -> None:
        self.nodes, self.op, self.kind = nodes, op, kind
        self.first_inputs: list[str] = kw.get("first_inputs", [])
        self.not_weights: list[str] = kw.get("not_weights", [])
        self.groups: int = kw.get("groups", 1)
        self.affine: bool = kw.get("affine", False)
        self.mask: bool = kw.get("mask", False)
        self.k_transposed: bool = kw.get("k_transposed", True)


def _single(g: Any, name: str) -> Any:
    """The producer of ``name`` where ``name`` feeds one node only, else ``None``."""
    p = g.producer.get(name)
    return p if p is not None and g.uses[name] == 1 else None


def _gate(g: Any, node: Any) -> "_Fused | None":
    """``Mul(x, gate(x))``: SiLU, Hardswish or Mish; or the outer ``Mul`` of a GELU (:func:`_gelu`)."""
    gelu = _gelu(g, node)
    if gelu is not None:
        return gelu
    a, b = node.input
    for x, s in ((a, b), (b, a)):
        p = _single(g, s)
        if p is None:
            continue
        if p.op_type == "Sigmoid" and list(p.input) == [x]:
            return _Fused([p, node], "silu", "Silu")
        if p.op_type == "HardSigmoid" and list(p.input) == [x] and _is_hardswish_gate(p):
            return _Fused([p, node], "hardswish", "HardSwish")
        if p.op_type == "Tanh":
            q = _single(g, p.input[0])
            if q is not None and q.op_type == "Softplus" and list(q.input) == [x]:
                return _Fused([q, p, node], "mish", "Mish")
    return None


def _is_hardswish_gate(node: Any) -> bool:
    a = _attrs(node)
    return abs(float(a.get("alpha", 0.2)) - 1 / 6) < 1e-6 and abs(float(a.get("beta", 0.5)) - 0.5) < 1e-6


def _gelu(g: Any, node: Any) -> "_Fused | None":
    """``Mul(Mul(x, Add(Erf(Div(x, c)), c1)), c2)`` (either operand order): ``nn.GELU()`` as exported before opset 20.

    Every node but the outer ``Mul`` feeds only the next; ``c``, ``c1``, ``c2`` are constants.
    """
    const = [i for i in node.input if i not in g.act]
    inner = [_single(g, i) for i in node.input if i in g.act]
    if len(const) != 1 or len(inner) != 1 or inner[0] is None or inner[0].op_type != "Mul":
        return None
    m = inner[0]
    for x, s in ((m.input[0], m.input[1]), (m.input[1], m.input[0])):
        add = _single(g, s)
        if add is None or add.op_type != "Add" or x not in g.act:
            continue
        erf = next((_single(g, i) for i in add.input if i in g.act), None)
        if erf is None or erf.op_type != "Erf" or any(i in g.act for i in add.input if i != erf.output[0]):
            continue
        div = _single(g, erf.input[0])
        if div is not None and div.op_type == "Div" and div.input[0] == x and div.input[1] not in g.act:
            return _Fused([div, erf, add, m, node], "gelu", "Gelu")
    return None
