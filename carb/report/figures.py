"""The report's static figures (matplotlib, Agg backend: files only, no display needed).

Each function writes one PNG and returns its path, or ``None`` when there is nothing to
draw (e.g. no second device for a transfer heat map).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "measured_vs_predicted",
    "scaling_curves",
    "transfer_heatmap",
    "pareto_projections",
    "feature_importance",
    "speed_plot",
    "LABELS",
    "MIN_LINKED_ARCHS",
    "scaling_not_drawn",
    "plain_log_axes",
]

#: axis labels with units
LABELS: dict[str, str] = {
    "energy_j": "energy (J)",
    "latency_ms": "latency (ms)",
    "memory_mb": "peak memory (MB)",
    "energy_j_per_image": "energy per image (J)",
    "flops_per_image": "FLOPs per image",
    "latency_ms_per_image": "latency per image (ms)",
}
DPI = 110

#: Fewest architectures measured at two or more batch sizes for a device's batch-scaling
#: curve to be drawn. Chosen on the shipped campaigns: curves from n random such
#: architectures against the curve from all of them (40 draws each, growth from the
#: smallest batch): with 3, latency misses by a median 29% (cpu-1t) / 45% (cpu-2t) and by
#: a factor 2.4 / 3.6 at the worst batch (p90 of the draws), and the cost per forward falls
#: with the batch somewhere in 15% / 45% of the draws (the zigzag); with 20, the median miss
#: is 6% / 14% and a fall 0% / 25% (memory: 3% / 7%). Below it the report says why there is
#: no curve.
MIN_LINKED_ARCHS = 20


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # our machines have no display; the report only needs files
    import matplotlib.pyplot as plt

    return plt


def _plain(fig: Any) -> None:
    """Label log axes with plain numbers (``30``, ``1e+09``), not ``3 x 10^1``.

    Minor ticks are labelled (at 2, 3, 5) only where an axis spans less than about a decade and a half.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter

    major = FuncFormatter(lambda v, _: f"{v:g}")
    for ax in fig.axes:
        for axis, scale, lim in (
            (ax.xaxis, ax.get_xscale(), ax.get_xlim()),
            (ax.yaxis, ax.get_yscale(), ax.get_ylim()),
        ):
            if scale != "log" or not (lim[0] > 0 and lim[1] > 0):
                continue
            axis.set_major_formatter(major)
            if abs(np.log10(lim[1] / lim[0])) < 1.5:
                axis.set_minor_formatter(
                    FuncFormatter(
                        lambda v, _: f"{v:g}" if round(v / 10 ** np.floor(np.log10(v) + 1e-9)) in (2, 3, 5) else ""
                    )
                )
            else:
                axis.set_minor_formatter(NullFormatter())


def plain_log_axes(fig: Any) -> None:
    """Label every log axis of ``fig`` as the report's figures do (:func:`_plain`).

    The labels are plain numbers, minor ticks labelled only at 2, 3, 5 and only on short axes, so that labels such as
    ``3x10^1`` and ``4x10^1`` do not run into each other. Call it once the axis limits are final.
    """
    _plain(fig)


