"""HELP's FBNet data: the packaged files, the loader's checks, and a small version of the
few-shot protocol that carb.transfer must pass (one target, one seed, three sources)."""

import shutil
from importlib import resources

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from carb.datasets import help_fbnet as hf
from carb.transfer import fit_fewshot

PASSTHROUGH = ["macs_m", "pw_macs_m", "dw_macs_m", "params_m", "activations_m", "convs"]


@pytest.fixture(scope="module")
def wide() -> pd.DataFrame:
    return hf.load(wide=True)


def test_files_are_package_resources():
    root = resources.files("carb") / "data" / "help_fbnet"
    for name in ("archs.parquet", "latency.parquet", "reference_archs.parquet", "LICENSE", "README.md"):
        assert (root / name).is_file(), name
    assert "MIT License" in (root / "LICENSE").read_text()


def test_long_form_rows_and_columns():
    df = hf.load()
    assert len(df) == 5000 * 27
    assert list(df.columns[:25]) == ["arch_id", "device", "latency_ms", *hf.LAYER_COLUMNS]
    assert df.groupby("device").size().eq(5000).all()
    assert df["arch_id"].nunique() == 5000 and df["arch_id"].between(0, 4999).all()
    assert (df["latency_ms"] > 0).all()
    for c in ("n_skip", "layer_00_kernel", "layer_21_groups", "macs_m", "params_m", "convs"):
        assert c in df.columns
    assert df[[f"n_{op}" for op in hf.OPS]].sum(axis=1).eq(22).all()
    # a skip layer has no kernel, expansion or groups of its own
    skip = df["layer_05"] == "skip"
    assert (df.loc[skip, "layer_05_kernel"] == 0).all() and (df.loc[~skip, "layer_05_kernel"] > 0).all()


def test_wide_form_and_protocol_constants(wide):
    assert len(wide) == 5000
    lat = [c for c in wide.columns if c.startswith("latency_ms_")]
    assert len(lat) == 27 and wide[lat].notna().all().all()
    devices = set(hf.devices())
    assert len(devices) == 27
    groups = [set(hf.SOURCE_DEVICES), set(hf.VALIDATION_DEVICES), set(hf.TARGET_DEVICES)]
    assert all(g <= devices for g in groups)
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    assert set(hf.HELP_RESULTS) == set(hf.TARGET_DEVICES)
    ref = hf.reference_arch_ids()
    assert len(ref) == 10 == len(set(ref)) and all(i in hf.TRAIN_ARCH_IDS for i in ref)


def test_block_counts_make_eyeriss_a_lookup_table(wide):
    """Eyeriss latency is a sum of per-layer costs in the published data: exactly linear
    in the (slot, op) counts. Wrong layer geometry or op order would break this."""
    counts = hf.block_counts(wide)
    assert counts.shape == (5000, 108) and counts.sum(axis=1).eq(22).all()
    X = np.column_stack([counts.to_numpy(float), np.ones(5000)])
    y = wide["latency_ms_eyeriss"].to_numpy()
    resid = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
    assert 1 - resid.var() / y.var() > 0.9999


def _copy_data(tmp_path):
    src = resources.files("carb") / "data" / "help_fbnet"
    for name in ("archs.parquet", "latency.parquet", "reference_archs.parquet"):
        shutil.copyfile(str(src / name), tmp_path / name)
    return tmp_path


def _one_line_error(tmp_path, filename):
    with pytest.raises(ValueError) as info:
        hf.load(data_dir=tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and filename in msg
    return msg


def test_corrupt_file_gives_one_line_error(tmp_path):
    d = _copy_data(tmp_path)
    (d / "latency.parquet").write_bytes(b"PAR1 this is not parquet")
    assert "not a readable Parquet file" in _one_line_error(d, "latency.parquet")


def test_schema_and_id_errors(tmp_path):
    d = _copy_data(tmp_path)
    archs = pd.read_parquet(d / "archs.parquet")
    archs.drop(columns="layer_07").to_parquet(d / "archs.parquet")
    assert "layer_07" in _one_line_error(d, "archs.parquet")

    archs.assign(layer_03=archs["layer_03"].where(archs.index != 5, "k7_e9")).to_parquet(d / "archs.parquet")
    assert "k7_e9" in _one_line_error(d, "archs.parquet")

    archs.to_parquet(d / "archs.parquet")
    lat = pd.read_parquet(d / "latency.parquet")
    lat.assign(arch_id=lat["arch_id"].where(lat.index != 0, 99999)).to_parquet(d / "latency.parquet")
    assert "99999" in _one_line_error(d, "latency.parquet")

    lat.to_parquet(d / "latency.parquet")
    pd.DataFrame({"arch_id": [1, 1, 2]}).to_parquet(d / "reference_archs.parquet")
    _one_line_error(d, "reference_archs.parquet")

    (d / "reference_archs.parquet").unlink()
    assert "missing" in _one_line_error(d, "reference_archs.parquet")


def test_small_help_protocol(wide):
    """HELP's protocol shrunk: fpga, seed 0, three published source devices trained on
    arch 0..999; 10 reference + 10 random target measurements; Spearman on 4000..4999.
    Measured 0.980 (0.893 without the passthrough cost features; HELP 0.892, the README
    baseline 0.927), so 0.95 fails if the map or its features break."""
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[PASSTHROUGH]], axis=1)
    y = {d: wide[f"latency_ms_{d}"].to_numpy() for d in ("silver_4114", "1080ti_1", "samsung_a50", "fpga")}
    ref = np.array(hf.reference_arch_ids())
    rng = np.random.default_rng(0)
    idx = np.concatenate([ref, rng.choice(np.setdiff1d(np.arange(4000), ref), 10, replace=False)])
    model = fit_fewshot(
        X.iloc[:1000],
        {d: y[d][:1000] for d in ("silver_4114", "1080ti_1", "samsung_a50")},
        X.iloc[idx],
        y["fpga"][idx],
        passthrough=PASSTHROUGH,
        source_columns=list(counts.columns),
    )
    assert model.method_ == "nnls"
    rho = spearmanr(model.predict(X.iloc[4000:]), y["fpga"][4000:])[0]
    assert rho > 0.95, rho


def test_static_features_agree_with_the_analytic_totals(wide):
    """load() carries carb.families.fbnet's exact features; help_fbnet's own MAC total is exactly half
    of the FlopCounterMode-exact FLOPs, and its parameter total lacks only BN's weights and
    biases and the classifier's bias."""
    for c in hf.FEATURE_COLUMNS:
        assert c in wide.columns and wide[c].notna().all(), c
    macs = np.rint(wide["macs_m"].to_numpy() * 1e6).astype(np.int64)
    assert (wide["flops"].to_numpy() == 2 * macs).all()
    assert (wide["convs"] == wide["n_conv"] + 1).all()
    bn_channels = ((wide["model_bytes"] - 8 * wide["n_bn"]) // 4 - wide["params"]) // 2  # fp32 state
    params = np.rint(wide["params_m"].to_numpy() * 1e6).astype(np.int64)
    assert (wide["params"].to_numpy() - params == 2 * bn_channels.to_numpy() + hf.CLASSES).all()
    full = hf.features(wide.iloc[:5])
    assert (full["flops"] == wide["flops"].iloc[:5]).all() and "n_skip" in full.columns
