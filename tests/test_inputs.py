"""Issue 13, section 3: every input checked. Bad input is one line ``error: ...`` and exit
code 2, never a traceback. The CLI runs in-process here (``carb.cli.main`` with ``sys.argv``)
so that each case takes milliseconds; the models are fitted on SYNTHETIC data."""

import json
import sys

import numpy as np
import pandas as pd
import pytest

from carb.families import features
from carb.families import space
from carb.families.space import SpaceError

RESNET_ROW = {"family": "cifar", "block": "basic", "depth": 20, "width": 1.0, "early_downsample": False,
              "input_size": 32, "batch": 1, "precision": "fp32"}


def cli(monkeypatch, capsys, *args, cwd=None):
    """Run ``carb ARGS`` in-process; returns (exit code, stdout, stderr)."""
    from carb.cli import main

    if cwd is not None:
        monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["carb", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def one_line_error(rc, err, *words):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], err
    assert "Traceback" not in err


def synthetic(n: int, seed: int = 0) -> pd.DataFrame:
    """SYNTHETIC dataset (made-up targets from the features, for code paths only) of the
    ``cpu`` space; batches up to 32 (fp32 and bf16 only, as the space has them)."""
    s = space.load("cpu")
    df = features.compute(s.to_frame(s.sample(n, seed=seed, method="uniform")))
    df = df[(df.batch <= 32) & (df.precision != "fp16")].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    df["device"], df["status"] = "synthetic", "ok"
    df["memory_mb"] = (df.model_bytes + df.input_bytes + df.live_activation_bytes) / 1e6 * 1.3 + 20
    df["latency_ms"] = (df.flops / 2e10 + df.n_ops * 2e-6) * 1e3 * np.exp(rng.normal(0, 0.05, len(df)))
    df["energy_j"] = df.latency_ms / 1e3 * 15
    return df


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from carb.model import CARB, save

    d = tmp_path_factory.mktemp("inputs") / "model"
    save(CARB(preset="fast").fit(synthetic(400)), d)
    return d


def write_csv(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# -- absurd values ------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, words", [
    ("width", float("inf"), "not a finite number"),
    ("width", float("nan"), "not a finite number"),
    ("width", 1e9, "<= 64"),
    ("depth", 10**7 * 6 + 2, "above the limit"),
    ("batch", 10**18, "above the limit"),
    ("input_size", 10**6, "above the limit"),
    ("classes", 10**9, "above the limit"),
])
def test_absurd_values_are_refused_with_the_limit(key, value, words):
    with pytest.raises(SpaceError, match=words):
        space.Config(**{**RESNET_ROW, key: value})


@pytest.mark.parametrize("text, words", [
    ("[[grid]]\nwidth = [inf]\n", "width = inf"),
    ("[[grid]]\nwidth = [1e9]\n", "width = 1000000000.0"),
    ("[[grid]]\nwidth = [nan]\n", "not a finite number"),
    ("[[grid]]\nbatch = [1_000_000_000_000_000_000]\n", "above the limit"),
    ("[[grid]]\ninput_size = [100000]\n", "above the limit"),
])
def test_absurd_values_in_a_space_file(tmp_path, monkeypatch, capsys, text, words):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SpaceError, match="bad.toml"):
        space.load(f)
    rc, _, err = cli(monkeypatch, capsys, "space", "show", f)
    one_line_error(rc, err, str(f), words)


def test_predict_on_absurd_values_is_one_line(tmp_path, monkeypatch, capsys, bundle):
    for width in ("inf", "1e9", "nan"):
        f = write_csv(tmp_path / "c.csv", [RESNET_ROW, {**RESNET_ROW, "width": width}])
        rc, _, err = cli(monkeypatch, capsys, "predict", "--model", bundle, "--configs", f, "--out", tmp_path / "p.csv")
        one_line_error(rc, err, "row 1", "width")
        assert not (tmp_path / "p.csv").exists()


def test_features_of_a_huge_batch_never_wrap_around():
    df = pd.DataFrame([{**RESNET_ROW, "batch": 10**12}, RESNET_ROW])
    f = features.compute(df)
    one = features.compute(pd.DataFrame([RESNET_ROW]))
    # int64 would wrap 8.2e19 FLOPs around silently; the table turns float64 instead
    assert f.flops.dtype == np.float64
    assert f.flops.iloc[0] == pytest.approx(one.flops.iloc[0] * 1e12, rel=1e-12)
    assert f.flops.iloc[1] == one.flops.iloc[0] and one.flops.dtype == np.int64
    with pytest.raises(ValueError, match="batch"):
        features.compute(pd.DataFrame([{**RESNET_ROW, "batch": 1e30}]))


