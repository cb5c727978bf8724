"""The demo's settings, and the records its sittings pass between stages."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from carb.campaign.rounds import RETAKES

#: visits per config in each of the demo's sittings (2 measured no better than 1 on our VMs)
DEMO_ROUNDS = 1


@dataclass
class DemoSettings:
    """Settings of a demo run.

    Attributes:
        out: output folder.
        device: ``cpu`` or ``cuda[:i]``.
        threads: CPU threads; default: the cores available, at most 4 (so that on our
            2-core machines the demo's platform differs from the 1-thread source).
        samples: K, configs measured for calibration.
        validate: shortlisted configs measured for validation (best ranked first).
        control: random configs of the space measured for validation.
        max_time: sampling seconds per config. Units: s.
        rounds: visits per config in each sitting, spread over the sitting and pooled
            (:func:`carb.campaign.runner.run_campaign`); the sampling time is split among them.
        budgets: target -> budget; default the calibrated model's median over the space.
        source: the dataset the source model is trained on: a shipped name (``carb dataset
            list``) or a dataset file of the `cpu` space's parameters; ``None``: ``cpu-1t``.
        space: the space screened.
        seed: seed of the sampler and the control sample.
        precisions: precisions of the space to screen; default: all but those this CPU has
            no native kernels for (:func:`carb.measure.foreign_precisions`).
        retakes: times a visit timed in another state of the machine (its paired sentinel
            more than :data:`carb.campaign.rounds.STATE_FACTOR` from the state the sitting is scored
            in: the faster of the two phases') is measured again, and each K config once; 0: never.
    """

    out: Path
    device: str = "cpu"
    threads: int | None = None
    samples: int = 12
    validate: int = 8
    control: int = 8
    max_time: float = 1.0
    rounds: int = DEMO_ROUNDS
    budgets: dict[str, float] = field(default_factory=dict)
    source: str | None = None
    space: str = "cpu"
    seed: int = 0
    #: precisions of the space to screen; ``None``: those this device runs natively
    #: (:func:`carb.measure.foreign_precisions`)
    precisions: tuple[str, ...] | None = None
    retakes: int = RETAKES


Measure = Callable[..., pd.DataFrame]


@dataclass
class _Calibration:
    """The calibration sitting.

    It holds the K configs, their measured rows, the machine state they are scored in, every visit of the K (first
    and retakes: their memory scatter widens the intervals) and the calibrated model with the sentinel speed its
    map was fitted at.
    """

    pick: pd.DataFrame
    measured: pd.DataFrame
    state: dict[str, Any]
    model: Any = None
    ref: float | None = None
    recalibrated: bool = False
    visits: list[pd.DataFrame] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        """The rows measured ok."""
        return self.measured[self.measured.status == "ok"]


@dataclass
class _Scores:
    """The validation's scores: calls against the measured rows, raw and drift-corrected."""

    calls: np.ndarray
    metrics: dict[str, Any]
    vpred: pd.DataFrame
    err: dict[str, float]
    cover: dict[str, float]
    moved: dict[str, Any]
    corr_val: pd.DataFrame
    err_corr: dict[str, float]
    cover_corr: dict[str, float]
    floor: dict[str, float]
    floor_raw: dict[str, float]
    calls_corr: dict[str, Any] | None

    @property
    def corrected(self) -> bool:
        """Whether the sentinel measured the machine's speed in both sittings (drift-corrected figures)."""
        return "speed_change" in self.moved


def default_threads() -> int:
    """Cores available to this process, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))
