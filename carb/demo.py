"""``carb demo``: the whole product on this machine in a few minutes.

1. **Source model**: CARB is trained on a shipped, measured dataset (``cpu-1t``: this
   project's own CPU campaign).
2. **Characterize**: K configs of the ``cpu`` space, chosen by the active sampler (each
   precision's low-memory batch-1 corner, the largest batch, then spread over the cost),
   are measured on this machine (all numbers are measured here).
3. **Calibrate**: the source model is mapped to this machine from those K measurements
   (their latencies at the calibration's median speed, when each row carries its own
   paired speed sentinel); a config beyond the K's range is flagged and its interval widened.
4. **Screen**: the space is screened in two stages (source model, then the calibrated
   model) under budgets set from the calibrated predictions (the space's median latency
   and memory unless given).
5. **Validate**: the best-ranked shortlisted configs and a random control sample are
   measured, and the budget decisions are scored against those measurements. The speed
   sentinel (:mod:`carb.measure.sentinel`) is read while both calibration and validation
   are measured. Both phases are scored in one state of the machine, the faster of theirs:
   each visit timed in another state, as its paired sentinel shows, is measured again
   (:func:`carb.campaign.rounds.retake_off_state`), the calibration's after validation too, and the map
   is refitted when any of those come back. The demo says how much the machine's speed
   moved between the two (first, when that exceeds its chance variation) and scores the
   predictions against the raw validation latencies and against them corrected to the
   calibration's speed (the budget calls too: a config timed once at a slow moment can
   break a latency budget it meets at the speed the model was calibrated at). Beside
   them, the sitting's floor: the same kind of map fitted on the validated configs
   themselves.
6. **Report**: tables, a summary and PNG figures in the output folder.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.campaign import rounds as states
from carb.campaign.rounds import RETAKES

__all__ = ["DEMO_ROUNDS", "DemoSettings", "run_demo", "sitting_floor"]

#: visits per config in each of the demo's sittings (2 measured no better than 1 on our VMs)
DEMO_ROUNDS = 1


@dataclass
class DemoSettings:
    """Settings of a demo run.

    Attributes:
        out: output folder.
        device: ``cpu`` or ``cuda[:i]``.
        threads: CPU threads; default: the cores available, at most 4 (so that on our
            2-core machines the demo's platform differs from the 1-thread source).
        samples: K, configs measured for calibration.
        validate: shortlisted configs measured for validation (best ranked first).
        control: random configs of the space measured for validation.
        max_time: sampling seconds per config. Units: s.
        rounds: visits per config in each sitting, spread over the sitting and pooled
            (:func:`carb.campaign.runner.run_campaign`); the sampling time is split among them.
        budgets: target -> budget; default the calibrated model's median over the space.
        source: the dataset the source model is trained on: a shipped name (``carb dataset
            list``) or a dataset file of the `cpu` space's parameters; ``None``: ``cpu-1t``.
        space: the space screened.
        seed: seed of the sampler and the control sample.
        precisions: precisions of the space to screen; default: all but those this CPU has
            no native kernels for (:func:`carb.measure.foreign_precisions`).
        retakes: times a visit timed in another state of the machine (its paired sentinel
            more than :data:`carb.campaign.rounds.STATE_FACTOR` from the state the sitting is scored
            in: the faster of the two phases') is measured again, and each K config once; 0: never.
    """

    out: Path
    device: str = "cpu"
    threads: int | None = None
    samples: int = 12
    validate: int = 8
    control: int = 8
    max_time: float = 1.0
    rounds: int = DEMO_ROUNDS
    budgets: dict[str, float] = field(default_factory=dict)
    source: str | None = None
    space: str = "cpu"
    seed: int = 0
    #: precisions of the space to screen; ``None``: those this device runs natively
    #: (:func:`carb.measure.foreign_precisions`)
    precisions: tuple[str, ...] | None = None
    retakes: int = RETAKES


Measure = Callable[..., pd.DataFrame]


@dataclass
class _Calibration:
    """The calibration sitting.

    It holds the K configs, their measured rows, the machine state they are scored in, every visit of the K (first
    and retakes: their memory scatter widens the intervals) and the calibrated model with the sentinel speed its
    map was fitted at.
    """

    pick: pd.DataFrame
    measured: pd.DataFrame
    state: dict[str, Any]
    model: Any = None
    ref: float | None = None
    recalibrated: bool = False
    visits: list[pd.DataFrame] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        """The rows measured ok."""
        return self.measured[self.measured.status == "ok"]


@dataclass
class _Scores:
    """The validation's scores: calls against the measured rows, raw and drift-corrected."""

    calls: np.ndarray
    metrics: dict[str, Any]
    vpred: pd.DataFrame
    err: dict[str, float]
    cover: dict[str, float]
    moved: dict[str, Any]
    corr_val: pd.DataFrame
    err_corr: dict[str, float]
    cover_corr: dict[str, float]
    floor: dict[str, float]
    floor_raw: dict[str, float]
    calls_corr: dict[str, Any] | None

    @property
    def corrected(self) -> bool:
        """Whether the sentinel measured the machine's speed in both sittings (drift-corrected figures)."""
        return "speed_change" in self.moved


def run_demo(
    s: DemoSettings, measure: Callable[[pd.DataFrame, str], pd.DataFrame], say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the demo: train the source, measure K, calibrate, screen, validate, report.

    Args:
        s: the settings.
        measure: ``measure(frame, what)`` measures the configs of a frame on the device and
            returns their stored rows (the CLI passes one with a progress bar);
            ``measure(frame, what, again=True)`` measures them once more (a retake of visits
            timed in another state of the machine: :func:`carb.campaign.rounds.retake_off_state`)
            and returns the new rows.
        say: prints one line for the user.

    Returns:
        The summary also written to ``summary.json``.
    """
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
    source = _train_source(data)
    timings["train_source_s"] = time.perf_counter() - t0
    say(
        f"source model: CARB (fast preset) trained on {source.n_train_rows_:,} configs measured on "
        f"{s.source}{'' if s.source.endswith(('.parquet', '.csv')) else ' (shipped)'}, targets "
        f"{', '.join(source.targets_)} in {timings['train_source_s']:.1f} s"
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


def _train_source(data: pd.DataFrame) -> Any:
    """CARB's ``fast`` preset fitted on the source dataset."""
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "energy_j not trained": said in plain words by the demo
        return CARB(preset="fast").fit(data)


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


def _say_screening(sm: dict[str, Any], space_name: str, budgets: dict[str, float], say: Callable[[str], None]) -> None:
    """One line: the screening's candidates, Stage 1, accepted outright and shortlist."""
    say(
        f"screened {sm['candidates']:,} configs of `{space_name}` under "
        + ", ".join(f"{k} <= {v:g}" for k, v in budgets.items())
        # "feasible" counts the configs accepted outright (whole interval within every budget), not all that may fit
        + f": Stage 1 kept {sm['after_stage1']:,}, {sm['feasible']:,} accepted outright, shortlist {sm['shortlist']:,} "
        f"({100 * sm['pruning_ratio']:.1f}% pruned)"
    )


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


def _score(source: Any, cal: _Calibration, val: pd.DataFrame, res: Any, budgets: dict[str, float]) -> _Scores:
    """Score the screening's calls and the calibrated model against the validation rows.

    They are scored raw and at the calibration's speed (the paired sentinel), beside the sitting's floor.
    """
    from carb.campaign import speed as drift
    from carb.decide.validate import decision_metrics, drift_corrected_calls, truly_feasible

    model = cal.model
    # three-way calls (screen's default): configs Stage 1 pruned are rejects
    call_of = dict(zip(res.decisions.config_id, res.decisions.decision)) if not res.decisions.empty else {}
    calls = np.array([call_of.get(i, "reject") for i in val.config_id])
    metrics = decision_metrics(calls, truly_feasible(val, budgets))
    vpred = model.predict(val)
    err = {t: float(np.median(np.abs(vpred[t] / val[t] - 1))) for t in model.targets_}
    cover = {t: float(np.mean((val[t] >= vpred[f"{t}_lo"]) & (val[t] <= vpred[f"{t}_hi"]))) for t in model.targets_}
    # drift: the machine's speed while validating against while calibrating (speed sentinel)
    moved = drift.phase_drift(cal.ok, val)
    corr_val = val.copy()
    if "speed_change" in moved:
        # validation latencies at the calibration's median speed, the one the map was fitted at
        corr_val["latency_ms"] = drift.normalize(val, ref_ms=cal.ref or moved["sentinel_ms_before"])
    err_corr = {t: float(np.nanmedian(np.abs(vpred[t] / corr_val[t] - 1))) for t in model.targets_}
    cover_corr = {
        t: float(np.mean((corr_val[t] >= vpred[f"{t}_lo"]) & (corr_val[t] <= vpred[f"{t}_hi"]))) for t in model.targets_
    }
    # the floor on the values the map was fitted on: drift-corrected where rows have a sentinel
    floor = sitting_floor(source, val, corr_val if "speed_change" in moved else val, model.targets_)
    # and on the raw values: where the corrected floor is the higher, the per-config correction
    # added scatter (the sentinel over-corrects large configs on some hosts)
    floor_raw = sitting_floor(source, val, val, model.targets_) if "speed_change" in moved else floor
    # the same calls against the latencies at the calibration's speed: one visit per config
    # at a slow moment of the VM can break a latency budget the config meets at that speed
    calls_corr = drift_corrected_calls(val, budgets, calls, model.meta.get("sentinel_ms")).get("corrected")
    return _Scores(
        calls=calls,
        metrics=metrics,
        vpred=vpred,
        err=err,
        cover=cover,
        moved=moved,
        corr_val=corr_val,
        err_corr=err_corr,
        cover_corr=cover_corr,
        floor=floor,
        floor_raw=floor_raw,
        calls_corr=calls_corr,
    )


def _say_validation(sc: _Scores, val: pd.DataFrame, val_state: dict[str, Any], say: Callable[[str], None]) -> None:
    """Say the validation's lines.

    They are the machine state and drift (first when it exceeds its chance variation), the budget calls, the latency
    error and the sitting's floor.
    """
    from carb.campaign import speed as drift

    metrics, calls_corr, moved = sc.metrics, sc.calls_corr, sc.moved
    if line := states.state_line(val_state):
        say(line)
    if moved.get("exceeds"):
        say(drift.drift_line(moved))
    decided = (
        f"budget accuracy {metrics['accuracy']:.3f} on the {metrics['n']} decided (false accepts "
        f"{metrics['false_accepts']}, false rejects {metrics['false_rejects']})"
        if metrics["n"]
        else "no budget call decided"
    )
    if metrics["n"] and calls_corr:
        decided += (
            f", {calls_corr['accuracy']:.3f} drift-corrected (false accepts {calls_corr['false_accepts']}, "
            f"false rejects {calls_corr['false_rejects']})"
        )
    say(
        f"validated on {len(val)} measured configs: {decided}; {metrics['measure']} called 'measure' "
        "(too close to a budget to call)"
    )
    if "latency_ms" in sc.err:
        say(
            f"median latency error {100 * sc.err['latency_ms']:.1f}% raw, "
            f"{100 * sc.err_corr['latency_ms']:.1f}% drift-corrected"
            if sc.corrected
            else f"median latency error {100 * sc.err['latency_ms']:.1f}% ({drift.NO_INDEX}: no drift correction)"
        )
    if "latency_ms" in sc.floor:
        _say_floor(sc, len(val), say)
    if not moved.get("exceeds"):
        say(drift.drift_line(moved))


def _say_floor(sc: _Scores, n: int, say: Callable[[str], None]) -> None:
    """The sitting's floor line, and a warning when the drift correction added scatter."""
    floor, floor_raw = sc.floor, sc.floor_raw
    both = (
        f"{100 * floor['latency_ms']:.1f}% drift-corrected, {100 * floor_raw['latency_ms']:.1f}% raw"
        if sc.corrected and "latency_ms" in floor_raw
        else f"{100 * floor['latency_ms']:.1f}%"
    )
    say(
        f"this sitting's floor: {both} median latency error for a map fitted on the "
        f"{n} validated configs themselves (the source's error on them and the machine's scatter "
        "between visits, which no calibration removes)"
    )
    if sc.corrected and floor["latency_ms"] - floor_raw.get("latency_ms", np.inf) >= 0.01:
        say(
            "the drift correction added scatter in this sitting (its floor is higher by a point or more): the paired "
            "sentinel can over-correct large configs, so read the raw figures beside the corrected ones"
        )


def _summary(
    s: DemoSettings,
    space_name: str,
    excluded: dict[str, str],
    source: Any,
    cal: _Calibration,
    budgets: dict[str, float],
    sm: dict[str, Any],
    sc: _Scores,
    val_state: dict[str, Any],
    timings: dict[str, float],
) -> dict[str, Any]:
    """The demo's summary (``summary.json``)."""
    from carb.campaign import speed as drift

    model = cal.model
    return {
        "device": s.device,
        "threads": s.threads,
        "source_dataset": s.source,
        "space": space_name,
        "precisions_left_out": excluded,
        "source_model": {"preset": "fast", "rows": int(source.n_train_rows_), "targets": list(source.targets_)},
        "calibration": {t: {"coef": m.coef, "add": getattr(m, "add", 0.0), "k": m.n} for t, m in model.maps_.items()},
        "budgets": budgets,
        "screening": {k: sm[k] for k in ("candidates", "after_stage1", "feasible", "shortlist", "pruning_ratio")},
        "validation": sc.metrics,
        "validation_corrected": sc.calls_corr,
        "validation_median_abs_error": sc.err,
        "validation_interval_coverage": sc.cover,
        "validation_extrapolated": int(sc.vpred["extrapolated"].sum()) if "extrapolated" in sc.vpred else 0,
        "validation_median_abs_error_corrected": sc.err_corr if sc.corrected else None,
        "validation_interval_coverage_corrected": sc.cover_corr if sc.corrected else None,
        "validation_floor_median_abs_error": sc.floor,
        "validation_floor_median_abs_error_raw": sc.floor_raw,
        "calibrated_on": "latency at the calibration's median sentinel speed" if cal.ref is not None else "raw latency",
        "drift": {**sc.moved, "line": drift.drift_line(sc.moved)},
        "machine_state": {"calibration": cal.state, "validation": val_state, "recalibrated": cal.recalibrated},
        "timings": timings,
    }


def _write_outputs(
    out: Path,
    s: DemoSettings,
    summary: dict[str, Any],
    cal: _Calibration,
    val: pd.DataFrame,
    sc: _Scores,
    res: Any,
    data: pd.DataFrame,
) -> None:
    """Write the tables, ``summary.json``, the figures and the report.

    The report goes in its own folder: it writes figures of the same names as the demo's.
    """
    from carb import datasets
    from carb.report import write_report

    model, ok = cal.model, cal.ok
    datasets.write(cal.measured, out / "characterized.csv")
    datasets.write(res.shortlist, out / "shortlist.csv")
    val_out = val.join(sc.vpred.add_prefix("pred_")).assign(
        call=sc.calls, accepted=sc.calls == "accept", latency_ms_corrected=sc.corr_val["latency_ms"]
    )
    datasets.write(val_out, out / "validation.csv")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    # screen() adds flops_per_image to the feasible table: capacity is an objective
    _figures(out, ok.join(model.predict(ok).add_prefix("pred_")), val_out, res.feasible, res.shortlist, model.targets_)
    t0 = time.perf_counter()
    # the report predicts the same rows from several figures: each warning is said once
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_report(
            out / "report",
            data={"this machine": pd.concat([ok, val], ignore_index=True), s.source: data},
            model=model,
            screen=res,
            transfer=False,
            title="carb demo",
        )
    for w in {(str(w.message), w.category): w for w in caught}.values():
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    summary["timings"]["report_s"] = time.perf_counter() - t0
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))


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


def sitting_floor(source: Any, rows: pd.DataFrame, truth: pd.DataFrame, targets: Any) -> dict[str, float]:
    """Return the validation sitting's floor per target.

    The floor is the median relative error of the calibration's own kind of map (log-linear in the source model's
    prediction) fitted on the validated configs themselves. No calibration of ``source`` from other configs can be
    expected to beat it: what it leaves is the source's error on these configs and the scatter of this sitting's
    measurements. ``rows``: the validated configs; ``truth``: their measured values (same index). Targets with fewer
    than 3 usable rows are left out.
    """
    src = source.predict(rows)
    out: dict[str, float] = {}
    for t in targets:
        if t not in truth.columns:
            continue
        x = np.log(src[t].to_numpy(float))
        y = np.log(pd.to_numeric(truth[t], errors="coerce").to_numpy(float))
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < 3:
            continue
        a = np.c_[np.ones(ok.sum()), x[ok]]
        fit = a @ np.linalg.lstsq(a, y[ok], rcond=None)[0]
        out[t] = float(np.median(np.abs(np.expm1(fit - y[ok]))))
    return out


def _figures(
    out: Path,
    calib: pd.DataFrame,
    val: pd.DataFrame,
    feasible: pd.DataFrame,
    shortlist: pd.DataFrame,
    targets: list[str],
) -> None:
    """measured_vs_predicted.png and pareto.png."""
    import matplotlib

    matplotlib.use("Agg")  # no display on our machines; files only
    import matplotlib.pyplot as plt

    from carb.report.figures import plain_log_axes

    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 4.5), squeeze=False)
    for ax, t in zip(axes[0], targets):
        for df, label, marker in ((calib, "calibration (K)", "o"), (val, "validation", "s")):
            if df.empty:
                continue
            y, p = df[t], df[f"pred_{t}"]
            ax.errorbar(
                y,
                p,
                yerr=[p - df[f"pred_{t}_lo"], df[f"pred_{t}_hi"] - p],
                fmt=marker,
                alpha=0.8,
                label=label,
                capsize=2,
            )
        lim = [min(calib[t].min(), val[t].min()) * 0.8, max(calib[t].max(), val[t].max()) * 1.25]
        ax.plot(lim, lim, "k--", lw=1)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {t}",
            ylabel=f"predicted {t}",
            title=f"{t}: measured vs predicted (90% interval)",
        )
        ax.legend()
    plain_log_axes(fig)  # matplotlib's default labels minor ticks on short log axes and they overlap
    fig.tight_layout()
    fig.savefig(out / "measured_vs_predicted.png", dpi=110)
    plt.close(fig)

    if "latency_ms" in feasible.columns and len(feasible):
        fig, ax = plt.subplots(figsize=(6, 4.5))
        ax.scatter(feasible["latency_ms"], feasible["flops_per_image"], s=6, c="0.7", label="feasible (predicted)")
        ax.scatter(shortlist["latency_ms"], shortlist["flops_per_image"], s=18, c="C3", label="shortlist (Pareto)")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="predicted latency (ms)",
            ylabel="FLOPs per image",
            title="screening: capacity vs latency",
        )
        ax.legend()
        plain_log_axes(fig)
        fig.tight_layout()
        fig.savefig(out / "pareto.png", dpi=110)
        plt.close(fig)


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


def default_threads() -> int:
    """Cores available to this process, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
