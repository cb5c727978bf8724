"""False accepts both ways in ``carb evaluate``, and the preset ``"auto"`` picked kept in a bundle.

The scoring cases are made-up numbers (SYNTHETIC), chosen so that the two false-accept shares
differ. The NAS-Bench-201 rows are a sample of the shipped public ``nb201`` dataset (Jetson TX2,
``edgegpu``), real measurements.
"""

import json
import math
import warnings

import numpy as np
import pytest

from carb.decide.validate import budget_metrics
from carb.model import AUTO, CARB, MANIFEST, doc_checksum, load, save
from carb.model.evaluation import METRICS, metrics

# light learners: the recipe of the nb201 preset, 50 trees instead of its full count
LIGHT = {"lgbm": {"n_estimators": 50}}


@pytest.fixture(scope="module")
def nb201_rows():
    """240 cells of the shipped nb201 dataset on the Jetson TX2."""
    from carb import datasets

    return datasets.load("nb201", device="edgegpu").sample(240, random_state=0).reset_index(drop=True)


def test_metrics_reports_both_false_accept_shares_and_they_differ():
    # SYNTHETIC: 10 configs, budget 5.5: configs 0-4 within, 5-9 over; the model accepts 0, 1, 2 and 5
    y = np.arange(1.0, 11.0)
    pred = np.array([1, 2, 3, 9, 9, 5, 9, 9, 9, 9], float)
    m = metrics(y, pred, budget=5.5)
    assert "false_discovery_rate" in METRICS
    assert m["false_accept_rate"] == pytest.approx(1 / 5)  # 1 of the 5 over budget accepted
    assert m["false_discovery_rate"] == pytest.approx(1 / 4)  # 1 of the 4 accepted over budget
    # the same shares as the screening's validation gives for the same calls
    b = budget_metrics(pred <= 5.5, y <= 5.5)
    assert (b["false_accept_rate"], b["false_discovery_rate"]) == pytest.approx(
        (m["false_accept_rate"], m["false_discovery_rate"])
    )


def test_metrics_false_discovery_is_nan_when_nothing_is_accepted():
    y = np.arange(1.0, 11.0)  # SYNTHETIC
    none_accepted = metrics(y, np.full(10, 100.0), budget=5.5)
    assert math.isnan(none_accepted["false_discovery_rate"]) and none_accepted["false_accept_rate"] == 0.0
    none_over = metrics(y, y, budget=50.0)
    assert math.isnan(none_over["false_accept_rate"]) and none_over["false_discovery_rate"] == 0.0


def test_a_bundle_fitted_with_auto_keeps_the_preset_it_fitted(nb201_rows, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # memory_mb: no labels in the nb201 rows
        model = CARB(preset=AUTO, learner_params=LIGHT).fit(nb201_rows)
    assert model.preset_ == "nb201"
    save(model, tmp_path / "m")
    man = json.loads((tmp_path / "m" / MANIFEST).read_text())
    assert man["preset"] == "nb201" and man["params"]["preset"] == AUTO
    back = load(tmp_path / "m")
    assert back.preset == AUTO and back.preset_ == "nb201"
    np.testing.assert_allclose(back.predict(nb201_rows)["energy_j"], model.predict(nb201_rows)["energy_j"])


def test_a_bundle_of_a_named_preset_loads_with_it(nb201_rows, tmp_path):
    model = CARB(preset="flops-linear").fit(nb201_rows)
    save(model, tmp_path / "m")
    assert load(tmp_path / "m").preset_ == "flops-linear"
    # a manifest without the fitted preset (re-checksummed as carb writes it): the setting stands in
    path = tmp_path / "m" / MANIFEST
    man = json.loads(path.read_text())
    del man["preset"]
    man["manifest_sha256"] = doc_checksum(man, "manifest_sha256")
    path.write_text(json.dumps(man))
    assert load(tmp_path / "m").preset_ == "flops-linear"


def test_carb_evaluate_shows_both_false_accept_columns_and_marks_the_recommended_preset(cli, nb201_rows, tmp_path):
    data, j = tmp_path / "nb201-sample.parquet", tmp_path / "e.json"
    nb201_rows.to_parquet(data, index=False)
    code, out, err = cli(
        "evaluate", "--data", data, "--split", "random", "--preset", "auto", "--preset", "flops-linear", "--json", j
    )
    assert code == 0, err
    res = json.loads(j.read_text())
    assert res["recommended_preset"] == "nb201"
    assert "FA/over" in out and "FA/acc" in out
    assert "FA/acc: share of the accepted configs over budget" in out
    assert "* nb201: the recommended preset for these data" in out
    rows = [line.split("│") for line in out.splitlines() if line.count("│") > 10]  # the energy table first
    assert [r[1].strip() for r in rows] == ["nb201 *", "flops-linear"] * 2
    assert res["results"]["nb201"]["energy_j"]["false_discovery_rate"] is not None  # half the test rows accepted
    for model in ("nb201", "flops-linear"):
        for t in ("energy_j", "latency_ms"):
            fdr = res["results"][model][t]["false_discovery_rate"]
            assert fdr is None or 0.0 <= fdr <= 1.0
    # the table's FA/over and FA/acc cells are the JSON's shares
    for cells, t in zip(rows[::2], ("energy_j", "latency_ms")):
        m = res["results"]["nb201"][t]
        shares = [m["false_accept_rate"], m["false_discovery_rate"]]
        assert [c.strip() for c in cells[-4:-2]] == ["—" if v is None else f"{100 * v:.1f}%" for v in shares]
