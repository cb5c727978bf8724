"""Calibration on this machine: measure K chosen samples here and map a model to it, for both model kinds.

:func:`calibrate_here` is what ``carb calibrate`` and ``carb predict --calibrate`` run, and what
``carb.calibrate(model, "here")`` runs from Python:

- a **config model** (a CARB bundle or a calibrated model): K configs of a space, chosen where decisions land and
  spread over cost (:func:`carb.transfer.sampling.choose_samples`), are measured in a small campaign with the speed
  sentinel; visits timed in another state of the machine are measured again; a map per target is fitted at the K's
  median speed (:func:`carb.transfer.calibrate.fit_calibrated`), its intervals widened by the visits' scatter;
- a **network model** (:class:`carb.netmodel.NetModel`): K whole networks, the user's list or zoo networks spread
  over the model's predicted latency (:func:`carb.netmodel.choose_networks`), are measured with the model's own
  worker allocator and the model is mapped or refitted on them (:func:`carb.netmodel.calibrate_on`), its latency
  interval widened by the machine's state spread measured during the calibration.

A calibration is a small campaign: before it measures, the machine's state is checked
(:func:`carb.campaign.state.check_state`: the load and a few sentinel readings); on a disturbed machine a
calibration to be cached or saved is refused (:class:`carb.campaign.state.DisturbedMachine`) unless ``force``,
and one kept nowhere is measured with a warning. The K are then visited in ``rounds`` at different
moments, each round a campaign with the speed sentinel read at its start and end and paired with every visit; the
round-to-round spread of the same K and of their sentinels is the state spread the interval carries.

The K measurements are kept beside a saved model (``calibration.duckdb``). With ``cache=True`` a calibrated network
model is kept in the per-user calibration cache for this machine kind (:mod:`carb.transfer.cache`), where
``carb predict --module`` finds it.

Example:
    >>> import carb                                                              # doctest: +SKIP
    >>> here = carb.calibrate("layers-cpu-avx2-1t", "here", samples=10, cache=True)  # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.params import Interval, Options, validate_params

__all__ = ["HereCalibration", "MIN_NETWORKS", "calibrate", "calibrate_here", "space_frame"]

#: the fewest networks a network model calibrates on (:func:`carb.netmodel.calibrate_on` refuses fewer)
MIN_NETWORKS = 3


@dataclass
class HereCalibration:
    """What a calibration on this machine measured and fitted.

    Attributes:
        model: the calibrated model (:class:`carb.transfer.calibrate.CalibratedModel` or a
            :class:`carb.netmodel.NetModel`).
        source: the source model, loaded.
        kind: ``"config"`` or ``"network"``.
        device: where the K were measured (``cpu``, ``cuda:0``, ...).
        measured: the K rows the map was fitted on (latency at the K's median sentinel speed where every row has one).
        visits: every visit of the K, retakes included.
        state: the retake summary of the calibration's visits (:func:`carb.campaign.rounds.retake_off_state`).
        machine: the machine's state checked before measuring (:class:`carb.campaign.state.MachineState`), or
            ``None`` where not checked (another measuring step than this machine's, and no ``check``).
        spread: the state spread measured over the rounds (:func:`carb.campaign.state.state_spread`).
        what: a phrase naming the K (e.g. ``10 carb.families.zoo networks (seed 0)``).
        labels: a short label per ``config_id`` of the K.
        tables: the K networks' layer tables (network models only).
        left_out: the networks measured but left out of the fit, with why.
        runtime: ``torch``, or the runtime the K networks ran in (``onnxruntime``).
        out: the directory the model was saved to, or ``None``.
        cached: the calibration cache's entry, or ``None`` where not kept.
        not_cached: why the model was not kept in the cache when ``cache`` was asked, else ``None``.
        ops: with ``ops``, the layers measured again per op (:func:`carb.netmodel.op_scale.op_layers`'s rows and
            ``here_ms``, their median latency here over the rounds, ms); else ``None``.
    """

    model: Any
    source: Any
    kind: str
    device: str
    measured: pd.DataFrame
    visits: pd.DataFrame
    state: dict[str, Any] = field(default_factory=dict)
    what: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    tables: list[Any] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    runtime: str = "torch"
    out: Path | None = None
    cached: Path | None = None
    not_cached: str | None = None
    machine: Any = None
    spread: dict[str, Any] = field(default_factory=dict)
    ops: pd.DataFrame | None = None


def space_frame(space: Any, precisions: Sequence[str] | None = None) -> pd.DataFrame:
    """The configs of a space, only those of ``precisions`` when given.

    Args:
        space: a :class:`carb.families.space.Space`, or a built-in space's name or a TOML file.
        precisions: keep only these precisions (``None``: all).

    Raises:
        carb.families.SpaceError: (one line) an unknown space, or a precision the space does not have.
    """
    from carb.families import space as spaces
    from carb.families.space import SpaceError

    sp = spaces.load(space) if isinstance(space, (str, Path)) else space
    frame = sp.to_frame()
    if not precisions:
        return frame
    if "precision" not in frame.columns:
        raise SpaceError(f"precision: space {sp.name} has no precision parameter")
    have = sorted(set(frame["precision"].astype(str)))
    bad = [p for p in precisions if p not in have]
    if bad:
        raise SpaceError(f"precision {bad[0]}: not in space {sp.name} (it has {', '.join(have)})")
    return frame[frame["precision"].isin(list(precisions))].reset_index(drop=True)


@validate_params(
    {
        "samples": [Interval(int, 2, None)],
        "device": [str],
        "threads": [None, Interval(int, 1, None)],
        "rounds": [Interval(int, 1, None)],
        "force": [bool],
        "max_time_s": [Interval(float, 0.1, None)],
        "method": [None, Options({"log", "nnls", "factor", "refit"})],
        "seed": [int],
        "cache": [bool],
        "ops": [bool],
    }
)
def calibrate_here(
    model: Any,
    *,
    samples: int = 10,
    device: str = "cpu",
    threads: int | None = None,
    rounds: int = 2,
    max_time_s: float = 2.0,
    method: str | None = None,
    seed: int = 0,
    space: Any = "cpu",
    precisions: Sequence[str] | None = None,
    networks: str | Path | None = None,
    out: str | Path | None = None,
    cache: bool = False,
    progress: Any = None,
    say: Callable[[str], None] | None = None,
    measure: Callable[..., pd.DataFrame] | None = None,
    force: bool = False,
    check: Callable[..., Any] | None = None,
    ops: bool = False,
) -> HereCalibration:
    """Measure K chosen samples on this machine and map ``model`` to it.

    Args:
        model: the source model: loaded, a model directory, or a shipped network model's name
            (``layers-cpu-avx2-1t``).
        samples: K, how many configs (config model) or networks (network model, >= 3) to measure.
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads of each worker (``None``: 1).
        rounds: visits per sample, each round a campaign at its own moment with the speed sentinel; their spread
            widens the interval (1: no round-to-round spread is measured).
        max_time_s: sampling time of one sample over all its rounds (each visit takes its share). Units: s.
        method: the map: ``log`` (default) or ``nnls`` for a config model; ``factor`` (default), ``log`` or
            ``refit`` for a network model.
        seed: the sampler's seed.
        space: config model: the space the K configs are chosen from (a name, a TOML file or a space).
        precisions: config model: only configs of these precisions.
        networks: network model: a text file of the networks to measure (``SPEC INPUT [PRECISION]`` per line;
            :func:`carb.netmodel.read_networks`); it imports and runs each network's code. ``None``: K zoo networks.
        out: save the calibrated model (and the K's store) in this new directory; ``None``: not saved.
        cache: keep a calibrated network model in the per-user calibration cache for this machine kind.
        progress: draws each measuring step (:data:`carb.campaign.here.Progress`); ``None``: silent.
        say: receives one line per notable event (a retake, a network left out); ``None``: silent.
        measure: another measuring step than this machine's (a simulated device, a remote machine):
            ``measure(frame, what, again=False, allocator="default")`` returns the measured rows of the frame's
            configs (``config_id``, ``status``, ``latency_ms``, ``memory_mb``, ``sentinel_ms``); ``None``: measured
            here (:func:`carb.campaign.here.measure_frame`, the K's store kept beside a saved model).
        force: measure and keep (cache, save) a calibration even where the machine's state is disturbed (the record
            says so); without it a disturbed state refuses a calibration to be kept and warns of one kept nowhere.
        check: reads the machine's state before measuring: ``check(reference_ms=..., force=...)`` returns a
            :class:`carb.campaign.state.MachineState` or raises :class:`carb.campaign.state.DisturbedMachine`;
            ``None``: :func:`carb.campaign.state.check_state` of this machine where it measures here, no check
            where ``measure`` is given.
        ops: a shipped network model: first price each op by its speed here against the convolutions'
            (:mod:`carb.netmodel.op_scale`: a few layers per op of its campaigns measured again).

    Returns:
        The calibrated model and what was measured (:class:`HereCalibration`).

    Raises:
        ValueError: (one line) a bad parameter, a model that is no model, too few samples measured ok,
            or an ``out`` that is not empty or is the source.
        carb.campaign.state.DisturbedMachine: (one line, under ``force``; an
            :class:`carb.params.InvalidParameterError`) the machine is disturbed and ``force`` was not given;
            nothing was measured.
        carb.campaign.here.CampaignInterrupted: stopped by Ctrl-C; nothing is saved or kept.
    """
    from .load import _is_network_model, load_model

    say = say or (lambda line: None)
    source_dir = _source_dir(model)
    src = load_model(model) if isinstance(model, (str, Path)) else model
    if out is not None:
        from .calibrate import check_model_out

        check_model_out(Path(out), source_dir)
    keeps = cache or out is not None
    run = _Run(samples, device, threads, rounds, max_time_s, seed, progress, say, measure, force, check, keeps)
    if _is_network_model(src):
        if precisions:
            raise ValueError(
                "precisions: for a config model's space; a network model calibrates on networks "
                "(a networks file's lines may name a precision)"
            )
        if samples < MIN_NETWORKS and networks is None:
            raise ValueError(f"samples {samples}: a network model calibrates on at least {MIN_NETWORKS} networks")
        res = _calibrate_network(src, str(model), run, networks=networks, method=method, ops=ops)
    else:
        if networks is not None or ops:
            flag = "networks" if networks is not None else "ops"
            raise ValueError(f"{flag}: only with a network model (the shipped layers-cpu-avx2-1t is one)")
        if method not in (None, "log", "nnls"):
            raise ValueError(f"method: unknown value {method!r} for a config model (expected log or nnls)")
        res = _calibrate_config(src, str(model), run, space=space, precisions=precisions, method=method)
    if out is not None:
        res.out = _save(res, Path(out), source_dir)
    if cache:
        _keep(res, model, source_dir)
    return res


def _source_dir(model: Any) -> Path | None:
    """The directory a source model was loaded from, where it can be told."""
    if isinstance(model, (str, Path)):
        from carb.netmodel import resolve

        return Path(resolve(model))
    d = getattr(model, "directory_", None)
    return Path(d) if d is not None else None


@dataclass(frozen=True)
class _Run:
    """How a calibration on this machine measures (the settings of :func:`calibrate_here` both kinds share)."""

    samples: int
    device: str
    threads: int | None
    rounds: int
    max_time_s: float
    seed: int
    progress: Any
    say: Callable[[str], None]
    measure: Callable[..., pd.DataFrame] | None
    force: bool = False
    check: Callable[..., Any] | None = None
    #: whether the calibration is kept (cached or saved): only a kept one is refused in a disturbed state
    keeps: bool = True

    def measuring(self, store: Path) -> Callable[..., pd.DataFrame]:
        """The measuring step: the caller's, else this machine's into ``store`` (each round a share of the time)."""
        return self.measure or _here(store, self.device, self.threads, self.max_time_s / self.rounds, self.progress)

    def machine_state(self, src: Any, allocator: str = "default") -> Any:
        """The machine's state before measuring (``None``: not checked); raises where disturbed and not forced."""
        from carb.campaign.state import check_state

        ref = _reference_ms(src, self.device)
        lenient = self.force or not self.keeps  # a calibration kept nowhere only says so
        if self.check is not None:
            st = self.check(reference_ms=ref, force=lenient)
        elif self.measure is None:
            st = check_state(self.device, self.threads, allocator=allocator, reference_ms=ref, force=lenient)
        else:
            return None
        st = replace(st, forced=self.force and st.disturbed)
        if st.disturbed:
            self.say(
                st.line() + ("" if self.keeps else "; measured anyway: this calibration is neither cached nor saved")
            )
        return st

    def rounds_of(
        self, measure: Callable[..., pd.DataFrame], first: pd.DataFrame, frame: pd.DataFrame, **kw: Any
    ) -> list[pd.DataFrame]:
        """Every round of the K, ``first`` the first: those measured ok in it, visited again at later moments."""
        out = [first]
        ok = frame[frame.config_id.isin(set(first.loc[first["status"] == "ok", "config_id"]))]
        for r in range(2, self.rounds + 1):
            out.append(measure(ok, f"calibrating, round {r} of {self.rounds}", again=True, **kw))
        return out


def _reference_ms(src: Any, device: str) -> float | None:
    """The median sentinel (ms) an earlier calibration measured in, where the model is one of this machine's kind."""
    from carb.measure.fingerprint import Fingerprint, compare, here

    meta = getattr(src, "meta", None)
    if not isinstance(meta, dict) or not meta.get("sentinel_ms") or not meta.get("fingerprint"):
        return None
    if not compare(Fingerprint.from_dict(meta["fingerprint"]), here(device)).same_kind:
        return None  # another machine's sentinel says nothing of this one's state
    s = [float(v) for v in meta["sentinel_ms"] if isinstance(v, (int, float)) and v > 0]
    return float(np.median(s)) if s else None


def _calibrate_config(
    src: Any, source_name: str, run: _Run, *, space: Any, precisions: Sequence[str] | None, method: str | None
) -> HereCalibration:
    """K configs of the space measured here in a small campaign, a map per target fitted on them."""
    from carb.campaign import rounds as states
    from carb.campaign import speed as drift
    from carb.campaign.state import state_spread
    from carb.families import space as spaces
    from carb.measure.fingerprint import here

    from .calibrate import fit_calibrated
    from .sampling import choose_samples

    sp = spaces.load(space) if isinstance(space, (str, Path)) else space
    frame = space_frame(sp, precisions)
    _warn_foreign_precisions(run.device, frame)
    if run.samples > len(frame):  # never fewer measured than asked without a word
        raise ValueError(
            f"samples {run.samples}: the space {sp.name} holds {len(frame):,} configs; give as many or fewer"
        )
    machine = run.machine_state(src)
    pick = choose_samples(frame, src, run.samples, seed=run.seed)
    meta = {
        "device": run.device,
        "samples": run.samples,
        "space": sp.name,
        "seed": run.seed,
        "source": source_name,
        # where the K were measured: this machine
        "fingerprint": replace(here(run.device), threads=run.threads or 1 if run.device == "cpu" else None).to_dict(),
    }
    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        store = Path(tmp) / "calibration.duckdb"
        measure = run.measuring(store)

        visits = [measure(pick, "calibrating")]

        def again(f: pd.DataFrame) -> pd.DataFrame:
            visits.append(measure(pick[pick.config_id.isin(set(f.config_id))], "measuring again", again=True))
            return visits[-1]

        # visits timed in another state of the machine than the one most were timed in (their paired sentinel says
        # which) are measured again: no one ratio corrects them
        measured, state = states.retake_off_state(visits[0], again)
        if line := states.state_line(state, "calibration"):
            run.say(line)
        # the later rounds are visits too: their scatter from the kept row widens the intervals (fit_calibrated)
        later = run.rounds_of(measure, measured, pick)[1:]
        visits.extend(later)
        spread = state_spread([measured, *later])
        meta["rounds"] = run.rounds
        meta["state_spread"] = spread
        if machine is not None:
            meta["machine_state"] = machine.to_dict()
        # fitted at the K configs' median speed when each carries its own (paired) sentinel
        fit_rows, ref = drift.at_median_speed(measured)
        meta["calibrated_on"] = "latency at the K configs' median sentinel speed" if ref is not None else "raw latency"
        all_visits = pd.concat(visits, ignore_index=True)
        model = fit_calibrated(src, fit_rows, meta=meta, method=method or "log", visits=all_visits)
        _widen_config_for_state(model, spread.get("state_sd", 0.0))
        res = HereCalibration(
            model=model, source=src, kind="config", device=run.device, measured=fit_rows, visits=all_visits,
            state=state, what=f"{len(pick)} configs of space {sp.name} (seed {run.seed})", machine=machine,
            spread=spread,
        )  # fmt: skip
        res._store = _keep_store(store)  # type: ignore[attr-defined]
    return res


def _widen_config_for_state(model: Any, state_sd: float) -> None:
    """A config model's latency intervals widened, in place, by the machine's state spread over the rounds.

    The K's later rounds are visits in the machine's other moments; a later measurement lands in one too. The
    widening is the spread of the difference of two such draws at the model's coverage, ``sqrt(2) * z * state_sd``
    (log), carried as the latency's visit scatter (:attr:`carb.transfer.calibrate.CalibratedModel.scatter_`, on top
    of each interval, as memory's visit scatter is).
    """
    from scipy import stats

    if not state_sd > 0 or "latency_ms" not in model.maps_:
        return
    z = float(stats.norm.ppf((1.0 + model.coverage) / 2.0))
    model.scatter_["latency_ms"] = float(np.sqrt(2.0) * z * state_sd)
    model.meta["state_widening"] = {"state_sd": float(state_sd), "scatter": model.scatter_["latency_ms"]}


def _calibrate_network(
    nm: Any, source_name: str, run: _Run, *, networks: str | Path | None, method: str | None, ops: bool = False
) -> HereCalibration:
    """K whole networks measured here with the model's allocator, the model mapped or refitted on them."""
    from carb import netmodel
    from carb.campaign.state import pool_rounds_at_median_speed, state_spread

    method = method or netmodel.DEFAULT_CALIBRATION_METHOD
    if method not in netmodel.CALIBRATION_METHODS:
        expected = " or ".join(netmodel.CALIBRATION_METHODS)
        raise ValueError(f"method: unknown value {method!r} for a network model (expected {expected})")
    if networks is not None:
        cfgs = netmodel.read_networks(networks)
        if len(cfgs) < MIN_NETWORKS:
            raise ValueError(f"networks {networks}: {len(cfgs)} networks; need at least {MIN_NETWORKS}")
        what = f"{len(cfgs)} networks of {networks}"
    else:
        cfgs = netmodel.choose_networks(nm, run.samples, seed=run.seed)
        what = f"{len(cfgs)} carb.families.zoo networks (seed {run.seed})"
    runtime = netmodel.runtime_of(cfgs)  # one runtime per calibration
    allocator = netmodel.allocator_of(nm)
    tables = [netmodel.capture_config(c) for c in cfgs]  # the user's networks first: a bad one is bad input
    machine = run.machine_state(nm, allocator)
    df = pd.DataFrame([c.to_dict() for c in cfgs])
    df.insert(0, "config_id", [c.config_id for c in cfgs])
    # the K networks are measured as the model's layers and networks were: with the same worker allocator (page
    # faults are part of a forward's cost under glibc's default rules)
    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        store = Path(tmp) / "calibration.duckdb"
        measure = run.measuring(store)
        op_rows = None
        if ops:  # before the networks: their map starts from the ops priced as they run here
            nm, op_rows = _scaled_by_ops(nm, source_name, run, measure, allocator)
        rows = measure(df, "calibrating", allocator=allocator)
        ok, meas, left_out = _networks_measured_ok(rows, df, cfgs)
        for label, why in left_out:
            run.say(f"left out of the calibration: {label} ({why})")
        rounds = run.rounds_of(measure, meas, df, allocator=allocator)
        spread = state_spread(rounds)
        fit_rows, ref = pool_rounds_at_median_speed(meas, rounds)
        tabs = [t for t, o in zip(tables, ok) if o]
        model = netmodel.calibrate_on(
            nm,
            tabs,
            fit_rows,
            method=method,
            state_sd=spread.get("state_sd", 0.0),
            meta={
                "calibration_device": run.device,
                "threads": run.threads or 1,
                "samples": len(tabs),
                "seed": run.seed,
                "rounds": run.rounds,
                "state_spread": spread,
                **({"machine_state": machine.to_dict()} if machine is not None else {}),
                "source": source_name,
                "networks": [c.label() for c, o in zip(cfgs, ok) if o],
                "calibration_latency": (
                    f"at the K networks' median sentinel speed, the median of {run.rounds} rounds"
                    if ref is not None
                    else f"raw, the median of {run.rounds} rounds"
                ),
                "sentinel_ms": [float(v) for v in meas["sentinel_ms"]] if "sentinel_ms" in meas else [],
                **_runtime_meta(runtime),
                **_machine_meta(nm, run.device, run.threads, allocator, tabs),
            },
        )
        model.device = f"{run.device}-{run.threads or 1}t" if run.device == "cpu" else run.device
        res = HereCalibration(
            model=model, source=nm, kind="network", device=run.device, measured=fit_rows,
            visits=pd.concat(rounds, ignore_index=True), what=what, labels={c.config_id: c.label() for c in cfgs},
            tables=tabs, left_out=left_out, runtime=runtime, machine=machine, spread=spread, ops=op_rows,
        )  # fmt: skip
        res._store = _keep_store(store)  # type: ignore[attr-defined]
    return res


def _scaled_by_ops(
    nm: Any, source_name: str, run: _Run, measure: Callable[..., pd.DataFrame], allocator: str
) -> tuple[Any, pd.DataFrame]:
    """``nm`` with each op priced by its speed here against the convolutions', and the layers measured for it."""
    import copy
    import dataclasses

    from carb.netmodel.op_scale import fit_op_scale, op_layers

    layers = op_layers(str(nm.meta.get("name") or source_name), seed=run.seed)
    frame = layers.drop(columns=["op_unit", "there_ms"])
    first = measure(frame, "calibrating the ops", allocator=allocator)
    rounds = run.rounds_of(measure, first, frame, allocator=allocator)
    ok = pd.concat(rounds, ignore_index=True)
    ok = ok[ok["status"] == "ok"].groupby("config_id")["latency_ms"].median()
    here_ms = layers["config_id"].map(ok).to_numpy(np.float64)
    scale = fit_op_scale(layers, here_ms)
    out = copy.copy(nm)
    out.layer = dataclasses.replace(nm.layer, op_scale=scale)
    out.meta = {
        **nm.meta,
        "op_scale": {
            "layers": int(np.isfinite(here_ms).sum()),
            "of": int(len(layers)),
            "reference": "dense convolutions",
            "rounds": run.rounds,
        },
    }
    return out, layers.assign(here_ms=here_ms)


def _here(
    store: Path, device: str, threads: int | None, max_time_s: float, progress: Any
) -> Callable[..., pd.DataFrame]:
    """The measuring step on this machine: a frame's configs measured into the K's store, one visit each."""
    from carb.campaign.here import measure_frame

    def measure(frame: pd.DataFrame, what: str, again: bool = False, allocator: str = "default") -> pd.DataFrame:
        return measure_frame(
            frame, store, device=device, threads=threads, max_time_s=max_time_s, rounds=1, again=again,
            allocator=allocator, what=what, progress=progress,
        )  # fmt: skip

    return measure


def _keep_store(store: Path) -> bytes | None:
    """The K's store as bytes, to write beside a saved model once the temporary folder is gone."""
    return store.read_bytes() if store.is_file() else None


def _save(res: HereCalibration, out: Path, source_dir: Path | None) -> Path:
    """Save the calibrated model in ``out`` with the K's store beside it."""
    if res.kind == "network":
        res.model.meta = {**res.model.meta, "name": str(out)}
        res.model.save(out)
    else:
        if source_dir is None:
            raise ValueError("out: a config model loaded from an object cannot be saved; pass its directory")
        res.model.save(out, source_dir=source_dir)
    data = getattr(res, "_store", None)
    if data:
        (out / "calibration.duckdb").write_bytes(data)  # the K measurements, kept with the model
    return out


def _keep(res: HereCalibration, model: Any, source_dir: Path | None) -> None:
    """Keep a calibrated network model in the per-user cache for this machine kind; say why not otherwise."""
    from carb.measure.fingerprint import here

    from . import cache

    if res.kind != "network":
        res.not_cached = "the calibration cache serves network models (carb predict --module)"
        return
    if res.runtime != "torch":
        res.not_cached = "it prices ONNX Runtime, and the cache serves PyTorch eager"
        return
    if source_dir is None:
        res.not_cached = "the source model was given as an object: name its directory or shipped name"
        return
    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        d = res.out if res.out is not None else _save(res, Path(tmp) / "model", source_dir)
        try:
            res.cached = cache.store(d, str(model), source_dir, here(res.device), len(res.tables))
        except OSError as e:
            res.not_cached = f"not kept ({e})"


def _networks_measured_ok(
    rows: pd.DataFrame, df: pd.DataFrame, cfgs: list[Any]
) -> tuple[list[bool], pd.DataFrame, list[tuple[str, str]]]:
    """Which of the K networks measured ok, their rows in the order of ``df``, and the others with why."""
    by_id = rows.set_index("config_id")
    ok = [cid in by_id.index and by_id.loc[cid, "status"] == "ok" for cid in df.config_id]
    if sum(ok) < MIN_NETWORKS:
        raise ValueError(
            f"calibration: {sum(ok)} of {len(df)} networks measured ok; need at least {MIN_NETWORKS} "
            f"(statuses: {', '.join(sorted(set(map(str, rows['status']))))})"
        )
    left_out = []
    for c, o in zip(cfgs, ok):
        if not o:
            r = by_id.loc[c.config_id] if c.config_id in by_id.index else None
            left_out.append((c.label(), f"{r['status']}: {r['message']}" if r is not None else "not measured"))
    return ok, by_id.loc[[cid for cid, o in zip(df.config_id, ok) if o]].reset_index(), left_out


def _runtime_meta(runtime: str) -> dict[str, Any]:
    """The runtime the K were measured with, where it is not PyTorch eager (the network model's own)."""
    if runtime == "torch":
        return {}
    import importlib.metadata

    try:
        version = importlib.metadata.version(runtime)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"runtime": runtime, "runtime_version": version}


def _machine_meta(nm: Any, device: str, threads: int | None, allocator: str, tabs: list[Any]) -> dict[str, Any]:
    """Where the K were measured: this machine's fingerprint, the source's, and the K's precisions."""
    from carb.measure.fingerprint import here

    fp = replace(here(device), threads=threads or 1, allocator=allocator if device == "cpu" else None)
    return {
        "fingerprint": fp.to_dict(),
        "source_fingerprint": nm.meta.get("fingerprint"),
        "calibration_precisions": sorted({t.precision for t in tabs}),
    }


def _warn_foreign_precisions(device: str, frame: pd.DataFrame) -> None:
    """Warn when the space holds precisions this CPU has no native kernels for: one map over all would be wide."""
    from carb.measure import foreign_precisions

    foreign = foreign_precisions(device, sorted(set(frame["precision"]))) if "precision" in frame.columns else []
    if foreign:
        native = [p for p in sorted(set(frame["precision"])) if p not in foreign]
        warnings.warn(
            f"this CPU has no native {' or '.join(foreign)} kernels (carb.measure.cpu_isa), so those "
            f"configs run on fallback kernels here, often tens of times slower than where the source was "
            f"measured; one map over all precisions will be wide: calibrate one precision at a time"
            + (f" (e.g. --precision {native[0]})" if native else ""),
            stacklevel=3,
        )


def calibrate(model: Any, measured: pd.DataFrame | str, **kwargs: Any) -> Any:
    """Map a model to a new device from K measurements there: the front door's one calibration call.

    Both kinds of model, either way: from K measurements you took (a DataFrame:
    :func:`carb.transfer.load.calibrate_from`), or ``"here"``: K chosen configs or networks measured on this
    machine now, in a small campaign with the speed sentinel (:func:`calibrate_here`). Nothing is written unless
    ``out`` is given (``"here"``); save a result with ``.save(directory, source_dir=...)`` (config model) or
    ``.save(directory)`` (network model).

    Args:
        model: the source model, loaded, or a path or shipped name for :func:`carb.load_model`.
        measured: the K measurements (see :func:`carb.transfer.load.calibrate_from` for their columns), or
            ``"here"``.
        **kwargs: with a DataFrame: ``method``, ``meta``, and ``coverage`` (config model) or ``tables`` (network
            model); with ``"here"``: :func:`calibrate_here`'s settings (``samples``, ``device``, ``threads``,
            ``rounds``, ``max_time_s``, ``precisions``, ``networks``, ``out``, ``cache``, ...).

    Returns:
        The calibrated model: a :class:`carb.transfer.calibrate.CalibratedModel` or a :class:`carb.netmodel.NetModel`.

    Raises:
        ValueError: (one line) too few measurements, an unknown method, missing columns, a bad setting.

    Example:
        >>> here = calibrate("layers-cpu-avx2-1t", "here", samples=10)        # doctest: +SKIP
        >>> cal = calibrate(load_model("models/cpu-1t"), measured)             # doctest: +SKIP
    """
    from .load import calibrate_from

    if isinstance(measured, str):
        if measured != "here":
            raise ValueError(f"measured: {measured!r}; expected a DataFrame of K measurements, or 'here'")
        return calibrate_here(model, **kwargs).model
    return calibrate_from(model, measured, **kwargs)
