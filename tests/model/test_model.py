"""CARB models, evaluation and bundles, on SYNTHETIC data.

The targets below are made up from the closed-form features with multiplicative noise
(memory ~ resident bytes, latency ~ FLOPs + bytes + operator calls, energy ~ latency x
power): they exercise the code paths (the full memory -> energy -> latency cascade
included), not the physics. Real measurements never come from here.
"""

import json
import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from carb.families import features, space
from carb.model import CARB, PRESETS, TARGETS, ArrayForest, BundleError, load, save
from carb.model.evaluation import GROUP_KEYS, metrics, split

# tiny learners, so that the study's recipe runs in about a second
TINY_PAPER = {
    "xgb": {"n_estimators": 30},
    "lgbm": {"n_estimators": 30},
    "et": {"n_estimators": 20},
    "corrector": {"n_estimators": 20},
}


def synthetic(n: int, seed: int, energy: bool = True) -> pd.DataFrame:
    """SYNTHETIC dataset of ``n`` configs of the ``cpu`` space (see the module docstring)."""
    s = space.load("cpu")
    df = features.compute(s.to_frame(s.sample(n, seed=seed, method="uniform")))
    rng = np.random.default_rng(seed)

    def noise(sd):
        return np.exp(rng.normal(0.0, sd, len(df)))

    mem = (df.model_bytes + df.input_bytes + df.live_activation_bytes) / 1e6 * 1.3 + 20.0
    lat = (df.flops / 2e10 + df.activation_bytes / 5e9 + df.n_ops * 2e-6) * 1e3
    lat = lat * np.where(df.precision == "bf16", 1.6, 1.0)
    df["device"] = "synthetic"
    df["status"] = "ok"
    df["memory_mb"] = mem * noise(0.03)
    df["latency_ms"] = lat * noise(0.05)
    df["energy_j"] = df.latency_ms / 1e3 * (12 + 0.02 * df.memory_mb) * noise(0.05) if energy else np.nan
    return df


@pytest.fixture(scope="module")
def data():
    return synthetic(360, 0), synthetic(240, 1)


@pytest.fixture(scope="module")
def fast_model(data):
    return CARB(preset="fast").fit(data[0])


def r2_log(y, p):
    y, p = np.log(y), np.log(p)
    return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


def test_fast_fits_all_targets_and_predicts_with_intervals(data, fast_model):
    train, test = data
    pred = fast_model.predict(test)
    assert list(pred.index) == list(test.index)
    assert fast_model.targets_ == ["memory_mb", "energy_j", "latency_ms"] and fast_model.missing_targets_ == []
    for t in TARGETS:
        assert {t, f"{t}_lo", f"{t}_hi"} <= set(pred.columns)
        assert r2_log(test[t], pred[t]) > 0.95, t
        assert (pred[f"{t}_lo"] <= pred[t]).all() and (pred[t] <= pred[f"{t}_hi"]).all()
    # the fast preset runs the study's cascade: energy reads memory, latency reads both
    assert fast_model.models_["latency_ms"].upstream == ["memory_mb", "energy_j"]
    # predict is pure: same input, same output, input untouched
    before = test.copy()
    pd.testing.assert_frame_equal(fast_model.predict(test), pred)
    pd.testing.assert_frame_equal(test, before)


def test_predict_takes_configs_and_computes_features(fast_model, data):
    cfgs = space.load("tiny").configs
    # the boolean 'extrapolated' flag aside, every column is a float
    a = fast_model.predict(cfgs).drop(columns="extrapolated")
    b = fast_model.predict(space.load("tiny").to_frame()).drop(columns="extrapolated")  # features computed
    assert len(a) == len(cfgs) and np.allclose(a.to_numpy(), b.to_numpy())
    assert np.isfinite(a.to_numpy()).all()