def test_export_copes_with_any_stored_row(tmp_path, monkeypatch, capsys):
    """A failed row of an older CARB (width=inf passed its checks) never breaks the export."""
    import duckdb

    from carb.measure.base import Measurement
    from carb.campaign.store import Store

    path = tmp_path / "s.duckdb"
    good, bad = space.Config(**RESNET_ROW), space.Config(**{**RESNET_ROW, "depth": 32})
    with Store(path) as store:
        run = store.begin_run("cpu-1t", "cpu", {"synthetic": True}, "test")
        store.add(good, "cpu-1t", Measurement(status="error", message="synthetic"), run)
        store.add(bad, "cpu-1t", Measurement(status="error", message="synthetic"), run)
    con = duckdb.connect(str(path))
    con.execute("UPDATE measurements SET width = 'inf'::DOUBLE WHERE config_id = ?", [bad.config_id])
    con.close()
    out = tmp_path / "d.parquet"
    rc, _, err = cli(monkeypatch, capsys, "dataset", "export", "--store", path, "--out", out)
    assert rc == 0, err
    df = pd.read_parquet(out)
    assert len(df) == 2
    assert df.set_index("config_id").loc[good.config_id, "flops"] > 0
    assert np.isnan(df.set_index("config_id").loc[bad.config_id, "flops"])


# -- characterize --configs ---------------------------------------------------------------


def test_characterize_configs_refuses_missing_columns(tmp_path, monkeypatch, capsys):
    f = write_csv(tmp_path / "w.csv", [{"width": 0.25}, {"width": 0.5}])
    rc, _, err = cli(monkeypatch, capsys, "characterize", "--configs", f, "--store", tmp_path / "s.duckdb")
    one_line_error(rc, err, "missing columns", "family", "depth", "batch")
    assert not (tmp_path / "s.duckdb").exists()
    # classes may be left out (the family's default), as predict allows
    from carb.campaign.runner import read_config_file

    f = write_csv(tmp_path / "ok.csv", [RESNET_ROW])
    assert read_config_file(str(f)) == [space.Config(**RESNET_ROW)]


# -- constraints and space files ----------------------------------------------------------


@pytest.mark.parametrize("text, words", [
    ('constraints = ["depth / (batch - batch) > 1"]\n[[grid]]\ndepth = [20]\n', "ZeroDivisionError"),
    ('constraints = ["precision > 3"]\n[[grid]]\ndepth = [20]\n', "TypeError"),
    ('constraints = ["(batch * 1e300) ** 200 > 1"]\n[[grid]]\ndepth = [20]\n', "OverflowError"),
    ('constraints = ["batch ** 1000000000 > 1"]\n[[grid]]\ndepth = [20]\n', "exponent"),
    ('constraints = ["import os"]\n[[grid]]\ndepth = [20]\n', "not an expression"),
    ('constraints = ["__import__(1)"]\n[[grid]]\ndepth = [20]\n', "not allowed"),
    ('constraints = [5]\n[[grid]]\ndepth = [20]\n', "constraints must be a list of expression strings"),
    ("constraints = 5\n[[grid]]\ndepth = [20]\n", "constraints must be a list of expression strings"),
    ("grid = 5\n", "grid must be a table"),
    ("grid = [5]\n", "grid must be a table"),
    ("name = 5\n[[grid]]\ndepth = [20]\n", "name must be a string"),
])
def test_bad_constraints_and_grids_are_one_line(tmp_path, monkeypatch, capsys, text, words):
    f = tmp_path / "s.toml"
    f.write_text(text)
    rc, _, err = cli(monkeypatch, capsys, "space", "show", f)
    one_line_error(rc, err, str(f), words)


# -- --out under a file or onto a directory -----------------------------------------------


