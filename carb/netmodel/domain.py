"""Where a network prediction stands: the model's machine, precisions and range, and how far off a step beyond them is.

A network model's own intervals come from its residuals inside its domain: its machine
kind, the precisions its layers were measured in, the range of networks it was fitted on.
A prediction outside that domain keeps its point value, and its interval widens to what
was *measured* about such a step (:data:`STEP_KINDS`, recorded in the model's
``meta["domain_steps"]``, measured by ``benchmarks/bench_machine_kind.py`` and recorded by
``scripts/ship.py steps``; a model without its own
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
    "default_model",
    "fingerprint_of",
    "network_range",
    "standing",
    "steps_of",
]

#: Network figures (:data:`carb.netmodel.NETWORK_COLUMNS`) whose fitted range a prediction
#: is checked against: FLOP per forward, batch, input, peak live activations and weights (B).
RANGE_COLUMNS = ("flops", "batch", "input_bytes", "peak_live_bytes", "model_bytes")
#: The kinds of step beyond a model's domain that have a measured size.
STEP_KINDS = ("machine_kind", "range", "precision", "memory_definition")
_TARGETS = ("latency_ms", "memory_mb")
_SLACK = 1e-3
_UNIT = {
    "flops": (1e9, "GFLOP"),
    "input_bytes": (1e6, "MB"),
    "peak_live_bytes": (1e6, "MB"),
    "model_bytes": (1e6, "MB"),
}


def older_memory(nm: Any) -> bool:
    """Whether the model's memory is of the older definition and no calibration on this machine maps it.

    A model fitted on measurements whose worker did not map its parent's library pages
    first (``meta["memory_baseline"]`` other than :data:`carb.measure.cpu.MEMORY_BASELINE`)
    predicts those pages too, several MB a network over what CARB measures now; its
    memory widens by the measured ``memory_definition`` step. A calibration of memory
    measured by the worker maps the difference out. Both shipped network models learn from
    layers and networks of the older definition, so both keep the step; a shipped dataset
    says which definition its memory is of in ``carb/data/fingerprints.json`` (``memory``).
    """
    from carb.measure.cpu import MEMORY_BASELINE

    if nm.device and not str(nm.device).startswith("cpu"):
        return False
    return nm.meta.get("memory_baseline") != MEMORY_BASELINE and "memory_mb" not in (nm.calibration or {})


def _own_q(nm: Any, target: str) -> float:
    """The model's own 90% |log residual| for ``target`` (0 where it has none)."""
    try:
        return float((nm.q or {})[target])
    except (KeyError, TypeError, ValueError):
        return 0.0


def fingerprint_of(nm: Any) -> Fingerprint | None:
    """The machine a network model's measurements were taken on (``None``: it records none)."""
    fp = nm.meta.get("fingerprint")
    return Fingerprint.from_dict(fp) if fp is not None else None


@lru_cache(maxsize=8)
def _shipped_fingerprint(name: str) -> Fingerprint | None:
    """The fingerprint a shipped network model's ``meta`` records (``None``: none, or unreadable)."""
    from carb._safeio import DocumentError, read_json
    from carb.netmodel.io import MODEL_FILE, SHIPPED, resolve

    if name not in SHIPPED:
        return None
    try:
        fp = (read_json(resolve(name) / MODEL_FILE).get("meta") or {}).get("fingerprint")
    except (OSError, DocumentError, AttributeError):
        return None
    return Fingerprint.from_dict(fp) if isinstance(fp, dict) else None


def default_model(machine: Fingerprint | None = None) -> str:
    """The shipped network model a prediction uses when none is named: the one measured on this machine's kind.

    The first of :data:`carb.netmodel.SHIPPED` whose fingerprint is of ``machine``'s kind
    (:func:`carb.measure.fingerprint.compare`: every kind-deciding fact known on both sides and
    equal); on a kind none was measured on, :data:`carb.netmodel.DEFAULT_MODEL`, whose measured
    machine-kind step widens the answer there.

    Args:
        machine: the machine asked about; ``None``: this one (:func:`carb.measure.fingerprint.here`).
    """
    from carb.measure.fingerprint import here
    from carb.netmodel.io import DEFAULT_MODEL, SHIPPED

    machine = here() if machine is None else machine
    for name in SHIPPED:
        if compare(_shipped_fingerprint(name), machine).same_kind:
            return name
    return DEFAULT_MODEL


def network_range(rows: pd.DataFrame) -> dict[str, list[float]]:
    """The range of :data:`RANGE_COLUMNS` over the networks a model is fitted on (JSON-ready)."""
    return {c: [float(rows[c].min()), float(rows[c].max())] for c in RANGE_COLUMNS if c in rows and len(rows)}


@lru_cache(maxsize=1)
def _default_steps() -> dict[str, Any]:
    from carb.model.steps import read_steps  # carb.model on demand: importing carb.netmodel stays light
    from carb.netmodel.io import DEFAULT_MODEL, MODEL_FILE, resolve

    return read_steps(resolve(DEFAULT_MODEL) / MODEL_FILE, "meta", "domain_steps")


def steps_of(nm: Any) -> dict[str, Any]:
    """The measured steps of :data:`STEP_KINDS` a model widens by: each its own, else the shipped default model's."""
    own = nm.meta.get("domain_steps")
    own = own if isinstance(own, dict) else {}
    default = _default_steps()
    return {k: own.get(k) or default.get(k) for k in STEP_KINDS}


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


