"""The demo's summary as rows of a two-column table: what each figure is, and its value, measured or predicted here."""

from __future__ import annotations

from typing import Any

from carb.decide.validate import false_accept_line

__all__ = ["summary_rows"]


def _fa(m: dict[str, Any]) -> str:
    return false_accept_line(m).removeprefix("false accepts: ")


def _machine_state(summary: dict[str, Any]) -> list[tuple[str, str]]:
    ms = summary.get("machine_state") or {}
    retaken = [
        f"{d['off']} of {d['n']} {w} visits in another state, {d['back']} back after retakes"
        for w, d in (("calibration", ms.get("calibration") or {}), ("validation", ms.get("validation") or {}))
        if d.get("off")
    ]
    if ms.get("recalibrated"):
        retaken.append("map refitted on the K measured again in validation's faster state")
    return [("machine state (speed sentinel)", "; ".join(retaken))] if retaken else []


def _errors(summary: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (
            f"{k}: median |error|, interval coverage",
            f"{100 * e:.1f}%, {100 * summary['validation_interval_coverage'][k]:.0f}%",
        )
        for k, e in summary["validation_median_abs_error"].items()
    ]
    if summary.get("validation_extrapolated"):
        rows.append(
            (
                "validated configs extrapolated",
                f"{summary['validation_extrapolated']} (beyond the K's range or the source's domain: never accepted)",
            )
        )
    corr = summary.get("validation_median_abs_error_corrected") or {}
    cov_corr = summary.get("validation_interval_coverage_corrected") or {}
    if "latency_ms" in corr:
        cov = f", {100 * cov_corr['latency_ms']:.0f}%" if "latency_ms" in cov_corr else ""
        rows.append(
            ("latency_ms: median |error|, interval coverage, drift-corrected", f"{100 * corr['latency_ms']:.1f}%{cov}")
        )
    fl = summary.get("validation_floor_median_abs_error") or {}
    fr = summary.get("validation_floor_median_abs_error_raw") or {}
    if "latency_ms" in fl:
        raw = f", {100 * fr['latency_ms']:.1f}% raw" if "latency_ms" in corr and "latency_ms" in fr else ""
        rows.append(
            (
                "latency_ms: this sitting's floor",
                f"{100 * fl['latency_ms']:.1f}%{' drift-corrected' if raw else ''}"
                f"{raw} (a map fitted on the validated configs themselves)",
            )
        )
    return rows


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The demo's summary (:func:`carb.demo.run_demo`'s) as ``(figure, value)`` rows, in the order to read them.

    The machine's drift comes first when it exceeds its chance variation (it weighs on every figure below), else
    last; then the machine state, the screening, the budget calls (false accepts both ways), the errors and the
    wall time.
    """
    sc, v = summary["screening"], summary["validation"]
    moved = summary.get("drift") or {}
    rows = [("machine speed drift", moved["line"])] if moved.get("exceeds") else []
    rows += _machine_state(summary)
    rows.append(
        (
            "candidates -> shortlist",
            f"{sc['candidates']:,} -> {sc['shortlist']:,} ({100 * sc['pruning_ratio']:.1f}% pruned)",
        )
    )
    rows += [(f"left out: {p}", why) for p, why in (summary.get("precisions_left_out") or {}).items()]
    rows.append(("budgets", ", ".join(f"{k} <= {b:g}" for k, b in summary["budgets"].items())))
    rows.append(
        (
            "budget accuracy (measured)",
            (f"{v['accuracy']:.3f} on {v['n']} decided configs" if v["n"] else "no config decided")
            + (f", {v['measure']} called 'measure'" if v.get("measure") else ""),
        )
    )
    if v["n"]:  # both ways: of the over-budget configs, and of the accepted ones
        rows.append(("false accepts (decided configs)", _fa(v)))
    rows.append(("false rejects", str(v["false_rejects"])))
    vc = summary.get("validation_corrected")
    if vc and v["n"]:
        rows.append(
            (
                "budget accuracy, drift-corrected",
                f"{vc['accuracy']:.3f} ({false_accept_line(vc)}; false rejects {vc['false_rejects']}; "
                f"latency at {vc['reference']})",
            )
        )
    rows += _errors(summary)
    if moved and not moved.get("exceeds"):
        rows.append(("machine speed drift", moved["line"]))
    rows.append(("wall time", f"{summary['timings']['total_s']:.0f} s"))
    return rows
