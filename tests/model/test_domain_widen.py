"""A config model's interval widens outside its training domain, by the measured step of that kind."""

from __future__ import annotations

import json
import math
import warnings
from importlib import resources

import numpy as np

from carb import datasets


def _steps() -> dict:
    return json.loads((resources.files("carb") / "data" / "domain_steps.json").read_text())["config"]


def test_the_shipped_steps_are_measured_and_plausible():
    steps = _steps()
    for kind in ("range", "precision"):
        for t in ("latency_ms", "memory_mb"):
            assert 0 < steps[kind][t]["q90_abs_log"] < 2 and steps[kind][t]["n"] >= 100


def _predict(model, rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.predict(rows)


def test_beyond_the_range_the_interval_takes_the_range_step(cpu1t_source):
    df = datasets.load("cpu-1t")
    row = df[(df["status"] == "ok") & (df["batch"] == 1)].head(1)
    inside = _predict(cpu1t_source, row)
    far = _predict(cpu1t_source, row.assign(batch=4096))
    assert not inside["extrapolated"].iloc[0] and far["extrapolated"].iloc[0]
    step = _steps()["range"]["latency_ms"]["q90_abs_log"]
    hw = math.log(far["latency_ms_hi"].iloc[0] / far["latency_ms"].iloc[0])
    assert hw >= step - 1e-9
    assert hw > math.log(inside["latency_ms_hi"].iloc[0] / inside["latency_ms"].iloc[0])


def test_an_unseen_precision_takes_the_precision_step(cpu1t_source):
    df = datasets.load("cpu-1t")
    row = df[(df["status"] == "ok") & (df["batch"] == 1)].head(1)
    assert "fp16" not in cpu1t_source.domain_["categories"]["precision"]
    p = _predict(cpu1t_source, row.assign(precision="fp16"))
    assert p["extrapolated"].iloc[0] and np.isfinite(p["latency_ms_hi"].iloc[0])
    step = _steps()["precision"]["latency_ms"]["q90_abs_log"]
    assert math.log(p["latency_ms_hi"].iloc[0] / p["latency_ms"].iloc[0]) >= step - 1e-9


def test_steps_add_in_quadrature_and_an_unseen_family_or_block_is_unbounded():
    from carb.model.domain import widen

    hw = np.full(4, 0.05)
    kinds = np.array([0, 1, 3, 4], dtype=np.int8)  # inside, range, range + precision, unseen block
    got = widen(hw, kinds, "latency_ms")
    r, p = _steps()["range"]["latency_ms"]["q90_abs_log"], _steps()["precision"]["latency_ms"]["q90_abs_log"]
    assert got[0] == 0.05 and got[1] == r and math.isclose(got[2], math.hypot(r, p)) and got[3] == np.inf


def test_a_step_with_no_measurement_leaves_other_rows_finite():
    from carb.model.domain import widen

    # energy has no measured precision step: rows beyond the range only stay finite, no NaN
    got = widen(np.full(3, 0.05), np.array([0, 1, 2], dtype=np.int8), "energy_j")
    assert got[0] == 0.05 and np.isfinite(got[1]) and got[2] == np.inf and not np.isnan(got).any()