def _save(fig: Any, path: Path) -> Path:
    _plain(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def measured_vs_predicted(
    rows: pd.DataFrame, targets: Sequence[str], metrics: dict[str, dict[str, float]], path: Path, title: str
) -> Path | None:
    """Plot measured (x) vs predicted (y) per target, log-log.

    The prediction interval is drawn as a vertical bar and the points are coloured by batch size.
    """
    targets = [
        t
        for t in targets
        if t in rows.columns
        and f"pred_{t}" in rows.columns
        and np.isfinite(rows[t].to_numpy(float)).any()
        and np.isfinite(rows[f"pred_{t}"].to_numpy(float)).any()
    ]
    if not targets:
        return None
    plt = _plt()
    from matplotlib.colors import LogNorm

    fig, axes = plt.subplots(1, len(targets), figsize=(4.8 * len(targets), 4.4), squeeze=False)
    batch = rows["batch"].to_numpy(float) if "batch" in rows.columns else None
    for ax, t in zip(axes[0], targets):
        y, p = rows[t].to_numpy(float), rows[f"pred_{t}"].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
        lo = rows.get(f"pred_{t}_lo", pd.Series(np.nan, index=rows.index)).to_numpy(float)
        hi = rows.get(f"pred_{t}_hi", pd.Series(np.nan, index=rows.index)).to_numpy(float)
        iv = ok & np.isfinite(lo) & np.isfinite(hi)
        if iv.any():
            ax.vlines(y[iv], lo[iv], hi[iv], color="0.75", lw=0.8, zorder=1, label="90% interval")
        if batch is not None and np.isfinite(batch[ok]).all() and np.ptp(batch[ok]) > 0:
            sc = ax.scatter(y[ok], p[ok], c=batch[ok], cmap="viridis", norm=LogNorm(), s=12, zorder=2)
            fig.colorbar(sc, ax=ax, label="batch", pad=0.01)
        else:
            ax.scatter(y[ok], p[ok], s=12, zorder=2)
        lim = [min(y[ok].min(), p[ok].min()) * 0.8, max(y[ok].max(), p[ok].max()) * 1.25]
        ax.plot(lim, lim, "k--", lw=1)
        m = metrics.get(t, {})
        ax.text(
            0.03,
            0.97,
            f"R²(log) {m.get('r2_log', np.nan):.3f}\nMAPE {100 * m.get('mape', np.nan):.1f}%\n"
            f"coverage {100 * m.get('coverage', np.nan):.0f}%\nn = {int(ok.sum())}",
            transform=ax.transAxes,
            va="top",
            fontsize=9,
            bbox=dict(fc="white", ec="0.8"),
        )
        ax.set(
            xscale="log",
            yscale="log",
            xlim=lim,
            ylim=lim,
            xlabel=f"measured {LABELS.get(t, t)}",
            ylabel=f"predicted {LABELS.get(t, t)}",
        )
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def scaling_not_drawn(summary: pd.DataFrame, min_archs: int = MIN_LINKED_ARCHS) -> pd.Series:
    """Return, per summary row (device x target), why its batch-scaling curve is not drawn.

    The reason is ``""`` when it is drawn, else a sentence (too few architectures measured at two or more batch
    sizes: fewer than ``min_archs``, see :data:`MIN_LINKED_ARCHS`).
    """
    if summary.empty or "n_archs_linked" not in summary.columns:
        return pd.Series("", index=summary.index, dtype=object)
    linked = pd.to_numeric(summary["n_archs_linked"], errors="coerce").fillna(0).astype(int)
    # rows without a profile (target not measured, one batch size) have their own note already
    has_curve = np.isfinite(
        pd.to_numeric(summary.get("factor", pd.Series(np.nan, index=summary.index)), errors="coerce").to_numpy(float)
    )
    return pd.Series(
        [
            ""
            if n >= min_archs or not c
            else f"curve not drawn: {n} architecture{'s' if n != 1 else ''} measured at two or more batch sizes, "
            f"fewer than {min_archs} (a curve from so few zigzags with the architectures drawn)"
            for n, c in zip(linked, has_curve)
        ],
        index=summary.index,
        dtype=object,
    )


def scaling_curves(
    profile: pd.DataFrame, summary: pd.DataFrame, path: Path, min_archs: int = MIN_LINKED_ARCHS
) -> Path | None:
    """Plot, per target, the cost per forward (top) and per image (bottom) against batch, one colour per device.

    Lines are the within-architecture profile, crosses the plain medians, the dotted line the regime boundary. A
    device x target with fewer than ``min_archs`` architectures measured at two or more batch sizes is left out
    (:func:`scaling_not_drawn` says why); ``None`` when nothing is left.
    """
    if profile.empty or summary.empty:
        return None
    why = scaling_not_drawn(summary, min_archs)
    drawn = summary.loc[why == "", ["device", "target"]]
    keep = pd.MultiIndex.from_frame(drawn.astype(str))
    profile = profile[
        pd.MultiIndex.from_arrays([profile["device"].astype(str), profile["target"].astype(str)]).isin(keep)
    ]
    if profile.empty:
        return None
    targets = [t for t in ("energy_j", "latency_ms", "memory_mb") if t in set(profile["target"])]
    plt = _plt()
    fig, axes = plt.subplots(2, len(targets), figsize=(4.8 * len(targets), 7.4), squeeze=False, sharex=True)
    devices = list(dict.fromkeys(profile["device"]))
    for j, t in enumerate(targets):
        for k, d in enumerate(devices):
            p = profile[(profile.target == t) & (profile.device == d)]
            if p.empty:
                continue
            s = summary[(summary.target == t) & (summary.device == d)].iloc[0]
            col = f"C{k % 10}"
            lab = f"{d}: x{s['factor']:.1f} per batch" if np.isfinite(s["factor"]) else d
            axes[0, j].plot(p.batch, p.cost, "-o", color=col, ms=4, label=lab)
            axes[0, j].plot(p.batch, p.median_measured, "x", color=col, ms=6, alpha=0.7)
            axes[1, j].plot(
                p.batch, p.cost_per_image, "-o", color=col, ms=4, label=f"{d}: /{s['per_image_gain']:.1f} per image"
            )
            axes[1, j].plot(p.batch, p.median_measured_per_image, "x", color=col, ms=6, alpha=0.7)
            if np.isfinite(s["boundary_batch"]):
                for ax in axes[:, j]:
                    ax.axvline(s["boundary_batch"], color=col, ls=":", lw=1.2)
        axes[0, j].set(
            xscale="log", yscale="log", ylabel=f"{LABELS.get(t, t)} per forward", title=f"{LABELS.get(t, t)}"
        )
        axes[1, j].set(xscale="log", yscale="log", xlabel="batch", ylabel=f"{LABELS.get(t, t)} per image")
        for ax in axes[:, j]:
            ax.legend(fontsize=8)
            ax.grid(True, which="both", alpha=0.25)
    fig.suptitle(
        "scaling with the batch (lines: median architecture, x: plain medians, dotted: regime boundary)", fontsize=10
    )
    return _save(fig, path)


def transfer_heatmap(result: Any, path: Path, targets: Sequence[str]) -> Path | None:
    """Plot, per target (columns), the transfer matrix of train-on-row, test-on-column.

    Its rows are R²(log) (top), Spearman (middle) and the measured factor column/row (bottom).
    """
    if len(result.devices) < 2:
        return None
    targets = [
        t
        for t in targets
        if t in set(result.matrix["target"]) and np.isfinite(result.pivot("r2_log", t).to_numpy(float)).any()
    ]
    if not targets:
        return None
    plt = _plt()
    n = len(result.devices)
    size = max(3.6, 0.55 * n + 2.2)
    fig, axes = plt.subplots(3, len(targets), figsize=(size * len(targets) + 0.6, size * 2.7), squeeze=False)
    panels = [
        ("r2_log", "R²(log), train row -> test column", "RdYlGn", (0, 1)),
        ("spearman", "Spearman, train row -> test column", "RdYlGn", (0, 1)),
        ("factor", "measured factor column / row", "PuOr_r", None),
    ]
    for j, t in enumerate(targets):
        for i, (metric, label, cmap, lim) in enumerate(panels):
            ax = axes[i, j]
            m = (result.factors(t) if metric == "factor" else result.pivot(metric, t)).to_numpy(float)
            if metric == "factor":
                v = np.log2(np.where(m > 0, m, np.nan))
                r = np.nanmax(np.abs(v)) if np.isfinite(v).any() else 1.0
                im = ax.imshow(v, cmap=cmap, vmin=-max(r, 0.1), vmax=max(r, 0.1))
            else:
                im = ax.imshow(np.clip(m, *lim), cmap=cmap, vmin=lim[0], vmax=lim[1])
            for a in range(n):
                for b in range(n):
                    if np.isfinite(m[a, b]):
                        txt = f"{m[a, b]:.2f}" if metric == "factor" or abs(m[a, b]) < 10 else f"{m[a, b]:.0f}"
                        ax.text(b, a, txt, ha="center", va="center", fontsize=8)
            ax.set_xticks(range(n), result.devices, rotation=45, ha="right", fontsize=8)
            ax.set_yticks(range(n), result.devices, fontsize=8)
            ax.set_title(f"{LABELS.get(t, t)}: {label}", fontsize=9)
            if metric == "factor":
                fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="log2 factor")
    return _save(fig, path)


