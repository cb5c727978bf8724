"""The CARB report: one self-contained HTML page with an interactive Pareto explorer.

The page shows figures first, tables second; the static figures lie beside it as PNG files, and the numbers in
``report.json``.

>>> from carb.report import write_report
>>> write_report("out", data=["cpu-1t"], screen_dir="screen-out")   # doctest: +SKIP
PosixPath('out/report.html')

The page needs no network: CSS, JavaScript (hand-written, no library) and the figures
(base64 PNG) are inline. What it shows:

* **Pareto explorer**: the feasible configs of a screening (``carb screen`` output) or, without
  one, the measured configs of the first dataset, with the Pareto front (the shortlist)
  highlighted; axes chosen among the objectives and costs, a tooltip with the config and its
  costs (and intervals), budget sliders that hide configs over a budget, and the 2-D front
  of what remains. Beside it, the static 2-D projections.
* **Scaling with the batch** per device (:func:`carb.studies.analyses.scaling`).
* **Measured vs predicted** with intervals: a model (``model``, or CARB ``fast`` fitted on
  all but ``holdout`` of the first dataset) against measured values.
* **Transfer between devices** (:func:`carb.studies.analyses.transfer`) when the data hold two
  devices or more: heat maps of R²(log), Spearman and the measured factor.
* **What drives the cost**: permutation importance of the model's inputs.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from carb._safeio import read_json
from carb.report import figures
from carb.report._json import clean as _clean
from carb.report._page import page as html_page
from carb.studies import analyses as analysis

__all__ = ["write_report", "build_report", "load_screen", "ReportError", "MAX_EXPLORER_POINTS", "REPORT_FILES"]

#: feasible (non-shortlist) configs drawn at most in the explorer (a seeded sample beyond)
MAX_EXPLORER_POINTS = 5000
#: the files a report writes (figures only when there is something to draw)
REPORT_FILES = (
    "report.html",
    "report.json",
    "pareto.png",
    "scaling.png",
    "measured_vs_predicted.png",
    "transfer.png",
    "importance.png",
)
#: the explorer's columns, in order of preference (those with values are offered)
_EXPLORER_COLUMNS = ("latency_ms", "memory_mb", "energy_j", "energy_j_per_image", "flops_per_image")


class ReportError(ValueError):
    """Bad input to a report (unreadable data, screening or model folder); one line."""


@dataclass
class _Screen:
    shortlist: pd.DataFrame
    feasible: pd.DataFrame
    summary: dict[str, Any]


def load_screen(directory: str | Path) -> _Screen:
    """Read a ``carb screen`` output folder (``shortlist.parquet``, ``feasible.parquet``, ``summary.json``).

    Raises:
        ReportError: a file is missing or unreadable.
    """
    d = Path(directory)
    if not d.is_dir():
        raise ReportError(f"--screen {d}: no such folder")
    for f in ("shortlist.parquet", "feasible.parquet", "summary.json"):
        if not (d / f).is_file():
            raise ReportError(f"--screen {d}: not a carb screen output (missing {f})")
    try:
        shortlist = pd.read_parquet(d / "shortlist.parquet")
        feasible = pd.read_parquet(d / "feasible.parquet")
        summary = read_json(d / "summary.json")
    except Exception as e:  # corrupt parquet or JSON
        raise ReportError(f"--screen {d}: not a carb screen output ({' '.join(str(e).split())[:160]})") from None
    if not isinstance(summary, dict):
        raise ReportError(f"--screen {d}: summary.json is not an object")
    return _Screen(shortlist, feasible, summary)


def _as_datasets(data: Any) -> tuple[dict[str, pd.DataFrame], list[dict[str, Any]]]:
    """Datasets by device name, and a description of each source.

    ``data``: a name or path (:func:`carb.datasets.load`), a DataFrame, a sequence of those, or a mapping name -> frame.
    """
    from carb import datasets as ds
    from carb.campaign import speed as drift

    if isinstance(data, (str, Path, pd.DataFrame)):
        items: list[tuple[str, Any]] = [(str(data) if not isinstance(data, pd.DataFrame) else "data", data)]
    elif isinstance(data, Mapping):
        items = [(str(k), v) for k, v in data.items()]
    else:
        items = [(str(x) if not isinstance(x, pd.DataFrame) else f"data {i + 1}", x) for i, x in enumerate(data)]
    if not items:
        raise ReportError("no data given (--data NAME|FILE, one or more)")
    out: dict[str, pd.DataFrame] = {}
    sources: list[dict[str, Any]] = []
    named = isinstance(data, Mapping)
    for name, x in items:
        corrected = 0
        if isinstance(x, (str, Path)):
            try:
                df = ds.load(str(x))
            except ds.DatasetError as e:
                raise ReportError(str(e)) from None
            # the latency `carb train` learns: at the campaign's median speed where the paired
            # sentinel timed the row (data without a speed index: unchanged)
            df = drift.corrected(df, paired_only=True)
            corrected = df.attrs["corrected_rows"]
        elif isinstance(x, pd.DataFrame):
            df = x
        else:
            raise ReportError(f"data {name}: expected a dataset name, a file path or a DataFrame")
        # a mapping names its frames; otherwise each device of a source becomes one dataset
        parts = {name: df} if named else analysis.split_devices(df, name=Path(name).stem)
        for dev, part in parts.items():
            key, i = dev, 2
            while key in out:  # the same device from two sources: keep both, apart
                key, i = f"{dev} ({i})", i + 1
            out[key] = part.reset_index(drop=True)
            sources.append(
                {
                    "name": key,
                    "source": name,
                    "rows": int(len(part)),
                    "ok_rows": int((part["status"] == "ok").sum()) if "status" in part.columns else int(len(part)),
                    **({"latency": drift.CORRECTED_LATENCY} if corrected else {}),
                }
            )
    return out, sources


def _predictor(model: Any) -> tuple[Any, str]:
    if model is None:
        return None, ""
    if isinstance(model, (str, Path)):
        from carb.transfer.calibrate import load_predictor

        try:
            m = load_predictor(model)
        except Exception as e:  # BundleError, a broken calibration, a missing folder
            raise ReportError(f"--model {model}: {' '.join(str(e).split())[:200]}") from None
        return m, f"model bundle {model}"
    if not hasattr(model, "predict"):
        raise ReportError("model: expected a model folder or an object with predict(DataFrame)")
    return model, _describe_model(model)


def _describe_model(m: Any) -> str:
    if hasattr(m, "preset"):
        return f"CARB (preset {getattr(m, 'preset_', m.preset)})"
    if hasattr(m, "maps_"):
        return "calibrated CARB model"
    return type(m).__name__


def _accuracy(rows: pd.DataFrame, targets: Sequence[str]) -> dict[str, dict[str, float]]:
    out = {}
    for t in targets:
        if t not in rows.columns or f"pred_{t}" not in rows.columns:
            continue
        y, p = rows[t].to_numpy(float), rows[f"pred_{t}"].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
        if ok.sum() < 2:
            continue
        ly, lp = np.log(y[ok]), np.log(p[ok])
        ss = float(np.sum((ly - ly.mean()) ** 2))
        lo = rows.get(f"pred_{t}_lo", pd.Series(np.nan, index=rows.index)).to_numpy(float)[ok]
        hi = rows.get(f"pred_{t}_hi", pd.Series(np.nan, index=rows.index)).to_numpy(float)[ok]
        cov = (
            float(np.mean((y[ok] >= lo) & (y[ok] <= hi)))
            if np.isfinite(lo).all() and np.isfinite(hi).all()
            else float("nan")
        )
        out[t] = {
            "n": int(ok.sum()),
            "r2_log": float(1 - np.sum((ly - lp) ** 2) / ss) if ss > 0 else float("nan"),
            "mape": float(np.mean(np.abs(p[ok] / y[ok] - 1))),
            "median_ape": float(np.median(np.abs(p[ok] / y[ok] - 1))),
            "coverage": cov,
        }
    return out


def _explorer_data(
    points: pd.DataFrame, is_short: np.ndarray, rank: np.ndarray, objectives: Sequence[tuple[str, str]], seed: int
) -> dict[str, Any]:
    """Return the explorer's JSON.

    It holds all the shortlist points and the other feasible points up to :data:`MAX_EXPLORER_POINTS` (seeded
    sample).
    """
    pts = points.reset_index(drop=True)
    if "energy_j" in pts.columns and "batch" in pts.columns and "energy_j_per_image" not in pts.columns:
        pts = pts.assign(energy_j_per_image=pts["energy_j"] / pts["batch"])
    others = np.flatnonzero(~is_short)
    n_other_total = len(others)
    if len(others) > MAX_EXPLORER_POINTS:
        others = np.sort(np.random.default_rng(seed).choice(others, MAX_EXPLORER_POINTS, replace=False))
    keep = np.concatenate([others, np.flatnonzero(is_short)])
    pts, short, rank = pts.iloc[keep].reset_index(drop=True), is_short[keep], rank[keep]
    cols = [c for c in _EXPLORER_COLUMNS if c in pts.columns and np.isfinite(pts[c].to_numpy(float)).any()]
    dirs = {c: d for c, d in objectives}
    cols += [c for c in dirs if c not in cols and c in pts.columns and np.isfinite(pts[c].to_numpy(float)).any()]

    def arr(v: Any) -> list[Any]:
        return [None if not math.isfinite(x) else float(f"{x:.6g}") for x in np.asarray(v, dtype=float)]

    lo, hi = {}, {}
    for c in cols:
        base, div = c, 1.0
        if c == "energy_j_per_image":
            base, div = "energy_j", pts["batch"].to_numpy(float)
        if f"{base}_lo" in pts.columns and f"{base}_hi" in pts.columns:
            lo[c] = arr(pts[f"{base}_lo"].to_numpy(float) / div)
            hi[c] = arr(pts[f"{base}_hi"].to_numpy(float) / div)
    if not cols:  # nothing to draw (e.g. a screening without a feasible config): the page says so
        axes: tuple[str, ...] = ()
    elif {"latency_ms", "flops_per_image"} <= set(cols):
        axes = ("latency_ms", "flops_per_image")
    else:
        axes = (cols[0], cols[1] if len(cols) > 1 else cols[0])
    return {
        "columns": cols,
        "labels": {c: figures.LABELS.get(c, c) for c in cols},
        "units": {c: analysis.UNITS.get(c, "") for c in cols},
        "dirs": {c: dirs.get(c, "min") for c in cols},
        "objectives": [c for c, _ in objectives],
        "default_axes": list(axes),
        "n_shortlist": int(short.sum()),
        "n_feasible_total": int(n_other_total),
        "points": {
            "label": analysis.config_label(pts).astype(str).tolist(),
            "shortlist": [int(s) for s in short],
            "rank": [None if not np.isfinite(r) else int(r) for r in rank],
            "values": {c: arr(pts[c]) for c in cols},
            "lo": lo,
            "hi": hi,
        },
    }


def _pareto_inputs(
    screen: _Screen | None, primary: str, data: pd.DataFrame
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, list[tuple[str, str]], dict[str, Any]]:
    """Points, shortlist mask, ranks, objectives and a description of the Pareto section."""
    from carb.decide.pareto import parse_objectives

    if screen is not None:
        feas, short = screen.feasible.reset_index(drop=True), screen.shortlist.reset_index(drop=True)
        key = "config_id" if "config_id" in feas.columns and "config_id" in short.columns else None
        if key is None:
            raise ReportError("screening tables have no config_id column")
        extra = short[~short[key].isin(set(feas[key]))]
        # the shortlist is a subset of the feasible set by construction; keep any stray row anyway
        pts = pd.concat([feas, extra[[c for c in extra.columns if c in feas.columns]]], ignore_index=True)
        rank_of = dict(zip(short[key], short["rank"] if "rank" in short.columns else range(1, len(short) + 1)))
        is_short = pts[key].isin(set(short[key])).to_numpy()
        # a config listed twice in the feasible table is one point
        dup = pts[key].duplicated().to_numpy()
        pts, is_short = pts[~dup].reset_index(drop=True), is_short[~dup]
        rank = pts[key].map(rank_of).to_numpy(float)
        try:
            objs = parse_objectives(screen.summary.get("objectives", []))
        except ValueError:
            objs = []
        objs = [o for o in objs if o[0] in pts.columns] or analysis.objectives_for(pts)
        sm = screen.summary
        info = {
            "source": "screening",
            "objectives": [f"{d}:{c}" for c, d in objs],
            "candidates": sm.get("candidates"),
            "after_stage1": sm.get("after_stage1"),
            "feasible": int(len(feas)),
            "shortlist": int(len(short)),
            "budgets": sm.get("budgets", {}),
            "risk": sm.get("risk"),
            "pruning_ratio": sm.get("pruning_ratio"),
        }
        return pts, is_short, rank, objs, info
    try:
        pts, front, objs = analysis.measured_front(data)
    except ValueError:  # no cost with values: an empty explorer, the rest of the report stands
        return (
            pd.DataFrame(),
            np.zeros(0, dtype=bool),
            np.zeros(0),
            [],
            {"source": "measured", "device": primary, "objectives": [], "feasible": 0, "shortlist": 0},
        )
    key = "config_id" if "config_id" in pts.columns else ("arch_id" if "arch_id" in pts.columns else None)
    if key is not None:
        is_short = pts[key].isin(set(front[key])).to_numpy()
        rank = pts[key].map(dict(zip(front[key], front["rank"]))).to_numpy(float)
    else:  # no id column: rows of the front by value
        from carb.decide.pareto import front_mask

        is_short = front_mask(pts, objs)
        rank = np.full(len(pts), np.nan)
    info = {
        "source": "measured",
        "device": primary,
        "objectives": [f"{d}:{c}" for c, d in objs],
        "feasible": int(len(pts)),
        "shortlist": int(is_short.sum()),
    }
    return pts, is_short, rank, objs, info


def build_report(
    data: Any,
    model: Any = None,
    screen_dir: str | Path | None = None,
    *,
    screen: Any = None,
    holdout: float = 0.25,
    seed: int = 0,
    transfer: bool = True,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Compute everything a report shows (no files written).

    Returns a dict with the JSON numbers under ``"json"`` and the frames the figures need; see :func:`write_report`.
    """
    say = say or (lambda m: None)
    sets, sources = _as_datasets(data)
    names = list(sets)
    primary = names[0]
    pred, model_desc = _predictor(model)
    scr = (
        load_screen(screen_dir)
        if screen_dir is not None
        else (_Screen(screen.shortlist, screen.feasible, dict(screen.summary)) if screen is not None else None)
    )
    notes: list[str] = []
    doc = _doc_head(sources, primary)
    scal_profile, scal_summary, scal_prec = _scaling_part(sets, doc, notes, say)
    checked = _accuracy_part(sets[primary], primary, pred, model_desc, holdout, seed, doc, notes, say)
    tr = _transfer_part(sets, transfer, seed, doc, notes, say)

    pts, is_short, rank, objs, pinfo = _pareto_inputs(scr, primary, sets[primary])
    doc["pareto"] = pinfo
    if scr is not None:
        doc["screen_summary"] = scr.summary
    explorer = _explorer_data(pts, is_short, rank, objs, seed)
    doc["notes"] = notes
    return {
        "json": doc,
        "sets": sets,
        "rows": checked.rows,
        "accuracy": checked.accuracy,
        "importance": checked.importance,
        "transfer": tr,
        "scaling_profile": scal_profile,
        "scaling_summary": scal_summary,
        "scaling_by_precision": scal_prec,
        "pareto_points": pts,
        "pareto_short": is_short,
        "pareto_rank": rank,
        "objectives": objs,
        "explorer": explorer,
        "held_out": checked.held_out,
        "model_desc": checked.model_desc,
        "primary": primary,
        "screen": scr,
    }


