"""Every input of the `carb` commands is checked: bad input is one line ``error: ...`` and
exit code 2, never a traceback; rows outside a model's training domain are flagged. The CLI
runs in-process (the ``cli`` fixture) so that each case takes milliseconds; the models are
fitted on SYNTHETIC data."""

import json

import numpy as np
import pandas as pd
import pytest

from carb.families import features, space
from carb.families.space import SpaceError
from tests._helpers import RESNET_ROW, one_line_error, run_carb


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


@pytest.mark.parametrize(
    "text, words",
    [
        ("[[grid]]\nwidth = [inf]\n", "width = inf"),
        ("[[grid]]\nwidth = [1e9]\n", "width = 1000000000.0"),
        ("[[grid]]\nwidth = [nan]\n", "not a finite number"),
        ("[[grid]]\nbatch = [1_000_000_000_000_000_000]\n", "above the limit"),
        ("[[grid]]\ninput_size = [100000]\n", "above the limit"),
    ],
)
def test_absurd_values_in_a_space_file(tmp_path, cli, text, words):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SpaceError, match="bad.toml"):
        space.load(f)
    rc, _, err = cli("space", "show", f)
    one_line_error(rc, err, str(f), words)


def test_predict_on_absurd_values_is_one_line(tmp_path, cli, bundle):
    for width in ("inf", "1e9", "nan"):
        f = write_csv(tmp_path / "c.csv", [RESNET_ROW, {**RESNET_ROW, "width": width}])
        rc, _, err = cli("predict", "--model", bundle, "--configs", f, "--out", tmp_path / "p.csv")
        one_line_error(rc, err, "row 1", "width")
        assert not (tmp_path / "p.csv").exists()


def test_export_copes_with_any_stored_row(tmp_path, cli):
    """A failed row of an older CARB (width=inf passed its checks) never breaks the export."""
    import duckdb

    from carb.campaign.store import Store
    from carb.measure.base import Measurement

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
    rc, _, err = cli("dataset", "export", "--store", path, "--out", out)
    assert rc == 0, err
    df = pd.read_parquet(out)
    assert len(df) == 2
    assert df.set_index("config_id").loc[good.config_id, "flops"] > 0
    assert np.isnan(df.set_index("config_id").loc[bad.config_id, "flops"])


# -- characterize --configs ---------------------------------------------------------------


def test_characterize_configs_refuses_missing_columns(tmp_path, cli):
    f = write_csv(tmp_path / "w.csv", [{"width": 0.25}, {"width": 0.5}])
    rc, _, err = cli("characterize", "--configs", f, "--store", tmp_path / "s.duckdb")
    one_line_error(rc, err, "missing columns", "family", "depth", "batch")
    assert not (tmp_path / "s.duckdb").exists()
    # classes may be left out (the family's default), as predict allows
    from carb.campaign.runner import read_config_file

    f = write_csv(tmp_path / "ok.csv", [RESNET_ROW])
    assert read_config_file(str(f)) == [space.Config(**RESNET_ROW)]


# -- constraints and space files ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, words",
    [
        ('constraints = ["depth / (batch - batch) > 1"]\n[[grid]]\ndepth = [20]\n', "ZeroDivisionError"),
        ('constraints = ["precision > 3"]\n[[grid]]\ndepth = [20]\n', "TypeError"),
        ('constraints = ["(batch * 1e300) ** 200 > 1"]\n[[grid]]\ndepth = [20]\n', "OverflowError"),
        ('constraints = ["batch ** 1000000000 > 1"]\n[[grid]]\ndepth = [20]\n', "exponent"),
        ('constraints = ["import os"]\n[[grid]]\ndepth = [20]\n', "not an expression"),
        ('constraints = ["__import__(1)"]\n[[grid]]\ndepth = [20]\n', "not allowed"),
        ("constraints = [5]\n[[grid]]\ndepth = [20]\n", "constraints must be a list of expression strings"),
        ("constraints = 5\n[[grid]]\ndepth = [20]\n", "constraints must be a list of expression strings"),
        ("grid = 5\n", "grid must be a table"),
        ("grid = [5]\n", "grid must be a table"),
        ("name = 5\n[[grid]]\ndepth = [20]\n", "name must be a string"),
    ],
)
def test_bad_constraints_and_grids_are_one_line(tmp_path, cli, text, words):
    f = tmp_path / "s.toml"
    f.write_text(text)
    rc, _, err = cli("space", "show", f)
    one_line_error(rc, err, str(f), words)


