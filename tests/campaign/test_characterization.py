"""carb.campaign.characterization: what `carb characterize` does, callable from Python (SYNTHETIC backend)."""

from __future__ import annotations

import pytest

from carb.campaign import characterization as ch
from carb.families import space
from tests._helpers import SyntheticBackend


def test_select_configs_takes_a_space_or_a_file_and_never_samples_more_than_the_space_holds(tmp_path):
    tiny = space.load("tiny")
    assert ch.select_configs(space="tiny") == list(tiny)
    assert len(ch.select_configs(space="tiny", samples=3, seed=1)) == 3
    with pytest.raises(ValueError, match=r"^give exactly one of space= or configs=$"):
        ch.select_configs()
    with pytest.raises(ValueError, match=r"^method: unknown value 'magic'"):
        ch.select_configs(space="tiny", method="magic")
    with pytest.raises(ValueError, match=rf"^samples {len(tiny) + 1}: the space tiny holds {len(tiny)} configs"):
        ch.select_configs(space="tiny", samples=len(tiny) + 1)
    f = tmp_path / "c.csv"
    tiny.to_frame().head(2).to_csv(f, index=False)
    assert [c.config_id for c in ch.select_configs(configs=f)] == list(tiny.to_frame().config_id.head(2))
    with pytest.raises(ValueError, match="samples works with space="):
        ch.select_configs(configs=f, samples=1)


@pytest.mark.parametrize(
    "opts, words",
    [
        ({"device": "cuda", "threads": 2}, "threads applies to device=cpu only"),
        ({"executor": "spark"}, "executor: unknown value 'spark'"),
        ({"workers": 2}, "address= and workers= apply to executor=ray only"),
        ({"allocator": "jemalloc"}, "allocator: unknown value 'jemalloc'"),
        ({"device": "cuda", "allocator": "retain"}, "allocator applies to device=cpu only"),
        ({"energy_periods": 4.0}, "energy_periods applies to device=cuda only"),
    ],
)
def test_check_options_refuses_what_does_not_apply_to_the_device_or_executor(opts, words):
    with pytest.raises(ValueError, match=words):
        ch.check_options(**opts)


def test_check_options_passes_what_applies():
    ch.check_options("cpu", threads=2, allocator="retain")
    ch.check_options("cuda", energy_periods=4.0)


def test_default_retakes_only_where_the_two_speed_states_show():
    assert ch.default_retakes(None, "cpu", 2, True, 3, False) > 0
    assert ch.default_retakes(None, "cpu", 1, True, 3, False) == 0  # one thread: one state
    assert ch.default_retakes(None, "cpu", 2, True, 1, False) == 0  # one round: nothing to pool
    assert ch.default_retakes(None, "cuda", None, True, 3, False) == 0
    assert ch.default_retakes(0, "cpu", 1, True, 1, False) == 0
    with pytest.raises(ValueError, match="retakes needs a CPU campaign"):
        ch.default_retakes(2, "cpu", 2, True, 1, False)


def test_protocol_for_overrides_only_what_is_given():
    p = ch.protocol_for("cpu", max_time_s=0.5)
    assert p.max_time_s == 0.5 and p.ci_target == ch.protocol_for("cpu").ci_target


def test_characterize_measures_into_the_store_and_resumes(tmp_path):
    configs = ch.select_configs(space="tiny", samples=4, seed=0)
    store = tmp_path / "s.duckdb"
    run = ch.characterize(configs, store, backend=SyntheticBackend(), rounds=1, sentinel=False)
    assert run.result.measured == 4 and len(run.rows) == 4 and run.store == store
    assert run.to_dict()["store"] == str(store) and run.to_dict()["summary"][0]["configs"] == 4
    title, rows = run.slowest_rows(limit=3)
    assert title == "measured now (4 configs, slowest 3 shown)" and len(rows) == 3
    assert [float(r[2]) for r in rows] == sorted((float(r[2]) for r in rows), reverse=True)
    again = ch.characterize(configs, store, backend=SyntheticBackend(), rounds=1, sentinel=False)
    assert again.result.measured == 0 and again.result.skipped == 4 and again.rows.empty
    # the machine's load, read before a campaign on this CPU, is kept with the run (the sentinel reads its speed)
    state = run.to_dict()["machine_state"]
    assert state["device"] == "cpu" and state["readings_ms"] == [] and state["cpus"] >= 1 and not state["forced"]
    gpu = ch.characterize(configs, tmp_path / "g.duckdb", backend=SyntheticBackend(), device="cuda", sentinel=False)
    assert gpu.machine_state is None


def test_characterize_remeasure_counts_the_configs_with_nothing_to_compare(tmp_path):
    configs = ch.select_configs(space="tiny", samples=4, seed=0)
    store = tmp_path / "s.duckdb"
    ch.characterize(configs[:3], store, backend=SyntheticBackend(), rounds=1, sentinel=False)
    run = ch.characterize(configs, store, backend=SyntheticBackend(), rounds=1, sentinel=False, remeasure=True)
    assert run.result.measured == 4 and run.fresh == 1 and run.repeat is not None
