"""Budget classification and front recovery on hand-made (synthetic) truths."""

import numpy as np
import pandas as pd
import pytest

from carb.decide.validate import budget_metrics, validate_against_truth


def test_budget_metrics_counts():
    acc = np.array([1, 1, 0, 0, 1], bool)
    feas = np.array([1, 0, 0, 1, 1], bool)
    m = budget_metrics(acc, feas)
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["false_accept_rate"] == pytest.approx(1 / 2)  # 1 of 2 infeasible accepted
    assert m["false_reject_rate"] == pytest.approx(1 / 3)  # 1 of 3 feasible rejected


def test_validate_against_truth():
    truth = pd.DataFrame(
        {
            "config_id": list("abcdef"),
            "status": "ok",
            "batch": 1,
            "latency_ms": [1.0, 2.0, 3.0, 9.0, 1.5, 2.5],
            "flops_per_image": [1.0, 4.0, 8.0, 20.0, 0.5, 3.0],
        }
    )
    objs = [("latency_ms", "min"), ("flops_per_image", "max")]
    # budget latency <= 5: d infeasible. True front of the feasible: a, b, c
    r = validate_against_truth(["a", "b", "c", "e"], ["a", "b"], truth, {"latency_ms": 5.0}, objs)
    assert r["accuracy"] == pytest.approx(5 / 6) and r["false_reject_rate"] == pytest.approx(1 / 5)
    assert r["pareto_recall"] == pytest.approx(2 / 3) and 0 < r["hypervolume_ratio"] < 1
    r = validate_against_truth(list("abcef"), list("abc"), truth, {"latency_ms": 5.0}, objs)
    assert r["accuracy"] == 1.0 and r["pareto_recall"] == 1.0 and r["hypervolume_ratio"] == pytest.approx(1.0)


def test_drift_corrected_calls_score_at_the_calibrations_speed():
    """SYNTHETIC rows: budget 10 ms; config b was timed while the machine ran 2x slow
    (sentinel 2.0 ms against the calibration's 1.0 ms): 16 ms raw, 8 ms at the
    calibration's speed. Accepting it is a false accept raw, right drift-corrected."""
    from carb.decide.validate import corrected_latency, drift_corrected_calls

    val = pd.DataFrame(
        {
            "config_id": ["a", "b", "c", "d"],
            "latency_ms": [5.0, 16.0, 30.0, 9.0],
            "memory_mb": [10.0] * 4,
            "sentinel_ms": [1.0, 2.0, 1.0, 1.1],
        }
    )
    calls = np.array(["accept", "accept", "reject", "measure"])
    budgets = {"latency_ms": 10.0, "memory_mb": 20.0}
    r = drift_corrected_calls(val, budgets, calls, calibration_sentinel_ms=[1.0, 1.0, 1.02, 0.98])
    c = r["corrected"]
    assert c["reference"] == "the calibration's median sentinel speed" and c["reference_ms"] == pytest.approx(1.0)
    assert c["n"] == 3 and c["false_accepts"] == 0 and c["accuracy"] == 1.0 and c["rows"] == 4
    from carb.decide.validate import decision_metrics, truly_feasible

    assert decision_metrics(calls, truly_feasible(val, budgets))["false_accepts"] == 1  # raw: b is over
    # the validation's median sentinel (1.05 ms) sits 5% slower than the calibration's, within noise
    assert r["drift"]["speed_change"] == pytest.approx(1 / 1.05 - 1) and "slower" in r["drift"]["line"]
    cl = corrected_latency(val, 1.0)
    assert cl.latency_ms.tolist() == pytest.approx([5.0, 8.0, 30.0, 9.0 / 1.1])
    assert cl.latency_ms_raw.tolist() == val.latency_ms.tolist()
    # no calibration readings: the validation's own median speed is the reference
    r2 = drift_corrected_calls(val, budgets, calls)
    assert r2["corrected"]["reference"] == "this validation's median sentinel speed"
    assert "no calibration speed index" in r2["drift"]["line"]
    # rows without a sentinel, or no latency budget: nothing to correct, the raw calls stand
    assert "corrected" not in drift_corrected_calls(val.drop(columns="sentinel_ms"), budgets, calls, [1.0])
    assert "corrected" not in drift_corrected_calls(val, {"memory_mb": 20.0}, calls, [1.0])
    # a row whose sentinel failed (NaN) keeps its raw latency
    gap = val.assign(sentinel_ms=[1.0, np.nan, 1.0, 1.0])
    assert corrected_latency(gap, 1.0).latency_ms.tolist() == pytest.approx([5.0, 16.0, 30.0, 9.0])


def test_false_accepts_are_counted_both_ways():
    """SYNTHETIC calls: 10 configs, 4 truly over budget; 5 accepted, of which 1 is over.
    Of the over-budget configs 1 of 4 was accepted (25%); of the accepts 1 of 5 is over (20%)."""
    from carb.decide.validate import decision_metrics, false_accept_line

    feas = np.array([1, 1, 1, 1, 0, 1, 1, 0, 0, 0], bool)
    acc = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], bool)
    m = budget_metrics(acc, feas)
    assert (m["false_accepts"], m["over_budget"], m["accepted"]) == (1, 4, 5)
    assert m["false_accept_rate"] == pytest.approx(1 / 4)
    assert m["false_discovery_rate"] == pytest.approx(1 / 5)
    assert false_accept_line(m) == (
        "false accepts: 1 of 4 over-budget configs accepted (25.0%); 1 of 5 accepted are over budget (20.0%)"
    )
    # three-way calls: both shares over the decided configs (the measure ones left out)
    calls = np.where(acc, "accept", "reject").astype(object)
    calls[[3, 9]] = "measure"
    d = decision_metrics(calls, feas)
    assert (d["false_accepts"], d["over_budget"], d["accepted"]) == (1, 3, 4)
    assert d["false_accept_rate"] == pytest.approx(1 / 3) and d["false_discovery_rate"] == pytest.approx(1 / 4)
    # nothing accepted, nothing over budget: said so, not a share of zero
    none = budget_metrics(np.zeros(3, bool), np.ones(3, bool))
    assert none["false_discovery_rate"] == 0.0
    assert false_accept_line(none) == "false accepts: no config over budget; none accepted"
