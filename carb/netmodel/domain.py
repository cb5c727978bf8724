"""Where a network prediction stands: the model's machine, precisions and range, and how far off a step beyond them is.

A network model's own intervals come from its residuals inside its domain: its machine
kind, the precisions its layers were measured in, the range of networks it was fitted on.
A prediction outside that domain keeps its point value, and its interval widens to what
was *measured* about such a step (:data:`STEP_KINDS`, recorded in the model's
``meta["domain_steps"]`` by ``benchmarks/bench_machine_kind.py``; a model without its own
takes the shipped default model's):

- ``machine_kind``: the 90% quantile of |log(measured / predicted)| of networks measured on
  another kind of machine than the model's and predicted uncalibrated;
- ``range``: the same for networks beyond the model's fitted range (:data:`RANGE_COLUMNS`),
  measured on the model's own machine kind;
- ``precision``: how far another precision moves a network's cost on a CPU that runs it
  natively (bf16 against fp32 of the same configs). On a machine that does not run the
  precision natively nothing bounds the latency from above: its upper bound is infinite.

Steps that apply together add in quadrature; the interval takes the wider of its own
half-width and the step's, on each side (log space).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.measure.fingerprint import Comparison, Fingerprint, compare

__all__ = [
    "RANGE_COLUMNS",
    "STEP_KINDS",
    "Standing",
    "fingerprint_of",
    "network_range",
    "standing",
    "steps_of",
]

#: Network figures (:data:`carb.netmodel.NETWORK_COLUMNS`) whose fitted range a prediction
#: is checked against: FLOP per forward, batch, input, peak live activations and weights (B).
RANGE_COLUMNS = ("flops", "batch", "input_bytes", "peak_live_bytes", "model_bytes")
#: The kinds of step beyond a model's domain that have a measured size.
STEP_KINDS = ("machine_kind", "range", "precision")
_TARGETS = ("latency_ms", "memory_mb")
_SLACK = 1e-3
_UNIT = {
    "flops": (1e9, "GFLOP"),
    "input_bytes": (1e6, "MB"),
    "peak_live_bytes": (1e6, "MB"),
    "model_bytes": (1e6, "MB"),
}


def fingerprint_of(nm: Any) -> Fingerprint | None:
    """The machine a network model's measurements were taken on (``None``: it records none)."""
    fp = nm.meta.get("fingerprint")
    return Fingerprint.from_dict(fp) if fp is not None else None


def network_range(rows: pd.DataFrame) -> dict[str, list[float]]:
    """The range of :data:`RANGE_COLUMNS` over the networks a model is fitted on (JSON-ready)."""
    return {c: [float(rows[c].min()), float(rows[c].max())] for c in RANGE_COLUMNS if c in rows and len(rows)}


@lru_cache(maxsize=1)
def _default_steps() -> dict[str, Any]:
    import json

    from carb.netmodel.io import DEFAULT_MODEL, MODEL_FILE, resolve

    try:
        doc = json.loads((resolve(DEFAULT_MODEL) / MODEL_FILE).read_text())
    except (OSError, ValueError):  # pragma: no cover - the package ships it
        return {}
    steps = doc.get("meta", {}).get("domain_steps")
    return steps if isinstance(steps, dict) else {}


def steps_of(nm: Any) -> dict[str, Any]:
    """The measured steps of :data:`STEP_KINDS` a model widens by: each its own, else the shipped default model's."""
    own = nm.meta.get("domain_steps")
    own = own if isinstance(own, dict) else {}
    default = _default_steps()
    return {k: own.get(k) or default.get(k) for k in STEP_KINDS}


def _step(steps: dict[str, Any], kind: str, target: str) -> float:
    """One step's 90% half-width (log) for a target; ``inf`` where the model has none measured."""
    try:
        v = float(steps[kind][target]["q90_abs_log"])
    except (KeyError, TypeError, ValueError):
        return math.inf
    return v if math.isfinite(v) and v >= 0 else math.inf