# -- --out under a file or onto a directory -----------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{out}"],
        ["dataset", "export", "--store", "{store}", "--out", "{out}"],
        ["fewshot", "--platform", "nope", "--out", "{out}"],
        ["evaluate", "--data", "cpu-1t", "--model", "{bundle}", "--json", "{out}"],
    ],
)
@pytest.mark.parametrize("where", ["under_a_file", "a_directory"])
def test_out_file_paths_are_checked(tmp_path, cli, bundle, cmd, where):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir.csv").mkdir()
    store = tmp_path / "s.duckdb"
    out = tmp_path / "afile" / "o.csv" if where == "under_a_file" else tmp_path / "adir.csv"
    if cmd[0] == "evaluate" and where == "a_directory":
        out = tmp_path / "adir.csv"
    args = [a.format(bundle=bundle, out=out, store=store) for a in cmd]
    rc, _, err = cli(*args)
    one_line_error(rc, err, "afile is a file" if where == "under_a_file" else "is a directory")
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize(
    "cmd",
    [
        ["train", "--data", "cpu-1t", "--out", "{out}"],
        ["screen", "--space", "tiny", "--target-model", "{bundle}", "--budget", "latency_ms=5", "--out", "{out}"],
        ["calibrate", "--model", "{bundle}", "--out", "{out}"],
        ["report", "--data", "cpu-1t", "--out", "{out}"],
        ["demo", "--out", "{out}"],
    ],
)
@pytest.mark.parametrize("where", ["under_a_file", "a_file"])
def test_out_directories_are_checked(tmp_path, cli, bundle, cmd, where):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "o" if where == "under_a_file" else tmp_path / "afile"
    rc, _, err = cli(*[a.format(bundle=bundle, out=out) for a in cmd])
    one_line_error(rc, err, "afile is a file" if where == "under_a_file" else "is a file")
    assert (tmp_path / "afile").read_text() == "x"


# -- checksums of manifest.json and calibration.json --------------------------------------


def _edit_one_digit(path, after):
    """Change the first digit after the text ``after`` in a file (a one-digit edit)."""
    text = path.read_text()
    i = text.index(after) + len(after)
    while not text[i].isdigit():
        i += 1
    path.write_text(text[:i] + ("7" if text[i] != "7" else "3") + text[i + 1 :])


@pytest.mark.parametrize("field", ['"weight": ', '"halfwidth": ', '"corrector_scale": ', '"coverage": '])
def test_a_one_digit_edit_of_the_manifest_fails_to_load(tmp_path, cli, bundle, field):
    import shutil

    from carb.model import BundleError, load

    d = tmp_path / "m"
    shutil.copytree(bundle, d)
    if field not in (d / "manifest.json").read_text():
        pytest.skip(f"no {field} in this bundle")
    _edit_one_digit(d / "manifest.json", field)
    with pytest.raises(BundleError, match="does not match its checksum"):
        load(d)
    rc, _, err = cli("predict", "--model", d, "--space", "tiny", "--out", tmp_path / "p.csv")
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


def test_a_one_digit_edit_of_calibration_json_fails_to_load(tmp_path, cli, bundle):
    from carb.model import BundleError, load
    from carb.transfer.calibrate import fit_calibrated, load_predictor

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
    rc, _, err = cli("predict", "--model", tmp_path / "cal", "--space", "tiny", "--out", tmp_path / "p.csv")
    one_line_error(rc, err, "calibration.json", "checksum")