def _doc_head(sources: list[dict[str, Any]], primary: str) -> dict[str, Any]:
    """Return the start of ``report.json``: its title (set on writing), time, data sources and carb version."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    doc: dict[str, Any] = {"title": "", "generated_at": now, "data": sources, "primary": primary}
    try:
        from carb._version import __version__

        doc["carb_version"] = __version__
    except ImportError:  # pragma: no cover - carb always has it
        pass
    return doc


def _scaling_part(
    sets: Mapping[str, pd.DataFrame], doc: dict[str, Any], notes: list[str], say: Callable[[str], None]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Analyse the batch scaling of every dataset: return the profile, the summary and the summary by precision.

    ``doc`` gets their records and definitions; ``notes`` says which datasets have no batch and which curves are
    not drawn.
    """
    profs, sums, by_prec, no_batch = [], [], [], []
    for n, d in sets.items():
        if "batch" not in d.columns:
            no_batch.append(n)
            continue
        r = analysis.scaling(d.assign(device=n))
        profs.append(r.profile)
        sums.append(r.summary)
        doc.setdefault("scaling_definitions", r.definitions)
        if "precision" in d.columns and d["precision"].nunique() > 1:
            # precisions scale differently (half precision is launch-bound longer on CPUs): a table each
            by_prec.append(analysis.scaling(d.assign(device=n), by="precision").summary)
    if no_batch:
        notes.append(f"no scaling analysis (no batch column): {', '.join(no_batch)}")
    scal_profile = pd.concat(profs, ignore_index=True) if profs else pd.DataFrame()
    scal_summary = pd.concat(sums, ignore_index=True) if sums else pd.DataFrame()
    if len(scal_summary):
        # a curve from a handful of architectures zigzags with the ones drawn: the figure leaves it out
        # (threshold: figures.MIN_LINKED_ARCHS) and the table and the notes say why
        why = figures.scaling_not_drawn(scal_summary)
        scal_summary["note"] = ["; ".join(x for x in (n, w) if x) for n, w in zip(scal_summary["note"], why)]
        for dev, w in scal_summary[why != ""].groupby("device", sort=False):
            notes.append(f"scaling, {dev} ({', '.join(w['target'])}): {why[w.index[0]]}")
    doc["scaling"] = analysis._records(scal_summary) if len(scal_summary) else []
    doc["scaling_profile"] = analysis._records(scal_profile) if len(scal_profile) else []
    scal_prec = pd.concat(by_prec, ignore_index=True) if by_prec else pd.DataFrame()
    doc["scaling_by_precision"] = analysis._records(scal_prec) if len(scal_prec) else []
    say(f"scaling: {len(sums)} device(s)")
    return scal_profile, scal_summary, scal_prec


