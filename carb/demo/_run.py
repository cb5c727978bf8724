"""The demo's run: train the source, measure K, calibrate, screen, validate, report."""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.campaign import rounds as states
from carb.campaign.here import Progress
from carb.demo._outputs import _write_outputs
from carb.demo._score import _say_screening, _say_validation, _score, _summary
from carb.demo._settings import DemoSettings, Measure, _Calibration


def run_demo(
    s: DemoSettings | None = None,
    say: Callable[[str], None] | None = print,
    progress: Progress | None = None,
    *,
    measure: Measure | None = None,
) -> dict[str, Any]:
    """Run the demo on this machine: train the source, measure K, calibrate, screen, validate, report.

    Args:
        s: the settings (default: :class:`DemoSettings` as they are: ``carb-demo/`` on this CPU).
        say: prints one line for the user; ``None``: silent.
        progress: draws each measuring step (:data:`carb.campaign.here.Progress`); ``None``: silent.
        measure: another measuring step than this machine's (a simulated device, a remote machine):
            ``measure(frame, what, again=False)`` returns the measured rows of the frame's configs (``status``,
            ``latency_ms``, ``memory_mb``, ``energy_j``, ``sentinel_ms``); ``None``: measured here
            (:func:`carb.campaign.here.measure_frame` into ``OUT/demo.duckdb``).

    Returns:
        The summary also written to ``summary.json``.

    Raises:
        ValueError: (one line) settings that cannot run (no config left to screen, a bad source dataset).
        carb.campaign.here.CampaignInterrupted: stopped by Ctrl-C; ``demo.duckdb`` keeps what was measured.
    """
    s = s or DemoSettings()
    say = say or (lambda line: None)
    measure = measure or _measure_here(s, progress)
    from carb import datasets
    from carb.campaign import speed as drift

    if s.source is None:
        s = replace(s, source="cpu-1t")
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    # the source learns the latency `carb train` learns: at its campaign's median speed where
    # the paired sentinel timed a row (datasets without a speed index: unchanged)
    data = drift.corrected(datasets.load(s.source), paired_only=True)
    sp, cands, excluded = _candidates(s, data, say)
    source, trained = _train_source(data)
    timings["train_source_s"] = time.perf_counter() - t0
    say(
        f"source model: CARB (fast preset) trained on {source.n_train_rows_:,} configs measured on "
        f"{s.source}{'' if s.source.endswith(('.parquet', '.csv')) else ' (shipped)'}, targets "
        f"{', '.join(source.targets_)} "
        + (f"in {timings['train_source_s']:.1f} s" if trained else "(trained on these rows earlier in this process)")
    )

    t0 = time.perf_counter()
    cal = _characterize(s, cands, source, measure)
    timings["characterize_s"] = time.perf_counter() - t0
    say(f"characterized {len(cal.ok)} of {len(cal.pick)} configs on this machine in {timings['characterize_s']:.0f} s")
    if line := states.state_line(cal.state, "calibration"):
        say(line)

    t0 = time.perf_counter()
    cal.model, cal.ref = _calibrate(s, source, cal.measured, cal.visits)
    timings["calibrate_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    budgets, res = _screen(s, cands, cal.model, source)
    timings["screen_s"] = time.perf_counter() - t0
    _say_screening(res.summary, sp.name, budgets, say)

    t0 = time.perf_counter()
    todo = _validation_set(s, cands, res)
    val = measure(todo, "validating")
    val = val[val.status == "ok"].reset_index(drop=True)
    cal = _recalibrate_in_state(s, cal, val, source, measure, say)
    val, val_state = states.retake_off_state(
        val, _again(measure, todo), ref_ms=cal.state.get("ref_ms"), tries=s.retakes
    )
    timings["validate_s"] = time.perf_counter() - t0
    sc = _score(source, cal, val, res, budgets)
    _say_validation(sc, val, val_state, say)

    timings["total_s"] = time.perf_counter() - t_all
    summary = _summary(s, sp.name, excluded, source, cal, budgets, res.summary, sc, val_state, timings)
    _write_outputs(out, s, summary, cal, val, sc, res, data)
    say(f"report: {out / 'report' / 'report.html'}")
    return summary


def _candidates(
    s: DemoSettings, data: pd.DataFrame, say: Callable[[str], None]
) -> tuple[Any, pd.DataFrame, dict[str, str]]:
    """Return the space, its configs to screen, and the precisions left out with why.

    The precisions left out are those not asked for, or (by default, on a CPU) those this CPU has no native kernels
    for.
    """
    from carb.families import space

    sp = space.load(s.space)
    cands = sp.to_frame()
    excluded: dict[str, str] = {}
    if s.precisions is not None:
        excluded = {p: "not asked for" for p in sorted(set(cands["precision"]) - set(s.precisions))}
    elif s.device.startswith("cpu"):
        from carb.measure import cpu_isa, foreign_precisions

        isa = cpu_isa()
        for p in foreign_precisions(s.device, sorted(set(cands["precision"])), isa):
            excluded[p] = _foreign_reason(p, data, s.source, isa)
            say(f"{s.space} space without {p}: {excluded[p]}")
    if excluded:
        cands = cands[~cands["precision"].isin(list(excluded))].reset_index(drop=True)
        if cands.empty:
            raise ValueError(f"no config of `{s.space}` left to screen without {', '.join(excluded)}")
    return sp, cands, excluded


#: The source model the demo trained last, under the digest of its training rows: another run in the same process
#: on the same rows (another device, other budgets or settings) uses it rather than training it again. The demo only
#: reads it (predictions, the calibration's map over it), so one model serves every run.
_LAST_SOURCE: dict[str, Any] = {}


def _rows_digest(data: pd.DataFrame) -> str | None:
    """sha256 of a frame's columns, dtypes, index and values; ``None`` when a column holds unhashable values."""
    import hashlib

    try:
        values = pd.util.hash_pandas_object(data, index=True).to_numpy()
    except TypeError:
        return None
    head = repr([(str(c), str(t)) for c, t in data.dtypes.items()]).encode()
    return hashlib.sha256(head + values.tobytes()).hexdigest()


def _train_source(data: pd.DataFrame) -> tuple[Any, bool]:
    """CARB's ``fast`` preset fitted on the source dataset, and whether it was fitted now (see :data:`_LAST_SOURCE`)."""
    from carb.model import CARB

    key = _rows_digest(data)
    if key is not None and key in _LAST_SOURCE:
        return _LAST_SOURCE[key], False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "energy_j not trained": said in plain words by the demo
        model = CARB(preset="fast").fit(data)
    _LAST_SOURCE.clear()
    if key is not None:
        _LAST_SOURCE[key] = model
    return model, True


def _characterize(s: DemoSettings, cands: pd.DataFrame, source: Any, measure: Measure) -> _Calibration:
    """Measure the K configs the active sampler picks.

    Visits timed in another state of the machine than the fastest one most were timed in (the paired sentinel says
    which) are measured again rather than scaled by one ratio; the configs not measured again are visited once more.
    """
    from carb.transfer.calibrate import choose_samples

    pick = choose_samples(cands, source, s.samples, seed=s.seed)
    visits = [measure(pick, "characterizing")]
    measured, state = states.retake_off_state(visits[0], _again(measure, pick, visits), tries=s.retakes)
    # every K config visited twice (0 retakes: once): the visits' peak memory scatter widens the memory intervals
    once = pick[~pick.config_id.isin(set(pd.concat(visits[1:] or [pick[:0]]).config_id))]
    if len(once) and s.retakes:
        visits.append(measure(once, "measuring again (the scatter between visits)", again=True))
    return _Calibration(pick=pick, measured=measured, state=state, visits=visits)


def _calibrate(s: DemoSettings, source: Any, rows: pd.DataFrame, visits: list) -> tuple[Any, float | None]:
    """The source model mapped to this machine from the K rows, and the sentinel speed (ms) of the map.

    Each row timed with the paired sentinel carries the machine's speed at its own moments: the map is fitted on
    latencies at the calibration's median speed, so the speed changes between the K configs do not bend it.
    """
    from carb.campaign import speed as drift
    from carb.transfer.calibrate import fit_calibrated

    fit_rows, ref = drift.at_median_speed(rows)
    on = "latency at the calibration's median sentinel speed" if ref is not None else "raw latency"
    meta = {"device": s.device, "samples": s.samples, "calibrated_on": on}
    return fit_calibrated(source, fit_rows, meta=meta, visits=pd.concat(visits, ignore_index=True)), ref


def _screen(s: DemoSettings, cands: pd.DataFrame, model: Any, source: Any) -> tuple[dict[str, float], Any]:
    """Return the budgets and the two-stage screening under them.

    The budgets are the settings', else the calibrated model's median over the space.
    """
    from carb.decide.screen import screen

    budgets = dict(s.budgets)
    if not budgets:
        pred = model.predict(cands)
        budgets = {
            t: float(np.round(np.median(pred[t]), 3)) for t in ("latency_ms", "memory_mb") if t in model.targets_
        }
    return budgets, screen(cands, model, budgets, source=source, seed=s.seed)


def _validation_set(s: DemoSettings, cands: pd.DataFrame, res: Any) -> pd.DataFrame:
    """The configs to validate: the best-ranked shortlisted ones and a random control sample."""
    top = res.shortlist.head(s.validate)
    rest = cands[~cands.config_id.isin(set(top.config_id))]
    ctrl = rest.sample(min(s.control, len(rest)), random_state=s.seed)
    return pd.concat([top[cands.columns], ctrl], ignore_index=True)


def _recalibrate_in_state(
    s: DemoSettings, cal: _Calibration, val: pd.DataFrame, source: Any, measure: Measure, say: Callable[[str], None]
) -> _Calibration:
    """Bring the calibration into the state of the machine that both sittings are scored in.

    Both sittings are scored in one state of the machine, the faster of theirs (contention only adds time): the
    calibration's visits timed in another state than that one (all of them when validation ran in a faster state;
    those whose retakes met the same slow spell otherwise) are measured again and the map refitted on them when any
    come back (the screening keeps the first map's calls and budgets).
    """
    val_ref = states.machine_state(val)
    ref = cal.state.get("ref_ms")
    faster = ref is not None and val_ref is not None and val_ref * states.STATE_FACTOR < ref
    target = val_ref if faster else ref
    if not (s.retakes and target is not None and states.off_state(cal.measured, target).any()):
        return cal
    again_k, again_state = states.retake_off_state(
        cal.measured, _again(measure, cal.pick, cal.visits), ref_ms=target, tries=s.retakes
    )
    if not again_state.get("back"):
        return cal
    where = (
        f"the faster state validation ran in (speed sentinel {target:.3f} against {ref:.3f} ms)"
        if faster
        else f"the calibration's state (speed sentinel {target:.3f} ms)"
    )
    say(
        f"{again_state['back']} of {again_state['off']} calibration visits timed in another state than "
        f"{where} measured again after validation ({again_state['visits']} visits) and the map refitted"
    )
    state = {**again_state, "ref_ms": states.machine_state(again_k), "first": cal.state}
    model, ref_ms = _calibrate(s, source, again_k, cal.visits)
    return replace(cal, measured=again_k, state=state, model=model, ref=ref_ms, recalibrated=True)


def _measure_here(s: DemoSettings, progress: Progress | None) -> Measure:
    """The demo's measuring step: a frame's configs measured on the settings' device into ``OUT/demo.duckdb``."""
    from carb.campaign.here import measure_frame

    def measure(frame: pd.DataFrame, what: str, again: bool = False) -> pd.DataFrame:
        return measure_frame(
            frame, Path(s.out) / "demo.duckdb", device=s.device, threads=s.threads, max_time_s=s.max_time,
            rounds=s.rounds, again=again, what=what, progress=progress,
        )  # fmt: skip

    return measure


def _again(measure: Callable[..., pd.DataFrame], frame: pd.DataFrame, keep: list | None = None) -> Callable:
    """Return ``measure_again`` for :func:`carb.campaign.rounds.retake_off_state`.

    It measures the configs of ``frame`` among the given rows once more (``measure(..., again=True)``); the new rows
    are also appended to ``keep``.
    """

    def again(rows: pd.DataFrame) -> pd.DataFrame:
        new = measure(
            frame[frame.config_id.isin(set(rows.config_id))], "measuring again (another machine state)", again=True
        )
        if keep is not None:
            keep.append(new)
        return new

    return again


def _foreign_reason(p: str, data: pd.DataFrame, source: str, isa: dict[str, Any]) -> str:
    """Say why the demo leaves precision ``p`` out, with the source data's own ``p`` / fp32 ratio.

    ``isa``: :func:`carb.measure.cpu_isa`.
    """
    why = (
        f"this CPU has no native {p} kernels (flags {', '.join(isa['flags'] or []) or 'none of note'}; "
        f"torch kernels {isa['torch_capability']}), so {p} runs on fallback kernels here"
    )
    keys = [
        c
        for c in ("family", "block", "depth", "width", "early_downsample", "input_size", "batch", "classes")
        if c in data.columns
    ]
    if "precision" in data.columns and {p, "fp32"} <= set(data["precision"]):
        pv = (
            data[data["status"] == "ok"].pivot_table(index=keys, columns="precision", values="latency_ms")
            if "status" in data.columns
            else data.pivot_table(index=keys, columns="precision", values="latency_ms")
        )
        r = (pv[p] / pv["fp32"]).dropna()
        if len(r):
            why += (
                f", while on the machine {source} was measured on it ran at a median {r.median():.2f}x "
                f"fp32's latency: a cost the source says nothing about here"
            )
    return why