def test_paper_preset_is_the_studys_recipe(data):
    train, test = data
    m = CARB(preset="paper", learner_params=TINY_PAPER).fit(train)
    assert {t: m.models_[t].upstream for t in m.targets_} == {
        "memory_mb": [],
        "energy_j": ["memory_mb"],
        "latency_ms": ["memory_mb", "energy_j"],
    }
    assert m.models_["memory_mb"].weights == {"xgb": 0.3, "lgbm": 0.4, "et": 0.3}
    assert m.models_["energy_j"].weights == {"xgb": 0.3, "lgbm": 0.5, "et": 0.2}
    assert m.models_["latency_ms"].weights == {"xgb": 0.2, "lgbm": 0.3, "et": 0.5}
    assert all(m.models_[t].corrector is not None and m.models_[t].corrector_scale == 0.9 for t in m.targets_)
    assert (
        m.spec_["learners"]["xgb"][1]["max_depth"] == 9
        and PRESETS["paper"]["learners"]["xgb"][1]["n_estimators"] == 800
    )
    assert PRESETS["paper"]["learners"]["lgbm"][1]["num_leaves"] == 127
    assert PRESETS["paper"]["learners"]["et"][1]["n_estimators"] == 400
    pred = m.predict(test)
    for t in TARGETS:
        assert r2_log(test[t], pred[t]) > 0.8, t


def test_missing_energy_trains_the_rest(data):
    train, test = data
    cpu_like = train.assign(energy_j=np.nan)  # a CPU without an energy sensor
    with pytest.warns(UserWarning, match="energy_j"):
        m = CARB(preset="fast").fit(cpu_like)
    assert m.targets_ == ["memory_mb", "latency_ms"] and m.missing_targets_ == ["energy_j"]
    assert m.models_["latency_ms"].upstream == ["memory_mb"]
    pred = m.predict(test)
    assert pred[["energy_j", "energy_j_lo", "energy_j_hi"]].isna().all().all()
    assert r2_log(test.latency_ms, pred.latency_ms) > 0.95
    with pytest.raises(ValueError, match="no target"):
        CARB(preset="fast").fit(train.assign(energy_j=np.nan, latency_ms=np.nan, memory_mb=np.nan))


def test_only_ok_rows_are_used(data):
    train, test = data
    failed = train.head(40).assign(status="oom", latency_ms=1e9, memory_mb=1e9, energy_j=1e9)
    a = CARB(preset="fast").fit(train).predict(test)
    b = CARB(preset="fast").fit(pd.concat([failed, train], ignore_index=True)).predict(test)
    pd.testing.assert_frame_equal(a, b)


def test_sklearn_contract_clone_and_params(fast_model):
    est = CARB(preset="fast", coverage=0.8, learner_params={"xgb": {"n_estimators": 10}})
    c = clone(est)
    assert c.get_params() == est.get_params() and c is not est
    assert not hasattr(c, "models_")
    c2 = clone(fast_model)  # clone of a fitted model is unfitted with the same settings
    assert not hasattr(c2, "models_") and c2.get_params() == fast_model.get_params()
    c.set_params(coverage=0.7)
    assert c.coverage == 0.7 and est.coverage == 0.8
    with pytest.raises(ValueError, match="unknown preset"):
        CARB(preset="nope").fit(synthetic(40, 3))
    with pytest.raises(ValueError, match="no learner"):
        CARB(preset="fast", learner_params={"lgbm": {}}).fit(synthetic(40, 3))


def test_interval_coverage_near_nominal():
    # exchangeable synthetic rows: CV conformal should cover about 90% of new rows
    train, test = synthetic(500, 4), synthetic(600, 5)
    m = CARB(preset="fast", coverage=0.9).fit(train)
    pred = m.predict(test)
    for t in TARGETS:
        cov = np.mean((pred[f"{t}_lo"] <= test[t]) & (test[t] <= pred[f"{t}_hi"]))
        assert 0.83 <= cov <= 0.98, (t, cov)
    narrow = CARB(preset="fast", coverage=0.5).fit(train).predict(test)
    assert (narrow.latency_ms_hi - narrow.latency_ms_lo).mean() < (pred.latency_ms_hi - pred.latency_ms_lo).mean()


