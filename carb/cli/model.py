"""The model commands of ``carb``: ``train``, ``evaluate``, ``predict``.

Thin wrappers over :mod:`carb.model` and :mod:`carb.model.evaluation`; :func:`register` adds them
to the Typer app of :mod:`carb.cli`. Bad input raises :class:`carb.cli.UsageError` (one
line ``error: ...``, exit code 2).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, List, Optional

import typer

from ._app import UsageError, atomic_file, check_jobs, check_out_dir, check_out_file, one_line, refuse_inputs
from ._results import _console, _fmt, _pct, print_results

__all__ = ["register", "load_data", "parse_budgets"]

DEFAULT_EVAL_PRESETS = ["default", "paper", "flops-linear", "lgbm", "power-latency"]


def _usage(msg: str) -> Exception:
    return UsageError(msg)


def load_data(spec: str, platform: str | None = None):
    """Load a dataset by registry name (``carb.datasets.load``) or Parquet/CSV file path, restricted to one platform.

    The platform is its ``platform`` column, or ``device`` in datasets that name it so: ``platform`` if given, else
    the only one present.
    """
    from carb import datasets

    try:
        # a dataset that can load one platform alone does (nb201: 640,625 rows in all)
        df = datasets.load(spec, device=platform)
    except ValueError as e:  # DatasetError and friends (nb201: an unknown platform, naming the 29)
        raise _usage(str(e)) from None
    col = "platform" if "platform" in df.columns else "device" if "device" in df.columns else None
    if col is not None:
        names = sorted(map(str, df[col].dropna().unique()))
        if platform is not None:
            if platform not in names:
                raise _usage(f"--platform {platform}: not in {spec} (platforms: {', '.join(names)})")
            df = df[df[col] == platform]
        elif len(names) > 1:
            raise _usage(f"{spec} holds {len(names)} platforms ({', '.join(names)}); choose one with --platform")
    elif platform is not None:
        raise _usage(f"--platform {platform}: {spec} has no platform column")
    return df.reset_index(drop=True)


LATENCY_CHOICES = ("corrected", "raw")
#: the free space ``carb train --out`` asks for: a bundle of a shipped dataset takes 1-4 MB. Units: MB.
BUNDLE_MB = 16.0
_LATENCY_HELP = (
    "corrected (default): for rows timed with the paired speed sentinel, use their latency at the "
    "campaign's median speed (latency_ms_norm); other rows keep the raw median; raw: the raw medians. "
    "Chosen by measurement: on cpu-avx2-1t a model trained on the corrected values predicted a later "
    "campaign's corrected values with 9.6% MAPE against 11.2%."
)


def latency_view(df, latency: str):
    """Return the rows with ``latency_ms`` as ``--latency`` asks, and a few words saying which.

    ``corrected`` puts it at the campaign's median speed in the rows timed with the paired sentinel
    (:func:`carb.campaign.speed.corrected`, the raw median kept as ``latency_ms_raw``).
    """
    from carb.campaign import speed as drift

    if latency not in LATENCY_CHOICES:
        raise _usage(f"--latency {latency}: expected one of {', '.join(LATENCY_CHOICES)}")
    if latency == "raw":
        return df, "raw medians"
    out = drift.corrected(df, paired_only=True)
    if "latency_ms_raw" not in out.columns:
        has = "latency_ms_norm" in df.columns and df["latency_ms_norm"].notna().any()
        return out, (
            "raw medians (the data's speed index comes from readings between visits, which "
            "corrected no better than raw)"
            if has
            else "raw medians (the data has no speed index)"
        )
    n = out.attrs["corrected_rows"]
    return out, (
        f"drift-corrected: latency_ms_norm, at the campaign's median speed ({n:,} of {len(out):,} rows; "
        "rows without a paired sentinel keep the raw median)"
        if n < len(out)
        else f"drift-corrected: latency_ms_norm, at the campaign's median speed (all {n:,} rows)"
    )


def parse_budgets(items: list[str] | None) -> dict[str, float]:
    """Parse ``["energy_j=75", "latency_ms=3"]`` into ``{"energy_j": 75.0, "latency_ms": 3.0}``.

    This is carb.decide.screen's parser; its ValueError becomes a usage error.
    """
    from carb.decide.screen import parse_budgets as parse

    from ._app import refuse_repeated_budgets

    refuse_repeated_budgets(items)
    try:
        return parse(items or [])
    except ValueError as e:
        raise _usage(f"--budget: {e}") from None


def _check_preset(names: list[str]) -> None:
    from carb.model import AUTO, PRESETS
    from carb.model.evaluation import BASELINES

    for p in names:
        if p not in PRESETS and p not in BASELINES and p != AUTO:
            raise _usage(f"--preset {p}: unknown preset (expected one of {', '.join([AUTO, *PRESETS, *BASELINES])})")


def _present_targets(df) -> list[str]:
    """The targets the rows have a value of, in CARB's order."""
    from carb.model import TARGETS

    return [t for t in TARGETS if t in df.columns and df[t].notna().any()]


