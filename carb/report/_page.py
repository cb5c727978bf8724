"""The report's HTML page: its sections, their tables and figures, and the explorer's data.

Each section builder takes the computed report (:func:`carb.report.build_report`), the ``report.json`` document and
the figures' paths, and returns its HTML (``""`` when it has nothing to show).
"""

from __future__ import annotations

import base64
import html
import json
import math
import string
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from carb.report import figures
from carb.report._json import clean as _clean
from carb.studies import analyses as analysis


def _asset(name: str) -> str:
    return resources.files("carb.report").joinpath("assets", name).read_text(encoding="utf-8")


def _img(path: Path | None, alt: str, caption: str) -> str:
    if path is None:
        return ""
    b64 = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'
        f"<figcaption>{caption} (file: {html.escape(path.name)})</figcaption></figure>"
    )


def _fmt(v: Any, spec: str = ".3g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or spec == "d":
        return f"{int(round(float(v))):,}"
    if isinstance(v, (float, np.floating)):
        return format(float(v), spec)
    return html.escape(str(v))


def _table(df: pd.DataFrame, cols: Sequence[tuple[str, str, str]], max_rows: int | None = None) -> str:
    """``cols``: (column, header, format spec; ``""`` for text)."""
    if df.empty:
        return ""
    d = df.head(max_rows) if max_rows else df
    head = "".join(f'<th class="{"l" if not f else ""}">{html.escape(h)}</th>' for _, h, f in cols)
    body = []
    for rec in d.to_dict(orient="records"):
        tds = []
        for c, _, f in cols:
            v = rec.get(c)
            if f == "%":
                cell = "–" if v is None or not np.isfinite(v) else f"{100 * v:.1f}%"
            else:
                cell = (
                    _fmt(v, f)
                    if f
                    else html.escape("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else str(v))
                )
            tds.append(f'<td class="{"l" if not f else ""}">{cell}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    more = f'<p class="note">first {max_rows} of {len(df):,} rows</p>' if max_rows and len(df) > max_rows else ""
    return (
        f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f"</div>{more}"
    )


def _section(id_: str, title: str, lead: str, body: str) -> str:
    return f'<section id="{id_}"><h2>{html.escape(title)}</h2><p class="lead">{lead}</p>{body}</section>'


def _pareto_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """The Pareto explorer: the front over the screening's feasible set, or over the measured configs."""
    e = html.escape
    pinfo = doc["pareto"]
    if pinfo["source"] == "screening":
        b = ", ".join(f"{k} ≤ {v:g}" for k, v in (pinfo.get("budgets") or {}).items()) or "no budget"
        lead = (
            f"Screening of {_fmt(pinfo.get('candidates'))} candidates ({b}, risk {e(str(pinfo.get('risk')))}): "
            f"{_fmt(pinfo['feasible'])} feasible, {_fmt(pinfo['shortlist'])} on the Pareto front (the shortlist, "
            f"red) over {e(', '.join(pinfo['objectives']))}. Costs are predictions. Hover a point for its config "
            "and costs; move a slider to set a budget."
        )
    else:
        lead = (
            f"The measured configs of {e(pinfo['device'])}: {_fmt(pinfo['shortlist'])} of "
            f"{_fmt(pinfo['feasible'])} "
            f"are on the Pareto front (red) over {e(', '.join(pinfo['objectives']))}. Give a screening "
            "(<code>--screen DIR</code>) to explore its feasible set instead. Hover a point for its config and "
            "costs; move a slider to set a budget."
        )
    explorer = (
        '<div id="explorer"><svg id="pareto-svg" role="img" aria-label="Pareto explorer"></svg>'
        '<div id="controls">'
        '<label for="axis-x">x axis</label><select id="axis-x"></select>'
        '<label for="axis-y">y axis</label><select id="axis-y"></select>'
        '<label><input type="checkbox" id="log-axes" checked> log axes</label>'
        '<div><span class="legend-dot" style="background:#c0392b"></span>Pareto front (shortlist)'
        '<span class="legend-dot" style="background:#9aa5b1"></span>other feasible configs</div>'
        '<p class="note">Dashed: the 2-D front of the configs shown, in this projection.</p>'
        '<div id="budgets"></div><button type="button" id="reset-budgets">reset budgets</button>'
        '<div id="counts"></div></div></div>'
    )
    short_df = r["pareto_points"][r["pareto_short"]].copy()
    if "energy_j" in short_df.columns and "batch" in short_df.columns and "energy_j_per_image" not in short_df:
        short_df["energy_j_per_image"] = short_df["energy_j"] / short_df["batch"]
    short_df.insert(0, "config", analysis.config_label(short_df).to_numpy())
    short_df["rank"] = r["pareto_rank"][r["pareto_short"]]
    if short_df["rank"].isna().all():
        short_df["rank"] = np.arange(1, len(short_df) + 1)
    short_df = short_df.sort_values("rank")
    tcols = [("rank", "rank", "d"), ("config", "config", "")] + [
        (c, figures.LABELS.get(c, c), ".4g") for c in r["explorer"]["columns"]
    ]
    body = (
        explorer
        + _img(figs["pareto"], "Pareto projections", "2-D projections of the feasible configs and the front")
        + "<details><summary>shortlist (Pareto front), ranked</summary>"
        + _table(short_df, tcols, 30)
        + "</details>"
    )
    return _section("pareto", "Pareto explorer", lead, body)


def _scaling_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """How cost grows with the batch on each device ("" without scaling rows)."""
    e = html.escape
    ss = r["scaling_summary"]
    if not len(ss):
        return ""
    lead = (
        "How cost grows with the batch on each device: per forward (top) and per image (bottom), for the "
        "median architecture, estimated within architectures (log cost = architecture + batch effect), so "
        "that configs sampled at different batch sizes compare. The factor is the growth from the smallest "
        "to the largest batch; the boundary separates the launch-bound regime (a bigger batch is nearly "
        "free) from the throughput-bound one (cost grows with the images)."
    )
    cols = [
        ("device", "device", ""),
        ("target", "target", ""),
        ("batch_min", "batch from", ".0f"),
        ("batch_max", "to", ".0f"),
        ("n_rows", "rows", "d"),
        ("n_archs_linked", "archs at ≥2 batches", ".0f"),
        ("factor", "factor (per forward)", ".3g"),
        ("per_image_gain", "per-image gain", ".3g"),
        ("boundary_batch", "regime boundary (batch)", ".3g"),
        ("slope_launch", "slope below", ".2f"),
        ("slope_throughput", "slope above", ".2f"),
        ("saturation_batch", "per-image within 10% from", ".0f"),
        ("note", "note", ""),
    ]
    defs = "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in doc.get("scaling_definitions", {}).items())
    bp = r["scaling_by_precision"]
    bp = bp[np.isfinite(bp["factor"].to_numpy(float))] if len(bp) else bp
    per_prec = (
        (
            "<details><summary>by precision</summary>"
            + _table(bp, cols[:2] + [("precision", "precision", "")] + cols[2:])
            + "</details>"
        )
        if len(bp)
        else ""
    )
    gaps = ss[ss["note"].astype(str).str.contains("curve not drawn", regex=False)]
    gap = "".join(
        f'<p class="note">{e(str(d))}, {e(str(t))}: no curve ({e(str(w).split("curve not drawn: ")[-1])}).</p>'
        for d, t, w in zip(gaps["device"], gaps["target"], gaps["note"])
    )
    body = (
        _img(figs["scaling"], "scaling curves", "cost against batch, log-log")
        + gap
        + _table(ss, cols)
        + per_prec
        + f"<details><summary>definitions</summary><ul>{defs}</ul></details>"
    )
    return _section("scaling", "Scaling with the batch", lead, body)


def _accuracy_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """The model's predictions against the measured values ("" without a model)."""
    e = html.escape
    acc = r["accuracy"]
    if not acc:
        return ""
    how = (
        f"held-out configs ({100 * doc['model']['holdout_fraction']:.0f}% of {e(r['primary'])}'s configs, "
        "never seen in training)"
        if r["held_out"]
        else f"every row of {e(r['primary'])} (in-sample if the model was trained on them)"
    )
    lead = (
        f"{e(r['model_desc'])}, checked on {how}. Bars: the model's 90% prediction interval; colour: batch. "
        "Coverage is the share of measured values inside their interval."
    )
    adf = pd.DataFrame([{"target": t, **m} for t, m in acc.items()])
    cols = [
        ("target", "target", ""),
        ("n", "rows", "d"),
        ("r2_log", "R²(log)", ".3f"),
        ("mape", "MAPE", "%"),
        ("median_ape", "median APE", "%"),
        ("coverage", "interval coverage", "%"),
    ]
    body = _img(figs["measured_vs_predicted"], "measured vs predicted", "measured against predicted, log-log") + _table(
        adf, cols
    )
    return _section("accuracy", "Measured vs predicted", lead, body)


def _transfer_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """Train on one device, test on another ("" without transfer)."""
    e = html.escape
    tr = r["transfer"]
    if tr is None:
        return ""
    lead = (
        "Train on one device (row), test on another (column): the same configs are held out on every device, "
        "so a test config is never trained on. R²(log) suffers from the device factor a plain transfer "
        "misses; Spearman says whether the ranking carries over; the factor is the measured typical ratio "
        "column / row on configs measured on both (with the log-log slope)."
    )
    cols = [
        ("train", "train", ""),
        ("test", "test", ""),
        ("target", "target", ""),
        ("n_test", "rows", ".0f"),
        ("r2_log", "R²(log)", ".3f"),
        ("r2_log_factor", "R²(log) with factor", ".3f"),
        ("mape", "MAPE", "%"),
        ("spearman", "Spearman", ".3f"),
        ("bias", "pred/measured", ".3g"),
        ("note", "note", ""),
    ]
    pcols = [
        ("a", "A", ""),
        ("b", "B", ""),
        ("target", "target", ""),
        ("n_common", "configs on both", "d"),
        ("factor", "factor B/A", ".3g"),
        ("loglog_slope", "log-log slope", ".3f"),
        ("spearman_measured", "Spearman (measured)", ".3f"),
    ]
    defs = "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in tr.definitions.items())
    body = (
        _img(figs["transfer"], "transfer heat map", "train row, test column")
        + "<details open><summary>matrix</summary>"
        + _table(tr.matrix, cols)
        + "</details>"
        + "<details open><summary>measured factors</summary>"
        + _table(tr.pairs, pcols)
        + "</details>"
        + f"<details><summary>definitions</summary><ul>{defs}</ul></details>"
    )
    return _section("transfer", "Transfer between devices", lead, body)


def _importance_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """Permutation importance of the inputs ("" without a model)."""
    imp = r["importance"]
    if not len(imp):
        return ""
    lead = (
        "Permutation importance on the rows above: how much the error (RMSE of log cost) grows when one input "
        "is shuffled across rows. For CARB configs an architecture's parameters are shuffled together and the "
        "static features recomputed, so every shuffled row is a real network."
    )
    cols = [
        ("target", "target", ""),
        ("input", "input", ""),
        ("importance", "importance", ".3f"),
        ("importance_std", "±", ".3f"),
    ]
    body = (
        _img(figs["importance"], "feature importance", "permutation importance")
        + "<details><summary>table</summary>"
        + _table(imp, cols)
        + "</details>"
    )
    return _section("importance", "What drives the cost", lead, body)


def _about_section(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """The data the report was made from, and its notes."""
    e = html.escape
    src = pd.DataFrame(doc["data"])
    if "latency" not in src.columns:
        src["latency"] = None
    src["latency"] = src["latency"].fillna("raw medians")
    notes = "".join(f'<li class="warn">{e(n)}</li>' for n in doc["notes"])
    body = (
        _table(
            src,
            [
                ("name", "dataset (device)", ""),
                ("source", "source", ""),
                ("rows", "rows", "d"),
                ("ok_rows", "ok rows", "d"),
                ("latency", "latency", ""),
            ],
        )
        + (f"<ul>{notes}</ul>" if notes else "")
        + (
            f'<p class="note">carb {e(str(doc.get("carb_version", "")))}, generated {e(doc["generated_at"])}. '
            "Numbers: report.json beside this page.</p>"
        )
    )
    return _section("about", "Data and notes", "What this report was made from.", body)


#: the report's sections in order: (id, navigation label, builder)
_SECTIONS = (
    ("pareto", "Pareto", _pareto_section),
    ("scaling", "Scaling", _scaling_section),
    ("accuracy", "Accuracy", _accuracy_section),
    ("transfer", "Transfer", _transfer_section),
    ("importance", "Importance", _importance_section),
    ("about", "Data", _about_section),
)


def page(r: dict[str, Any], doc: dict[str, Any], figs: dict[str, Path | None]) -> str:
    """The report page: its sections (those with something to show) and the explorer's data."""
    e = html.escape
    sections: list[str] = []
    nav: list[tuple[str, str]] = []
    for id_, label, build in _SECTIONS:
        if section := build(r, doc, figs):
            sections.append(section)
            nav.append((id_, label))

    data_json = json.dumps(_clean(r["explorer"]), separators=(",", ":"), allow_nan=False)
    # inside <script>, "</" would end the element early; "<\/" is the same JSON string
    data_json = data_json.replace("</", "<\\/")
    listed = ", ".join(f"{d['name']} ({d['ok_rows']:,} rows)" for d in doc["data"])
    sub = f"<p>{e(listed)} · model: {e(r['model_desc'] or 'none')}</p>"
    page = string.Template(_asset("report.html")).substitute(
        title=e(doc["title"]),
        subtitle=sub,
        css=_asset("report.css"),
        js=_asset("report.js"),
        nav="".join(f'<a href="#{i}">{e(t)}</a>' for i, t in nav),
        sections="\n".join(sections),
        data=data_json,
    )
    return page