def test_train_checks_out_before_training_and_needs_force(tmp_path, cli, bundle):
    import shutil

    data = tmp_path / "d.parquet"
    synthetic(300).to_parquet(data)
    d = tmp_path / "m"
    shutil.copytree(bundle, d)
    before = (d / "manifest.json").read_text()
    rc, out, err = cli("train", "--data", data, "--preset", "fast", "--out", d)
    one_line_error(rc, err, "holds a model bundle", "--force")
    assert "training" not in out and (d / "manifest.json").read_text() == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    rc, _, err = cli("train", "--data", data, "--out", tmp_path / "other")
    one_line_error(rc, err, "not a CARB model bundle")
    rc, out, err = cli("train", "--data", data, "--preset", "fast", "--out", d, "--force")
    assert rc == 0, err
    assert (d / "manifest.json").read_text() != before


def test_train_learns_the_drift_corrected_latency_unless_told_raw(tmp_path, cli):
    # SYNTHETIC: the machine's speed index varied from row to row while "measuring"; the raw
    # medians are the clean latency divided by it, latency_ms_norm the clean latency
    from carb.model import load

    df = synthetic(300)
    speed = np.random.default_rng(1).uniform(0.7, 1.4, len(df))
    df["latency_ms_norm"], df["speed_index"] = df.latency_ms, speed
    df["sentinel_ms"], df["latency_ms"] = 1.0 / speed, df.latency_ms / speed
    # timed with the paired sentinel (the block ratios in the telemetry), but for the last 20 rows,
    # whose index came from readings between visits: those keep the raw median
    df["extra"] = [
        json.dumps({"pair_ratio": [1.0, 1.1]} if i < len(df) - 20 else {"rounds": 2}) for i in range(len(df))
    ]
    from carb.campaign.speed import corrected

    c = corrected(df, paired_only=True)
    np.testing.assert_allclose(c.latency_ms[:-20], df.latency_ms_norm[:-20])
    np.testing.assert_allclose(c.latency_ms[-20:], df.latency_ms[-20:])
    np.testing.assert_allclose(corrected(df).latency_ms, df.latency_ms_norm)
    data = tmp_path / "d.parquet"
    df.to_parquet(data)
    err_vs = {}
    for how in ("corrected", "raw"):
        rc, out, err = cli("train", "--data", data, "--preset", "fast", "--out", tmp_path / how, "--latency", how)
        assert rc == 0, err
        note = json.loads((tmp_path / how / "manifest.json").read_text())["training"]["latency"]
        assert note.startswith("drift-corrected" if how == "corrected" else "raw"), note
        assert how == "raw" or f"{len(df) - 20:,} of {len(df):,} rows" in note, note
        assert f"latency trained on: {note}" in " ".join(out.split())
        p = load(tmp_path / how).predict(df)["latency_ms"].to_numpy()
        err_vs[how] = np.median(np.abs(np.log(p / df.latency_ms_norm)))
    # the default learned the clean latency (in-sample, so small), raw learned the noisy one
    assert err_vs["corrected"] < 0.5 * err_vs["raw"], err_vs
    rc, out, err = cli("train", "--data", data, "--out", tmp_path / "x", "--latency", "fast")
    one_line_error(rc, err, "--latency fast", "corrected, raw")
    rc, out, err = cli("evaluate", "--model", tmp_path / "corrected", "--data", data, "--latency", "raw")
    assert rc == 0 and "latency: raw medians" in out, err


# -- a user's config ids are verified -------------------------------------------------------


