"""The demo's scores: budget calls and errors against the validation's measurements, its lines and summary."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.campaign import rounds as states
from carb.demo._settings import DemoSettings, _Calibration, _Scores


def _say_screening(sm: dict[str, Any], space_name: str, budgets: dict[str, float], say: Callable[[str], None]) -> None:
    """One line: the screening's candidates, Stage 1, accepted outright and shortlist."""
    say(
        f"screened {sm['candidates']:,} configs of `{space_name}` under "
        + ", ".join(f"{k} <= {v:g}" for k, v in budgets.items())
        # "feasible" counts the configs accepted outright (whole interval within every budget), not all that may fit
        + f": Stage 1 kept {sm['after_stage1']:,}, {sm['feasible']:,} accepted outright, shortlist {sm['shortlist']:,} "
        f"({100 * sm['pruning_ratio']:.1f}% pruned)"
    )


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
    from carb.decide.validate import false_accept_line

    metrics, calls_corr, moved = sc.metrics, sc.calls_corr, sc.moved
    if line := states.state_line(val_state):
        say(line)
    if moved.get("exceeds"):
        say(drift.drift_line(moved))
    decided = (
        f"budget accuracy {metrics['accuracy']:.3f} on the {metrics['n']} decided, false rejects "
        f"{metrics['false_rejects']}"
        if metrics["n"]
        else "no budget call decided"
    )
    say(
        f"validated on {len(val)} measured configs: {decided}; {metrics['measure']} called 'measure' "
        "(too close to a budget to call)"
    )
    if metrics["n"]:
        say(false_accept_line(metrics))
        if calls_corr:
            say(
                f"drift-corrected: budget accuracy {calls_corr['accuracy']:.3f}, false rejects "
                f"{calls_corr['false_rejects']}, {false_accept_line(calls_corr)}"
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
    from carb.decide.validate import false_accept_line

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
        # false accepts both ways: of the over-budget configs, and of the accepted ones
        "validation": {**sc.metrics, "false_accepts_line": false_accept_line(sc.metrics)},
        "validation_corrected": (
            {**sc.calls_corr, "false_accepts_line": false_accept_line(sc.calls_corr)}
            if sc.calls_corr
            else sc.calls_corr
        ),
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