@dataclass
class _Checked:
    """The model checked against the measured values of the first dataset."""

    rows: pd.DataFrame
    held_out: bool
    accuracy: dict[str, dict[str, float]]
    importance: pd.DataFrame
    model_desc: str


def _accuracy_part(
    data: pd.DataFrame,
    primary: str,
    pred: Any,
    model_desc: str,
    holdout: float,
    seed: int,
    doc: dict[str, Any],
    notes: list[str],
    say: Callable[[str], None],
) -> _Checked:
    """Check the model on ``data`` (the first dataset, ``primary``): its accuracy and the inputs' importance.

    Without a model, CARB ``fast`` is fitted on all but ``holdout`` of the configs. ``doc`` gets the model, the
    accuracy and the importance; ``notes`` says why the check was skipped, if it was.
    """
    rows, held_out, acc, imp, fitted = pd.DataFrame(), False, {}, pd.DataFrame(), None
    try:
        rows, fitted, held_out = analysis.holdout_predictions(data, pred, test_fraction=holdout, seed=seed)
        targets = [t for t in analysis.TARGETS if t in getattr(fitted, "targets_", analysis.TARGETS)]
        acc = _accuracy(rows, targets)
        if not model_desc:
            model_desc = f"{_describe_model(fitted)} fitted on {primary} less a {holdout:g} holdout"
        say(f"measured vs predicted: {len(rows)} rows of {primary}" + (" (held out)" if held_out else ""))
        if len(rows) >= 10:
            imp = analysis.importance(fitted, rows, targets=list(acc), seed=seed)
    except Exception as e:  # too few rows, a model that cannot read these rows: say so, keep the rest
        notes.append(f"measured vs predicted skipped on {primary}: {' '.join(str(e).split())[:200]}")
    doc["model"] = {
        "description": model_desc,
        "checked_on": primary,
        "held_out": held_out,
        "holdout_fraction": holdout if held_out else None,
    }
    doc["accuracy"] = acc
    doc["importance"] = analysis._records(imp) if len(imp) else []
    return _Checked(rows=rows, held_out=held_out, accuracy=acc, importance=imp, model_desc=model_desc)


