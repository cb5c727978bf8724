"""Capture through ``torch.export`` where ``torch.fx`` cannot trace.

``torch.fx`` traces with symbolic inputs, so a forward that branches on its input's shape
(``if x.shape[-1] > 100``) does not trace. ``torch.export`` runs the forward on fake
tensors of the example input's static shape, so such branches take the path that shape
takes. Its graph is an ATen one (``aten.conv2d``, ``aten.add_``) in which every node records
the modules it ran in (``nn_module_stack``); :func:`export_graph` folds it back into the
graph ``torch.fx`` would give:

- the nodes one call of a leaf module ran (``torch.fx``'s leaves: the standard ``torch.nn``
  modules) become one ``call_module`` node taking the tensors that flow into them, so a
  ``Conv2d`` is one row, as in ``torch.fx``;
- every other node stays one ``call_function`` node, named by its ATen operator
  (``add``, ``cat``, ``flatten``), which :mod:`carb.graph.nodes` prices as ``torch.fx``'s
  ``add``, ``torch.cat``, ``torch.flatten``;
- parameters and buffers read outside leaf modules become ``get_attr`` nodes.

The same node-by-node run on meta tensors (:class:`carb.graph._run._GraphRun`) then makes
the rows, so wherever both capture a network the tables agree: ops, shapes, groups, FLOPs
and liveness. A leaf module whose call cannot be priced by formula runs its own ATen nodes
on meta tensors, under the FLOP-counting mode.

The module is exported as a meta copy (each parameter and buffer a meta tensor of its
shape, cast to the capture's precision): no weight is copied and the user's module is not
touched.
"""

from __future__ import annotations

import copy
import logging
import operator
import warnings
from typing import Any

from carb.graph._layout import cpu_layout
from carb.graph._run import _first_layer_expects, _GraphRun
from carb.graph.nodes import _MODULE_OPS, _fast_module, _meta
from carb.graph.table import CaptureError

#: Loggers ``torch.export`` writes its progress and hints to (silenced while it runs: the
#: capture reports a failure as one line).
_NOISY = (
    "torch._dynamo",
    "torch._export",
    "torch.export",
    "torch.fx.experimental.symbolic_shapes",
    "torch._subclasses",
)


def export_graph(
    module: Any, inputs: tuple[Any, ...], dtype: Any, fx_reason: str | None = None
) -> tuple[Any, _GraphRun]:
    """The ``torch.fx``-like graph of ``module`` exported on ``inputs``, and its run on meta tensors.

    Args:
        module: the user's module (not modified).
        inputs: the example inputs, meta tensors.
        dtype: the precision's torch dtype, ``None`` to keep the module's.
        fx_reason: why ``torch.fx`` could not trace it (named in the error if export fails
            too); ``None``: fx was not tried.

    Returns:
        The graph and its run (rows recorded).

    Raises:
        CaptureError: the module does not export either (one line naming both reasons), or
            running the exported graph fails.

    """
    try:
        meta_module = _meta_copy(module, dtype)
        exported = _export(meta_module, inputs)
    except _ExportFailed as e:
        shapes = ", ".join("x".join(map(str, t.shape)) for t in inputs)
        expects = _first_layer_expects(module, tuple(inputs[0].shape) if inputs else None)
        why = f"torch.export on the example input {shapes} ({e})" + (f"; {expects}" if expects else "")
        if fx_reason is None:
            raise CaptureError(f"module does not export with {why}") from None
        raise CaptureError(f"{fx_reason}, nor export with {why}") from None
    graph, groups, attrs = _fx_like(exported, meta_module)
    run = _ExportRun(meta_module, inputs, dtype, groups, attrs)
    run.run(graph)
    return graph, run


class _ExportFailed(Exception):
    """``torch.export`` (or the meta copy it needs) failed; the message is one line."""


def _one_line(e: BaseException) -> str:
    """The exception's type and the first line of its message (export's run on for pages)."""
    first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {' '.join(first.split())[:240]}"


def _meta_copy(module: Any, dtype: Any) -> Any:
    """A deep copy of ``module`` whose parameters and buffers are meta tensors, in eval mode.

    Floating tensors are cast to ``dtype`` when given, as the capture's precision asks
    (the exported graph then runs in it); nothing is allocated.
    """
    import torch

    memo: dict[int, Any] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        m = _meta(t, dtype)
        if m is not t and isinstance(t, torch.nn.Parameter):
            m = torch.nn.Parameter(m, requires_grad=False)
        memo[id(t)] = m
    try:
        out = copy.deepcopy(module, memo)
    except Exception as e:  # noqa: BLE001 - a module that cannot be copied: one line
        raise _ExportFailed(f"copying the module failed: {_one_line(e)}") from None
    for m in out.modules():
        m.training = False
    return out


