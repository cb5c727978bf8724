"""The report of the ``nb201`` dataset (``carb report --data nb201``), with its own analyses.

It is not the per-device report (its platforms differ in batch by name, ``titan_rtx_b1`` / ``_b32`` /
``_b256``, and its 29 settings would make 812 train-on-A/test-on-B models): batch scaling
of latency on the five desktop GPUs, the 29 x 29 transfer matrix of measured latency, and
energy against latency on the Jetson TX2 (:mod:`carb.studies.analyses`, ``nb201_*``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.studies import nb201 as analysis

from . import figures
from ._json import clean as _clean


def write(out: Path, say: Callable[[str], None] | None = None, title: str = "CARB report: nb201") -> Path:
    """Write ``report.html``, ``report.json`` and three PNG figures into ``out``."""
    from carb import datasets

    say = say or (lambda m: None)
    out.mkdir(parents=True, exist_ok=True)
    say("loading nb201 (29 settings, latency only)")
    df = datasets.load("nb201", features=False)
    bs = analysis.nb201_batch_scaling(df)
    tm = analysis.nb201_transfer_matrix(df)
    say("energy vs latency on the Jetson TX2")
    dec = analysis.nb201_decoupling(datasets.load("nb201", device="edgegpu"))
    plt = figures._plt()
    figs = {
        "batch_scaling": _batch_figure(plt, bs, out),
        "transfer": _transfer_figure(plt, tm, out),
        "decoupling": _energy_figure(plt, dec, out),
    }
    notes = _notes(bs, tm, dec)
    doc = _doc(title, notes, bs, tm, dec, figs)
    (out / "report.json").write_text(json.dumps(_clean(doc), indent=2, allow_nan=False))
    tmp = out / "report.html.tmp"
    tmp.write_text(_page(title, notes, bs, dec), encoding="utf-8")
    tmp.replace(out / "report.html")
    return out / "report.html"


def _batch_figure(plt: Any, bs: pd.DataFrame, out: Path) -> str:
    """Draw latency against batch on the five desktop GPUs; return the file's name."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for r in bs.itertuples():
        ax.plot([1, 32, 256], [r.b1_ms, r.b32_ms, r.b256_ms], marker="o", label=r.gpu)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="batch",
        ylabel="latency per forward, ms (median cell)",
        title="NAS-Bench-201 on five GPUs: batch 32 costs what batch 1 does",
    )
    ax.legend(fontsize=8)
    figures._save(fig, out / "nb201_batch.png")
    return "nb201_batch.png"


def _transfer_figure(plt: Any, tm: pd.DataFrame, out: Path) -> str:
    """Draw the Spearman matrix of measured latency between the 29 settings; return the file's name."""
    fig, ax = plt.subplots(figsize=(9, 8))
    im = ax.imshow(tm.to_numpy(), vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(tm)), tm.columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(tm)), tm.index, fontsize=7)
    ax.set_title("Spearman of measured latency between settings (CIFAR-10 input)")
    fig.colorbar(im, ax=ax, shrink=0.7)
    figures._save(fig, out / "nb201_transfer.png")
    return "nb201_transfer.png"


