"""The demo's files: tables, ``summary.json``, figures and the report."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from carb.demo._settings import DemoSettings, _Calibration, _Scores


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
    draw_figures(
        out, ok.join(model.predict(ok).add_prefix("pred_")), val_out, res.feasible, res.shortlist, model.targets_
    )
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


def draw_figures(
    out: Path,
    calib: pd.DataFrame,
    val: pd.DataFrame,
    feasible: pd.DataFrame,
    shortlist: pd.DataFrame,
    targets: list[str],
) -> None:
    """Write the demo's figures into ``out``: measured_vs_predicted.png and pareto.png.

    measured_vs_predicted.png: per target (``latency_ms``, ...), the measured value of each ``calib`` and ``val``
    config against its prediction (columns ``pred_<target>``, ``pred_<target>_lo``, ``pred_<target>_hi``); pareto.png:
    the predicted latency (ms) and FLOPs per image of the ``feasible`` configs and of the ``shortlist``.
    """
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