def check_budget_targets(budgets: dict[str, float], df, where: str) -> None:
    """Refuse a budget on a target the rows lack (energy on a latency-only platform).

    It is a usage error naming the targets there are.
    """
    present = _present_targets(df)
    for t in budgets:
        if t not in present:
            raise _usage(f"--budget {t}: {where} has no {t} (targets there: {', '.join(present) or 'none'})")


def check_power_latency(df, where: str) -> None:
    """Refuse ``--preset power-latency`` asked for by name on rows without energy or latency.

    On such rows (a latency-only platform, our CPUs) it is a usage error naming the targets there are: the baseline
    is an energy prediction (a model's latency x the median power), and would otherwise leave an empty table.
    """
    present = _present_targets(df)
    lacking = [t for t in ("energy_j", "latency_ms") if t not in present]
    if lacking:
        raise _usage(
            f"--preset power-latency: {where} has no {' and '.join(lacking)} (targets there: "
            f"{', '.join(present) or 'none'}); the baseline predicts energy from latency"
        )


def _load_prior(prior: Optional[Path], n_jobs: int) -> Any:
    """The ``--prior`` bundle, loaded (None without one); bad input is a usage error."""
    if prior is None:
        return None
    from carb.model import BundleError, load
    from carb.transfer.calibrate import CALIBRATION_FILE

    if (prior / CALIBRATION_FILE).is_file():
        raise _usage(
            f"--prior: {prior} is a calibrated model (carb calibrate); a prior is a bundle "
            "from carb train, e.g. the calibration's source model"
        )
    try:
        return load(prior, n_jobs=n_jobs)
    except BundleError as e:
        raise _usage(f"--prior: {e}") from None


