"""carb.decide.validation: what `carb validate` does, callable from Python (SYNTHETIC measurements)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from carb.decide import read_screen, validate_screen
from carb.decide.validation import validation_configs
from carb.families import space


@pytest.fixture
def screen(tmp_path):
    """A screening of the tiny space (SYNTHETIC): the first 3 configs accepted, the first 2 shortlisted."""
    frame = space.load("tiny").to_frame()
    d = tmp_path / "scr"
    d.mkdir()
    summary = {"space": "tiny", "budgets": {"latency_ms": 2.5}, "objectives": ["min:latency_ms"]}
    (d / "summary.json").write_text(json.dumps(summary))
    frame.head(2).to_parquet(d / "shortlist.parquet")
    frame.head(3).to_parquet(d / "feasible.parquet")
    return d, frame


def _truth(frame, tmp_path):
    """Every config of the tiny space 'measured' (SYNTHETIC): latency 1, 2, 3, ... ms in the frame's order."""
    f = frame.assign(
        status="ok", device="synthetic", latency_ms=np.arange(1.0, len(frame) + 1), energy_j=np.nan, memory_mb=10.0
    )
    path = tmp_path / "truth.csv"
    f.to_csv(path, index=False)
    return str(path)


def test_read_screen_reads_the_calls_and_refuses_what_is_not_a_screen_output(screen, tmp_path):
    d, frame = screen
    scr = read_screen(d)
    assert scr.accepted == set(frame.config_id.head(3)) and scr.objectives == [("latency_ms", "min")]
    assert scr.to_measure is None
    with pytest.raises(ValueError, match="not a carb screen output"):
        read_screen(tmp_path / "nothing")
    with pytest.raises(ValueError, match=r"^measure_first: .* has no measure set \(screen with risk=decide\)"):
        read_screen(d, measure_first=True)


def test_validation_configs_are_the_shortlist_then_a_control_sample_of_the_rest(screen):
    d, frame = screen
    todo, ctrl = validation_configs(read_screen(d), limit=2, control=3, seed=0)
    assert list(todo.config_id.head(2)) == list(frame.config_id.head(2)) and len(todo) == 5
    assert not set(ctrl.config_id) & set(frame.config_id.head(2))


def test_validate_screen_on_data_scores_the_calls_and_writes_validation_json(screen, tmp_path):
    d, frame = screen
    res = validate_screen(d, data=_truth(frame, tmp_path))
    # accepted: latencies 1, 2, 3 under a budget of 2.5: two right, one false accept, nothing falsely rejected
    assert res["n"] == len(frame) and res["false_accepts"] == 1 and res["accuracy"] == pytest.approx(7 / 8)
    assert json.loads((d / "validation.json").read_text())["accuracy"] == res["accuracy"]


def test_validate_screen_needs_exactly_one_source_and_data_of_the_screened_space(screen, tmp_path):
    d, frame = screen
    with pytest.raises(ValueError, match=r"^give exactly one of device= or data=$"):
        validate_screen(d)
    cpu = space.load("cpu").to_frame()
    other = cpu[~cpu.config_id.isin(set(frame.config_id))].head(8)
    with pytest.raises(ValueError, match=r"^data .*: none of its 8 rows is a config of the screened space"):
        validate_screen(d, data=_truth(other, tmp_path))


def test_validation_rows_say_three_way_figures_on_the_decided_configs():
    from carb.decide.validate import budget_metrics
    from carb.decide.validation import validation_rows

    res = budget_metrics(np.array([True] * 5 + [False] * 5), np.array([True] * 4 + [False] * 6))
    res["n"] = 10
    res["decisions"] = {"decided": 0.6, "measure": 4, "accuracy": 0.9, "false_reject_rate": 0.0}
    res["decisions"].update(budget_metrics(np.array([True, False]), np.array([True, False])))
    rows = dict(validation_rows(res))
    assert rows["n"] == "10" and rows["accuracy (measure counted as reject)"] == "0.900"
    assert rows["decided share (accept or reject)"] == "0.600 (4 to measure)" and "false accepts" in rows
    assert "machine speed drift" not in rows
    assert validation_rows({**res, "drift": {"exceeds": False, "line": "moved"}})[-1] == (
        "machine speed drift",
        "moved",
    )
