"""Calibration of a network model to a device from K whole networks measured there.

By default one device factor per target, or none where it does not predict the K better
left out (``factor``); :func:`carb.model.maps.fit_log_map`'s full log-space map per target
(``log``: also a slope and a batch term); or the network terms refitted on the K
(``refit``). The K are chosen spread over the predicted latency and the input sizes
(:func:`choose_networks`). A map's interval pools its leave-one-out residuals on the K with
the model's own in-domain error (:func:`carb.netmodel.network.calibrated_q`); a refit's is the
finite-sample conformal level of its leave-one-out residuals. The latency interval then carries
the machine's state spread measured during the calibration (:func:`widen_for_state`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from carb.graph import LayerTable
from carb.netmodel.io import ModelError
from carb.netmodel.network import NetModel, _network_rows, fit_netmodel

#: How :func:`calibrate_on` maps a network model to K whole networks measured on a device.
CALIBRATION_METHODS = ("factor", "log", "refit")
#: Largest network :func:`choose_networks` measures by default. Units: GFLOP per forward.
#: Up to 12 (not the zoo's 3 of the leave-one-family-out evaluation): networks as large as
#: the ImageNet CNNs users deploy, whose big dense convolutions the layer model over-prices.
CALIBRATION_MAX_GFLOPS = 12.0
#: The default of :func:`calibrate_on` and ``carb calibrate`` for a network model: one device
#: factor (or none, if it does not predict the K better left out). On networks left out of
#: the K (40 draws of K = 10, the shipped model) a factor and the full log map err 5.3%,
#: refit 6.2%, and the full log map's line and batch term, picked from ten points, can scale
#: batch-1 networks by a third. A device whose speed does not differ by one factor (another
#: batch scaling) wants ``log`` or ``refit``.
DEFAULT_CALIBRATION_METHOD = "factor"


def capture_config(config: Any) -> LayerTable:
    """The layer table of a measurable network config, built on the meta device.

    Args:
        config: a :class:`carb.families.zoo.ZooConfig`, a :class:`carb.families.nets.NetConfig` or a
            :class:`carb.families.onnxfile.OnnxConfig`.

    Returns:
        Its :func:`carb.graph.capture` (an ONNX file's :func:`carb.graph.capture_onnx`).

    Raises:
        carb.graph.CaptureError: the network does not build or trace, or the file does not read (one line).
        ModelError: not a zoo, net or onnx config.

    """
    from carb.families import nets, onnxfile, zoo

    if isinstance(config, nets.NetConfig):
        return nets.capture(config)
    if isinstance(config, zoo.ZooConfig):
        return zoo.capture(config)
    if isinstance(config, onnxfile.OnnxConfig):
        return onnxfile.capture(config)
    raise ModelError(f"not a network config: a {type(config).__name__} (expected a zoo, net or onnx config)")


def read_networks(path: str | Path) -> list[Any]:
    """The networks of a ``--networks`` file (:func:`carb.families.nets.read_networks`), ``.onnx`` files included.

    A ``SPEC`` ending in ``.onnx`` is an ONNX file (:class:`carb.families.onnxfile.OnnxConfig`, measured with
    ONNX Runtime), relative to the directory the command runs in.

    Raises:
        carb.families.SpaceError: an unreadable file or a malformed line (one line naming the line).
    """
    from carb.families import nets, onnxfile

    return nets.read_networks(path, onnx=onnxfile.OnnxConfig)


def runtime_of(configs: Sequence[Any]) -> str:
    """The one runtime a list of network configs is measured with: ``torch`` (eager) or ``onnxruntime``.

    Raises:
        ModelError: the list mixes runtimes (a calibration maps one runtime's cost).
    """
    runtimes = {getattr(c, "runtime", "torch") for c in configs}
    if len(runtimes) > 1:
        raise ModelError(
            "the networks mix ONNX files (measured with ONNX Runtime) and torch networks (PyTorch eager): "
            "calibrate one runtime at a time"
        )
    return runtimes.pop() if runtimes else "torch"


#: How :func:`choose_networks` spreads the K networks: ``sizes`` (the default) takes in each
#: latency bin the input size, then the family, least used so far; ``families``, the family
#: only. One input size may price systematically off (the layer model's thin corners), and a
#: calibration map fitted on networks mostly of that size moves every other network by that error.
CHOICE_RULES = ("sizes", "families")


def pick_networks(
    cands: Sequence[Any], latency_ms: np.ndarray, k: int, rng: np.random.Generator, rule: str = "sizes"
) -> list[int]:
    """Indices of K of ``cands`` spread over their predicted latency.

    The candidates (zoo configs with ``arch`` and ``input_size``) are split into K bins of
    log ``latency_ms`` and one is taken from each bin by ``rule`` (:data:`CHOICE_RULES`),
    ties broken by ``rng``.

    Raises:
        ModelError: an unknown ``rule``.

    """
    if rule not in CHOICE_RULES:
        raise ModelError(f"unknown choice rule {rule!r} (expected one of {', '.join(CHOICE_RULES)})")
    order = np.argsort(np.log(np.asarray(latency_ms, np.float64)), kind="stable")
    fams: dict[str, int] = {}
    sizes: dict[int, int] = {}
    out = []
    for b in np.array_split(order, k):

        def key(i: int) -> tuple:
            c = cands[i]
            s = sizes.get(c.input_size, 0) if rule == "sizes" else 0
            return (s, fams.get(c.arch, 0), rng.random())

        pick = int(min(b, key=key))
        fams[cands[pick].arch] = fams.get(cands[pick].arch, 0) + 1
        sizes[cands[pick].input_size] = sizes.get(cands[pick].input_size, 0) + 1
        out.append(pick)
    return out


@functools.lru_cache(maxsize=4)
def _candidates(per_family: int, seed: int, max_gflops: float) -> tuple[list[Any], tuple[LayerTable, ...]]:
    """The zoo's candidate configs for :func:`choose_networks` and their layer tables, captured once a process.

    Capturing 40-80 networks takes a few seconds, and every calibration of a network model draws the same.
    """
    from carb.families import zoo

    cands = zoo.sample_configs(per_family=per_family, seed=seed, max_gflops=max_gflops)
    return cands, tuple(capture_config(c) for c in cands)


def choose_networks(
    nm: NetModel,
    k: int,
    seed: int = 0,
    per_family: int = 4,
    max_gflops: float = CALIBRATION_MAX_GFLOPS,
    rule: str = "sizes",
) -> list[Any]:
    """K zoo networks (:mod:`carb.families.zoo`) to calibrate ``nm`` with.

    ``per_family`` random candidates of each family (seeded) of at most ``max_gflops``
    GFLOP per forward are split into K bins of the model's predicted latency (log scale)
    and one is taken from each bin (:func:`pick_networks`: the input size, then the family,
    least used so far first), so that the K networks span the latencies, the input sizes
    and the designs.

    Args:
        nm: the network model to calibrate.
        k: how many networks.
        seed: seeds the candidates and the ties.
        per_family: candidates drawn per family.
        max_gflops: the largest candidate. Units: GFLOP per forward.
        rule: one of :data:`CHOICE_RULES`.

    Returns:
        The K zoo configs.

    Raises:
        ModelError: ``k`` < 2 or more than the candidates, or an unknown ``rule``.

    """
    cands, tables = _candidates(per_family, seed, max_gflops)
    if not 2 <= k <= len(cands):
        raise ModelError(f"--samples {k}: choose between 2 and {len(cands)} networks")
    rows = _network_rows(list(tables), nm.layer)[0]
    lat = nm.predict_rows(rows)["latency_ms"].to_numpy()
    return [cands[i] for i in pick_networks(cands, lat, k, np.random.default_rng(seed), rule)]


def calibrate_on(
    nm: NetModel,
    tables: Sequence[LayerTable],
    measured: pd.DataFrame,
    method: str = DEFAULT_CALIBRATION_METHOD,
    meta: Mapping[str, Any] | None = None,
    state_sd: float = 0.0,
) -> NetModel:
    """``nm`` calibrated with K whole networks measured on a device.

    Args:
        nm: the network model to calibrate (its layer model is kept).
        tables: the K networks' captures (:func:`capture_config`).
        measured: their ``latency_ms`` (ms) and ``memory_mb`` (MB), aligned with ``tables``.
        method: ``factor``: one device factor per target (or, for memory, one offset in MB),
            or none, whichever predicts the K better left out (:meth:`NetModel.calibrate`
            with ``max_terms=1``);
            ``log``: a log-space map of ``nm``'s prediction per target, also a line in log
            and a batch term (:meth:`NetModel.calibrate`, as ``carb calibrate`` maps a config model);
            ``refit``: the network terms refitted on the K networks (:func:`fit_netmodel`,
            overheads shrunk towards 0, scale free).
        meta: provenance added to the model's ``meta``.
        state_sd: the machine's state spread during the calibration (log standard deviation;
            :func:`carb.campaign.state.state_spread`), which the latency interval takes on
            (:func:`widen_for_state`); 0: none measured.

    Raises:
        ModelError: an unknown method, or fewer than 3 networks measured.

    """
    if method not in CALIBRATION_METHODS:
        raise ModelError(
            f"--method: unknown value {method!r} for a network model (expected {' or '.join(CALIBRATION_METHODS)})"
        )
    y = measured[["latency_ms", "memory_mb"]].reset_index(drop=True).astype(np.float64)
    ok = (np.isfinite(y.to_numpy()) & (y.to_numpy() > 0)).all(axis=1)
    if ok.sum() < 3:
        raise ModelError(f"calibration: {int(ok.sum())} networks measured; need at least 3")
    rows = _network_rows([t for t, o in zip(tables, ok) if o], nm.layer)[0]
    out = calibrate_rows(nm, rows, y[ok].reset_index(drop=True), method)
    out.meta = {**out.meta, "calibration_method": method, **dict(meta or {})}
    return widen_for_state(out, state_sd)


def widen_for_state(nm: NetModel, state_sd: float) -> NetModel:
    """``nm`` (calibrated, changed in place) with its latency interval widened by the machine's state spread.

    The K were measured at one moment of the machine and a later measurement lands at another:
    each carries one draw of the machine's state, whose spread ``state_sd`` (log standard
    deviation) the calibration's rounds measured, so their difference has twice its variance.
    The half-width ``q`` (log, at the model's coverage) becomes
    ``sqrt(q**2 + 2 * (z * state_sd)**2)``, ``z`` the normal quantile of the coverage: a
    calibration taken in a fast or a moving moment does not claim a narrow interval. The
    spread and the widened half-width are kept in ``meta["state_widening"]``.

    Args:
        nm: a calibrated network model (a latency map in ``calibration``, or refitted terms).
        state_sd: log standard deviation; 0 or less: unchanged.

    Returns:
        ``nm``.
    """
    if not state_sd > 0:
        return nm
    z = float(stats.norm.ppf((1.0 + nm.coverage) / 2.0))
    cal = nm.calibration.get("latency_ms")
    q = float(cal["q"]) if cal else float(nm.q.get("latency_ms", 0.0))
    wide = float(np.sqrt(q**2 + 2.0 * (z * state_sd) ** 2))
    if cal:
        nm.calibration = {**nm.calibration, "latency_ms": {**cal, "q": wide}}
    else:
        nm.q = {**nm.q, "latency_ms": wide}
    nm.meta = {**nm.meta, "state_widening": {"state_sd": float(state_sd), "q_before": q, "q": wide}}
    return nm


def calibrate_rows(nm: NetModel, rows: pd.DataFrame, measured: pd.DataFrame, method: str) -> NetModel:
    """:func:`calibrate_on` from the K networks' :func:`network_row` figures already computed.

    ``rows`` are aligned with ``measured``'s ``latency_ms`` (ms) and ``memory_mb`` (MB).
    """
    if method in ("log", "factor"):
        return nm.calibrate(rows, measured, max_terms=1 if method == "factor" else 3)
    out = fit_netmodel(nm.layer, rows, measured, coverage=nm.coverage, device=nm.device, meta=nm.meta)
    out.meta["calibrated_on"] = int(len(rows))
    return out