def _score_model(
    model_dir: Path,
    data: str,
    platform: str | None,
    budget: list[str] | None,
    json_out: Path | None,
    latency: str = "corrected",
) -> None:
    """``carb evaluate --model``: a fitted model (bundle or calibrated) scored on a dataset."""
    from rich.table import Table

    from carb.model import UNITS
    from carb.model.evaluation import metrics
    from carb.transfer.calibrate import load_predictor

    try:
        model = load_predictor(model_dir)
    except (ValueError, OSError) as e:
        raise _usage(f"--model {model_dir}: {e}") from None
    df = load_data(data, platform)
    if "status" in df.columns:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    df, latency_note = latency_view(df, latency)
    try:
        pred = model.predict(df)
    except ValueError as e:
        raise _usage(f"{data}: {e}") from None
    budgets = parse_budgets(budget)
    targets = [t for t in model.targets_ if t in df.columns and df[t].notna().any()]
    if not targets:
        raise _usage(f"{data}: has none of the model's targets ({', '.join(model.targets_)})")
    res: dict[str, Any] = {
        "data": data,
        "model": str(model_dir),
        "rows": len(df),
        "results": {},
        "latency": latency_note,
    }
    table = Table(
        "target",
        "n",
        "R² log",
        "MAPE",
        "±10%",
        "ρ",
        "cover",
        "acc@budget",
        "FA/over",
        "FA/acc",
        title=f"{model_dir} on {data} ({len(df):,} ok rows)",
        caption="FA/over: share of the configs over budget that the model accepts; "
        "FA/acc: share of the accepted configs that are over budget",
    )
    for t in targets:
        m = metrics(
            df[t].to_numpy(), pred[t].to_numpy(), pred[f"{t}_lo"].to_numpy(), pred[f"{t}_hi"].to_numpy(), budgets.get(t)
        )
        m.update(_false_accepts(df[t].to_numpy(float), pred[t].to_numpy(float), m["budget"]))
        res["results"][t] = m
        table.add_row(
            f"{t} ({UNITS[t]})",
            f"{int(m['n']):,}",
            _fmt(m["r2_log"], ".3f"),
            _pct(m["mape"], ".1f"),
            _pct(m["within_10pct"], ".0f"),
            _fmt(m["spearman"], ".3f"),
            _pct(m["coverage"], ".0f"),
            _pct(m["budget_accuracy"], ".0f"),
            _pct(m["false_accept_rate"], ".1f"),
            _pct(m["false_discovery_rate"], ".1f"),
        )
    console = _console()
    console.print(table)
    if "latency_ms" in targets:
        console.print(f"latency: {latency_note}")
    if json_out is not None:
        _write_json(res, json_out, console)


def _false_accepts(y: Any, pred: Any, budget: float) -> dict[str, float]:
    """False accepts both ways at ``budget`` (accept: predicted within it; the rows measured, as ``metrics`` scores).

    Both rates come from ``metrics`` (``false_accept_rate``: of the configs over budget; ``false_discovery_rate``:
    of the accepted configs); this adds their counts ``false_accepts``, ``over_budget``, ``accepted``.
    """
    import numpy as np

    from carb.decide.validate import budget_metrics

    ok = np.isfinite(y)
    if not ok.any() or not np.isfinite(budget):
        return {"false_accepts": 0, "over_budget": 0, "accepted": 0}
    m = budget_metrics(pred[ok] <= budget, y[ok] <= budget)
    # the rate itself comes from metrics (NaN when nothing is accepted); these are its counts
    return {k: m[k] for k in ("false_accepts", "over_budget", "accepted")}


