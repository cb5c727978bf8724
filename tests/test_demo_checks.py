"""carb.demo's checks and summary rows, callable from Python (a SYNTHETIC summary)."""

from __future__ import annotations

import pytest

from carb.demo import check_demo, summary_rows


@pytest.mark.parametrize(
    "opts, words",
    [
        ({"device": "cuda", "threads": 2}, "threads applies to device=cpu only"),
        ({"device": "tpu"}, "device 'tpu': unknown device"),
        ({"device": "cuda:99"}, "device cuda:99: this machine has"),
        ({"source": "nope"}, "source nope: "),
    ],
)
def test_check_demo_refuses_before_any_work(opts, words):
    with pytest.raises(ValueError, match=words):
        check_demo(**opts)


def test_check_demo_refuses_a_source_without_latency(tmp_path):
    from carb.families import space

    f = tmp_path / "src.csv"
    space.load("tiny").to_frame().assign(
        device="x", status="ok", energy_j=1.0, memory_mb=1.0, latency_ms=float("nan")
    ).to_csv(f, index=False)
    with pytest.raises(ValueError, match="not a dataset of the cpu space's configs with measured latency"):
        check_demo(source=str(f))


def _summary(exceeds: bool) -> dict:
    """A SYNTHETIC demo summary."""
    return {
        "screening": {"candidates": 1000, "shortlist": 10, "pruning_ratio": 0.99},
        "validation": {"n": 8, "accuracy": 0.875, "false_rejects": 1, "false_accepts": 0, "over_budget": 3,
                       "accepted": 4, "false_accept_rate": 0.0, "false_discovery_rate": 0.0},
        "budgets": {"latency_ms": 3.0},
        "drift": {"exceeds": exceeds, "line": "the machine moved"},
        "validation_median_abs_error": {"latency_ms": 0.1},
        "validation_interval_coverage": {"latency_ms": 0.9},
        "timings": {"total_s": 61.0},
    }  # fmt: skip


def test_summary_rows_put_a_drift_beyond_chance_first_and_one_within_it_last():
    first = summary_rows(_summary(True))
    assert first[0] == ("machine speed drift", "the machine moved") and first[-1] == ("wall time", "61 s")
    last = summary_rows(_summary(False))
    assert last[-2] == ("machine speed drift", "the machine moved")
    assert ("candidates -> shortlist", "1,000 -> 10 (99.0% pruned)") in last
    assert ("budget accuracy (measured)", "0.875 on 8 decided configs") in last
    assert ("latency_ms: median |error|, interval coverage", "10.0%, 90%") in last