def _energy_figure(plt: Any, dec: dict[str, Any], out: Path) -> str:
    """Draw the Jetson TX2's power per network and energy against latency; return the file's name."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    pw = dec["power"]
    for name, g in pw.groupby("dataset"):
        axes[0].hist(g["power_w"], bins=80, alpha=0.5, label=name)
    axes[0].set(xlabel="mean power = energy / latency, W", ylabel="cells", title="Jetson TX2: power per network")
    axes[0].legend(fontsize=8)
    c10 = pw[pw["dataset"] == "cifar10"]
    axes[1].scatter(c10["latency_ms"], c10["energy_j"] * 1e3, s=1, alpha=0.3)
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="latency, ms",
        ylabel="energy, mJ",
        title=f"CIFAR-10: R² (log) {dec['summary']['r2_log_energy_on_log_latency']:.3f}",
    )
    figures._save(fig, out / "nb201_energy.png")
    return "nb201_energy.png"


def _notes(bs: pd.DataFrame, tm: pd.DataFrame, dec: dict[str, Any]) -> list[str]:
    """Return the report's findings in words: batch scaling, transfer, and the Jetson's power."""
    s = dec["summary"]
    off = tm.to_numpy()[~np.eye(len(tm), dtype=bool)]
    return [
        f"batch: batch 32 costs {bs['ratio_32_1'].min():.2f}-{bs['ratio_32_1'].max():.2f}x batch 1 per forward "
        f"and batch 256 {bs['ratio_256_1'].min():.2f}-{bs['ratio_256_1'].max():.2f}x on the five GPUs "
        "(median over cells): small networks are launch-bound",
        f"transfer: Spearman of latency between settings from {np.nanmin(off):.2f} to {np.nanmax(off):.2f} "
        f"(median {np.nanmedian(off):.2f})",
        f"Jetson TX2: power {s['power_mean_w']:.2f} W mean, sd {s['power_sd_w']:.2f} W; energy and latency "
        f"order {100 * s['pairs_ordered_differently']:.1f}% of cell pairs differently; latency x median power "
        f"misses energy by {100 * s['mape_latency_x_median_power']:.1f}% (MAPE); noise floor (cifar10 vs "
        f"cifar100) {100 * s['noise_floor_cifar10_vs_cifar100'].get('energy_j', float('nan')):.2f}% energy",
    ]


def _doc(
    title: str, notes: list[str], bs: pd.DataFrame, tm: pd.DataFrame, dec: dict[str, Any], figs: dict[str, str]
) -> dict[str, Any]:
    """Return ``report.json``: the per-device report's keys where they apply, and the nb201 analyses."""
    return {
        "title": title,
        "data": ["nb201"],
        "model": None,
        "accuracy": {},
        "pareto": None,
        "notes": notes,
        "scaling": [
            {
                "device": r.gpu,
                "target": "latency_ms",
                "factor": r.ratio_256_1,
                "batch_min": 1,
                "batch_max": 256,
                "per_image_gain": r.per_image_gain_256,
            }
            for r in bs.itertuples()
        ],
        "nb201": {
            "batch_scaling": bs.to_dict("records"),
            "transfer_matrix": tm.round(4).to_dict(),
            "decoupling": {
                "summary": dec["summary"],
                "by_input": dec["by_input"].to_dict("records"),
                "drivers": dec["drivers"].to_dict("records"),
            },
        },
        "figures": figs,
    }


def _table(frame: pd.DataFrame) -> str:
    """Return ``frame`` as a plain HTML table (floats to 4 significant digits)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{v:.4g}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>" for v in r)
        + "</tr>"
        for r in frame.itertuples(index=False)
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _page(title: str, notes: list[str], bs: pd.DataFrame, dec: dict[str, Any]) -> str:
    """Return the report page: the notes, the three figures and their tables."""
    drivers = dec["drivers"].head(6)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}td,th{{padding:2px 8px;text-align:right}}</style>
</head><body><h1>{html.escape(title)}</h1>
<p>Public data: HW-NAS-Bench and HELP (MIT), see the dataset card <code>carb/data/nb201.md</code>.</p>
<ul>{"".join(f"<li>{html.escape(n)}</li>" for n in notes)}</ul>
<h2>Batch scaling on five desktop GPUs</h2><img src="nb201_batch.png" alt="batch scaling">{_table(bs)}
<h2>Transfer between the 29 settings</h2><img src="nb201_transfer.png" alt="transfer matrix" width="800">
<h2>Energy against latency on the Jetson TX2</h2><img src="nb201_energy.png" alt="power" width="900">
{_table(dec["by_input"])}<p>What the power depends on (Spearman with power, CIFAR-10 rows):</p>{_table(drivers)}
</body></html>"""