@pytest.mark.parametrize("cmd", [
    ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{out}"],
    ["dataset", "export", "--store", "{store}", "--out", "{out}"],
    ["fewshot", "--platform", "nope", "--out", "{out}"],
    ["evaluate", "--data", "cpu-1t", "--model", "{bundle}", "--json", "{out}"],
])
@pytest.mark.parametrize("where", ["under_a_file", "a_directory"])
def test_out_file_paths_are_checked(tmp_path, monkeypatch, capsys, bundle, cmd, where):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.csv").mkdir()
    store = tmp_path / "s.duckdb"
    out = tmp_path / "afile" / "o.csv" if where == "under_a_file" else tmp_path / "adir.csv"
    if cmd[0] == "evaluate" and where == "a_directory":
        out = tmp_path / "adir.csv"
    args = [a.format(bundle=bundle, out=out, store=store) for a in cmd]
    rc, _, err = cli(monkeypatch, capsys, *args)
    one_line_error(rc, err, "afile is a file" if where == "under_a_file" else "is a directory")
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("cmd", [
    ["train", "--data", "cpu-1t", "--out", "{out}"],
    ["screen", "--space", "tiny", "--target-model", "{bundle}", "--budget", "latency_ms=5", "--out", "{out}"],
    ["calibrate", "--model", "{bundle}", "--out", "{out}"],
    ["report", "--data", "cpu-1t", "--out", "{out}"],
    ["demo", "--out", "{out}"],
])
@pytest.mark.parametrize("where", ["under_a_file", "a_file"])
def test_out_directories_are_checked(tmp_path, monkeypatch, capsys, bundle, cmd, where):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "o" if where == "under_a_file" else tmp_path / "afile"
    rc, _, err = cli(monkeypatch, capsys, *[a.format(bundle=bundle, out=out) for a in cmd])
    one_line_error(rc, err, "afile is a file" if where == "under_a_file" else "is a file")
    assert (tmp_path / "afile").read_text() == "x"


def test_write_never_leaves_a_tmp(tmp_path):
    from carb.datasets import DatasetError, write

    (tmp_path / "d.csv").mkdir()
    with pytest.raises(DatasetError, match="is a directory"):
        write(pd.DataFrame([RESNET_ROW]), tmp_path / "d.csv")
    (tmp_path / "f").write_text("x")
    with pytest.raises(DatasetError, match="cannot create its folder"):
        write(pd.DataFrame([RESNET_ROW]), tmp_path / "f" / "d.csv")
    assert not list(tmp_path.rglob("*.tmp"))


# -- checksums of manifest.json and calibration.json --------------------------------------


def _edit_one_digit(path, after):
    """Change the first digit after the text ``after`` in a file (a one-digit edit)."""
    text = path.read_text()
    i = text.index(after) + len(after)
    while not text[i].isdigit():
        i += 1
    path.write_text(text[:i] + ("7" if text[i] != "7" else "3") + text[i + 1:])


@pytest.mark.parametrize("field", ['"weight": ', '"halfwidth": ', '"corrector_scale": ', '"coverage": '])
def test_a_one_digit_edit_of_the_manifest_fails_to_load(tmp_path, monkeypatch, capsys, bundle, field):
    import shutil

    from carb.model import BundleError, load

    d = tmp_path / "m"
    shutil.copytree(bundle, d)
    if field not in (d / "manifest.json").read_text():
        pytest.skip(f"no {field} in this bundle")
    _edit_one_digit(d / "manifest.json", field)
    with pytest.raises(BundleError, match="does not match its checksum"):
        load(d)
    rc, _, err = cli(monkeypatch, capsys, "predict", "--model", d, "--space", "tiny", "--out", tmp_path / "p.csv")
    one_line_error(rc, err, "manifest.json", "checksum")