def _transfer_part(
    sets: Mapping[str, pd.DataFrame],
    transfer: bool,
    seed: int,
    doc: dict[str, Any],
    notes: list[str],
    say: Callable[[str], None],
) -> analysis.TransferResult | None:
    """Return the transfer matrix between the datasets' devices (None with fewer than two, or when not asked).

    ``doc`` gets its numbers; ``notes`` says why there is none.
    """
    tr = None
    if transfer and len(sets) >= 2:
        try:
            tr = analysis.transfer(sets, seed=seed, say=say)
            doc["transfer"] = tr.to_dict()
        except ValueError as e:
            notes.append(f"transfer skipped: {e}")
    elif len(sets) < 2:
        notes.append("transfer: one device only (give two datasets or more, e.g. --data cpu-1t --data cpu-2t)")
    return tr


def _names_nb201(data: Any) -> bool:
    """Whether ``data`` names the shipped NAS-Bench-201 data alone (a name, not a frame)."""
    if isinstance(data, (list, tuple)) and len(data) == 1:
        data = data[0]
    return isinstance(data, str) and data == "nb201"


def write_report(
    out_dir: str | Path,
    data: Any,
    model: Any = None,
    screen_dir: str | Path | None = None,
    *,
    screen: Any = None,
    holdout: float = 0.25,
    seed: int = 0,
    transfer: bool = True,
    title: str = "CARB report",
    say: Callable[[str], None] | None = None,
) -> Path:
    """Write ``report.html``, ``report.json`` and the PNG figures into ``out_dir``.

    Args:
        out_dir: output folder (created).
        data: datasets: a shipped name or file path (:func:`carb.datasets.load`), a
            DataFrame, a list of those (each split by its ``device`` column), or a mapping
            name -> DataFrame (one device each). The first is the one the model is checked
            on and, without a screening, whose measured Pareto front the explorer shows.
        model: a model folder (CARB bundle or calibrated model) or a fitted predictor; checked
            on every row of the first dataset. Default: CARB ``fast`` fitted on all but
            ``holdout`` of the first dataset's configs and checked on the rest.
        screen_dir: a ``carb screen`` output folder for the Pareto explorer.
        screen: a :class:`carb.decide.screen.ScreenResult` instead of ``screen_dir``.
        holdout: fraction of configs held out when the model is fitted here.
        seed: seed of the holdout, the transfer split and the explorer's sample.
        transfer: compute the transfer matrix when there are two devices or more.
        title: page title.
        say: progress messages.

    Returns:
        The path of ``report.html``.

    Raises:
        ReportError: unreadable data, screening or model (one line).
    """
    if not 0 < holdout < 1:
        raise ReportError(f"holdout {holdout!r}: must be in (0, 1)")
    if screen_dir is not None and screen is not None:
        raise ReportError("give screen_dir or screen, not both")
    out = Path(out_dir)
    created = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    # every file is written into a private folder inside ``out`` first and moved into place once all are written:
    # a failure (a full disk) leaves ``out`` as it was, and an earlier report in it whole
    stage = Path(tempfile.mkdtemp(prefix=".carb-report-", dir=out))
    try:
        if _names_nb201(data) and model is None and screen_dir is None and screen is None:
            from . import _nb201  # its own analyses: batch scaling, 29 x 29 transfer, Jetson energy vs latency

            page = _nb201.write(stage, say=say)
            stale: list[str] = []
        else:
            page, stale = _write_files(stage, data, model, screen_dir, screen, holdout, seed, transfer, title, say)
        for f in sorted(stage.iterdir()):
            f.replace(out / f.name)
    except OSError as e:
        raise ReportError(f"--out {out}: cannot write the report ({e.strerror or e}); nothing was written") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        for d in created:  # the folders made for a report that failed, if left empty
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    for name in stale:  # a figure not drawn this time must not survive from an earlier report in the same folder
        (out / name).unlink(missing_ok=True)
    return out / page.name