@dataclass
class Standing:
    """Where each of a batch of network predictions stands against the model's domain.

    Attributes:
        machine: this machine against the model's (:class:`carb.measure.fingerprint.Comparison`).
        outside: per network, the reasons it lies outside the domain (empty: inside).
        widened: per network, whether its interval was widened.

    """

    machine: Comparison
    outside: list[list[str]] = field(default_factory=list)
    widened: list[bool] = field(default_factory=list)


def _range_reasons(nm: Any, rows: pd.DataFrame) -> list[list[str]]:
    rng = nm.meta.get("range") or {}
    out: list[list[str]] = [[] for _ in range(len(rows))]
    for c, lo_hi in rng.items():
        if c not in rows.columns or not isinstance(lo_hi, (list, tuple)) or len(lo_hi) != 2:
            continue
        lo, hi = float(lo_hi[0]), float(lo_hi[1])
        v = rows[c].to_numpy(np.float64)
        scale, unit = _UNIT.get(c, (1.0, ""))
        for i in np.flatnonzero((v < lo * (1 - _SLACK)) | (v > hi * (1 + _SLACK))):
            side = f"> {hi / scale:.3g}" if v[i] > hi else f"< {lo / scale:.3g}"
            out[i].append(f"{c} {v[i] / scale:.3g}{(' ' + unit) if unit else ''} {side} fitted")
    return out


def standing(
    nm: Any,
    rows: pd.DataFrame,
    pred: pd.DataFrame,
    precisions: Sequence[str],
    machine: Fingerprint,
) -> tuple[pd.DataFrame, Standing]:
    """Widen the intervals of predictions outside the model's domain by the measured steps.

    Args:
        nm: the network model (its ``meta``: ``fingerprint``, ``range``, ``domain_steps``).
        rows: the networks' :data:`carb.netmodel.NETWORK_COLUMNS` figures.
        pred: :meth:`carb.netmodel.NetModel.predict_rows`'s output for ``rows``.
        precisions: each network's precision.
        machine: the machine the prediction is asked on (:func:`carb.measure.fingerprint.here`).

    Returns:
        ``pred`` with widened ``_lo``/``_hi`` (ms, MB), and the :class:`Standing`.

    """
    cmp = compare(fingerprint_of(nm), machine)
    steps = steps_of(nm)
    measured = nm.layer.precisions
    measured = list(measured) + list(nm.meta.get("calibration_precisions") or []) if measured is not None else None
    reasons = _range_reasons(nm, rows)
    out = pred.copy()
    widened = []
    for i in range(len(rows)):
        kinds = []
        if not cmp.same_kind:
            kinds.append("machine_kind")
            reasons[i].insert(0, "another machine kind")
        if any(r.endswith("fitted") for r in reasons[i]):
            kinds.append("range")
        unbounded = False
        if measured is not None and precisions[i] not in measured:
            kinds.append("precision")
            native = machine.native
            unbounded = precisions[i] != "fp32" and (native is None or precisions[i] not in native)
            reasons[i].append(
                f"precision {precisions[i]} not measured by the model"
                + ("; not native on this machine: no upper bound" if unbounded else "")
            )
        widened.append(bool(kinds))
        for t in _TARGETS if kinds else ():
            s = math.sqrt(sum(_step(steps, k, t) ** 2 for k in kinds))
            p = float(out.at[out.index[i], t])
            lo, hi = float(out.at[out.index[i], f"{t}_lo"]), float(out.at[out.index[i], f"{t}_hi"])
            hw_lo = max(math.log(p / lo) if lo > 0 else math.inf, s)
            hw_hi = max(math.log(hi / p) if hi > 0 else math.inf, s)
            out.at[out.index[i], f"{t}_lo"] = p * math.exp(-hw_lo) if math.isfinite(hw_lo) else 0.0
            open_top = (unbounded and t == "latency_ms") or not math.isfinite(hw_hi)
            out.at[out.index[i], f"{t}_hi"] = math.inf if open_top else p * math.exp(hw_hi)
    return out, Standing(cmp, reasons, widened)
