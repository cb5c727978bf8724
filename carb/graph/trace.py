"""Graph capture: any ``torch.nn.Module`` -> a :class:`~carb.graph.table.LayerTable`, on the meta device.

:func:`capture` traces a module with ``torch.fx`` (standard ``torch.nn`` modules are
leaves: a ``Conv2d`` is one layer, a user's ``Block`` is traced through), then runs the
graph node by node on **meta** tensors (:mod:`carb.graph.nodes`), so no weight or
activation is ever allocated: a module whose parameters are real is first copied with
every parameter and buffer replaced by a meta tensor of the same shape and dtype (the
user's module is not touched). Each node that produces a tensor becomes a row
(:mod:`carb.graph._run`). Where ``torch.fx`` cannot trace (a forward that branches on its
input's shape), ``torch.export`` does, on the example input's static shape, and its graph
is folded back into the one ``torch.fx`` would give (:mod:`carb.graph._export`).

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

import pandas as pd

from carb.graph._run import _GraphRun
from carb.graph.nodes import _esize
from carb.graph.table import COLUMNS, DTYPES, CaptureError, LayerTable, dtype_of


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


#: How :func:`capture` traces: ``torch.fx``, falling back to ``torch.export`` where fx fails.
VIAS = ("auto", "fx", "export")


@gc_paused
def capture(
    module: Any, example_input: Any, precision: str | None = None, *, fold_bn: bool = False, via: str = "auto"
) -> LayerTable:
    """Trace ``module`` on the meta device into a :class:`LayerTable`.

    Args:
        module: any ``torch.nn.Module`` (in eval mode or not: it is captured as in eval).
        example_input: a tensor (any device: only its shape and dtype are used), a tuple of
            tensors, or a shape (tuple of ints: an fp32/``precision`` tensor of that shape).
        precision: ``fp32``, ``fp16`` or ``bf16``: weights and inputs are cast to it; ``None``
            keeps the example input's dtype.
        fold_bn: fold each BN that directly follows a convolution into it (runtimes that
            fold; eager PyTorch does not).
        via: ``auto``: ``torch.fx``, and where it cannot trace (a forward that branches on
            its input's shape) ``torch.export`` on the example input's static shape
            (:mod:`carb.graph._export`: the same table wherever both succeed); ``fx`` or
            ``export``: that one only. ``meta["capture"]`` says which one captured it.

    Returns:
        The layer table: one row per tensor-producing node, and the network's totals.

    Raises:
        CaptureError: the module neither traces with ``torch.fx`` nor exports with
            ``torch.export``, or running its graph on the example input fails (one line
            naming the causes), or an unknown precision or ``via``.

    """
    if via not in VIAS:
        raise CaptureError(f"unknown capture method {via!r} (expected one of {', '.join(VIAS)})")
    inputs, dtype, precision = _meta_inputs(module, example_input, precision)
    graph, run, how = _capture_graph(module, inputs, dtype, via)
    _refuse_overflow(run.rows, inputs)
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
        meta={"fold_bn": fold_bn, "capture": how},
    )


#: the largest count a layer table holds: its columns and totals are 64-bit integers
INT64_MAX = 2**63 - 1


def _refuse_overflow(rows: list[dict[str, Any]], inputs: tuple[Any, ...]) -> None:
    """Refuse an input so large that the network's FLOP or activation bytes exceed a 64-bit count.

    Summed in 64-bit columns they would wrap around to negative or small figures; summed here in Python's
    integers, which never overflow.
    """
    flops = sum(int(r["flops"]) for r in rows)
    nbytes = sum(int(r["alloc_bytes"]) for r in rows) + sum(t.numel() * t.element_size() for t in inputs)
    if max(flops, nbytes) > INT64_MAX:
        shape = "x".join(map(str, inputs[0].shape))
        raise CaptureError(
            f"input {shape}: {float(flops):.3g} FLOP and {float(nbytes):.3g} B of activations, beyond a 64-bit count "
            f"({float(INT64_MAX):.3g}): give a smaller input"
        )


def _capture_graph(module: Any, inputs: tuple[Any, ...], dtype: Any, via: str) -> tuple[Any, "_GraphRun", str]:
    """The graph of ``module``, its run on ``inputs`` (rows recorded) and which tracer made it."""
    fx_reason = None
    if via != "export":
        try:
            graph = _trace(module)
        except CaptureError as e:
            if via == "fx":
                raise
            fx_reason = str(e)
        else:
            run = _GraphRun(module, inputs, dtype)
            run.run(graph)
            return graph, run, "torch.fx"
    from carb.graph._export import export_graph  # imports torch.export: only when fx fails

    graph, run = export_graph(module, inputs, dtype, fx_reason)
    return graph, run, "torch.export"


def _meta_inputs(module: Any, example_input: Any, precision: str | None) -> tuple[tuple[Any, ...], Any, str]:
    """The example inputs as meta tensors, their dtype and the precision's name.

    Inputs are cast to ``precision``'s dtype when given (``None``: each keeps its own); the
    name is then the first input's.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got a {type(module).__name__}")
    if isinstance(module, torch.jit.ScriptModule):  # neither torch.fx nor torch.export reads TorchScript
        raise CaptureError(
            f"a TorchScript module ({type(module).__name__}) cannot be captured: pass the nn.Module it was "
            "scripted or traced from, or its ONNX export (carb predict --onnx)"
        )
    quantized = _quantized(module)
    if quantized is not None:  # int8 kernels: no network model measured them, and meta tensors do not run them
        raise CaptureError(
            f"a quantized module ({quantized}) cannot be priced: the network models measured float layers "
            "(fp32, bf16, fp16); measure it on this machine instead (carb.measure_cost)"
        )
    dtype = dtype_of(precision) if precision is not None else None
    if isinstance(example_input, (tuple, list)) and example_input and all(isinstance(d, int) for d in example_input):
        example_input = torch.empty(tuple(example_input), device="meta", dtype=dtype or torch.float32)
    inputs = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise CaptureError("example input: expected a tensor, a tuple of tensors or a shape")
    inputs = tuple(  # strides kept: a channels-last input runs other kernels
        torch.empty_strided(
            t.shape,
            t.stride(),
            device="meta",
            dtype=(dtype if dtype is not None and t.is_floating_point() else t.dtype),
        )
        for t in inputs
    )
    if precision is None:
        precision = {v: k for k, v in DTYPES.items()}.get(str(inputs[0].dtype).removeprefix("torch."), "fp32")
    return inputs, dtype, precision


def _quantized(module: Any) -> str | None:
    """``module``'s first quantized submodule (torch.ao.quantization's), by class and package, or ``None``."""
    for m in module.modules():
        where = type(m).__module__
        if where.startswith(("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized")):
            return f"{type(m).__name__} of {where.split('.modules')[0]}"
    return None


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