def test_a_users_config_id_is_verified(tmp_path, cli, bundle):
    frame = space.load("tiny").to_frame()
    frame.to_csv(tmp_path / "good.csv", index=False)
    rc, _, err = cli("predict", "--model", bundle, "--configs", tmp_path / "good.csv", "--out", tmp_path / "p.csv")
    assert rc == 0, err
    assert list(pd.read_csv(tmp_path / "p.csv").config_id) == list(frame.config_id)
    frame.loc[3, "config_id"] = "deadbeefdeadbeef"
    frame.to_csv(tmp_path / "bad.csv", index=False)
    rc, _, err = cli("predict", "--model", bundle, "--configs", tmp_path / "bad.csv", "--out", tmp_path / "p2.csv")
    one_line_error(rc, err, "row 3", "deadbeefdeadbeef", "not the id of its parameters")
    rc, _, err = cli("characterize", "--configs", tmp_path / "bad.csv", "--store", tmp_path / "s.duckdb")
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


def test_a_huge_space_says_its_size_up_front_and_samples_without_listing(tmp_path, cli, bundle):
    f = tmp_path / "big.toml"
    f.write_text(BIG)
    s = space.load(f)
    assert s.size_bound() == 30_000_000 and s.size_text() == "30,000,000 configs"
    assert repr(s) == "Space('big', 30,000,000 configs)"
    with pytest.raises(SpaceError, match="30,000,000 configs.*sample"):
        len(s)
    rc, out, err = cli("space", "show", f)
    assert rc == 0 and "30,000,000 configs" in out, err
    rc, _, err = cli("predict", "--model", bundle, "--space", f, "--out", tmp_path / "p.csv")
    one_line_error(rc, err, "30,000,000 configs", "--samples")
    rc, _, err = cli("characterize", "--space", f, "--store", tmp_path / "s.duckdb")
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


def test_validate_truth_scores_only_the_screened_configs(tmp_path, cli, bundle):
    from carb import datasets

    out = tmp_path / "scr"
    rc, _, err = cli("screen", "--space", "tiny", "--target-model", bundle, "--budget", "latency_ms=5", "--out", out)
    assert rc == 0, err
    truth = datasets.load("cpu-1t", features=False)
    tiny = set(space.load("tiny").to_frame().config_id)
    in_both = int((truth.config_id.isin(tiny) & (truth.status == "ok")).sum())
    assert 0 < in_both < len(truth)
    rc, stdout, err = cli("validate", "--screen", out, "--data", "cpu-1t", "--json")
    assert rc == 0, err
    res = json.loads(stdout)
    assert res["n"] == in_both and res["truth_rows_not_screened"] == len(truth) - int(truth.config_id.isin(tiny).sum())
    # a screen of a space the data never measured is refused
    f = tmp_path / "other.toml"
    f.write_text("[[grid]]\ndepth = [1202]\nwidth = [0.3]\n")
    rc, _, err = cli(
        "screen", "--space", f, "--target-model", bundle, "--budget", "latency_ms=1e9", "--out", tmp_path / "scr2"
    )
    assert rc == 0, err
    rc, _, err = cli("validate", "--screen", tmp_path / "scr2", "--data", "cpu-1t")
    one_line_error(rc, err, "none of its", "screened space")


# -- predictions outside the training domain ----------------------------------------------


def test_extrapolated_rows_are_flagged_and_counted(tmp_path, cli, bundle):
    from carb.model import load

    model = load(bundle)  # trained on batch <= 32, fp32 and bf16 only (SYNTHETIC)
    inside = synthetic(400).iloc[0][list(RESNET_ROW)].to_dict()
    rows = [inside, {**inside, "batch": 256}, {**inside, "precision": "fp16"}, {**inside, "batch": 10**12}]
    with pytest.warns(UserWarning, match="3 of 4 rows lie outside the training domain"):
        pred = model.predict(pd.DataFrame(rows))
    assert list(pred.extrapolated) == [False, True, True, True]
    assert np.isfinite(pred.latency_ms).all()
    f = write_csv(tmp_path / "c.csv", rows)
    rc, out, err = cli("predict", "--model", bundle, "--configs", f, "--out", tmp_path / "p.csv")
    assert rc == 0, err
    assert "3 of 4 rows lie outside the training domain" in " ".join(out.split())
    assert list(pd.read_csv(tmp_path / "p.csv").extrapolated) == [False, True, True, True]


