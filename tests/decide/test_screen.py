"""Two-stage screening with SYNTHETIC predictors (costs made up from the static features)."""

import pytest

from carb.decide.screen import parse_budgets, screen
from carb.families import space
from tests._helpers import SyntheticPredictor


@pytest.fixture(scope="module")
def cands():
    return space.load("screening").to_frame()


def test_budgets_and_pareto(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    r = screen(cands, SyntheticPredictor(), budgets, risk="safe")
    s = r.summary
    assert s["candidates"] == 3072 and s["after_stage1"] == 3072
    assert 0 < s["shortlist"] < s["feasible"] < 3072 and s["pruning_ratio"] == pytest.approx(1 - s["shortlist"] / 3072)
    assert (r.feasible.latency_ms_hi <= 20).all() and (r.feasible.memory_mb_hi <= 200).all()
    assert list(r.shortlist["rank"]) == list(range(1, len(r.shortlist) + 1))
    # risk: point admits at least as much as safe
    assert screen(cands, SyntheticPredictor(), budgets, risk="point").summary["feasible"] >= s["feasible"]


def test_measured_columns_of_candidates_never_decide(cands):
    """Candidates from a measured dataset carry the measured targets; the screening must
    use the model's predictions, not those, under risk=point too."""
    budgets = {"latency_ms": 20.0}
    clean = screen(cands, SyntheticPredictor(), budgets, risk="point")
    # synthetic "measurements" that would accept every config if they leaked
    measured = cands.assign(latency_ms=0.001, memory_mb=0.001)
    leaky = screen(measured, SyntheticPredictor(), budgets, risk="point")
    assert leaky.summary["feasible"] == clean.summary["feasible"] < len(cands)
    assert (leaky.feasible.latency_ms <= 20).all() and (leaky.feasible.latency_ms > 0.01).all()


def test_stage1_prunes_without_dropping_feasible(cands):
    budgets = {"latency_ms": 20.0}
    target = SyntheticPredictor(scale=2.0)
    full = screen(cands, target, budgets, risk="safe")
    two = screen(cands, target, budgets, source=SyntheticPredictor(scale=1.0, noise=0.2), risk="safe")
    s = two.summary
    assert s["after_stage1"] < 3072
    assert s["stage1"]["maps"]["latency_ms"]["slope"] == pytest.approx(1.0, abs=0.15)
    # the margin keeps every config the target model would accept
    assert set(full.feasible.config_id) <= set(two.feasible.config_id) | set()
    assert set(full.shortlist.config_id) == set(two.shortlist.config_id)
    # three-way calls (the default): a Stage 1 prune is a reject, never an accept or measure
    d_full = screen(cands, target, budgets)
    d_two = screen(cands, target, budgets, source=SyntheticPredictor(scale=1.0, noise=0.2))
    assert d_two.summary["risk"] == "decide" and d_two.summary["after_stage1"] < 3072
    assert set(d_full.feasible.config_id) <= set(d_two.feasible.config_id)


def test_missing_target_and_bad_input(cands):
    cpu = SyntheticPredictor(targets=("latency_ms", "memory_mb"))
    r = screen(cands, cpu, {"latency_ms": 5})
    assert "min:energy_j_per_image" not in r.summary["objectives"]
    with pytest.raises(ValueError, match="does not predict"):
        screen(cands, cpu, {"energy_j": 1})
    with pytest.raises(ValueError, match="risk"):
        screen(cands, cpu, {}, risk="yolo")
    assert parse_budgets(["energy_j=75", "latency_ms=2.5"]) == {"energy_j": 75.0, "latency_ms": 2.5}
    for bad in (["power=3"], ["latency_ms=fast"], ["latency_ms=-1"], ["latency_ms"]):
        with pytest.raises(ValueError):
            parse_budgets(bad)