def train(
    data: str = typer.Option(..., "--data", help="Dataset name or .parquet/.csv file."),
    preset: str = typer.Option(
        "auto",
        "--preset",
        help=(
            "Model preset: auto (default: the data's family preset where one exists, nb201 for NAS-Bench-201 "
            "cells, else default), default, paper, fast, flops-linear, lgbm, nb201, nb201-cb."
        ),
    ),
    out: Path = typer.Option(..., "--out", help="Bundle directory to write."),
    device: Optional[str] = typer.Option(
        None, "--platform", help=("The platform whose rows to train on (when the data holds several).")
    ),
    coverage: float = typer.Option(0.9, "--coverage", help="Nominal coverage of the prediction intervals."),
    holdout: float = typer.Option(
        0.0,
        "--holdout",
        min=0.0,
        max=0.5,
        help=(
            "Hold out this fraction (random) and record its metrics in the manifest; the bundle is then fitted on the "
            "rest."
        ),
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the folds, learners and holdout."),
    n_jobs: int = typer.Option(1, "--jobs", min=1, help="Threads per learner."),
    force: bool = typer.Option(False, "--force", help="Replace the model bundle already in --out."),
    latency: str = typer.Option("corrected", "--latency", help=_LATENCY_HELP),
    prior: Optional[Path] = typer.Option(
        None,
        "--prior",
        help=(
            "A model bundle of another device (e.g. the screening's Stage 1 source model) whose predictions the model "
            "reads as inputs; it is saved inside the new bundle."
        ),
    ),
) -> None:
    """Fit a CARB model on a dataset and write it as a bundle directory.

    Example: carb train --data cpu-1t --preset fast --out models/cpu-1t

    With --prior, every target also reads another device's model's prediction of the
    same config: carb train --data cpu-2t --prior models/cpu-1t --out models/cpu-2t
    """
    from carb.model import CARB, BundleError, auto_preset, evaluation, save

    _check_preset([preset])
    if not 0 < coverage < 1:
        raise _usage(f"--coverage {coverage}: must be in (0, 1)")
    check_jobs(n_jobs)
    _check_train_out(out, force)  # before training: minutes of fitting must not end in a refusal
    refuse_inputs(out, "--out", {"--data": data, "--prior": prior}, folder=True)
    prior_model = _load_prior(prior, n_jobs)
    df = load_data(data, device)
    if "status" in df.columns:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    df, latency_note = latency_view(df, latency)
    console = _console()
    dups = evaluation.duplicate_rows(df)
    if dups:  # kept, and reported: each config's rows stay in one fold, so they do not flatter the scores
        console.print(
            f"[yellow]warning[/yellow]: {data}: {dups:,} row(s) repeat a config already there; a config's rows stay "
            "together in one cross-validation fold and on one side of --holdout",
            highlight=False,
            soft_wrap=True,
        )
    if preset == "auto":  # the data's family preset, said in one line
        preset, why = auto_preset(df)
        generic = "; --preset default for the generic one" if preset != "default" else ""
        console.print(f"preset {preset}: {why}{generic}", highlight=False, soft_wrap=True)
    test = None
    if holdout > 0:  # whole configs: a config measured twice is never on both sides
        kept, held = evaluation.holdout(df, holdout, seed)
        test, df = df.iloc[held], df.iloc[kept]
    model = CARB(preset=preset, coverage=coverage, random_state=seed, n_jobs=n_jobs, prior=prior_model)
    _fit_saying_warnings(model, df, data, preset, console)
    hold = _holdout_metrics(model, test, holdout)
    try:
        save(
            model,
            str(out),
            holdout=hold,
            training={**_training_facts(data, df, model, latency_note), "duplicate_rows": dups},
        )
    except BundleError as e:
        raise _usage(str(e)) from None
    except Exception as e:  # a full disk, seen by Python or by xgboost's writer; save leaves nothing behind
        if not isinstance(e, OSError) and type(e).__name__ != "XGBoostError":
            raise
        raise _usage(f"--out {out}: writing the bundle failed ({one_line(e)}); nothing was written") from None
    _say_trained(model, out, preset, prior, latency_note, hold, console)


def _training_facts(data: str, df: Any, model: Any, latency_note: str) -> dict[str, Any]:
    """What the bundle records of its data: the latency view, the device label and the machine it was measured on."""
    from carb.datasets import fingerprint

    fp = fingerprint(data)
    devices = sorted(map(str, df["device"].dropna().unique())) if "device" in df.columns else []
    return {
        **({"latency": latency_note} if "latency_ms" in model.targets_ else {}),
        "device": devices[0] if len(devices) == 1 else None,
        "fingerprint": fp.to_dict() if fp is not None else None,
    }


def _fit_saying_warnings(model: Any, df: Any, data: str, preset: str, console: Any) -> None:
    """Fit ``model`` on ``df`` under a status line; its warnings are printed after, one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            with console.status(f"training {preset} on {len(df)} rows"):
                model.fit(df)
        except ValueError as e:
            raise _usage(f"{data}: {e}") from None
    for w in caught:
        console.print(f"[yellow]warning[/yellow]: {w.message}")


def _holdout_metrics(model: Any, test: Any, holdout: float) -> dict[str, Any] | None:
    """The holdout's metrics per target for the manifest (``None`` without a holdout)."""
    from carb.model.evaluation import metrics

    if test is None or not len(test):
        return None
    pred = model.predict(test)
    return {
        "rows": len(test),
        "fraction": holdout,
        "metrics": {
            t: metrics(test[t].to_numpy(), pred[t].to_numpy(), pred[f"{t}_lo"].to_numpy(), pred[f"{t}_hi"].to_numpy())
            for t in model.targets_
        },
    }


def _say_trained(
    model: Any,
    out: Path,
    preset: str,
    prior: Optional[Path],
    latency_note: str,
    hold: dict[str, Any] | None,
    console: Any,
) -> None:
    """``carb train``'s closing lines: what it wrote, the prior, the latency, the cross-validated and holdout scores."""
    cv = ", ".join(f"{t} R² log {m['r2_log']:.3f} / MAPE {100 * m['mape']:.1f}%" for t, m in model.cv_metrics_.items())
    console.print(
        f"wrote {out}: preset {preset}, {model.n_train_rows_} rows, targets {', '.join(model.targets_)}"
        + (f" (not trained: {', '.join(model.missing_targets_)})" if model.missing_targets_ else "")
    )
    if model.prior_columns_:
        console.print(f"reads the prior {prior}: {', '.join(model.prior_columns_)} (saved in {out}/prior)")
    if "latency_ms" in model.targets_:
        console.print(f"latency trained on: {latency_note}")
    console.print(f"cross-validated: {cv}")
    if hold:
        console.print(
            "holdout: "
            + ", ".join(f"{t} R² {m['r2']:.3f} / MAPE {100 * m['mape']:.1f}%" for t, m in hold["metrics"].items())
        )


def evaluate_cmd(
    data: str = typer.Option(..., "--data", help="Dataset name or .parquet/.csv file."),
    split: str = typer.Option("grouped", "--split", help="random, stratified, grouped or batch-tier."),
    presets: Optional[List[str]] = typer.Option(
        None,
        "--preset",
        help=(
            "Model preset to compare (repeat; auto: the data's family preset, nb201 for NAS-Bench-201 cells, else "
            "default; without --preset: default, paper, flops-linear, lgbm, power-latency = the default model's "
            "latency x the training rows' median power, plus the data's family preset, the recommended one marked)."
        ),
    ),
    json_out: Optional[Path] = typer.Option(
        None, "--json", help=("Also write the results as JSON here (results\\[model]\\[target]\\[metric]).")
    ),
    budget: Optional[List[str]] = typer.Option(
        None, "--budget", help=("TARGET=VALUE budget for the budget metrics (repeat; default: the test median).")
    ),
    device: Optional[str] = typer.Option(
        None, "--platform", help=("The platform whose rows to use (when the data holds several).")
    ),
    coverage: float = typer.Option(0.9, "--coverage", help="Nominal coverage of the prediction intervals."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split and of the models."),
    n_jobs: int = typer.Option(1, "--jobs", min=1, help="Threads per learner."),
    model_dir: Optional[Path] = typer.Option(
        None,
        "--model",
        help=(
            "Instead of fitting presets: score this model directory (from carb train or carb calibrate) on every ok "
            "row of the data."
        ),
    ),
    latency: str = typer.Option("corrected", "--latency", help=_LATENCY_HELP),
    prior: Optional[Path] = typer.Option(
        None,
        "--prior",
        help=(
            "A model bundle of another device: each preset is also fitted reading it (carb train --prior), reported as "
            "'<preset> + prior' beside the preset alone."
        ),
    ),
) -> None:
    """Fit presets on a split of a dataset and compare them on its test side, or score a model you have on a dataset.

    Example: carb evaluate --data cpu-1t --split grouped --preset default --preset paper

    Does a prior help on your data? carb evaluate --data cpu-2t --preset default --prior models/cpu-1t
    """
    check_jobs(n_jobs)
    if json_out is not None:
        check_out_file(json_out, "--json", inputs={"--data": data, "--model": model_dir, "--prior": prior})
    if model_dir is not None:
        if presets or prior is not None:
            raise _usage("give --preset/--prior (fit and compare) or --model (score a fitted model), not both")
        _score_model(model_dir, data, device, budget, json_out, latency)
        return
    _compare_presets(data, split, presets, json_out, budget, device, coverage, seed, n_jobs, latency, prior)


def _compare_presets(
    data: str,
    split: str,
    presets: Optional[List[str]],
    json_out: Optional[Path],
    budget: Optional[List[str]],
    device: Optional[str],
    coverage: float,
    seed: int,
    n_jobs: int,
    latency: str,
    prior: Optional[Path],
) -> None:
    """``carb evaluate --preset``: the presets fitted on a split of the data and compared on its test side."""
    from carb.model.evaluation import SPLITS, evaluate

    if split not in SPLITS:
        raise _usage(f"--split {split}: unknown split (expected one of {', '.join(SPLITS)})")
    names = list(presets) if presets else list(DEFAULT_EVAL_PRESETS)
    _check_preset(names)
    if not 0 < coverage < 1:
        raise _usage(f"--coverage {coverage}: must be in (0, 1)")
    budgets = parse_budgets(budget)
    platform = device
    df, latency_note = latency_view(load_data(data, platform), latency)
    where = f"{data}" + (f" on {platform}" if platform else "")
    check_budget_targets(budgets, df, where)
    if presets and "power-latency" in names:
        check_power_latency(df, where)
    names, recommended = _with_auto(names, df, asked=bool(presets))
    prior_model = _load_prior(prior, n_jobs)
    console = _console()
    with console.status("evaluating") as status:
        try:
            res = evaluate(
                df,
                split,
                names,
                seed=seed,
                budgets=budgets,
                coverage=coverage,
                n_jobs=n_jobs,
                progress=lambda p: status.update(f"fitting {p} on split {split}"),
                prior=prior_model,
            )
        except ValueError as e:
            raise _usage(f"{data}: {e}") from None
    res["data"] = data
    res["latency"] = latency_note
    if prior is not None:
        res["prior"] = str(prior)
    if recommended is not None:
        res["recommended_preset"], res["recommended_why"] = recommended
    print_results(res, console)
    if recommended is not None:
        rec = f"recommended: {recommended[0]} ({recommended[1]}; carb train fits it without --preset)"
        console.print(rec, highlight=False, soft_wrap=True)
    if "latency_ms" in df.columns and df["latency_ms"].notna().any():
        console.print(f"latency: {latency_note}")
    if json_out is not None:
        _write_json(res, json_out, console)


def _with_auto(names: list[str], df: Any, asked: bool) -> tuple[list[str], tuple[str, str] | None]:
    """``carb evaluate``'s presets with ``auto`` resolved, and the recommended one with why (or None).

    Without ``--preset`` (``asked`` false) the default list gains the data's family preset and that
    preset is recommended; ``--preset auto`` stands for it; presets named otherwise are fitted as asked.
    """
    from carb.model import AUTO, auto_preset

    if asked and AUTO not in names:
        return names, None
    pick, why = auto_preset(df)
    names = [pick if n == AUTO else n for n in names] if asked else [*names, pick]
    return list(dict.fromkeys(names)), (pick, why)  # each once, in order


def register(app: typer.Typer) -> None:
    """Add the ``train``, ``evaluate`` and ``predict`` commands to ``app``."""
    app.command("train")(train)
    app.command("evaluate")(evaluate_cmd)
    from .predicting import predict

    app.command("predict")(predict)


def _check_train_out(out: Path, force: bool) -> None:
    """``carb train --out``: a new or empty directory, or (with ``--force``) a model bundle."""
    check_out_dir(out, need_mb=BUNDLE_MB)
    if out.is_dir() and any(out.iterdir()):
        if not (out / "manifest.json").is_file():
            raise _usage(f"--out {out}: exists and is not a CARB model bundle; choose a new directory")
        if not force:
            raise _usage(f"--out {out}: holds a model bundle already; give --force to replace it")


def _write_json(res: dict[str, Any], json_out: Path, console: Any) -> None:
    """Write ``res`` to ``json_out`` as JSON (NaN as null) and say so."""
    with atomic_file(json_out) as tmp:
        tmp.write_text(json.dumps(_clean(res), indent=2, allow_nan=False) + "\n")
    console.print(f"wrote {json_out}")


def _clean(o: Any) -> Any:
    """JSON-ready copy: numpy scalars as Python numbers, NaN and infinities as null."""
    import numpy as np

    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o
