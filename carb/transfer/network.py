"""Pricing on this machine: a config model's predictions of configs, and any network priced by a network model.

:func:`price_network` is what ``carb predict --module/--onnx`` does: load the network model, use (or make) its
cached calibration for this machine, capture the network and price it. :func:`predict_configs` is ``carb predict
--space/--configs``. The ``*_line`` functions say in one line what a prediction stands for (its machine, runtime,
calibration, coverage); the CLI prints them, a Python user may too.

Example:
    >>> from carb.transfer.network import price_network
    >>> p = price_network("torchvision.models:resnet18", "1x3x224x224")  # doctest: +SKIP
    >>> p.prediction.latency_ms                                            # doctest: +SKIP
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from carb.netmodel import physical_memory_bytes

__all__ = [
    "CALIBRATE_SAMPLES",
    "ConfigPredictions",
    "PricedNetwork",
    "Say",
    "calibrate_command",
    "calibration_line",
    "coverage_lines",
    "figure_lines",
    "top_layers",
    "folded_bn_line",
    "kernel_stride_groups",
    "predict_configs",
    "prediction_json",
    "price_network",
    "read_configs",
    "runtime_line",
]

#: How many networks :func:`price_network` measures with ``calibrate=True`` (``carb calibrate``'s default K).
CALIBRATE_SAMPLES = 10

#: what a step says, and how: ``say(text, kind)`` with kind ``"step"`` (a step begins), ``"warning"`` or ``"info"``
Say = Callable[[str, str], None]


def _silent(text: str, kind: str) -> None:
    """The default :data:`Say`: nothing."""


@dataclass
class ConfigPredictions:
    """A config model's predictions of configs (:func:`predict_configs`).

    Attributes:
        frame: the configs with their predictions (``energy_j``, ``latency_ms``, ``memory_mb`` with ``_lo``/``_hi``).
        machine: the machine the model's measurements were taken on, by what it is.
        warnings: what the model warned of (e.g. how many rows lie outside its training domain).
        missing: the targets the model is not trained for (NaN in ``frame``).
    """

    frame: pd.DataFrame
    machine: str
    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def read_configs(configs: Path) -> pd.DataFrame:
    """The configs of a Parquet/CSV file, their ids computed (or, where the file has them, verified).

    Raises:
        ValueError: ``configs PATH: ...`` an unknown file type, no such file, an unreadable file or bad ids.
    """
    from carb.families import space
    from carb.families.space import PARAMETERS

    configs = Path(configs)
    if configs.suffix not in (".parquet", ".csv"):
        raise ValueError(f"configs {configs}: unknown file type (expected .parquet or .csv)")
    if not configs.exists():
        raise ValueError(f"configs {configs}: no such file")
    try:
        frame = pd.read_parquet(configs) if configs.suffix == ".parquet" else pd.read_csv(configs)
    except Exception as e:
        raise ValueError(f"configs {configs}: unreadable ({' '.join(str(e).split())[:200]})") from None
    frame = frame[[c for c in ("config_id", *PARAMETERS) if c in frame.columns]].reset_index(drop=True)
    if len(frame) and {"family", "depth"} <= set(frame.columns):
        try:  # computed (vectorized) or, when the file has them, verified
            frame = space.with_config_ids(frame)
        except ValueError as e:
            raise ValueError(f"configs {configs}: {e}") from None
    return frame


def predict_configs(model: Any, space: str | None = None, configs: Path | None = None) -> ConfigPredictions:
    """Predict every config of a space or of a file with a config model.

    Args:
        model: a config model (:func:`carb.load_model` of a bundle or a calibrated model).
        space: a built-in space's name or a TOML file; or
        configs: a Parquet/CSV file of configs (:func:`read_configs`).

    Raises:
        ValueError: a bad file, or configs the model cannot predict (the message names the space or the file).
    """
    from carb.families import space as spaces
    from carb.model.training import older_memory_note

    from .load import machine_of

    frame = spaces.load(space).to_frame() if space is not None else read_configs(configs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            pred = model.predict(frame)
        except ValueError as e:
            raise ValueError(f"{configs or space}: {e}") from None
    fp = machine_of(model)
    training = (getattr(model, "manifest_", None) or {}).get("training") or {}
    note = older_memory_note(training.get("memory_definition")) if "memory_mb" in pred.columns else None
    if note is not None:
        caught.append(warnings.WarningMessage(note, UserWarning, __file__, 0))
    return ConfigPredictions(
        pd.concat([frame, pred], axis=1),
        fp.describe() if fp is not None else "a machine the model does not record",
        [str(w.message) for w in caught],
        list(getattr(model, "missing_targets_", [])),
    )


@dataclass
class PricedNetwork:
    """A network priced on this machine (:func:`price_network`).

    Attributes:
        prediction: the :class:`carb.netmodel.Prediction`.
        model: the network model that priced it (the cached calibration, when one was used).
        model_name: the model as named (the shipped default's name when none was).
        default: no model was named (the shipped model of this machine's kind, :func:`carb.netmodel.default_model`).
        cached: the calibration cache's entry used, or None (the model as given).
        machine: this machine's fingerprint.
    """

    prediction: Any
    model: Any
    model_name: Any
    default: bool
    cached: Any
    machine: Any


def price_network(
    network: str | Path,
    input_shape: str,
    precision: str = "fp32",
    model: Any = None,
    *,
    calibrate: bool = False,
    cache: bool = True,
    say: Say = _silent,
    progress: Any = None,
    force: bool = False,
    ops: bool = False,
    samples: int = CALIBRATE_SAMPLES,
) -> PricedNetwork:
    """Price a network on this machine with a network model, calibrated here when asked.

    Args:
        network: ``pkg.mod:callable`` or ``file.py:callable`` (imports and runs that code:
            :func:`carb.graph.load_module`), or the :class:`~pathlib.Path` of an ONNX file (read, never run).
        input_shape: e.g. ``1x3x224x224``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        model: the network model's directory or shipped name; None: the shipped model of this machine's kind
            (:func:`carb.netmodel.default_model`).
        calibrate: with no cached calibration for this machine, measure :data:`CALIBRATE_SAMPLES` networks here
            first (about a minute) and keep it in the calibration cache.
        cache: use the cached calibration of the model for this machine, if any.
        say: told each step (:data:`Say`).
        progress: the measuring campaign's progress (:data:`carb.campaign.here.Progress`), with ``calibrate``.
        force: with ``calibrate``, measure and keep the calibration even where the machine's state is disturbed
            (:func:`carb.campaign.state.check_state`).
        ops: with ``calibrate``, calibrate anew (the cached calibration set aside) measuring each op's speed here
            first (:func:`carb.transfer.here.calibrate_here`'s ``ops``).
        samples: with ``calibrate``, how many networks to measure (K, at least 3): fewer take less time and
            leave a wider interval.

    Raises:
        ValueError: a bad shape or precision, a model that cannot be read, a network that cannot be captured
            (:class:`carb.graph.CaptureError`, :class:`carb.netmodel.ModelError`), or one this machine could
            not hold.
    """
    from carb import graph
    from carb.measure.fingerprint import here
    from carb.netmodel import default_model, load, predict_module

    machine = here()  # read once: the model's pick, the cache's key, the prediction's machine and the first line
    default = model is None
    model = default_model(machine) if default else model
    shape = graph.parse_shape(input_shape)
    graph.dtype_of(precision)
    nm = load(model)
    net = network if isinstance(network, Path) else graph.load_module(network)
    nm, entry = _calibrated_here(nm, model, calibrate, cache, machine, say, progress, force, ops, samples)
    # a network this machine could not hold is refused, as the measuring commands refuse one
    pred = predict_module(net, shape, nm, precision=precision, machine=machine, max_bytes=physical_memory_bytes())
    return PricedNetwork(pred, nm, model, default, entry, machine)


def _calibrated_here(
    nm: Any,
    model: Any,
    calibrate: bool,
    cache: bool,
    machine: Any,
    say: Say,
    progress: Any,
    force: bool = False,
    ops: bool = False,
    samples: int = CALIBRATE_SAMPLES,
) -> Any:
    """The model to price with and the cache entry used (None: the model as given).

    That is the cached calibration of ``model`` for this machine, made first when asked, on the model's own
    kind too: a model of this kind prices networks unlike its zoo at the scale it learnt there, which K
    networks measured here map.
    """
    from carb.netmodel import load, resolve

    from . import cache as calibrations

    if not (cache or calibrate):
        return nm, None
    source_dir = resolve(model)
    entry = calibrations.find(str(model), source_dir, machine) if cache and not (calibrate and ops) else None
    if entry is None and calibrate:
        entry = _calibrate_now(model, source_dir, machine, say, progress, force, ops, samples)
    if entry is None:
        return nm, None
    say(
        f"using your calibration of {model} for this machine ({entry.networks or '?'} networks measured here, "
        f"{entry.created}; {entry.path}); --no-cache for the model as fitted",
        "step",
    )
    return load(entry.path), entry


def _calibrate_now(
    model: Any,
    source_dir: Path,
    machine: Any,
    say: Say,
    progress: Any,
    force: bool = False,
    ops: bool = False,
    samples: int = CALIBRATE_SAMPLES,
) -> Any:
    """Measure ``samples`` (K) networks on this machine, calibrate ``model`` and keep it in the cache; the new entry."""
    from . import cache as calibrations
    from .here import calibrate_here

    # two rounds at different moments: the interval carries the machine's state spread between them
    k, max_time, rounds = samples, 1.2, 2
    minutes = k * (max_time + 3.5 * rounds) / 60 + (2.0 if ops else 0.0)  # the ops: ~120 layers of ~0.5 s a visit
    first = f"measuring each op's layers and {k} networks here" if ops else f"measuring {k} networks here first"
    say(
        f"{'calibrating' if ops else 'no calibration of'} {model} for this machine{'' if ops else ' yet'}: {first} "
        f"(about {round(minutes + 0.5)} min; Ctrl-C stops it, nothing is kept)",
        "step",
    )
    res = calibrate_here(
        str(model), samples=k, device="cpu", threads=1, rounds=rounds, max_time_s=max_time, cache=True,
        progress=progress, say=lambda line: say(line, "warning"), force=force, ops=ops,
    )  # fmt: skip
    if res.cached is None:
        say(f"not kept in your calibration cache: {res.not_cached}", "warning")
    else:
        say(f"kept for this machine in your calibration cache ({res.cached.parent})", "info")
    return calibrations.find(str(model), source_dir, machine)


def calibrate_command(network: str | Path, shape: tuple[int, ...], precision: str, model: Any) -> str:
    """The command that prices ``network`` again with ``--calibrate`` (K networks measured here first).

    ``model``: None for the shipped default model.
    """
    flag = "--onnx" if isinstance(network, Path) else "--module"
    args = ["carb", "predict", flag, str(network), "--input", "x".join(map(str, shape))]
    args += [] if precision == "fp32" else ["--precision", precision]
    args += [] if model is None else ["--model", str(model)]
    return (
        f"{shlex.join([*args, '--calibrate'])} (about a minute: {CALIBRATE_SAMPLES} networks measured here; "
        "--ops also each op's speed, about 3 min, closer where the network holds other ops than convolutions)"
    )


def calibration_line(nm: Any, model_dir: Any) -> str:
    """One line on what the model's figures stand for.

    Args:
        nm: the network model.
        model_dir: how the user named it, quoted in the hint to calibrate it.

    Returns:
        Calibrated on how many networks by which method, or not calibrated (then: how to calibrate it to this
        machine).
    """
    from carb.netmodel.domain import fingerprint_of

    m = nm.meta
    fp = fingerprint_of(nm)
    where = fp.describe() if fp is not None else (nm.device or "its device")
    if m.get("calibration_method"):
        rt = f" with {m['runtime']} {m.get('runtime_version') or ''}".rstrip() if m.get("runtime") else ""
        return (
            f"calibrated ({m['calibration_method']}) on {m.get('calibrated_on', '?')} networks measured{rt} on {where}"
        )
    n = f"{m['networks']} networks measured " if isinstance(m.get("networks"), int) else ""
    return (
        f"not calibrated to this machine: fitted on {n}on {where} on another day; to fit it "
        f"to this machine: carb calibrate --model {shlex.quote(str(model_dir))} --out NEW_DIR (K zoo networks spread "
        "over sizes and designs; --networks YOUR_NETS.txt for a few of the kind you deploy)"
    )


def runtime_line(nm: Any, network: str | Path) -> str | None:
    """A line where the model prices another runtime than the one the network is held for, else None.

    A network model prices PyTorch eager unless it was calibrated on ONNX files measured with ONNX Runtime
    (``meta["runtime"]``); then a module is priced as ONNX Runtime would run its export.
    """
    runtime = nm.meta.get("runtime")
    if runtime and not isinstance(network, Path):
        return (
            f"this model is calibrated for {runtime} (ONNX files measured here): it prices the module as "
            f"{runtime} would run its ONNX export, not as PyTorch eager runs it"
        )
    return None


def folded_bn_line(pred: Any) -> str | None:
    """A line where an ONNX file holds no BatchNorm but convolutions with biases, or None.

    An exporter that folded BNs leaves exactly that, and so does a network whose convolutions have biases of
    their own and no BN: the file cannot tell the two apart, so the line says what follows in the first case.
    """
    cap = pred.capture
    if cap.get("capture") != "onnx" or cap.get("bn_nodes") or not cap.get("convs_with_bias"):
        return None
    return (
        f"the file has no BatchNormalization node, and {cap['convs_with_bias']} of its {cap['convs']} convolutions "
        "carry a bias: where the module had a BatchNorm after them, the exporter folded it (torch.onnx.export does "
        "in eval mode) and this prices the folded graph, where the module run eagerly runs its BNs as kernels of "
        "their own (carb predict --module prices those)"
    )


def coverage_lines(pred: Any, nm: Any, precision: str) -> list[tuple[str, bool]]:
    """The model's coverage of the network, what has no budget decision, and a precision it never measured.

    Returns:
        ``(line, warning)`` pairs: the coverage (layers, FLOPs, bytes known; what a fallback prices), then where
        they apply, why no latency budget decision stands and the precision's warning.
    """
    cov = (
        f"coverage: {100 * pred.coverage_layers:.1f}% of layers, {100 * pred.coverage_flops:.1f}% of FLOPs, "
        f"{100 * pred.coverage_bytes:.1f}% of bytes known"
    )
    if pred.unknown_ops:
        cov += (
            f"; unknown (priced by the measured fallback of their class, wider interval; "
            f"{100 * pred.unknown_share:.0f}% of the latency): {', '.join(pred.unknown_ops)}"
        )
    lines = [(cov, bool(pred.unknown_ops))]
    if pred.no_decision:
        lines.append((f"no latency budget decision for this network: {pred.no_decision}", True))
    if pred.precision_measured is False:
        lines.append(
            (
                f"precision {precision}: not measured by this model (its layers are "
                f"{', '.join(nm.layer.precisions or [])}); priced as their work on {precision}'s bytes, which says "
                f"nothing of what this device's {precision} kernels cost (on a CPU without native {precision}, "
                "tens of times more): calibrate with networks in this precision",
                True,
            )
        )
    return lines


def kernel_stride_groups(row: Any) -> str:
    """A layer's kernel, stride and groups, each as its geometry states it (``3x7x7/1x2x2/1``), else its columns."""
    geo = dict(kv.split("=", 1) for kv in str(getattr(row, "geometry", "") or "").split() if "=" in kv)
    if "k" in geo:
        return f"{geo['k']}/{geo.get('s', row.stride)}/{geo.get('g', row.groups)}"
    return f"{row.kernel}/{row.stride}/{row.groups}"


def _hi(x: float, fmt: str) -> str:
    """An upper bound as text: ``no upper bound`` where nothing measured bounds it."""
    import math

    return format(x, fmt) if math.isfinite(x) else "no upper bound"


def figure_lines(pred: Any, nm: Any) -> list[tuple[str, bool]]:
    """Latency (ms), memory (MB) and energy (J) with their intervals, and why they are widened.

    Returns:
        ``(line, warning)`` pairs: where the network lies outside the model's domain (a warning), then one line per
        figure, and under the latency what the allocator it was measured with means.
    """
    from carb.netmodel import allocator_of

    pct = f"{round(100 * pred.interval)}%"
    lines = []
    if pred.outside:
        lines.append(
            (
                f"outside the model's domain ({'; '.join(pred.outside)}): the intervals are widened by the measured "
                "size of such a step (carb.netmodel.domain)",
                True,
            )
        )
    lines.append(
        (
            f"latency  {pred.latency_ms:10.3f} ms   {pct} interval [{pred.latency_ms_lo:.3f}, "
            f"{_hi(pred.latency_ms_hi, '.3f')}]",
            False,
        )
    )
    if allocator_of(nm) == "retain":
        lines.append(
            (
                "         the steady state of a process that keeps freed memory (measured with allocator retain); "
                "under glibc's default malloc a forward can page-fault on fresh memory every time and take longer "
                "(a median 1.25x, up to 1.7x, on our 2-core VMs: README, How it measures)",
                False,
            )
        )
    lines.append(
        (
            f"memory   {pred.memory_mb:10.1f} MB   {pct} interval "
            f"[{pred.memory_mb_lo:.1f}, {_hi(pred.memory_mb_hi, '.1f')}]",
            False,
        )
    )
    energy = f"{pred.energy_j:.4f} J" if pred.energy_j is not None else f"- ({pred.energy_missing_reason})"
    lines.append(("energy   " + energy, False))
    return lines


def top_layers(pred: Any, top: int) -> pd.DataFrame:
    """The ``top`` most expensive layers, as text: name, op, input shape, kernel/stride/groups, GFLOP, ms, share."""
    rows = [
        [
            str(r.name),
            str(r.op),
            "x".join(map(str, r.in_shape)),
            kernel_stride_groups(r),
            f"{r.flops / 1e9:.4f}",
            f"{r.latency_ms:.4f}",
            f"{100 * r.share:.1f}%",
            "yes" if r.known else "NO",
        ]
        for r in pred.top(top).itertuples()
    ]
    return pd.DataFrame(rows, columns=["layer", "op", "input", "k/s/g", "GFLOP", "ms", "share", "known"])


def prediction_json(priced: PricedNetwork, network: str | Path, precision: str, top: int) -> dict[str, Any]:
    """The prediction as a JSON document: the network, its input, the allocator, the capture and the figures."""
    from carb.netmodel import allocator_of

    pred = priced.prediction
    return {
        "module": str(network),
        "input": list(pred.input_shape),
        "precision": precision,
        "allocator": allocator_of(priced.model),
        "capture": pred.capture,
        **pred.to_dict(top),
    }
