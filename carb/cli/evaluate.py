"""``carb evaluate``: CARB's presets against the baselines, on held-out configs or architectures."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from carb.report.evaluation import fmt_share as _pct
from carb.report.evaluation import fmt_value as _fmt
from carb.report.evaluation import print_results

from ._app import app, check_jobs, check_out_file
from ._app import wide_console as _console
from ._data import (
    LATENCY_HELP,
    check_budget_targets,
    check_power_latency,
    check_preset,
    latency_view,
    load_data,
    load_prior,
    parse_budgets,
    usage,
    write_json,
)
from ._flags import python_errors

__all__ = ["evaluate_cmd", "print_results"]


@app.command("evaluate")
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
    latency: str = typer.Option("corrected", "--latency", help=LATENCY_HELP),
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
            raise usage("give --preset/--prior (fit and compare) or --model (score a fitted model), not both")
        _score_model(model_dir, data, device, budget, json_out, latency)
        return
    _compare_presets(data, split, presets, json_out, budget, device, coverage, seed, n_jobs, latency, prior)


def _score_model(
    model_dir: Path, data: str, platform: str | None, budget: list[str] | None, json_out: Path | None, latency: str
) -> None:
    """``carb evaluate --model``: a fitted model (bundle or calibrated) scored on a dataset."""
    from rich.table import Table

    from carb.decide.scoring import score_model
    from carb.model import UNITS
    from carb.transfer.load import load_model

    try:
        model = load_model(model_dir, ("calibrated", "bundle"))
    except (ValueError, OSError) as e:
        raise usage(f"--model {model_dir}: {e}") from None
    df = load_data(data, platform)
    if "status" in df.columns:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    df, latency_note = latency_view(df, latency)
    budgets = parse_budgets(budget)
    try:
        results = score_model(model, df, budgets)
    except ValueError as e:
        raise usage(f"{data}: {e}") from None
    res = {"data": data, "model": str(model_dir), "rows": len(df), "results": results, "latency": latency_note}
    table = Table(
        "target", "n", "R² log", "MAPE", "±10%", "ρ", "cover", "acc@budget", "FA/over", "FA/acc",
        title=f"{model_dir} on {data} ({len(df):,} ok rows)",
        caption="FA/over: share of the configs over budget that the model accepts; "
        "FA/acc: share of the accepted configs that are over budget",
    )  # fmt: skip
    for t, m in results.items():
        table.add_row(
            f"{t} ({UNITS[t]})", f"{int(m['n']):,}", _fmt(m["r2_log"], ".3f"), _pct(m["mape"], ".1f"),
            _pct(m["within_10pct"], ".0f"), _fmt(m["spearman"], ".3f"), _pct(m["coverage"], ".0f"),
            _pct(m["budget_accuracy"], ".0f"), _pct(m["false_accept_rate"], ".1f"),
            _pct(m["false_discovery_rate"], ".1f"),
        )  # fmt: skip
    console = _console()
    console.print(table)
    if "latency_ms" in results:
        console.print(f"latency: {latency_note}")
    if json_out is not None:
        write_json(res, json_out, console)


def _compare_presets(
    data: str,
    split: str,
    presets: Optional[List[str]],
    json_out: Optional[Path],
    budget: Optional[List[str]],
    platform: Optional[str],
    coverage: float,
    seed: int,
    n_jobs: int,
    latency: str,
    prior: Optional[Path],
) -> None:
    """``carb evaluate --preset``: the presets fitted on a split of the data and compared on its test side."""
    from carb.decide.scoring import DEFAULT_PRESETS, check_settings, compare_presets

    with python_errors(check_settings):
        check_settings(split=split)
        check_preset(list(presets) if presets else list(DEFAULT_PRESETS))
        check_settings(coverage=coverage)
    budgets = parse_budgets(budget)
    df, latency_note = latency_view(load_data(data, platform), latency)
    where = f"{data}" + (f" on {platform}" if platform else "")
    check_budget_targets(budgets, df, where)
    if presets and "power-latency" in presets:
        check_power_latency(df, where)
    prior_model = load_prior(prior, n_jobs)
    console = _console()
    with console.status("evaluating") as status:
        try:
            res = compare_presets(
                df, presets, split, seed=seed, budgets=budgets, coverage=coverage, n_jobs=n_jobs, prior=prior_model,
                progress=lambda p: status.update(f"fitting {p} on split {split}"),
            )  # fmt: skip
        except ValueError as e:
            raise usage(f"{data}: {e}") from None
    recommended = {k: res.pop(k) for k in ("recommended_preset", "recommended_why") if k in res}
    res.update(data=data, latency=latency_note, **({"prior": str(prior)} if prior is not None else {}), **recommended)
    print_results(res, console)
    if recommended:
        rec = (
            f"recommended: {res['recommended_preset']} ({res['recommended_why']}; carb train fits it without --preset)"
        )
        console.print(rec, highlight=False, soft_wrap=True)
    if "latency_ms" in df.columns and df["latency_ms"].notna().any():
        console.print(f"latency: {latency_note}")
    if json_out is not None:
        write_json(res, json_out, console)
