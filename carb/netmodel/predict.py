"""Predictions for any ``torch.nn.Module``: capture it, then price it with a network model.

:func:`predict_module` captures one module on the meta device (:func:`carb.graph.capture`)
and prices it (:class:`Prediction`: latency, peak memory, intervals, the per-layer
breakdown and the model's coverage); :func:`predict_modules` captures many in worker
processes, then prices them all in one batched call (:func:`predict_tables`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.graph import CaptureError, LayerTable, build_meta, capture
from carb.measure.fingerprint import Fingerprint, here
from carb.netmodel.domain import default_model, fingerprint_of, standing
from carb.netmodel.network import NetModel, _network_rows, load
from carb.netmodel.roofline import CHANNELS_LAST, op_class

#: Above this share of a network's predicted latency in layers priced by the measured fallback
#: (ops the model has no measurements of), it gets no latency budget decision
#: (:meth:`Prediction.decision`: ``measure``). On the shipped layers-cpu-avx2-1t the network
#: model's own 90% error is 15% (``q["latency_ms"]`` = 0.143) and the fallback's
#: leave-one-op-out 90% error x3.8-4.0 (``q`` = 1.34 compute, 1.38 element-wise and
#: normalization; :func:`carb.netmodel.layers.fit_fallback`): layers making 5% of the latency
#: may then be off by 0.05 x 3.0 = 15% of it, as much as the model's whole error elsewhere.
#: Beyond that share the ops nobody measured, not the model, would decide the call.
UNKNOWN_SHARE_MAX = 0.05


@dataclass
class Prediction:
    """What a network will cost on the model's device.

    Attributes:
        latency_ms, latency_ms_lo, latency_ms_hi: per forward of the whole batch, with the
            interval (``coverage``). Units: ms.
        memory_mb, memory_mb_lo, memory_mb_hi: peak memory of inference. Units: MB (1e6 B).
        energy_j: per forward, where the device model has energy; else ``None`` and
            ``energy_missing_reason`` says why. Units: J.
        coverage_flops, coverage_layers, coverage_bytes: shares (0..1) of the FLOPs, of the
            costed layers and of their bytes whose operator type the model has measurements for.
        unknown_ops: operator kinds priced by the measured fallback (their class's roofline).
        unknown_share: the share (0..1) of the predicted latency of the layers in those layers;
            above :data:`UNKNOWN_SHARE_MAX` no latency budget is decided (:meth:`decision`).
        input_shape: the input's shape the network was captured on.
        capture: how it was captured (:attr:`carb.graph.LayerTable.meta`: ``capture``,
            ``fold_bn``; an ONNX file's ``bn_nodes``, ``convs`` and ``convs_with_bias``).
        precision, precision_measured: the network's precision, and whether the model's
            layers were measured in it (``None``: not recorded by the model).
        machine: the machine the model's measurements were taken on, by what it is.
        machine_line: one line saying this machine is another kind than the model's, with
            the command that fits it here (``None``: the same kind).
        extrapolated, outside: whether the network lies outside the model's domain (another
            machine kind, beyond its fitted range, an unmeasured precision) and why; its
            intervals are then widened by the measured size of such a step
            (:mod:`carb.netmodel.domain`); an upper bound may be infinite.
        layers: the per-layer table with ``latency_ms`` (predicted, ms) and ``share``, the
            most expensive first; under a calibrated model the layers are rescaled with the
            calibrated total and add up to ``latency_ms`` (:func:`predict_tables`).
        flops, params: of the whole forward / module. Units: FLOP, count.

    """

    latency_ms: float
    latency_ms_lo: float
    latency_ms_hi: float
    memory_mb: float
    memory_mb_lo: float
    memory_mb_hi: float
    coverage_flops: float
    coverage_layers: float
    unknown_ops: list[str]
    flops: int
    params: int
    interval: float = 0.9
    device: str = ""
    energy_j: float | None = None
    energy_missing_reason: str | None = "the device model has no energy measurements"
    #: the network's precision, and whether the model measured layers in it (``None``: the
    #: model does not record its layers' precisions)
    precision: str = ""
    precision_measured: bool | None = None
    #: the machine the model's measurements were taken on, by what it is; the one line that
    #: says this machine is another kind (``None``: the same kind); whether the network lies
    #: outside the model's domain (machine kind, fitted range, measured precisions), why,
    #: and so whether its intervals were widened by the measured steps (:mod:`carb.netmodel.domain`)
    machine: str = ""
    machine_line: str | None = None
    extrapolated: bool = False
    outside: list[str] = field(default_factory=list)
    coverage_bytes: float = 1.0
    unknown_share: float = 0.0
    input_shape: tuple[int, ...] = ()
    capture: dict[str, Any] = field(default_factory=dict)
    # the captured table, per-layer ms and known flags the breakdown is made of, on first
    # use of ``layers`` (sorting and copying the table is most of the per-network predict
    # time, and a sweep over many networks seldom reads it)
    _source: tuple[pd.DataFrame, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    _layers: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def layers(self) -> pd.DataFrame:
        """The per-layer table with ``latency_ms`` (predicted, ms), ``known`` and ``share``, costliest first."""
        if self._layers is None:
            empty = (pd.DataFrame(), np.zeros(0), np.zeros(0, bool))
            table, t, known = self._source if self._source is not None else empty
            order = np.argsort(-t, kind="stable")
            total = t.sum()
            L = table.take(order).reset_index(drop=True)
            self._layers = L.assign(
                latency_ms=t[order], known=known[order], share=(t[order] / total) if total > 0 else 0.0
            )
        return self._layers

    @property
    def no_decision(self) -> str | None:
        """Why no latency budget is decided for this network (one line), or ``None``."""
        if self.unknown_share > UNKNOWN_SHARE_MAX:
            return (
                f"{100 * self.unknown_share:.0f}% of its predicted latency is in ops priced by the measured fallback "
                f"({', '.join(self.unknown_ops)}), above {100 * UNKNOWN_SHARE_MAX:.0f}%: measure it"
            )
        return None

    def decision(self, latency_ms: float | None = None, memory_mb: float | None = None) -> str:
        """The budget call: ``accept``, ``reject`` or ``measure``, as a screening calls a config.

        ``reject`` where a lower bound is over its budget, ``accept`` where every upper bound is
        within its budget, else ``measure``. A network outside the model's domain
        (:attr:`extrapolated`) is never accepted; one whose fallback-priced ops make more than
        :data:`UNKNOWN_SHARE_MAX` of its latency (:attr:`no_decision`) gets no latency call at
        all: ``measure``.

        Args:
            latency_ms: the latency budget (ms), or ``None``.
            memory_mb: the peak memory budget (MB), or ``None``.

        Returns:
            ``accept``, ``reject`` or ``measure``.

        Raises:
            ValueError: no budget given.

        """
        budgets = {k: v for k, v in (("latency_ms", latency_ms), ("memory_mb", memory_mb)) if v is not None}
        if not budgets:
            raise ValueError("decision: give a latency_ms or memory_mb budget")
        if "latency_ms" in budgets and self.no_decision is not None:
            return "measure"
        bounds = {
            "latency_ms": (self.latency_ms_lo, self.latency_ms_hi),
            "memory_mb": (self.memory_mb_lo, self.memory_mb_hi),
        }
        if any(bounds[k][0] > b for k, b in budgets.items()):
            return "reject"
        if all(bounds[k][1] <= b for k, b in budgets.items()) and not self.extrapolated:
            return "accept"
        return "measure"

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` most expensive layers: name, op, shapes, geometry, predicted ms, share."""
        cols = [
            "name",
            "op",
            "kind",
            "in_shape",
            "out_shape",
            "kernel",
            "stride",
            "groups",
            "geometry",
            "flops",
            "latency_ms",
            "share",
            "known",
        ]
        return self.layers[cols].head(n)

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """JSON-serialisable summary (coverage first)."""
        t = self.top(top).copy()
        t["in_shape"] = t["in_shape"].map(list)
        t["out_shape"] = t["out_shape"].map(list)
        return {
            "coverage": {
                "flops": self.coverage_flops,
                "layers": self.coverage_layers,
                "bytes": self.coverage_bytes,
                "unknown_ops": self.unknown_ops,
                "unknown_latency_share": self.unknown_share,
                "no_decision": self.no_decision,
                "precision": self.precision,
                "precision_measured": self.precision_measured,
            },
            "device": self.device,
            "machine": self.machine,
            "machine_line": self.machine_line,
            "extrapolated": self.extrapolated,
            "outside": list(self.outside),
            "interval": self.interval,
            "latency_ms": {"value": self.latency_ms, "lo": self.latency_ms_lo, "hi": _finite(self.latency_ms_hi)},
            "memory_mb": {"value": self.memory_mb, "lo": self.memory_mb_lo, "hi": _finite(self.memory_mb_hi)},
            "energy_j": self.energy_j,
            "energy_missing_reason": self.energy_missing_reason,
            "flops": self.flops,
            "params": self.params,
            "n_layers": int(len(self.layers)),
            "top_layers": json.loads(t.to_json(orient="records")),
        }


def _finite(x: float) -> float | None:
    """``x``, or ``None`` for an unbounded value (JSON has no infinity)."""
    return x if np.isfinite(x) else None


def _model(model: NetModel | str | Path | None, machine: Fingerprint | None) -> NetModel:
    """The network model as given, loaded; ``None``: the shipped one of ``machine``'s kind (``None``: this one)."""
    if isinstance(model, NetModel):
        return model
    return load(default_model(machine) if model is None else model)


def predict_module(
    module: Any,
    example_input: Any,
    model: NetModel | str | Path | None = None,
    *,
    precision: str | None = None,
    fold_bn: bool = False,
    machine: Fingerprint | None = None,
    max_bytes: int | None = None,
) -> Prediction:
    """Predict latency and peak memory of ``module`` on the device of ``model``.

    With intervals, the per-layer breakdown and the coverage of the model.

    Args:
        module: any ``torch.nn.Module`` (captured on the meta device; not modified), or the
            path of an ``.onnx`` file (read by :func:`carb.graph.capture_onnx`, its graph priced
            as it is, BN folded or not).
        example_input: a tensor, a tuple of tensors, or a shape such as ``(1, 3, 224, 224)``
            (for an ONNX file: its input's shape, ``None`` where the file fixes it).
        model: the device's network model (a :class:`NetModel`, its directory or a shipped name);
            ``None``: the shipped model of ``machine``'s kind, as ``carb predict --module`` picks it
            (:func:`carb.netmodel.default_model`; no cached calibration).
        precision: ``fp32``, ``fp16``, ``bf16``; ``None``: the input's dtype.
        fold_bn: fold each BN that directly follows a convolution into it (:func:`carb.graph.capture`).
        machine: the machine the prediction is for; ``None``: this one
            (:func:`carb.measure.fingerprint.here`). On another kind than the model's the
            interval widens by the measured step and ``machine_line`` says so.
        max_bytes: refuse an input, or activations, larger than this (B; e.g.
            :func:`physical_memory_bytes`: a network this machine could not hold); ``None``: no limit.

    Returns:
        The :class:`Prediction`.

    Raises:
        carb.graph.CaptureError: the module does not trace, bad input or precision, or an input
            or activations above ``max_bytes`` (one line).
        ModelError: the model cannot be loaded (one line).

    """
    nm = _model(model, machine)
    if max_bytes is not None and isinstance(example_input, (tuple, list)) and example_input:
        if all(isinstance(d, int) for d in example_input):
            problem = input_memory_problem(tuple(example_input), precision or "fp32", max_bytes)
            if problem:
                raise CaptureError(problem)
    if isinstance(module, (str, Path)) and str(module).lower().endswith(".onnx"):
        from carb.graph import capture_onnx

        table = capture_onnx(module, example_input, precision)
    else:
        table = capture(module, example_input, precision, fold_bn=fold_bn)
    problem = memory_problem(table, max_bytes) if max_bytes is not None else None
    if problem:
        raise CaptureError(problem)
    return predict_table(table, nm, machine)


def physical_memory_bytes() -> int | None:
    """This machine's physical memory (B), ``None`` where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def input_memory_problem(shape: tuple[int, ...], precision: str, max_bytes: int) -> str | None:
    """Why an input of ``shape`` cannot be held in ``max_bytes`` (one line), or ``None``."""
    from carb.graph import dtype_of

    esize = int(dtype_of(precision).itemsize) if precision else 4
    need = math.prod(shape) * esize
    if need > max_bytes:
        return (
            f"input {'x'.join(map(str, shape))} {precision}: its tensor alone is {_gb(need)}, more than this "
            f"machine's memory ({_gb(max_bytes)}); give a smaller input"
        )
    return None


def memory_problem(table: LayerTable, max_bytes: int) -> str | None:
    """Why a captured network's input or activations cannot be held in ``max_bytes`` (one line), or ``None``.

    Its input, then its input with the peak of the activations alive at once (the liveness
    simulation of :func:`carb.graph.capture`).
    """
    shape = "x".join(map(str, table.input_shape))
    if table.input_bytes > max_bytes:
        return (
            f"input {shape}: its tensor alone is {_gb(table.input_bytes)}, more than this machine's memory "
            f"({_gb(max_bytes)}); give a smaller input"
        )
    need = table.input_bytes + table.peak_live_bytes
    if need > max_bytes:
        return (
            f"input {shape}: the network's activations reach {_gb(need)} at their peak, more than this machine's "
            f"memory ({_gb(max_bytes)}); give a smaller input"
        )
    return None


def predict_table(table: LayerTable, nm: NetModel, machine: Fingerprint | None = None) -> Prediction:
    """:func:`predict_module` on an already captured network."""
    return predict_tables([table], nm, machine)[0]


def _kinds(layers: pd.DataFrame) -> np.ndarray:
    """Each row's kind as an answer names it, with what sets its class apart from the kind's measured one.

    ``(channels last)`` after one on a channels-last input, ``(depthwise, channel multiplier)``
    after such a convolution.
    """
    if not len(layers):
        return np.zeros(0, object)
    kinds = layers["kind"].astype(str).to_numpy().astype(object)
    cls = op_class(layers).astype(str)
    for mask, what in (
        (np.char.endswith(cls, CHANNELS_LAST), "channels last"),
        (np.char.startswith(cls, "conv_dw_multiplier"), "depthwise, channel multiplier"),
    ):
        kinds[mask] = [f"{k} ({what})" for k in kinds[mask]]
    return kinds


def predict_tables(tables: Sequence[LayerTable], nm: NetModel, machine: Fingerprint | None = None) -> list[Prediction]:
    """:func:`predict_table` over many captured networks at once; the same figures as predicting each alone.

    One layer-model call over all their layers and one network-model call over all
    networks (per network, the fixed cost of those calls is most of the prediction time).
    ``machine``: as in :func:`predict_module`.
    """
    if not tables:
        return []
    rows, t_all, known_all, L = _network_rows(tables, nm.layer)
    ends = np.cumsum([len(t.layers) for t in tables])
    starts = ends - np.array([len(t.layers) for t in tables])
    machine = machine if machine is not None else here(_device_kind(nm))
    pred, where = standing(nm, rows, nm.predict_rows(rows), [t.precision for t in tables], machine)
    model_fp = fingerprint_of(nm)
    described = model_fp.describe() if model_fp is not None else "a machine the model does not record"
    line = where.machine.line(_fix_command(nm))
    cols = {c: pred[c].to_numpy(np.float64) for c in pred.columns}
    kind_all = L["kind"].to_numpy().astype(object) if len(L) else np.zeros(0, object)
    kind_all[~known_all] = _kinds(L[~known_all])  # only the unknown rows are named in an answer
    share_f, share_l = rows["flops_known_share"].to_numpy(), rows["layers_known_share"].to_numpy()
    share_b = rows["bytes_known_share"].to_numpy()
    unknown_share = np.divide(
        rows["unknown_ms"].to_numpy(np.float64),
        rows["layer_sum_ms"].to_numpy(np.float64),
        out=np.zeros(len(rows)),
        where=rows["layer_sum_ms"].to_numpy(np.float64) > 0,
    )
    rescale = _calibrated(nm)
    out = []
    for i, table in enumerate(tables):
        t, known = t_all[starts[i] : ends[i]], known_all[starts[i] : ends[i]]
        if rescale and t.sum() > 0:
            # a calibration maps the network's total; the layers take its ratio, so the table adds up to the answer
            t = t * (cols["latency_ms"][i] / t.sum())
        order = np.argsort(-t, kind="stable")
        unknown = list(dict.fromkeys(str(k) for k in kind_all[starts[i] : ends[i]][order][~known[order]]))
        out.append(
            Prediction(
                latency_ms=float(cols["latency_ms"][i]),
                latency_ms_lo=float(cols["latency_ms_lo"][i]),
                latency_ms_hi=float(cols["latency_ms_hi"][i]),
                memory_mb=float(cols["memory_mb"][i]),
                memory_mb_lo=float(cols["memory_mb_lo"][i]),
                memory_mb_hi=float(cols["memory_mb_hi"][i]),
                coverage_flops=float(share_f[i]),
                coverage_layers=float(share_l[i]),
                coverage_bytes=float(share_b[i]),
                unknown_share=float(unknown_share[i]),
                input_shape=tuple(int(d) for d in table.input_shape),
                capture=dict(table.meta),
                unknown_ops=unknown,
                flops=table.flops,
                params=table.params,
                interval=nm.coverage,
                device=nm.device,
                precision=table.precision,
                precision_measured=None if nm.layer.precisions is None else table.precision in nm.layer.precisions,
                machine=described,
                machine_line=line,
                extrapolated=bool(where.outside[i]),
                outside=list(where.outside[i]),
                _source=(table.layers, t, known),
            )
        )
    return out


def _calibrated(nm: NetModel) -> bool:
    """Whether ``nm`` is calibrated to a device (a latency map, or its network terms refitted on K networks)."""
    return bool(nm.calibration.get("latency_ms")) or "calibrated_on" in nm.meta


def _device_kind(nm: NetModel) -> str:
    """``cuda`` for a GPU model, else ``cpu`` (from its fingerprint, else its device label)."""
    fp = fingerprint_of(nm)
    dev = (fp.device if fp is not None and fp.device else None) or nm.device or "cpu"
    return "cuda" if dev.startswith(("cuda", "gpu")) else "cpu"


def _fix_command(nm: NetModel) -> str:
    """The one command that fits ``nm`` to this machine."""
    name = nm.meta.get("name")
    return f"carb calibrate --model {name if isinstance(name, str) else 'MODEL_DIR'} --out NEW_DIR"


#: Below this many networks :func:`predict_modules` captures in-process by default: a
#: worker process starts in 2-4 s (it imports torch), the capture time of 50-100 networks.
PARALLEL_MIN = 100


def _capture_chunk(
    jobs: list[tuple[int, Any, Any, str | None, bool]], in_worker: bool = False
) -> list[tuple[int, Any]]:
    """Capture ``(index, module or builder, example input, precision, fold_bn)`` jobs.

    Each result is a :class:`LayerTable` or the one-line error it raised.
    """
    if in_worker:
        import torch

        torch.set_num_threads(1)  # capture runs no kernel: one thread per worker process
    out = []
    for i, obj, example, precision, fold_bn in jobs:
        try:
            out.append((i, capture(build_meta(obj, f"network {i}: building it"), example, precision, fold_bn=fold_bn)))
        except CaptureError as e:
            out.append((i, str(e)))
    return out


def predict_modules(
    modules: Sequence[Any],
    example_inputs: Any,
    model: NetModel | str | Path | None = None,
    *,
    precision: str | None = None,
    fold_bn: bool = False,
    workers: int | None = None,
    progress: Any = None,
    machine: Fingerprint | None = None,
) -> list[Prediction]:
    """:func:`predict_module` for many networks (a sweep, a NAS population).

    Each is captured (in ``workers`` processes), then all are predicted in one batched call.

    Args:
        modules: ``torch.nn.Module`` objects, or zero-argument callables returning one
            (e.g. ``functools.partial(build, cfg)``; built on the meta device, so nothing is
            allocated, and in the worker, so only the callable is sent there).
        example_inputs: one input for all networks (a tensor or a shape such as
            ``(1, 3, 224, 224)``), or a list with one per network.
        model: the device's network model (a :class:`NetModel`, its directory or a shipped name);
            ``None``: as in :func:`predict_module`.
        precision: ``fp32``, ``fp16``, ``bf16``; ``None``: each input's dtype.
        fold_bn: fold each BN that directly follows a convolution into it (:func:`carb.graph.capture`).
        workers: capture processes (joblib's loky workers: no ``if __name__ ==
            "__main__"`` guard needed, and kept for the next call); ``None``: one per usable
            CPU from :data:`PARALLEL_MIN` networks on, in-process below; ``1``: in-process.
        progress: called with the number of networks captured so far (e.g. a progress bar's
            ``update``), after each chunk.
        machine: as in :func:`predict_module`.

    Returns:
        One :class:`Prediction` per network, in order; the same figures as
        :func:`predict_module` on each.

    Raises:
        carb.graph.CaptureError: a network does not build or trace, or bad input (one
            line, naming the network's index).
        ModelError: the model cannot be loaded (one line).

    """
    nm = _model(model, machine)
    n = len(modules)
    if isinstance(example_inputs, list) and not all(isinstance(d, int) for d in example_inputs):
        if len(example_inputs) != n:
            raise CaptureError(f"example_inputs: {len(example_inputs)} inputs for {n} networks")
        inputs = example_inputs
    else:
        inputs = [example_inputs] * n
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = workers if n >= PARALLEL_MIN else 1
    workers = max(1, min(int(workers), n or 1))
    jobs = [(i, modules[i], inputs[i], precision, fold_bn) for i in range(n)]
    results = _capture_all(jobs, workers, progress)
    for i in range(n):
        if isinstance(results[i], str):
            raise CaptureError(results[i] if results[i].startswith(f"network {i}") else f"network {i}: {results[i]}")
    return predict_tables([results[i] for i in range(n)], nm, machine)


def _capture_all(jobs: list[tuple[int, Any, Any, str | None, bool]], workers: int, progress: Any) -> dict[int, Any]:
    """:func:`_capture_chunk` over all ``jobs`` in chunks, in ``workers`` loky processes (``1``: in-process).

    Returns:
        Index -> layer table or error line.

    """
    n = len(jobs)
    # chunks of ~20 networks: few round trips, and a progress step every fraction of a second
    size = max(1, min(20, -(-n // max(4 * workers, 1))))
    chunks = [jobs[k : k + size] for k in range(0, n, size)]
    results: dict[int, Any] = {}
    if workers == 1:
        done_chunks: Any = (_capture_chunk(ch) for ch in chunks)
    else:
        from joblib import Parallel, delayed

        done_chunks = Parallel(n_jobs=workers, backend="loky", return_as="generator")(
            delayed(_capture_chunk)(ch, True) for ch in chunks
        )
    for done in done_chunks:
        results.update(done)
        if progress is not None:
            progress(len(results))
    return results
