"""carb.decide.scoring: what `carb evaluate` does, callable from Python (SYNTHETIC predictor and rows)."""

from __future__ import annotations

import numpy as np
import pytest

from carb.decide.scoring import check_settings, false_accepts, score_model, with_auto
from carb.families import space
from tests._helpers import SyntheticPredictor


def _rows(scale: float):
    """The cpu space's first 40 configs 'measured' on a SYNTHETIC device ``scale`` x the predictor's."""
    frame = space.load("cpu").to_frame().head(40)
    pred = SyntheticPredictor(targets=("latency_ms",)).predict(frame)
    return frame.assign(status="ok", latency_ms=pred.latency_ms.to_numpy() * scale)


def test_score_model_scores_each_target_the_rows_measure_with_false_accepts_counted():
    rows = _rows(1.0)
    res = score_model(SyntheticPredictor(targets=("latency_ms", "energy_j")), rows)
    assert list(res) == ["latency_ms"]  # energy is not measured: not scored
    m = res["latency_ms"]
    assert m["n"] == 40 and m["mape"] == pytest.approx(0.0) and m["false_accepts"] == 0


def test_score_model_counts_false_accepts_of_a_model_that_predicts_too_low():
    rows = _rows(2.0)  # the device is twice as slow as predicted
    budget = float(np.median(rows.latency_ms))
    m = score_model(SyntheticPredictor(targets=("latency_ms",)), rows, {"latency_ms": budget})["latency_ms"]
    assert m["false_accepts"] > 0 and m["false_accepts"] <= m["accepted"]
    with pytest.raises(ValueError, match="has none of the model's targets"):
        score_model(SyntheticPredictor(targets=("energy_j",)), rows)


def test_false_accepts_counts_on_the_measured_rows_only():
    y = np.array([1.0, 3.0, np.nan, 5.0])
    assert false_accepts(y, np.array([1.0, 1.0, 1.0, 6.0]), 2.0) == {
        "false_accepts": 1,
        "over_budget": 2,
        "accepted": 2,
    }
    assert false_accepts(y, y, float("nan"))["accepted"] == 0


def test_check_settings_refuses_an_unknown_split_and_a_coverage_outside_0_1():
    check_settings("grouped", 0.9)
    with pytest.raises(ValueError, match=r"^split magic: unknown split"):
        check_settings(split="magic")
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match=rf"^coverage {bad}: must be in \(0, 1\)"):
            check_settings(coverage=bad)


def test_with_auto_adds_and_recommends_the_family_preset_only_when_none_or_auto_is_asked():
    rows = _rows(1.0)
    names, rec = with_auto(["default", "paper"], rows, asked=False)
    assert rec is not None and rec[0] in names and names[:2] == ["default", "paper"]  # each preset once
    assert with_auto(["paper"], rows, asked=True) == (["paper"], None)
    names, rec = with_auto(["auto", "paper"], rows, asked=True)
    assert names[0] == rec[0] and "auto" not in names
