"""Training a bundle: CARB fitted on measured rows, its holdout scored, written as a checksummed bundle directory.

What ``carb train`` does, as two steps: :func:`plan_training` resolves the preset (``auto``: the data's family
preset), counts the rows that repeat a config and holds whole configs out; :func:`train_bundle` fits the model
(its warnings collected), scores the holdout and saves the bundle with the facts of its data.

Example:
    >>> from carb import datasets                                                 # doctest: +SKIP
    >>> from carb.model.training import plan_training, train_bundle              # doctest: +SKIP
    >>> plan = plan_training(datasets.load("cpu-1t"), preset="fast", holdout=0.2)  # doctest: +SKIP
    >>> trained = train_bundle(plan, "models/cpu-1t")                             # doctest: +SKIP
    >>> trained.holdout["metrics"]["latency_ms"]["mape"]                          # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["TrainingPlan", "Trained", "check_out", "plan_training", "train_bundle"]


@dataclass
class TrainingPlan:
    """The rows to fit and to hold out, and the preset, decided before any fitting.

    Attributes:
        train: the rows the model is fitted on.
        test: the rows held out (whole configs), or ``None``.
        preset: the preset to fit.
        why: why ``auto`` chose it (``None`` where it was named).
        holdout: the fraction held out.
        seed: the seed of the holdout, the folds and the learners.
        duplicate_rows: rows that repeat a config already there (kept; a config's rows stay in one fold and on one
            side of the holdout, so they do not flatter the scores).
    """

    train: pd.DataFrame
    test: pd.DataFrame | None
    preset: str
    why: str | None = None
    holdout: float = 0.0
    seed: int = 0
    duplicate_rows: int = 0


@dataclass
class Trained:
    """A bundle written.

    Attributes:
        model: the fitted :class:`~carb.model.CARB`.
        path: the bundle directory.
        holdout: the holdout's rows, fraction and metrics per target (``None`` without a holdout).
        warnings: what the fit warned of, one message each.
    """

    model: Any
    path: Path
    holdout: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def lines(self, prior: str | Path | None = None, latency: str | None = None) -> list[str]:
        """What was written, the prior read, the latency learned, the cross-validated and holdout scores, in lines.

        Args:
            prior: where the prior came from, named in its line.
            latency: which latency the rows held, said where the model learns latency.
        """
        m, out = self.model, self.path
        said = [
            f"wrote {out}: preset {m.preset}, {m.n_train_rows_} rows, targets {', '.join(m.targets_)}"
            + (f" (not trained: {', '.join(m.missing_targets_)})" if m.missing_targets_ else "")
        ]
        if m.prior_columns_:
            said.append(f"reads the prior {prior}: {', '.join(m.prior_columns_)} (saved in {out}/prior)")
        if "latency_ms" in m.targets_:
            said.append(f"latency trained on: {latency}")
        cv = m.cv_metrics_.items()
        said.append(
            "cross-validated: "
            + ", ".join(f"{t} R² log {s['r2_log']:.3f} / MAPE {100 * s['mape']:.1f}%" for t, s in cv)
        )
        if self.holdout:
            scores = self.holdout["metrics"].items()
            said.append(
                "holdout: " + ", ".join(f"{t} R² {s['r2']:.3f} / MAPE {100 * s['mape']:.1f}%" for t, s in scores)
            )
        return said


def check_out(out: str | Path, force: bool = False) -> None:
    """Refuse a bundle directory that holds something else, or a bundle already unless ``force`` (it is replaced).

    Raises:
        ValueError: naming the parameter.
    """
    out = Path(out)
    if out.is_dir() and any(out.iterdir()):
        if not (out / "manifest.json").is_file():
            raise ValueError(f"out {out}: exists and is not a CARB model bundle; choose a new directory")
        if not force:
            raise ValueError(f"out {out}: holds a model bundle already; give force= to replace it")


def plan_training(df: pd.DataFrame, preset: str = "auto", holdout: float = 0.0, seed: int = 0) -> TrainingPlan:
    """The rows of ``df`` measured ok split into training and holdout, and the preset resolved.

    Args:
        df: measured rows (those of another status are left out).
        preset: a preset name, or ``auto``: the data's family preset where one exists, else ``default``.
        holdout: hold out this fraction of the configs (random, whole configs). Units: share in [0, 0.5].
        seed: the holdout's seed.
    """
    from ._presets import AUTO, auto_preset
    from .folds import duplicate_rows
    from .folds import holdout as held_out

    if "status" in df.columns:
        df = df[df["status"] == "ok"].reset_index(drop=True)
    dups, why = duplicate_rows(df), None
    if preset == AUTO:
        preset, why = auto_preset(df)
    test = None
    if holdout > 0:  # whole configs: a config measured twice is never on both sides
        kept, held = held_out(df, holdout, seed)
        test, df = df.iloc[held], df.iloc[kept]
    return TrainingPlan(df, test, preset, why, holdout, seed, dups)


def older_memory_note(definition: str | None) -> str | None:
    """A line where a model's memory is of another definition than the backends measure now, else ``None``.

    ``definition``: what the data's ``memory_mb`` counts (:func:`carb.datasets.memory_definition`;
    ``None``: unknown, nothing said).
    """
    from carb.measure.cpu import MEMORY_DEFINITION as CPU
    from carb.measure.cuda import MEMORY_DEFINITION as CUDA

    if not definition or definition in (CPU, CUDA):
        return None
    return (
        f"memory_mb: learned from memory of another definition than CARB measures now ({definition}); "
        "its memory answers are that definition's: measure the data again, or calibrate memory here (carb calibrate)"
    )


def _facts(df: pd.DataFrame, model: Any, latency: str | None, fingerprint: dict | None) -> dict[str, Any]:
    """What the bundle records of its data: the latency view, the device label and the machine it was measured on."""
    devices = sorted(map(str, df["device"].dropna().unique())) if "device" in df.columns else []
    return {
        **({"latency": latency} if "latency_ms" in model.targets_ and latency is not None else {}),
        "device": devices[0] if len(devices) == 1 else None,
        "fingerprint": fingerprint,
    }


def train_bundle(
    plan: TrainingPlan,
    out: str | Path,
    *,
    coverage: float = 0.9,
    n_jobs: int = 1,
    prior: Any = None,
    latency: str | None = None,
    fingerprint: dict[str, Any] | None = None,
    memory_definition: str | None = None,
) -> Trained:
    """Fit CARB as planned, score its holdout and write it as a bundle directory.

    Args:
        plan: the rows and the preset (:func:`plan_training`).
        out: the bundle directory (new, empty, or a bundle replaced).
        coverage: nominal coverage of the prediction intervals.
        n_jobs: threads per learner.
        prior: a fitted model of another device whose predictions the model reads as inputs (saved inside).
        latency: which latency the rows hold (recorded in the manifest when the model learns latency).
        fingerprint: the machine the data was measured on (:func:`carb.datasets.fingerprint`), recorded.
        memory_definition: what the data's ``memory_mb`` counts (:func:`carb.datasets.memory_definition`),
            recorded; one of another definition than the backends' now is warned of (:func:`older_memory_note`).

    Raises:
        ValueError: rows the preset cannot learn.
        BundleError: ``out`` holds something other than a bundle.
        OSError: the bundle could not be written (nothing is left behind).
    """
    from ._bundle import save
    from .estimator import CARB
    from .evaluation import metrics

    model = CARB(preset=plan.preset, coverage=coverage, random_state=plan.seed, n_jobs=n_jobs, prior=prior)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        model.fit(plan.train)
    hold = None
    if plan.test is not None and len(plan.test):
        pred, test = model.predict(plan.test), plan.test
        hold = {
            "rows": len(test),
            "fraction": plan.holdout,
            "metrics": {
                t: metrics(
                    test[t].to_numpy(), pred[t].to_numpy(), pred[f"{t}_lo"].to_numpy(), pred[f"{t}_hi"].to_numpy()
                )
                for t in model.targets_
            },
        }
    training = {**_facts(plan.train, model, latency, fingerprint), "duplicate_rows": plan.duplicate_rows}
    if memory_definition is not None:
        training["memory_definition"] = str(memory_definition)
    save(model, str(out), holdout=hold, training=training)
    said = [str(w.message) for w in caught]
    note = older_memory_note(memory_definition) if "memory_mb" in model.targets_ else None
    return Trained(model, Path(out), hold, said + ([note] if note else []))
