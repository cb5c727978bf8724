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
    assert m["false_accept_rate"] == pytest.approx(1 / 2)   # 1 of 2 infeasible accepted
    assert m["false_reject_rate"] == pytest.approx(1 / 3)   # 1 of 3 feasible rejected


def test_validate_against_truth():
    truth = pd.DataFrame({"config_id": list("abcdef"), "status": "ok", "batch": 1,
                          "latency_ms": [1.0, 2.0, 3.0, 9.0, 1.5, 2.5],
                          "flops_per_image": [1.0, 4.0, 8.0, 20.0, 0.5, 3.0]})
    objs = [("latency_ms", "min"), ("flops_per_image", "max")]
    # budget latency <= 5: d infeasible. True front of the feasible: a, b, c
    r = validate_against_truth(["a", "b", "c", "e"], ["a", "b"], truth, {"latency_ms": 5.0}, objs)
    assert r["accuracy"] == pytest.approx(5 / 6) and r["false_reject_rate"] == pytest.approx(1 / 5)
    assert r["pareto_recall"] == pytest.approx(2 / 3) and 0 < r["hypervolume_ratio"] < 1
    r = validate_against_truth(list("abcef"), list("abc"), truth, {"latency_ms": 5.0}, objs)
    assert r["accuracy"] == 1.0 and r["pareto_recall"] == 1.0 and r["hypervolume_ratio"] == pytest.approx(1.0)
