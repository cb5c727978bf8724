"""carb.model.training: what `carb train` does, callable from Python (on the shipped cpu-1t dataset)."""

from __future__ import annotations

import pytest

from carb import datasets
from carb.model import BundleError, load, plan_training, train_bundle
from carb.model.training import check_out


@pytest.fixture(scope="module")
def rows():
    return datasets.load("cpu-1t").head(120).reset_index(drop=True)


def test_plan_training_resolves_auto_and_holds_out_whole_configs(rows):
    twice = rows.iloc[[0, 0, 1]].reset_index(drop=True).pipe(lambda d: d.assign(status="ok"))
    assert plan_training(twice).duplicate_rows == 1
    plan = plan_training(rows, holdout=0.25, seed=1)
    assert plan.why and plan.preset != "auto"
    assert plan.test is not None and not set(plan.test.config_id) & set(plan.train.config_id)
    assert len(plan.test) + len(plan.train) == int((rows.status == "ok").sum())
    named = plan_training(rows, preset="fast")
    assert named.preset == "fast" and named.why is None and named.test is None


def test_train_bundle_writes_a_bundle_with_its_holdout_and_facts(rows, tmp_path):
    plan = plan_training(rows, preset="fast", holdout=0.2)
    trained = train_bundle(plan, tmp_path / "m", latency="raw medians", fingerprint={"kind": "SYNTHETIC"})
    assert trained.path == tmp_path / "m" and set(trained.holdout["metrics"]) == set(trained.model.targets_)
    back = load(tmp_path / "m")
    assert back.n_train_rows_ == len(plan.train)
    lines = trained.lines(latency="raw medians")
    assert lines[0].startswith(f"wrote {tmp_path / 'm'}: preset fast, {len(plan.train)} rows")
    assert lines[-2].startswith("cross-validated: ") and lines[-1].startswith("holdout: ")
    assert ("latency trained on: raw medians" in lines) == ("latency_ms" in trained.model.targets_)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("not a bundle")
    with pytest.raises(BundleError):
        train_bundle(plan, tmp_path / "other")


def test_check_out_refuses_a_folder_of_something_else_and_a_bundle_without_force(rows, tmp_path):
    check_out(tmp_path / "new")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(ValueError, match=r"^out .*junk: exists and is not a CARB model bundle"):
        check_out(tmp_path / "junk")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="holds a model bundle already; give force= to replace it"):
        check_out(tmp_path / "m")
    check_out(tmp_path / "m", force=True)


def test_a_model_of_memory_measured_otherwise_says_so_when_trained_and_when_it_predicts(rows, tmp_path):
    from carb.measure.cpu import MEMORY_DEFINITION
    from carb.transfer.network import predict_configs

    assert datasets.memory_definition("cpu-1t") == MEMORY_DEFINITION  # measured again by today's worker
    assert datasets.memory_definition("no-such-dataset") is None
    plan = plan_training(rows, preset="fast")
    older = "older (the library pages the forked worker touched counted)"
    trained = train_bundle(plan, tmp_path / "old", memory_definition=older)
    assert any(w.startswith("memory_mb: learned from memory of another definition") for w in trained.warnings)
    model = load(tmp_path / "old")
    assert model.manifest_["training"]["memory_definition"] == older
    configs = tmp_path / "c.parquet"
    rows.head(5).to_parquet(configs)
    said = predict_configs(model, configs=configs).warnings
    assert any(older in w for w in said)
    # data measured as CARB measures now: nothing to say
    now = train_bundle(plan, tmp_path / "now", memory_definition=MEMORY_DEFINITION)
    assert not any("memory_mb" in w for w in now.warnings)
    assert not any("another definition" in w for w in predict_configs(load(tmp_path / "now"), configs=configs).warnings)