# -- --budget, --margin, --precision, --allocator ---------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "latency_ms=5", "--budget", "latency_ms=7"], "--budget latency_ms given twice"),
        (["--budget", "latency_ms=5", "--margin", "-1"], "--margin -1: must be >= 0"),
    ],
)
def test_screen_refuses_repeated_budgets_and_negative_margins(tmp_path, cli, bundle, args, words):
    rc, _, err = cli("screen", "--space", "tiny", "--target-model", bundle, *args, "--out", tmp_path / "o")
    one_line_error(rc, err, words)
    assert not (tmp_path / "o").exists()


def test_evaluate_refuses_repeated_budgets(cli, bundle):
    rc, _, err = cli(
        "evaluate", "--data", "cpu-1t", "--model", bundle, "--budget", "energy_j=1", "--budget", "energy_j=2"
    )
    one_line_error(rc, err, "--budget energy_j given twice")


def test_screen_warns_in_one_line_about_extrapolated_rows(tmp_path, bundle):
    f = tmp_path / "ext.toml"
    f.write_text('[[grid]]\ndepth = [20]\nbatch = [1, 256]\nprecision = ["fp16"]\n')
    # a subprocess: pytest records warnings instead of letting the CLI print them
    p = run_carb(
        "screen", "--space", f, "--target-model", bundle, "--budget", "latency_ms=1e6", "--out", tmp_path / "o"
    )
    rc, err = p.returncode, p.stderr
    assert rc == 0, err
    assert "warning: CARB: 2 of 2 rows lie outside the training domain" in err
    assert "UserWarning" not in err
    assert pd.read_parquet(tmp_path / "o" / "shortlist.parquet")["extrapolated"].all()


def test_precision_option_keeps_one_precision_of_the_space(tmp_path, cli, bundle):
    frame = space.load("cpu").to_frame()
    out = tmp_path / "scr"
    rc, _, err = cli(
        "screen",
        "--space",
        "cpu",
        "--precision",
        "fp32",
        "--target-model",
        bundle,
        "--budget",
        "latency_ms=5",
        "--out",
        out,
    )
    assert rc == 0, err
    s = json.loads((out / "summary.json").read_text())
    assert s["candidates"] == int((frame.precision == "fp32").sum()) < len(frame) and s["precisions"] == ["fp32"]
    rc, _, err = cli(
        "screen",
        "--space",
        "cpu",
        "--precision",
        "fp8",
        "--target-model",
        bundle,
        "--budget",
        "latency_ms=5",
        "--out",
        tmp_path / "bad",
    )
    one_line_error(rc, err, "--precision fp8", "bf16, fp32")
    # calibrate refuses it before measuring anything
    rc, _, err = cli("calibrate", "--model", bundle, "--precision", "fp8", "--samples", "3", "--out", tmp_path / "cal")
    one_line_error(rc, err, "--precision fp8")
    assert not (tmp_path / "cal").exists() or not any((tmp_path / "cal").iterdir())
    rc, _, err = cli("demo", "--precision", "fp8", "--out", tmp_path / "demo")
    one_line_error(rc, err, "--precision fp8")
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())


@pytest.mark.parametrize(
    "args,why",
    [
        (["--allocator", "jemalloc"], "--allocator: unknown value 'jemalloc'"),
        (["--allocator", "retain", "--device", "cuda"], "--allocator applies to --device cpu only"),
    ],
)
def test_characterize_refuses_a_bad_allocator(tmp_path, cli, args, why):
    rc, _, err = cli("characterize", "--space", "tiny", "--store", tmp_path / "s.duckdb", *args)
    assert rc == 2 and why in err and "Traceback" not in err
    assert not (tmp_path / "s.duckdb").exists()