def _log_scaled(v: np.ndarray) -> bool:
    """Whether an axis of these values reads on a log scale: some are positive and every finite one is."""
    return bool(np.nanmin(v[v > 0], initial=np.inf) < np.inf and (v[np.isfinite(v)] > 0).all())


def pareto_projections(
    points: pd.DataFrame, shortlist: np.ndarray, objectives: Sequence[tuple[str, str]], path: Path, title: str
) -> Path | None:
    """Plot 2-D projections (every pair of objectives) of the feasible configs.

    The feasible configs are grey, the Pareto front / shortlist red.
    """
    cols = [c for c, _ in objectives if c in points.columns and np.isfinite(points[c].to_numpy(float)).any()]
    pairs = list(itertools.combinations(cols, 2))[:6]
    if not pairs:
        return None
    plt = _plt()
    ncol = min(3, len(pairs))
    nrow = int(np.ceil(len(pairs) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 4.0 * nrow), squeeze=False)
    dirs = dict(objectives)
    for ax, (x, y) in zip(axes.flat, pairs):
        xv, yv = points[x].to_numpy(float), points[y].to_numpy(float)
        ax.scatter(xv[~shortlist], yv[~shortlist], s=5, c="0.72", label="feasible", rasterized=True)
        ax.scatter(xv[shortlist], yv[shortlist], s=16, c="C3", label="Pareto front (shortlist)")
        ax.set(
            xscale="log" if _log_scaled(xv) else "linear",
            yscale="log" if _log_scaled(yv) else "linear",
            xlabel=f"{LABELS.get(x, x)} ({dirs[x]})",
            ylabel=f"{LABELS.get(y, y)} ({dirs[y]})",
        )
        ax.grid(True, which="major", alpha=0.25)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def feature_importance(imp: pd.DataFrame, path: Path) -> Path | None:
    """Permutation importance per target: growth of the RMSE of log cost when an input is shuffled."""
    if imp.empty or not np.isfinite(imp["importance"].to_numpy(float)).any():
        return None
    targets = list(dict.fromkeys(imp["target"]))
    plt = _plt()
    h = max(2.6, 0.32 * imp.groupby("target").size().max() + 1.2)
    fig, axes = plt.subplots(1, len(targets), figsize=(4.6 * len(targets), h), squeeze=False)
    for ax, t in zip(axes[0], targets):
        d = imp[imp.target == t].iloc[::-1]
        ax.barh(d["input"], d["importance"], xerr=d["importance_std"], color="C0", alpha=0.85)
        ax.set(xlabel="increase in RMSE of log cost when shuffled", title=LABELS.get(t, t))
        ax.grid(True, axis="x", alpha=0.25)
    return _save(fig, path)


def speed_plot(readings: pd.DataFrame, out: str | Path, title: str = "speed index") -> Path | None:
    """A small PNG of the speed index over time (one line per platform); ``None`` (and no file) without readings."""
    if readings is not None and "used" in readings.columns:
        readings = readings[readings["used"].fillna(True).astype(bool)]
    if readings is None or len(readings) == 0:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.6))
    t0 = readings["t"].min().timestamp()
    for k, (plat, r) in enumerate(readings.sort_values("t").groupby("platform", sort=True)):
        ref = float(np.median(r["sentinel_ms"]))
        for j, (_, run) in enumerate(r.groupby("run_id", sort=False)):  # one line per run: no line over gaps
            t = run["t"].map(lambda x: x.timestamp()).to_numpy(float)
            ax.plot(
                (t - t0) / 60,
                ref / run["sentinel_ms"].to_numpy(float),
                ".-",
                ms=3,
                lw=0.8,
                color=f"C{k}",
                label=str(plat) if j == 0 else None,
            )
    ax.axhline(1.0, color="k", lw=0.6, ls="--")
    ax.set(xlabel="minutes since the first reading", ylabel="speed (1 = median)", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
