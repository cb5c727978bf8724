"""CARB(prior=...): a model that reads another device's model, on SYNTHETIC data.

Two made-up devices share a per-config quirk that no closed-form feature carries (a factor
drawn from each config's id: the kind of thing an allocator or a thread split does config
by config). A device model that reads the other device's values (a lookup table as the
prior) learns it; one that does not, cannot. A CARB prior exercises the plumbing: clone,
bundles, the CLI. Real measurements never come from here.
"""

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from carb.families import features, space
from carb.model import CARB, BundleError, load, save


def two_devices(n: int = 420, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """SYNTHETIC rows of the same configs on two devices (see the module docstring)."""
    s = space.load("cpu")
    df = features.compute(s.to_frame(s.sample(n, seed=seed, method="uniform")))
    rng = np.random.default_rng(seed)
    # the shared quirk: a factor fixed by the config itself, not by any feature
    quirk = np.array([int(c[:8], 16) % 1000 for c in df["config_id"]]) / 1000.0 * 0.4 - 0.2
    mem = (df.model_bytes + df.input_bytes + df.live_activation_bytes) / 1e6 * 1.3 + 20.0
    lat = (df.flops / 2e10 + df.activation_bytes / 5e9 + df.n_ops * 2e-6) * 1e3
    out = []
    for name, speed in (("synthetic-a", 1.0), ("synthetic-b", 0.6)):
        d = df.copy()
        d["device"], d["status"] = name, "ok"
        d["memory_mb"] = mem * np.exp(quirk + rng.normal(0, 0.01, len(d)))
        d["latency_ms"] = lat * speed * np.exp(quirk + rng.normal(0, 0.02, len(d)))
        d["energy_j"] = np.nan
        out.append(d)
    return out[0], out[1]


class _Table:
    """A predictor that is not a CARB: looks another device's measurements up by config id
    (the best prior there is: it knows every config's quirk)."""

    def __init__(self, rows: pd.DataFrame, targets: list[str]) -> None:
        self.targets_ = list(targets)
        self.values = {t: dict(zip(rows["config_id"], rows[t])) for t in targets}

    def predict(self, df):
        return pd.DataFrame({t: df["config_id"].map(v).to_numpy(float) for t, v in self.values.items()}, index=df.index)


FAST = {"xgb": {"n_estimators": 60}}


@pytest.fixture(scope="module")
def devices():
    a, b = two_devices()
    prior = CARB(preset="fast", learner_params=FAST).fit(a)
    return a, b, prior


def mape(y, p):
    return float(np.mean(np.abs(np.asarray(p) / np.asarray(y) - 1)))


def test_prior_carries_what_the_features_cannot(devices):
    a, b, prior = devices
    rows = np.random.default_rng(0).permutation(len(b))  # the sample comes ordered
    cut = int(0.7 * len(b))
    train, test = b.iloc[rows[:cut]], b.iloc[rows[cut:]]
    alone = CARB(preset="fast", learner_params=FAST).fit(train)
    read = CARB(preset="fast", learner_params=FAST, prior=_Table(a, ["memory_mb", "latency_ms"])).fit(train)
    assert read.prior_columns_ == ["prior_latency_ms", "prior_memory_mb"]
    pa, pr = alone.predict(test), read.predict(test)
    for t in ("memory_mb", "latency_ms"):
        # the quirk spreads +-20%: without the prior it stays in the error, with it it goes
        assert mape(test[t], pr[t]) < 0.6 * mape(test[t], pa[t]), t
        assert (pr[f"{t}_lo"] <= pr[t]).all() and (pr[t] <= pr[f"{t}_hi"]).all()
    # a CARB prior is used as it is, never refitted
    before = prior.predict(test)
    CARB(preset="fast", learner_params=FAST, prior=prior).fit(train)
    pd.testing.assert_frame_equal(prior.predict(test), before)


def test_clone_shares_the_fitted_prior(devices):
    _, b, prior = devices
    m = CARB(preset="fast", prior=prior)
    c = clone(m)
    assert c.prior is prior and c.get_params()["preset"] == "fast"
    c.fit(b)  # a clone's prior is still fitted
    assert c.prior_columns_ == ["prior_latency_ms", "prior_memory_mb"]


def test_bundle_keeps_the_prior_and_refuses_another(devices, tmp_path):
    a, b, prior = devices
    m = CARB(preset="fast", learner_params=FAST, prior=prior).fit(b)
    save(prior, tmp_path / "src")
    out = save(m, tmp_path / "dev")
    man = json.loads((out / "manifest.json").read_text())
    assert man["prior"]["columns"] == ["prior_latency_ms", "prior_memory_mb"]
    assert man["params"]["prior"] is None and (out / "prior" / "manifest.json").is_file()
    back = load(out)
    pd.testing.assert_frame_equal(back.predict(b), m.predict(b))
    # the prior loaded from its bundle gives the same model
    from_disk = CARB(preset="fast", learner_params=FAST, prior=load(tmp_path / "src")).fit(b)
    pd.testing.assert_frame_equal(from_disk.predict(b), m.predict(b))
    with pytest.raises(ValueError, match=r"load a bundle first"):
        CARB(preset="fast", prior=str(tmp_path / "src")).fit(b)
    # another model put in place of the prior is refused, as is a damaged prior file
    other = CARB(preset="fast", learner_params={"xgb": {"n_estimators": 20}}).fit(a)
    swapped = tmp_path / "swapped"
    shutil.copytree(out, swapped)
    shutil.rmtree(swapped / "prior")
    save(other, swapped / "prior")
    with pytest.raises(BundleError, match="not the one it was trained with"):
        load(swapped)
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    f = next(p for p in (damaged / "prior").iterdir() if p.suffix == ".ubj")
    f.write_bytes(f.read_bytes()[:-3] + b"xyz")
    with pytest.raises(BundleError, match="checksum"):
        load(damaged)


def test_any_predictor_as_prior_but_only_carb_saves(devices, tmp_path):
    a, b, _ = devices
    table = _Table(a, ["memory_mb"])
    m = CARB(preset="fast", learner_params=FAST, prior=table).fit(b)
    assert m.prior_columns_ == ["prior_memory_mb"]
    assert np.isfinite(m.predict(b)["memory_mb"]).all()
    with pytest.raises(BundleError, match="only a CARB prior"):
        save(m, tmp_path / "m")
    assert not (tmp_path / "m").exists()
    # a config the prior cannot predict is an error, not a silent NaN input
    unknown = b.copy()
    unknown.loc[unknown.index[3], "config_id"] = "0000000000000000"
    with pytest.raises(ValueError, match="prior: its memory_mb prediction of row 3"):
        m.predict(unknown)
    with pytest.raises(ValueError, match="prior: expected a fitted model"):
        CARB(preset="fast", prior=42).fit(b)


def test_cli_train_with_a_prior(devices, tmp_path, cli):
    """Both trainings in subprocesses, as a user runs them; the refusals in-process (the cli fixture)."""
    a, b, _ = devices
    a.to_parquet(tmp_path / "a.parquet")
    b.to_parquet(tmp_path / "b.parquet")
    carb = [sys.executable, "-m", "carb.cli"]
    run = subprocess.run(
        carb + ["train", "--data", str(tmp_path / "a.parquet"), "--preset", "fast", "--out", str(tmp_path / "src")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    run = subprocess.run(
        carb
        + [
            "train",
            "--data",
            str(tmp_path / "b.parquet"),
            "--preset",
            "fast",
            "--prior",
            str(tmp_path / "src"),
            "--out",
            str(tmp_path / "dev"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "prior_latency_ms, prior_memory_mb" in run.stdout
    assert load(tmp_path / "dev").prior_columns_ == ["prior_latency_ms", "prior_memory_mb"]
    rc, _, err = cli("train", "--data", tmp_path / "b.parquet", "--prior", tmp_path / "nope", "--out", tmp_path / "x")
    assert rc == 2
    assert err.strip().splitlines() == [f"error: --prior: {tmp_path / 'nope'}: no such model bundle directory"]
    assert not (tmp_path / "x").exists()
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "calibration.json").write_text("{}")
    rc, _, err = cli("train", "--data", tmp_path / "b.parquet", "--prior", tmp_path / "cal", "--out", tmp_path / "x")
    assert rc == 2 and "is a calibrated model" in err and len(err.strip().splitlines()) == 1


def test_evaluate_puts_each_preset_beside_itself_with_the_prior(devices):
    from carb.model.evaluation import evaluate

    a, b, _ = devices
    res = evaluate(
        b,
        "grouped",
        ["fast", "flops-linear"],
        prior=_Table(a, ["memory_mb", "latency_ms"]),
        learner_params={"fast": FAST},
    )
    assert list(res["results"]) == ["fast", "flops-linear", "fast + prior", "flops-linear + prior"]
    # the same split and seed: the prior that knows the quirk wins on every target
    for t in ("memory_mb", "latency_ms"):
        assert res["results"]["fast + prior"][t]["mape"] < 0.6 * res["results"]["fast"][t]["mape"], t
    plain = evaluate(b, "grouped", ["fast"], learner_params={"fast": FAST})
    assert plain["results"]["fast"] == res["results"]["fast"]


def test_cli_evaluate_with_a_prior_refuses_it_beside_a_model(tmp_path, devices, cli):
    a, b, prior = devices
    b.to_parquet(tmp_path / "b.parquet")
    save(prior, tmp_path / "src")
    rc, _, err = cli(
        "evaluate", "--data", tmp_path / "b.parquet", "--model", tmp_path / "src", "--prior", tmp_path / "src"
    )
    assert rc == 2
    assert err.strip().splitlines() == [
        "error: give --preset/--prior (fit and compare) or --model (score a fitted model), not both"
    ]
