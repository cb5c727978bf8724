"""The calibrated network model's intervals and device factor, on SYNTHETIC residuals and a
SYNTHETIC device (made-up numbers from known distributions and formulas, labelled synthetic:
they test the rule, not any machine)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from carb import netmodel
from carb.netmodel.network import CALIBRATION_PRIOR_NETWORKS, calibrated_q


def test_without_a_prior_the_half_width_is_the_student_t_prediction_interval() -> None:
    loo = np.array([0.12, -0.05, 0.08, -0.11, 0.02, 0.07, -0.09, 0.04, -0.03, 0.10])  # synthetic
    expected = stats.t.ppf(0.95, 10 - 1) * math.sqrt(np.mean(loo**2))
    assert calibrated_q(loo, 1, 0.0) == pytest.approx(expected, rel=1e-12)
    assert calibrated_q(loo, 1, 0.0, coverage=0.8) == pytest.approx(
        stats.t.ppf(0.9, 9) * math.sqrt(np.mean(loo**2)), rel=1e-12
    )
    # an identity map fits nothing: one more degree of freedom, a narrower t
    assert calibrated_q(loo, 0, 0.0) < calibrated_q(loo, 1, 0.0)


def test_synthetic_normal_errors_are_covered_at_the_nominal_level() -> None:
    # synthetic: 4,000 calibrations of K = 10 networks whose log errors are N(0, 0.1), a factor
    # fitted on each K (leave-one-out residuals), each judged on 50 new networks
    rng = np.random.default_rng(0)
    cov = {"prior right": [], "prior too small": [], "no prior": []}
    for _ in range(4000):
        e = rng.normal(0, 0.1, 10)
        loo = (e - e.mean()) * 10 / 9
        new = np.abs(rng.normal(0, 0.1, 50) - e.mean())
        for key, q0 in (("prior right", 0.1645), ("prior too small", 0.08), ("no prior", 0.0)):
            cov[key].append(np.mean(new <= calibrated_q(loo, 1, q0)))
    assert np.mean(cov["no prior"]) == pytest.approx(0.9, abs=0.01)
    assert np.mean(cov["prior right"]) == pytest.approx(0.9, abs=0.01)
    # a model whose own error is half this machine's: the K pull the width part of the way
    # (a prior of ten networks against ten: 80%; its own half-width alone would cover about 55%)
    assert 0.78 < np.mean(cov["prior too small"]) < 0.83


def test_one_badly_measured_network_does_not_set_the_width_alone() -> None:
    # synthetic: nine networks within 5%, one measured 35% off
    loo = np.array([0.05, -0.04, 0.03, -0.05, 0.02, 0.04, -0.03, 0.01, -0.02, 0.30])
    conformal = np.quantile(np.abs(loo), min(1.0, math.ceil(11 * 0.9) / 10))  # the largest at K = 10
    assert conformal == pytest.approx(0.30)
    q = calibrated_q(loo, 1, 0.14)
    assert 0.14 < q < 0.20


def test_the_prior_weighs_as_many_networks_as_the_constant_says() -> None:
    q0, z = 0.15, stats.norm.ppf(0.95)
    k = int(CALIBRATION_PRIOR_NETWORKS)
    loo = np.full(k, 2 * q0 / z)  # synthetic: the K twice as spread as the model's own error
    s = math.sqrt((q0 / z) ** 2 * (1 + 4) / 2)  # equal weights
    assert calibrated_q(loo, 1, q0) == pytest.approx(stats.t.ppf(0.95, 2 * k - 1) * s, rel=1e-12)
    # three networks lean on the model's own error more than thirty do
    few, many = calibrated_q(loo[:3], 1, q0), calibrated_q(np.full(30, 2 * q0 / z), 1, q0)
    assert few < many


@pytest.fixture(scope="module")
def shipped() -> netmodel.NetModel:
    return netmodel.load("layers-cpu-avx2-1t")


def test_calibrated_factor_is_the_median_ratio_and_its_interval_pools_the_model_q(shipped) -> None:
    # synthetic device 0.8x the shipped model's latency, +-3% scatter, and one network
    # measured 40% slow (a visit other tenants slowed)
    cfgs = netmodel.choose_networks(shipped, 10, seed=3, per_family=2)
    tables = [netmodel.capture_config(c) for c in cfgs]
    rows = netmodel._network_rows(tables, shipped.layer)[0]
    before = shipped.predict_rows(rows)
    scatter = np.array([1.03, 0.97, 1.01, 0.99, 1.02, 0.98, 1.0, 1.03, 0.97, 1.4])
    truth = pd.DataFrame({"latency_ms": 0.8 * before["latency_ms"] * scatter, "memory_mb": before["memory_mb"]})
    cal = netmodel.calibrate_on(shipped, tables, truth)
    m = cal.calibration["latency_ms"]
    assert m["coef"][1] == 1.0
    assert math.exp(m["coef"][0]) == pytest.approx(0.8, rel=0.015)  # the mean would say 0.83
    r = np.log(scatter)
    loo = [r[i] - np.median(np.delete(r, i)) for i in range(10)]
    assert m["q"] == pytest.approx(calibrated_q(loo, 1, shipped.q["latency_ms"]), rel=1e-9)
    assert m["q"] < 0.2 < np.max(np.abs(loo))  # not the one slow visit's residual
    p = cal.predict_rows(rows)
    half = (p["latency_ms_hi"] - p["latency_ms_lo"]) / 2 / p["latency_ms"]
    assert np.allclose(half, math.sinh(m["q"]), rtol=1e-9)  # no unknown operator in the zoo networks
    assert "Student-t" in cal.meta["calibration_interval"]