def test_default_beats_flops_only_baseline(data):
    train, test = data
    lp = {"xgb": {"n_estimators": 60}, "et": {"n_estimators": 20}}
    d = CARB(preset="default", learner_params=lp).fit(train).predict(test)
    f = CARB(preset="flops-linear").fit(train).predict(test)
    for t in TARGETS:
        assert r2_log(test[t], d[t]) > r2_log(test[t], f[t]), t


# -- bundles ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper_bundle(tmp_path_factory, data):
    m = CARB(preset="paper", learner_params=TINY_PAPER).fit(data[0])
    d = tmp_path_factory.mktemp("bundle") / "paper"
    save(m, d)
    return m, d


def test_bundle_round_trip_without_pickle(paper_bundle, data, monkeypatch):
    m, d = paper_bundle
    man = json.loads((d / "manifest.json").read_text())
    assert man["schema_version"] == 1 and man["preset"] == "paper"
    assert man["targets_trained"] == ["memory_mb", "energy_j", "latency_ms"]
    assert len(man["training"]["data_sha256"]) == 64 and man["input_columns"] == m.input_columns_
    assert {p.suffix for p in d.iterdir()} == {".json", ".ubj", ".txt", ".npz"}
    assert set(man["files"]) == {p.name for p in d.iterdir()} - {"manifest.json"}

    def no_pickle(*a, **k):
        raise AssertionError("a bundle must load without unpickling")

    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    loaded = load(d)
    pd.testing.assert_frame_equal(loaded.predict(data[1]), m.predict(data[1]))


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_bundle_refuses_tampered_or_incompatible(paper_bundle, tmp_path):
    _, d = paper_bundle
    t = _copy(d, tmp_path / "tampered")
    f = t / "latency_ms.lgbm.txt"
    f.write_text(f.read_text().replace("leaf_value=", "leaf_value=9", 1))
    with pytest.raises(BundleError, match="checksum"):
        load(t)
    v = _copy(d, tmp_path / "version")
    man = json.loads((v / "manifest.json").read_text())
    man["schema_version"] = 999
    (v / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(BundleError, match="incompatible.*schema version 999"):
        load(v)
    g = _copy(d, tmp_path / "gone")
    (g / "memory_mb.et.npz").unlink()
    with pytest.raises(BundleError, match="missing file memory_mb.et.npz"):
        load(g)
    with pytest.raises(BundleError, match="no manifest"):
        load(tmp_path)
    with pytest.raises(BundleError, match="not a CARB model bundle"):
        save(CARB(preset="fast").fit(synthetic(60, 2)), tmp_path)  # holds other things


def test_forest_arrays_are_checked_and_both_paths_agree(data):
    from sklearn.ensemble import ExtraTreesRegressor

    X = np.random.default_rng(0).random((300, 6))
    y = X[:, 0] * 3 + X[:, 1] ** 2
    et = ExtraTreesRegressor(n_estimators=8, random_state=0).fit(X, y)
    f = ArrayForest.from_sklearn(et)
    Xt = np.random.default_rng(1).random((500, 6))
    assert np.allclose(f.predict(Xt), et.predict(Xt), rtol=0, atol=1e-12)
    f._compiled = []  # the numpy traversal, as where scikit-learn's private tree is unavailable
    assert np.allclose(f.predict(Xt), et.predict(Xt), rtol=0, atol=1e-12)
    bad = f.children_left.copy()
    bad[0] = 0  # a cycle: the root is its own child
    with pytest.raises(ValueError, match="child index"):
        ArrayForest(f.offsets, bad, f.children_right, f.feature, f.threshold, f.value, 6)
    with pytest.raises(ValueError, match="outside the input"):
        ArrayForest(f.offsets, f.children_left, f.children_right, f.feature + 10, f.threshold, f.value, 6)


# -- evaluation ---------------------------------------------------------------------------


def test_splits_keep_their_promises(data):
    df = pd.concat(data, ignore_index=True)
    g = split(df, "grouped", seed=1)
    key = df[list(GROUP_KEYS)].astype(str).agg("|".join, axis=1)
    assert not set(key.iloc[g["train"]]) & set(key.iloc[g["test"]])
    assert 0.15 < len(g["test"]) / len(df) < 0.3
    b = split(df, "batch-tier")
    assert (df.batch.iloc[b["train"]] > 8).all() and (df.batch.iloc[b["test"]] <= 8).all()
    s = split(df, "stratified", seed=2)
    assert not set(s["train"]) & set(s["test"]) and set(s["val"]) <= set(s["train"])
    assert abs(len(s["test"]) / len(df) - 0.15) < 0.03 and abs(len(s["val"]) / len(df) - 0.15) < 0.03
    r = split(df, "random", seed=3)
    assert len(r["train"]) + len(r["test"]) == len(df) and not set(r["train"]) & set(r["test"])
    with pytest.raises(ValueError, match="unknown split"):
        split(df, "nope")


def test_metrics_on_known_answers():
    y = np.array([1.0, 2.0, 4.0, 8.0])
    m = metrics(y, y, y * 0.9, y * 1.1, budget=3.0)
    assert m["r2"] == 1 and m["mape"] == 0 and m["within_10pct"] == 1 and m["coverage"] == 1
    assert m["budget_accuracy"] == 1 and m["false_accept_rate"] == 0
    m = metrics(y, y * 1.2, y, y * 1.1, budget=3.0)
    assert m["within_10pct"] == 0 and abs(m["mape"] - 0.2) < 1e-12 and m["coverage"] == 1
    m = metrics(y, y / 2, budget=3.0)  # accepts 4 (pred 2), which is over the budget
    assert m["false_accept_rate"] == 0.5 and m["budget_accuracy"] == 0.75


# -- command line -------------------------------------------------------------------------


def test_cli_train_predict_evaluate(tmp_path, data, cli):
    """The commands in-process (the ``cli`` fixture: carb.cli's entry point, as the console script calls it)."""
    df = pd.concat(data, ignore_index=True)
    df.to_parquet(tmp_path / "syn.parquet", index=False)
    code, _, err = cli(
        "train", "--data", "syn.parquet", "--preset", "fast", "--out", "bundle", "--holdout", "0.2", cwd=tmp_path
    )
    assert code == 0, err
    man = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert man["holdout"]["rows"] == 120 and man["holdout"]["metrics"]["latency_ms"]["r2_log"] > 0.9
    code, _, err = cli("predict", "--model", "bundle", "--space", "tiny", "--out", "pred.csv")
    assert code == 0, err
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert len(pred) == 8 and {"config_id", "latency_ms", "latency_ms_lo", "energy_j_hi"} <= set(pred.columns)
    code, _, err = cli(
        "evaluate",
        "--data",
        "syn.parquet",
        "--split",
        "grouped",
        "--preset",
        "fast",
        "--preset",
        "flops-linear",
        "--budget",
        "latency_ms=5",
        "--json",
        "res.json",
    )
    assert code == 0, err
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["budgets"]["latency_ms"] == 5
    for model in ("fast", "flops-linear"):
        for t in TARGETS:
            assert set(res["results"][model][t]) >= {
                "r2",
                "mape",
                "within_10pct",
                "spearman",
                "coverage",
                "budget_accuracy",
                "false_accept_rate",
            }
    assert res["results"]["fast"]["latency_ms"]["r2_log"] > res["results"]["flops-linear"]["latency_ms"]["r2_log"]

    f = tmp_path / "bundle" / "memory_mb.xgb.ubj"
    f.write_bytes(f.read_bytes() + b"\0")
    for args, words in [
        (["predict", "--model", "bundle", "--space", "tiny", "--out", "p.csv"], "checksum"),
        (["predict", "--model", "nope", "--space", "tiny", "--out", "p.csv"], "no such model directory"),
        (["train", "--data", "syn.parquet", "--preset", "huge", "--out", "b2"], "unknown preset"),
        (["evaluate", "--data", "syn.parquet", "--split", "diagonal"], "unknown split"),
        (["evaluate", "--data", "syn.parquet", "--budget", "speed=3"], "--budget"),
        (["evaluate", "--data", "missing.parquet"], "missing.parquet"),
    ]:
        code, _, err = cli(*args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, err)
