"""``carb train``: fit CARB on a measured dataset and write a checksummed bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._app import app, check_jobs, check_out_dir, one_line, refuse_inputs
from ._app import wide_console as _console
from ._data import (
    LATENCY_HELP,
    check_preset,
    latency_view,
    load_data,
    load_prior,
    usage,
)
from ._flags import python_errors

__all__ = ["train"]


#: the free space ``carb train --out`` asks for: a bundle of a shipped dataset takes 1-4 MB. Units: MB.
BUNDLE_MB = 16.0


@app.command("train")
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
    latency: str = typer.Option("corrected", "--latency", help=LATENCY_HELP),
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
    from carb.datasets import fingerprint, memory_definition
    from carb.model import BundleError
    from carb.model.training import plan_training, train_bundle

    check_preset([preset])
    if not 0 < coverage < 1:
        raise usage(f"--coverage {coverage}: must be in (0, 1)")
    check_jobs(n_jobs)
    _check_train_out(out, force)  # before training: minutes of fitting must not end in a refusal
    refuse_inputs(out, "--out", {"--data": data, "--prior": prior}, folder=True)
    prior_model = load_prior(prior, n_jobs)
    df = load_data(data, device)
    if "status" in df.columns:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    df, latency_note = latency_view(df, latency)
    console = _console()
    plan = plan_training(df, preset, holdout, seed)
    if (
        plan.duplicate_rows
    ):  # kept, and reported: each config's rows stay in one fold, so they do not flatter the scores
        console.print(
            f"[yellow]warning[/yellow]: {data}: {plan.duplicate_rows:,} row(s) repeat a config already there; a "
            "config's rows stay together in one cross-validation fold and on one side of --holdout",
            highlight=False,
            soft_wrap=True,
        )
    if plan.why is not None:  # the data's family preset, said in one line
        generic = "; --preset default for the generic one" if plan.preset != "default" else ""
        console.print(f"preset {plan.preset}: {plan.why}{generic}", highlight=False, soft_wrap=True)
    fp = fingerprint(data)
    try:
        with console.status(f"training {plan.preset} on {len(plan.train)} rows"):
            trained = train_bundle(
                plan, out, coverage=coverage, n_jobs=n_jobs, prior=prior_model, latency=latency_note,
                fingerprint=fp.to_dict() if fp is not None else None, memory_definition=memory_definition(data),
            )  # fmt: skip
    except BundleError as e:
        raise usage(str(e)) from None
    except ValueError as e:
        raise usage(f"{data}: {e}") from None
    except Exception as e:  # a full disk, seen by Python or by xgboost's writer; save leaves nothing behind
        if not isinstance(e, OSError) and type(e).__name__ != "XGBoostError":
            raise
        raise usage(f"--out {out}: writing the bundle failed ({one_line(e)}); nothing was written") from None
    for w in trained.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
    for line in trained.lines(prior, latency_note):
        console.print(line)


def _check_train_out(out: Path, force: bool) -> None:
    """``carb train --out``: a new or empty directory, or (with ``--force``) a model bundle."""
    from carb.model.training import check_out

    check_out_dir(out, need_mb=BUNDLE_MB)
    with python_errors(check_out):
        check_out(out, force)