def _export(module: Any, inputs: tuple[Any, ...]) -> Any:
    """``torch.export.export(module, inputs, strict=False)``, its warnings, logs and prints silenced.

    On failure export prints the partial graph to stderr; the capture says why in one line.
    """
    import contextlib
    import io

    import torch

    loggers = [logging.getLogger(n) for n in _NOISY]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        # a tensor the forward makes itself (an anchor grid, a projection) is meta too
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), torch.device("meta"):
            warnings.simplefilter("ignore")
            return torch.export.export(module, inputs, strict=False)
    except Exception as e:  # noqa: BLE001 - whatever export raises, the user gets one line
        raise _ExportFailed(_one_line(e)) from None
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class _Op:
    """An ATen operator as a ``call_function`` target, named by its overload packet (``add``, ``relu_``).

    The name is what :mod:`carb.graph.nodes` reads to price the node as the torch function
    ``torch.fx`` would have recorded; calling it calls the operator.
    """

    def __init__(self, op: Any) -> None:
        self.op = op
        self.__name__ = op.overloadpacket.__name__
        self.__module__ = "torch"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"aten.{self.__name__}"


class _Group:
    """The ATen nodes of one leaf-module call: its nodes, the nodes it reads from outside, its outputs."""

    def __init__(self, key: str, path: str) -> None:
        self.key, self.path = key, path
        self.nodes: list[Any] = []
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []


def _leaf_keys(exported: Any, module: Any) -> dict[Any, tuple[str, str]]:
    """For each ATen node run inside a leaf module: the key of that module call and its path.

    The key tells two calls of one module apart (``relu`` and ``relu@1``); the leaf is the
    outermost module of the node's stack that ``torch.fx`` would not trace into.
    """
    import torch.fx as fx

    tracer = fx.Tracer()
    modules = dict(module.named_modules())
    leaf: dict[str, bool] = {}
    out: dict[Any, tuple[str, str]] = {}
    for node in exported.graph.nodes:
        if node.op != "call_function":
            continue
        for key, (path, _) in (node.meta.get("nn_module_stack") or {}).items():
            if not path or path not in modules:
                continue
            if path not in leaf:
                leaf[path] = bool(tracer.is_leaf_module(modules[path], path))
            if leaf[path]:
                out[node] = (key, path)
                break
    return out


def _fx_like(exported: Any, module: Any) -> tuple[Any, dict[Any, _Group], dict[Any, Any]]:
    """The graph ``torch.fx`` would trace, from an exported program.

    Returns:
        The graph; for each of its ``call_module`` nodes, the :class:`_Group` of ATen nodes it
        stands for; and the values of the parameters, buffers and constants, keyed by the
        exported program's placeholders (which the groups' ATen nodes read) and by the
        graph's ``get_attr`` nodes.

    """
    import torch.fx as fx

    sig = exported.graph_signature
    targets = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    consts = {**sig.inputs_to_lifted_tensor_constants, **getattr(sig, "inputs_to_lifted_custom_objs", {})}
    keys = _leaf_keys(exported, module)
    g = fx.Graph()
    new: dict[Any, Any] = {}  # exported node -> its node in ``g``
    attrs: dict[Any, Any] = {}  # exported placeholder -> parameter/buffer/constant value
    for node in exported.graph.nodes:
        if node.op == "placeholder":
            if node.name in targets:
                attrs[node] = _attr(module, targets[node.name])
            elif node.name in consts:
                attrs[node] = exported.constants[consts[node.name]]
            else:
                new[node] = g.placeholder(node.name)
        elif node.op == "get_attr":
            attrs[node] = _attr(exported.graph_module, str(node.target))
    groups = _groups(exported, keys)
    done: set[Any] = set()
    calls: dict[Any, _Group] = {}

    def arg(a: Any) -> Any:
        def one(n: Any) -> Any:
            if n in attrs and n not in new:  # a parameter read outside a leaf module: get_attr, as fx
                new[n] = g.get_attr(targets.get(n.name, f"_export_const.{n.name}"))
                attrs[new[n]] = attrs[n]  # the run reads its value here (no attribute of that name on the module)
            return new[n]

        return fx.node.map_arg(a, one)

    for node in exported.graph.nodes:
        if node.op != "call_function" or node in done:
            if node.op == "output":
                user = set(sig.user_outputs)
                outs = [o for o in node.args[0] if getattr(o, "name", None) in user]
                g.output(arg(tuple(outs) if len(outs) != 1 else outs[0]))
            continue
        grp = groups.get(node)
        if grp is None:
            target = _Op(node.target) if hasattr(node.target, "overloadpacket") else node.target
            new[node] = g.create_node("call_function", target, arg(node.args), arg(node.kwargs), name=node.name)
            continue
        done.update(grp.nodes)
        call = g.create_node("call_module", grp.path, arg(tuple(grp.inputs)), {}, name=grp.path.replace(".", "_"))
        calls[call] = grp
        if len(grp.outputs) == 1:
            new[grp.outputs[0]] = call
        else:  # a module returning several tensors: fx unpacks them with getitem
            for j, o in enumerate(grp.outputs):
                new[o] = g.call_function(operator.getitem, (call, j))
    return g, calls, attrs


