"""``preset="auto"``: the data's family preset where one exists, else ``default``.

The NAS-Bench-201 rows are a sample of the shipped public ``nb201`` dataset (Jetson TX2,
``edgegpu``), real measurements; the resnet and mixed frames are made-up rows (SYNTHETIC)
that only carry a ``family`` column, since the pick reads nothing else.
"""

import json
import warnings

import pandas as pd
import pytest

from carb.model import CARB, FAMILY_PRESETS, auto_preset

NB201_LINE = "preset nb201: the data are NAS-Bench-201 cells; --preset default for the generic one"


@pytest.fixture(scope="module")
def nb201_file(tmp_path_factory):
    """240 cells of the shipped nb201 dataset on the Jetson TX2, written to a Parquet file."""
    from carb import datasets

    rows = datasets.load("nb201", device="edgegpu").sample(240, random_state=0)
    path = tmp_path_factory.mktemp("nb201") / "nb201-sample.parquet"
    rows.to_parquet(path, index=False)
    return path


def test_auto_picks_the_family_preset_and_default_otherwise():
    assert auto_preset(pd.DataFrame({"family": ["nb201"] * 3})) == ("nb201", "the data are NAS-Bench-201 cells")
    # SYNTHETIC rows: a family without a preset of its own, two families, no family column
    name, why = auto_preset(pd.DataFrame({"family": ["resnet"] * 3}))
    assert name == "default" and why.startswith("no preset is tuned for resnet configs")
    name, why = auto_preset(pd.DataFrame({"family": ["nb201", "resnet"]}))
    assert name == "default" and "mix 2 families (nb201, resnet)" in why
    assert auto_preset(pd.DataFrame({"x": [1]}))[0] == "default"
    assert set(p for p, _ in FAMILY_PRESETS.values()) == {"nb201"}


def test_carb_train_picks_nb201_on_nb201_data_and_says_so_in_one_line(cli, nb201_file, tmp_path):
    code, out, err = cli("train", "--data", nb201_file, "--out", tmp_path / "m")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == NB201_LINE
    assert "wrote" in out and "preset nb201," in out
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["preset"] == "nb201"


def test_carb_train_honours_an_explicit_preset(cli, nb201_file, tmp_path):
    code, out, err = cli("train", "--data", nb201_file, "--preset", "fast", "--out", tmp_path / "m")
    assert code == 0, err
    assert "preset nb201:" not in out and "preset fast," in out
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())["preset"] == "fast"


def test_carb_evaluate_auto_fits_and_recommends_the_family_preset(cli, nb201_file, tmp_path):
    j = tmp_path / "e.json"
    code, out, err = cli(
        "evaluate",
        "--data",
        nb201_file,
        "--split",
        "random",
        "--preset",
        "auto",
        "--preset",
        "flops-linear",
        "--json",
        j,
    )
    assert code == 0, err
    res = json.loads(j.read_text())
    assert list(res["results"]) == ["nb201", "flops-linear"]
    assert res["recommended_preset"] == "nb201" and res["recommended_why"] == "the data are NAS-Bench-201 cells"
    assert "recommended: nb201 (the data are NAS-Bench-201 cells" in out
    # presets named otherwise are fitted as asked, with no recommendation
    code, out, err = cli("evaluate", "--data", nb201_file, "--split", "random", "--preset", "flops-linear", "--json", j)
    assert code == 0, err
    res = json.loads(j.read_text())
    assert list(res["results"]) == ["flops-linear"] and "recommended_preset" not in res
    assert "recommended:" not in out


def test_carb_auto_in_python_fits_the_family_preset(nb201_file):
    rows = pd.read_parquet(nb201_file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # memory_mb: too few labelled rows in the sample
        m = CARB(preset="auto", learner_params={"lgbm": {"n_estimators": 50}}).fit(rows)
    assert m.preset == "auto" and m.preset_ == "nb201"
    assert m.spec_["learners"]["lgbm"][0] == "lightgbm" and m.spec_["learners"]["lgbm"][1]["n_estimators"] == 50
    assert CARB(preset="default").preset == "default"