def _write_files(
    out: Path,
    data: Any,
    model: Any,
    screen_dir: str | Path | None,
    screen: Any,
    holdout: float,
    seed: int,
    transfer: bool,
    title: str,
    say: Callable[[str], None] | None,
) -> tuple[Path, list[str]]:
    """Write the report's files into ``out``; return the page's path and the figures of an earlier report to drop."""
    r = build_report(data, model, screen_dir, screen=screen, holdout=holdout, seed=seed, transfer=transfer, say=say)
    doc = r["json"]
    doc["title"] = title
    figs: dict[str, Path | None] = {}
    held = "held-out" if r["held_out"] else "all"
    targets = list(r["accuracy"])
    figs["pareto"] = figures.pareto_projections(
        r["pareto_points"],
        r["pareto_short"],
        r["objectives"],
        out / "pareto.png",
        "screening: feasible configs and the shortlist (predicted)"
        if r["screen"] is not None
        else f"{r['primary']}: measured configs and their Pareto front",
    )
    figs["scaling"] = figures.scaling_curves(r["scaling_profile"], r["scaling_summary"], out / "scaling.png")
    figs["measured_vs_predicted"] = figures.measured_vs_predicted(
        r["rows"],
        targets,
        r["accuracy"],
        out / "measured_vs_predicted.png",
        f"{r['model_desc']}: {held} rows of {r['primary']}",
    )
    figs["transfer"] = (
        figures.transfer_heatmap(r["transfer"], out / "transfer.png", [t for t in analysis.TARGETS])
        if r["transfer"] is not None
        else None
    )
    figs["importance"] = figures.feature_importance(r["importance"], out / "importance.png")
    doc["figures"] = {k: p.name for k, p in figs.items() if p is not None}
    (out / "report.json").write_text(json.dumps(_clean(doc), indent=2, allow_nan=False))
    (out / "report.html").write_text(html_page(r, doc, figs), encoding="utf-8")
    return out / "report.html", [f"{k}.png" for k, p in figs.items() if p is None]