def test_an_old_bundle_without_the_manifest_checksum_is_refused(tmp_path, bundle):
    import shutil

    from carb.model import BundleError, load

    d = tmp_path / "old"
    shutil.copytree(bundle, d)
    man = json.loads((d / "manifest.json").read_text())
    del man["manifest_sha256"]
    (d / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(BundleError, match="older carb.*retrain"):
        load(d)


def test_a_one_digit_edit_of_calibration_json_fails_to_load(tmp_path, monkeypatch, capsys, bundle):
    from carb.transfer.calibrate import fit_calibrated, load_predictor
    from carb.model import BundleError, load

    src = load(bundle)
    measured = synthetic(200, seed=3).head(12).copy()
    measured["latency_ms"] *= 1.7  # SYNTHETIC "new device"
    cal = fit_calibrated(src, measured)
    cal.save(tmp_path / "cal", source_dir=bundle)
    p = load_predictor(tmp_path / "cal").predict(measured)
    assert np.isfinite(p.latency_ms).all()
    _edit_one_digit(tmp_path / "cal" / "calibration.json", '"coef": [')
    with pytest.raises(BundleError, match="does not match its checksum"):
        load_predictor(tmp_path / "cal")
    rc, _, err = cli(monkeypatch, capsys, "predict", "--model", tmp_path / "cal", "--space", "tiny",
                     "--out", tmp_path / "p.csv")
    one_line_error(rc, err, "calibration.json", "checksum")


def test_train_checks_out_before_training_and_needs_force(tmp_path, monkeypatch, capsys, bundle):
    import shutil

    data = tmp_path / "d.parquet"
    synthetic(300).to_parquet(data)
    d = tmp_path / "m"
    shutil.copytree(bundle, d)
    before = (d / "manifest.json").read_text()
    rc, out, err = cli(monkeypatch, capsys, "train", "--data", data, "--preset", "fast", "--out", d)
    one_line_error(rc, err, "holds a model bundle", "--force")
    assert "training" not in out and (d / "manifest.json").read_text() == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    rc, _, err = cli(monkeypatch, capsys, "train", "--data", data, "--out", tmp_path / "other")
    one_line_error(rc, err, "not a CARB model bundle")
    rc, out, err = cli(monkeypatch, capsys, "train", "--data", data, "--preset", "fast", "--out", d, "--force")
    assert rc == 0, err
    assert (d / "manifest.json").read_text() != before


def test_train_learns_the_drift_corrected_latency_unless_told_raw(tmp_path, monkeypatch, capsys):
    # SYNTHETIC: the machine's speed index varied from row to row while "measuring"; the raw
    # medians are the clean latency divided by it, latency_ms_norm the clean latency
    from carb.model import load

    df = synthetic(300)
    speed = np.random.default_rng(1).uniform(0.7, 1.4, len(df))
    df["latency_ms_norm"], df["speed_index"] = df.latency_ms, speed
    df["sentinel_ms"], df["latency_ms"] = 1.0 / speed, df.latency_ms / speed
    # timed with the paired sentinel (the block ratios in the telemetry), but for the last 20 rows,
    # whose index came from readings between visits: those keep the raw median
    df["extra"] = [json.dumps({"pair_ratio": [1.0, 1.1]} if i < len(df) - 20 else {"rounds": 2})
                   for i in range(len(df))]
    from carb.campaign.speed import corrected

    c = corrected(df, paired_only=True)
    np.testing.assert_allclose(c.latency_ms[:-20], df.latency_ms_norm[:-20])
    np.testing.assert_allclose(c.latency_ms[-20:], df.latency_ms[-20:])
    np.testing.assert_allclose(corrected(df).latency_ms, df.latency_ms_norm)
    data = tmp_path / "d.parquet"
    df.to_parquet(data)
    err_vs = {}
    for how in ("corrected", "raw"):
        rc, out, err = cli(monkeypatch, capsys, "train", "--data", data, "--preset", "fast", "--out",
                           tmp_path / how, "--latency", how)
        assert rc == 0, err
        note = json.loads((tmp_path / how / "manifest.json").read_text())["training"]["latency"]
        assert note.startswith("drift-corrected" if how == "corrected" else "raw"), note
        assert how == "raw" or f"{len(df) - 20:,} of {len(df):,} rows" in note, note
        assert f"latency trained on: {note}" in " ".join(out.split())
        p = load(tmp_path / how).predict(df)["latency_ms"].to_numpy()
        err_vs[how] = np.median(np.abs(np.log(p / df.latency_ms_norm)))
    # the default learned the clean latency (in-sample, so small), raw learned the noisy one
    assert err_vs["corrected"] < 0.5 * err_vs["raw"], err_vs
    rc, out, err = cli(monkeypatch, capsys, "train", "--data", data, "--out", tmp_path / "x", "--latency", "fast")
    one_line_error(rc, err, "--latency fast", "corrected, raw")
    rc, out, err = cli(monkeypatch, capsys, "evaluate", "--model", tmp_path / "corrected", "--data", data,
                       "--latency", "raw")
    assert rc == 0 and "latency: raw medians" in out, err


# -- config ids: verified, and vectorized --------------------------------------------------


def test_vectorized_ids_equal_config_id_on_random_rows():
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(3000):
        if rng.random() < 0.7:
            block = str(rng.choice(["basic", "bottleneck"]))
            n = int(rng.integers(1, 40))
            r = {"family": "cifar", "block": block, "depth": (6 if block == "basic" else 9) * n + 2,
                 "early_downsample": bool(rng.random() < 0.5), "input_size": int(rng.integers(8, 600))}
        else:
            depth = int(rng.choice([18, 34, 50, 101, 152]))
            r = {"family": "imagenet", "block": "basic" if depth < 50 else "bottleneck", "depth": depth,
                 "early_downsample": False, "input_size": int(rng.integers(32, 600))}
        r.update(width=float(rng.choice([0.25, 0.5, 1.0, 2, 1 / 3, 0.123456789, 63.99999999, 1e-4, 7.0])),
                 batch=int(rng.choice([1, 7, 256, 10**12, 2**50])),
                 precision=str(rng.choice(["fp32", "fp16", "bf16"])),
                 classes=None if rng.random() < 0.5 else int(rng.integers(1, 5000)))
        rows.append(r)
    df = pd.DataFrame(rows)
    want = [space.Config(**r).config_id for r in rows]
    assert list(space.config_ids(df)) == want
    assert list(space.config_ids(df.drop(columns="classes").assign(classes=np.nan))) == \
        [space.Config(**{**r, "classes": None}).config_id for r in rows]
    # a bad row is named
    df.loc[17, "depth"] = 21
    with pytest.raises(SpaceError, match="row 17: depth"):
        space.config_ids(df)


def test_a_users_config_id_is_verified(tmp_path, monkeypatch, capsys, bundle):
    frame = space.load("tiny").to_frame()
    frame.to_csv(tmp_path / "good.csv", index=False)
    rc, _, err = cli(monkeypatch, capsys, "predict", "--model", bundle, "--configs", tmp_path / "good.csv",
                     "--out", tmp_path / "p.csv")
    assert rc == 0, err
    assert list(pd.read_csv(tmp_path / "p.csv").config_id) == list(frame.config_id)
    frame.loc[3, "config_id"] = "deadbeefdeadbeef"
    frame.to_csv(tmp_path / "bad.csv", index=False)
    rc, _, err = cli(monkeypatch, capsys, "predict", "--model", bundle, "--configs", tmp_path / "bad.csv",
                     "--out", tmp_path / "p2.csv")
    one_line_error(rc, err, "row 3", "deadbeefdeadbeef", "not the id of its parameters")
    rc, _, err = cli(monkeypatch, capsys, "characterize", "--configs", tmp_path / "bad.csv",
                     "--store", tmp_path / "s.duckdb")
    one_line_error(rc, err, "row 3", "not the id of its parameters")
    assert not (tmp_path / "s.duckdb").exists()


# -- a space too large to list --------------------------------------------------------------


BIG = """name = "big"
[[grid]]
depth = [20, 32, 44, 56, 110]
width = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
input_size = [16, 24, 32, 40, 48, 56, 64, 96, 128, 224]
batch = [%s]
precision = ["fp32", "fp16", "bf16"]
early_downsample = [true, false]
classes = [%s]
""" % (", ".join(map(str, range(1, 101))), ", ".join(map(str, range(1, 101))))  # 30,000,000 configs


def test_a_huge_space_says_its_size_up_front_and_samples_without_listing(tmp_path, monkeypatch, capsys, bundle):
    f = tmp_path / "big.toml"
    f.write_text(BIG)
    s = space.load(f)
    assert s.size_bound() == 30_000_000 and s.size_text() == "30,000,000 configs"
    assert repr(s) == "Space('big', 30,000,000 configs)"
    with pytest.raises(SpaceError, match="30,000,000 configs.*sample"):
        len(s)
    rc, out, err = cli(monkeypatch, capsys, "space", "show", f)
    assert rc == 0 and "30,000,000 configs" in out, err
    rc, _, err = cli(monkeypatch, capsys, "predict", "--model", bundle, "--space", f, "--out", tmp_path / "p.csv")
    one_line_error(rc, err, "30,000,000 configs", "--samples")
    rc, _, err = cli(monkeypatch, capsys, "characterize", "--space", f, "--store", tmp_path / "s.duckdb")
    one_line_error(rc, err, "30,000,000 configs")
    # a uniform sample never lists it: distinct, valid, reproducible
    a = s.sample(50, seed=1)
    assert len(set(a)) == 50 and a == s.sample(50, seed=1) and a != s.sample(50, seed=2)
    assert all(1 <= c.batch <= 100 and 1 <= c.classes <= 100 for c in a)
    with pytest.raises(SpaceError, match="uniform"):
        s.sample(5, method="stratified")
    # with a constraint the count is an upper bound, and the sample obeys it
    f.write_text(BIG.replace('name = "big"', 'name = "big"\nconstraints = ["batch <= 10"]'))
    c = space.load(f)
    assert c.size_text() == "at most 30,000,000 configs"
    assert all(x.batch <= 10 for x in c.sample(30, seed=0))


# -- validate --data on a screen of another space -------------------------------------------


def test_validate_truth_scores_only_the_screened_configs(tmp_path, monkeypatch, capsys, bundle):
    from carb import datasets

    out = tmp_path / "scr"
    rc, _, err = cli(monkeypatch, capsys, "screen", "--space", "tiny", "--target-model", bundle,
                     "--budget", "latency_ms=5", "--out", out)
    assert rc == 0, err
    truth = datasets.load("cpu-1t", features=False)
    tiny = set(space.load("tiny").to_frame().config_id)
    in_both = int((truth.config_id.isin(tiny) & (truth.status == "ok")).sum())
    assert 0 < in_both < len(truth)
    rc, stdout, err = cli(monkeypatch, capsys, "validate", "--screen", out, "--data", "cpu-1t", "--json")
    assert rc == 0, err
    res = json.loads(stdout)
    assert res["n"] == in_both and res["truth_rows_not_screened"] == len(truth) - int(truth.config_id.isin(tiny).sum())
    # a screen of a space the data never measured is refused
    f = tmp_path / "other.toml"
    f.write_text("[[grid]]\ndepth = [1202]\nwidth = [0.3]\n")
    rc, _, err = cli(monkeypatch, capsys, "screen", "--space", f, "--target-model", bundle,
                     "--budget", "latency_ms=1e9", "--out", tmp_path / "scr2")
    assert rc == 0, err
    rc, _, err = cli(monkeypatch, capsys, "validate", "--screen", tmp_path / "scr2", "--data", "cpu-1t")
    one_line_error(rc, err, "none of its", "screened space")


# -- predictions outside the training domain ----------------------------------------------


def test_extrapolated_rows_are_flagged_and_counted(tmp_path, monkeypatch, capsys, bundle):
    from carb.model import load

    model = load(bundle)  # trained on batch <= 32, fp32 and bf16 only (SYNTHETIC)
    inside = synthetic(400).iloc[0][list(RESNET_ROW)].to_dict()
    rows = [inside, {**inside, "batch": 256}, {**inside, "precision": "fp16"}, {**inside, "batch": 10**12}]
    with pytest.warns(UserWarning, match="3 of 4 rows lie outside the training domain"):
        pred = model.predict(pd.DataFrame(rows))
    assert list(pred.extrapolated) == [False, True, True, True]
    assert np.isfinite(pred.latency_ms).all()
    f = write_csv(tmp_path / "c.csv", rows)
    rc, out, err = cli(monkeypatch, capsys, "predict", "--model", bundle, "--configs", f, "--out", tmp_path / "p.csv")
    assert rc == 0, err
    assert "3 of 4 rows lie outside the training domain" in " ".join(out.split())
    assert list(pd.read_csv(tmp_path / "p.csv").extrapolated) == [False, True, True, True]


# -- stopping, resuming, stores in use, --remeasure ----------------------------------------


def _rounds_stored(path):
    from carb.campaign.store import Store

    if not path.exists():
        return 0
    try:
        with Store(path, read_only=True) as s:  # a snapshot while the campaign holds the lock
            return int(s.con.execute("SELECT count(*) FROM rounds").fetchone()[0])
    except Exception:
        return 0


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stopped_campaign_says_what_it_committed_and_how_to_resume(tmp_path, sig):
    """Real measurements of the `tiny` space in a subprocess, stopped after a few visits."""
    import signal
    import subprocess
    import time

    store = tmp_path / "s.duckdb"
    cmd = [sys.executable, "-m", "carb.cli", "characterize", "--space", "tiny", "--rounds", "3",
           "--max-time", "1.5", "--no-sentinel", "--store", str(store)]
    # SIGINT as a terminal sends it: a test runner started in the background (`cmd &` in a
    # script) passes SIGINT on ignored, and Python then installs no Ctrl-C handler, as a
    # background job should; the campaign would run to its end and exit 0
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while _rounds_stored(store) < 2 and time.time() < deadline and p.poll() is None:
        time.sleep(0.3)
    assert p.poll() is None, p.communicate()
    p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    line = [ln for ln in " ".join(err.split("\n")).split("interrupted: ")[1:]]
    assert line and "visit(s)" in line[0] and "run the same command again to resume" in line[0], err
    assert _rounds_stored(store) >= 2


def test_remeasure_on_a_fresh_store_says_what_it_did(tmp_path, monkeypatch, capsys):
    rc, _, err = cli(monkeypatch, capsys, "characterize", "--space", "tiny", "--samples", "1", "--remeasure",
                     "--rounds", "1", "--max-time", "0.1", "--no-sentinel", "--store", tmp_path / "s.duckdb")
    assert rc == 0, err
    text = " ".join(err.split())
    assert "--remeasure: 1 config(s) measured again into the remeasurements table" in text
    assert "1 of them had no first measurement there" in text


def test_remeasure_says_how_the_latency_repeated(tmp_path, monkeypatch, capsys):
    import json

    args = ["characterize", "--space", "tiny", "--samples", "1", "--rounds", "1", "--max-time", "0.1",
            "--no-sentinel", "--store", tmp_path / "s.duckdb"]
    assert cli(monkeypatch, capsys, *args)[0] == 0
    rc, out, err = cli(monkeypatch, capsys, *args, "--remeasure", "--json")
    assert rc == 0, err
    rep = json.loads(out)["remeasure"]
    # no sentinel here: the raw median and the fastest sample, no drift-corrected figure
    assert rep["configs"] == 1 and set(rep["latency"]) == {"raw", "fastest"}
    text = " ".join(err.split())
    assert "1 config(s) measured again" in text and "fastest sample (latency_ms_min)" in text
    # and the store says it later
    rc, out, _ = cli(monkeypatch, capsys, "dataset", "info", "--store", tmp_path / "s.duckdb", "--json")
    assert rc == 0 and json.loads(out)["remeasure"]["cpu-1t"]["latency"].keys() == {"raw", "fastest"}


def test_dataset_info_reads_a_snapshot_of_a_store_in_use(tmp_path, monkeypatch, capsys):
    import subprocess

    from carb.measure.base import Measurement
    from carb.campaign.store import Store

    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        run = store.begin_run("cpu-1t", "cpu", {"synthetic": True}, "test")
        store.add(space.Config(**RESNET_ROW), "cpu-1t", Measurement(status="error", message="synthetic"), run)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\n"
                               f"c = duckdb.connect({str(path)!r}); print('ok', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        with pytest.raises(Exception, match="in use"):
            Store(path)  # a writer is still refused
        rc, out, err = cli(monkeypatch, capsys, "dataset", "info", "--store", path)
        assert rc in (0, None), err
        assert "reading a snapshot" in err and "1 run(s)" in out
        with Store(path, read_only=True) as s:
            snap = s.snapshot
            assert snap is not None and snap.exists() and len(s.measurements()) == 1
        assert not snap.parent.exists()  # the private copy is removed on close
    finally:
        holder.kill()
        holder.wait()


# -- help texts, --budget, --margin ---------------------------------------------------------

COMMANDS = ["characterize", "screen", "calibrate", "validate", "demo", "train", "evaluate", "predict", "report",
            "fewshot", "space list", "space show", "dataset list", "dataset check", "dataset info",
            "dataset export"]


def test_version_and_short_help(monkeypatch, capsys):
    from carb import __version__

    rc, out, _ = cli(monkeypatch, capsys, "--version")
    assert rc == 0 and out.strip() == f"carb {__version__}"
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, _ = cli(monkeypatch, capsys, "-h")
    assert rc == 0 and "characterize" in out and "--version" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_h_an_example_and_clean_help(monkeypatch, capsys, command):
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, err = cli(monkeypatch, capsys, *command.split(), "-h")
    assert rc == 0, err
    assert f"Example: carb {command}" in out
    assert "<bool>" not in out and "%%" not in out
    if command == "characterize":
        assert "pip install 'carb[ray]'" in out and "95% CI" in out
    if command == "evaluate":
        assert "results[model][target][metric]" in out


def test_space_list_prints_full_descriptions(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, _ = cli(monkeypatch, capsys, "space", "list")
    assert rc == 0
    desc = " ".join(space.load("cpu").description.split())
    assert desc.split()[-1] in out and len(desc) > 80  # its last word: the whole text, not its first line


@pytest.mark.parametrize("args, words", [
    (["--budget", "latency_ms=5", "--budget", "latency_ms=7"], "--budget latency_ms given twice"),
    (["--budget", "latency_ms=5", "--margin", "-1"], "--margin -1: must be >= 0"),
])
def test_screen_refuses_repeated_budgets_and_negative_margins(tmp_path, monkeypatch, capsys, bundle, args, words):
    rc, _, err = cli(monkeypatch, capsys, "screen", "--space", "tiny", "--target-model", bundle, *args,
                     "--out", tmp_path / "o")
    one_line_error(rc, err, words)
    assert not (tmp_path / "o").exists()


def test_evaluate_refuses_repeated_budgets(monkeypatch, capsys, bundle):
    rc, _, err = cli(monkeypatch, capsys, "evaluate", "--data", "cpu-1t", "--model", bundle,
                     "--budget", "energy_j=1", "--budget", "energy_j=2")
    one_line_error(rc, err, "--budget energy_j given twice")


def test_screen_warns_in_one_line_about_extrapolated_rows(tmp_path, monkeypatch, capsys, bundle):
    f = tmp_path / "ext.toml"
    f.write_text('[[grid]]\ndepth = [20]\nbatch = [1, 256]\nprecision = ["fp16"]\n')
    import subprocess

    # a subprocess: pytest records warnings instead of letting the CLI print them
    p = subprocess.run([sys.executable, "-m", "carb.cli", "screen", "--space", str(f), "--target-model", str(bundle),
                        "--budget", "latency_ms=1e6", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=300)
    rc, err = p.returncode, p.stderr
    assert rc == 0, err
    assert "warning: CARB: 2 of 2 rows lie outside the training domain" in err
    assert "UserWarning" not in err
    assert pd.read_parquet(tmp_path / "o" / "shortlist.parquet")["extrapolated"].all()


def test_a_calibrated_model_carries_the_extrapolated_flag(tmp_path) -> None:
    """Synthetic rows (not measurements): a source trained on batch <= 8 only, calibrated,
    then asked about batch 256: the flag of the source comes through the calibration."""
    import warnings

    import numpy as np

    from carb.families import space
    from carb.transfer.calibrate import fit_calibrated
    from carb.model import CARB

    frame = space.load("cpu").to_frame()
    small = frame[frame.batch <= 8].head(80).reset_index(drop=True)
    df = small.assign(latency_ms=small.batch * small.depth * 0.01, memory_mb=10 + small.batch * 0.5, status="ok")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = CARB(preset="fast").fit(df)
        cal = fit_calibrated(src, df.head(6))
        big = frame[frame.batch > 8].head(3).reset_index(drop=True)
        p = cal.predict(big)
    assert "extrapolated" in p.columns and bool(np.all(p["extrapolated"]))


def test_precision_option_keeps_one_precision_of_the_space(tmp_path, monkeypatch, capsys, bundle):
    frame = space.load("cpu").to_frame()
    out = tmp_path / "scr"
    rc, _, err = cli(monkeypatch, capsys, "screen", "--space", "cpu", "--precision", "fp32", "--target-model", bundle,
                     "--budget", "latency_ms=5", "--out", out)
    assert rc == 0, err
    s = json.loads((out / "summary.json").read_text())
    assert s["candidates"] == int((frame.precision == "fp32").sum()) < len(frame) and s["precisions"] == ["fp32"]
    rc, _, err = cli(monkeypatch, capsys, "screen", "--space", "cpu", "--precision", "fp8", "--target-model", bundle,
                     "--budget", "latency_ms=5", "--out", tmp_path / "bad")
    one_line_error(rc, err, "--precision fp8", "bf16, fp32")
    # calibrate refuses it before measuring anything
    rc, _, err = cli(monkeypatch, capsys, "calibrate", "--model", bundle, "--precision", "fp8", "--samples", "3",
                     "--out", tmp_path / "cal")
    one_line_error(rc, err, "--precision fp8")
    assert not (tmp_path / "cal").exists() or not any((tmp_path / "cal").iterdir())
    rc, _, err = cli(monkeypatch, capsys, "demo", "--precision", "fp8", "--out", tmp_path / "demo")
    one_line_error(rc, err, "--precision fp8")
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())


@pytest.mark.parametrize("args,why", [
    (["--allocator", "jemalloc"], "--allocator: unknown value 'jemalloc'"),
    (["--allocator", "retain", "--device", "cuda"], "--allocator applies to --device cpu only"),
])
def test_characterize_refuses_a_bad_allocator(tmp_path, monkeypatch, capsys, args, why):
    rc, _, err = cli(monkeypatch, capsys, "characterize", "--space", "tiny", "--store", tmp_path / "s.duckdb", *args)
    assert rc == 2 and why in err and "Traceback" not in err
    assert not (tmp_path / "s.duckdb").exists()