def _attr(obj: Any, target: str) -> Any:
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _groups(exported: Any, keys: dict[Any, tuple[str, str]]) -> dict[Any, _Group]:
    """Each leaf-module call's :class:`_Group`, keyed by its first ATen node.

    A module call's nodes run one after the other, so a group is a run of consecutive nodes
    with the same key.
    """
    sig = exported.graph_signature
    own = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers)
    own |= set(sig.inputs_to_lifted_tensor_constants)
    out: dict[Any, _Group] = {}
    cur: _Group | None = None
    for node in exported.graph.nodes:
        k = keys.get(node)
        if k is None:
            cur = None
            continue
        if cur is None or cur.key != k[0]:
            cur = _Group(*k)
            out[node] = cur
        cur.nodes.append(node)
    for grp in out.values():
        inside = set(grp.nodes)
        for n in grp.nodes:
            for a in n.all_input_nodes:
                if a not in inside and a.name not in own and a not in grp.inputs and a.op != "get_attr":
                    grp.inputs.append(a)
        # what the call returns: the tensors read after it, and those nobody reads (a returned
        # value the caller drops, such as attention weights, is still computed and allocated)
        grp.outputs = [
            n for n in grp.nodes if any(u not in inside for u in n.users) or (not n.users and _is_tensor(n))
        ] or [grp.nodes[-1]]
    return out


def _is_tensor(node: Any) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)


class _ExportRun(_GraphRun):
    """:class:`_GraphRun` over the ``torch.fx``-like graph of an exported program.

    A ``call_module`` node is one leaf-module call: priced by formula where it can be (as
    in ``torch.fx``), else its group's ATen nodes run on meta tensors.
    """

    def __init__(
        self, module: Any, inputs: tuple[Any, ...], dtype: Any, groups: dict[Any, _Group], attrs: dict[Any, Any]
    ) -> None:
        super().__init__(module, inputs, dtype)
        self.groups = groups
        self.attrs = {n: _meta(v, dtype) for n, v in attrs.items()}

    def _step(self, node: Any) -> None:
        if node.op == "get_attr" and node in self.attrs:
            self.env[node] = self.attrs[node]
            return
        super()._step(node)

    def _call_module(self, node: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
        from carb.graph import _run

        mod = self.modules[node.target]
        op0 = _MODULE_OPS.get(type(mod).__name__)
        fast = _fast_module(mod, op0, args, kwargs, self.dtype) if _run._CLOSED_FORMS else None
        if fast is not None:
            out, self.mode.flops = fast
            return out, mod
        out = self._counted(op0, self._run_group, (self.groups[node], args), {})
        return cpu_layout(op0, out, args[0] if args else None, getattr(mod, "weight", None)), mod

    def _run_group(self, grp: _Group, args: tuple[Any, ...]) -> Any:
        """The outputs of a group's ATen nodes run on meta tensors (a tuple where it has several)."""
        import torch.fx as fx

        env: dict[Any, Any] = dict(zip(grp.inputs, args))

        def val(n: Any) -> Any:
            return env[n] if n in env else self.attrs[n]

        for n in grp.nodes:
            env[n] = n.target(*fx.node.map_arg(n.args, val), **fx.node.map_arg(n.kwargs, val))
        outs = [env[o] for o in grp.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)