def _range_reasons(nm: Any, rows: pd.DataFrame) -> tuple[np.ndarray, list[list[str]]]:
    """Per network, whether a figure lies beyond the model's fitted range, and the phrases that say which."""
    rng = nm.meta.get("range") or {}
    beyond = np.zeros(len(rows), dtype=bool)
    phrases: list[np.ndarray] = []
    for c, lo_hi in rng.items():
        if c not in rows.columns or not isinstance(lo_hi, (list, tuple)) or len(lo_hi) != 2:
            continue
        lo, hi = float(lo_hi[0]), float(lo_hi[1])
        v = rows[c].to_numpy(np.float64)
        out = (v < lo * (1 - _SLACK)) | (v > hi * (1 + _SLACK))
        if not out.any():
            continue
        beyond |= out
        scale, unit = _UNIT.get(c, (1.0, ""))
        w = v[out]  # the phrases of the networks beyond the range only: formatting is the costly part
        u = f" {unit}" if unit else ""
        side = np.where(w > hi, f"{u} > {hi / scale:.3g} fitted", f"{u} < {lo / scale:.3g} fitted")
        col = np.full(len(v), "", dtype=object)
        col[out] = np.char.add(np.char.add(f"{c} ", np.char.mod("%.3g", w / scale)), side)
        phrases.append(col)
    if not phrases:
        return beyond, [[] for _ in range(len(rows))]
    table = np.stack(phrases, axis=1).tolist()
    return beyond, [[r for r in row if r] for row in table]


def _exp(x: np.ndarray) -> np.ndarray:
    """``exp`` element-wise as the C library computes it (``math.exp``).

    numpy's SIMD ``exp`` and ``log`` can differ from the C library's in the last bit (on AVX-512 CPUs): with the C
    library's, a bound widened in a batch is the bound of that network widened alone, to the bit.
    """
    with np.errstate(over="ignore"):
        out = np.exp(x)  # inf, 0 and NaN where the C library would overflow, underflow or see NaN
    ok = np.abs(x) < 700
    out[ok] = np.fromiter(map(math.exp, x[ok].tolist()), np.float64, int(ok.sum()))
    return out


def _log(x: np.ndarray) -> np.ndarray:
    """``log`` element-wise as the C library computes it (:func:`_exp`); ``-inf`` at 0, NaN below 0 or at NaN."""
    out = np.full(len(x), np.nan)
    pos = x > 0
    out[pos] = np.fromiter(map(math.log, x[pos].tolist()), np.float64, int(pos.sum()))
    out[x == 0] = -np.inf
    return out


def _widen(out: pd.DataFrame, t: str, s: np.ndarray, widened: np.ndarray, open_top: np.ndarray) -> None:
    """Widen ``t``'s interval, in place, to at least ``s`` (log half-width) on each side, on the widened rows.

    ``open_top``: rows whose upper bound is infinite.
    """
    p = out[t].to_numpy(np.float64)
    lo, hi = out[f"{t}_lo"].to_numpy(np.float64), out[f"{t}_hi"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        hw_lo = np.maximum(np.where(lo > 0, _log(p / np.where(lo > 0, lo, 1.0)), np.inf), s)
        hw_hi = np.maximum(np.where(hi > 0, _log(np.where(hi > 0, hi, 1.0) / p), np.inf), s)
        new_lo = np.where(np.isfinite(hw_lo), p * _exp(-hw_lo), 0.0)
        new_hi = np.where(open_top | ~np.isfinite(hw_hi), np.inf, p * _exp(hw_hi))
    out[f"{t}_lo"] = np.where(widened, new_lo, lo)
    out[f"{t}_hi"] = np.where(widened, new_hi, hi)


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
    from carb.model.steps import half_width

    cmp = compare(fingerprint_of(nm), machine)
    steps = steps_of(nm)
    measured = nm.layer.precisions
    measured = list(measured) + list(nm.meta.get("calibration_precisions") or []) if measured is not None else None
    n = len(rows)
    beyond, range_reasons = _range_reasons(nm, rows)
    prec = np.asarray([str(p) for p in precisions], dtype=object)
    other = np.full(n, not cmp.same_kind)
    unmeasured = ~np.isin(prec, measured) if measured is not None else np.zeros(n, dtype=bool)
    native = machine.native
    not_native = np.ones(n, dtype=bool) if native is None else ~np.isin(prec, list(native))
    unbounded = unmeasured & (prec != "fp32") & not_native
    # not a step outside the domain (no flag, no reason): the memory interval widens by what the definitions differ
    older = np.full(n, older_memory(nm))
    widened = other | beyond | unmeasured
    out = pred.copy()
    for t in _TARGETS if (widened | older).any() else ():
        # np.where, not a product: a step with no measurement is inf, and 0 * inf is NaN
        s = np.sqrt(
            np.where(other, half_width(steps, "machine_kind", t) ** 2, 0.0)
            + np.where(beyond, half_width(steps, "range", t) ** 2, 0.0)
            + np.where(unmeasured, half_width(steps, "precision", t) ** 2, 0.0)
            # the definition step is a difference of measurements, not of predictions: the model's own error adds to it
            + np.where(
                older & (t == "memory_mb"), half_width(steps, "memory_definition", t) ** 2 + _own_q(nm, t) ** 2, 0.0
            )
        )
        rows_t = other | beyond | unmeasured | (older & (t == "memory_mb"))
        _widen(out, t, s, rows_t, unbounded & (t == "latency_ms"))
    first = ["another machine kind"] if not cmp.same_kind else []
    reasons = [
        first
        + r
        + (
            [f"precision {p} not measured by the model" + ("; not native on this machine: no upper bound" if u else "")]
            if m
            else []
        )
        for r, p, m, u in zip(range_reasons, prec, unmeasured.tolist(), unbounded.tolist())
    ]
    return out, Standing(cmp, reasons, widened.tolist())
