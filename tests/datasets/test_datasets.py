"""Dataset files: validation on load, `carb dataset check`, the shipped-dataset registry.
The tables here are SYNTHETIC (made-up targets) unless they come from carb/data."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from carb import datasets
from carb.datasets import DatasetError
from carb.families import space
from tests._helpers import RESNET_ROW, ROOT, run_carb


def synthetic(n=8):
    df = space.load("tiny").to_frame().head(n)
    df.insert(1, "device", "synthetic")
    df["status"] = "ok"
    df["message"] = ""
    df["latency_ms"] = np.linspace(1, 2, len(df))
    df["latency_ms_cov"] = 0.05
    df["latency_ms_ci_rel"] = 0.01
    df["memory_mb"] = 20.0
    df["energy_j"] = np.nan
    df["energy_missing_reason"] = "synthetic: no sensor"
    return df


def test_read_validates_and_load_adds_features(tmp_path):
    p = tmp_path / "d.parquet"
    synthetic().to_parquet(p)
    df = datasets.load(str(p))
    assert len(df) == 8 and (df.flops > 0).all()
    assert datasets.check(df).empty


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d.drop(columns="latency_ms"), "missing column 'latency_ms'"),
        (lambda d: d.assign(status=["ok"] * 7 + ["weird"]), "unknown status 'weird'"),
        (lambda d: d.assign(config_id=["0" * 16] + list(d.config_id[1:])), "does not match its parameters"),
        (lambda d: d.assign(depth=[9] + list(d.depth[1:])), "depth: 9 is not 6n+2"),
        (lambda d: d.assign(memory_mb="lots"), "column 'memory_mb' is not numeric"),
    ],
)
def test_broken_files_say_what_is_wrong(tmp_path, mutate, words):
    p = tmp_path / "d.parquet"
    mutate(synthetic()).to_parquet(p)
    with pytest.raises(DatasetError) as e:
        datasets.read(p)
    assert words in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_corrupt_and_unknown(tmp_path):
    p = tmp_path / "d.parquet"
    p.write_bytes(b"PAR1 not really")
    with pytest.raises(DatasetError, match="not a readable parquet file"):
        datasets.read(p)
    with pytest.raises(DatasetError, match="no such dataset"):
        datasets.load("nope")


def test_check_finds_each_kind_of_problem():
    d = synthetic()
    d = pd.concat([d, d.head(1)], ignore_index=True)  # a duplicate
    d.loc[1, "status"], d.loc[1, "message"] = "oom", "synthetic OOM"
    d.loc[2, "memory_mb"] = np.nan
    d.loc[3, "energy_missing_reason"] = None  # energy missing without a reason
    d.loc[4, "latency_ms_cov"] = 0.5
    d.loc[5, "latency_ms_ci_rel"] = 0.2
    problems = datasets.check(d)
    assert problems.problem.value_counts().to_dict() == {"duplicate": 1, "failed": 1, "missing target": 2, "noisy": 2}


def test_cli_check_exit_codes(tmp_path, cli):
    """The exit code that says a file has problems from a process, as a script reads it; the others in-process."""
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    synthetic().to_parquet(good)
    d = synthetic()
    d.loc[0, "status"] = "timeout"
    d.to_parquet(bad)

    assert cli("dataset", "check", good)[0] == 0
    r = run_carb("dataset", "check", bad)
    assert r.returncode == 1 and "timeout" in r.stdout
    rc, _, err = cli("dataset", "check", tmp_path / "missing.parquet")
    assert rc == 2 and err.startswith("error: ")


def test_registry_lists_shipped_datasets():
    names = {d.name for d in datasets.list()}
    assert "help-fbnet" in names
    for d in datasets.list():
        if d.name != "help-fbnet":
            # every shipped CARB dataset passes validation; nb201's 640,625 rows without their
            # features (15 s: the same closed form as its one-device load in test_nb201)
            df = datasets.load(d.name, features=d.name != "nb201")
            assert len(df) == d.rows
            if "platform" not in df.columns:  # our campaigns: one platform, named as the dataset
                assert set(df.device) == {d.name}


def test_shipped_speed_index_is_consistent_and_the_old_datasets_say_they_have_none():
    # cpu-avx2-1t was measured with the speed sentinel: every row carries its sentinel reading,
    # the index (reference / reading) and the latency at the campaign's median speed, and the
    # card shows the index; cpu-1t / cpu-2t predate the sentinel and their cards say so
    df = datasets.load("cpu-avx2-1t", features=False)
    ok = df[df.status == "ok"]
    assert len(ok) == 592 and set(ok.precision) == {"fp32"}
    assert ok[["sentinel_ms", "speed_index", "latency_ms_norm"]].notna().all().all()
    np.testing.assert_allclose(ok.latency_ms_norm, ok.latency_ms * ok.speed_index, rtol=1e-9)
    # the index is the machine's speed relative to the campaign's median: centred on 1
    assert 0.9 < ok.speed_index.median() < 1.1 and ok.speed_index.std() > 0
    from importlib import resources

    data = resources.files("carb") / "data"
    card = (data / "cpu-avx2-1t.md").read_text()
    assert "cpu-avx2-1t-speed.png" in card and (data / "cpu-avx2-1t-speed.png").is_file()
    for old in ("cpu-1t", "cpu-2t"):
        assert "no speed index" in (data / f"{old}.md").read_text()
        assert "speed_index" not in datasets.load(old, features=False).columns


def test_cpu_avx2_2t_pools_each_round_from_the_campaigns_state_as_its_card_says():
    # cpu-avx2-2t: cpu-avx2-1t's 592 configs again at 2 threads, with carb characterize's
    # retakes. The card's retakes line and the rows must agree: the retakes stored equal the
    # rows' `extra.retakes`, only retaken rows were pooled anew, and the pooled rounds still
    # beyond x1.25 of the state are the ones the card says were left as measured.
    import json
    import re
    from importlib import resources

    df = datasets.load("cpu-avx2-2t", features=False)
    assert len(df) == 592 and set(df.status) == {"ok"} and set(df.precision) == {"fp32"}
    assert set(df.config_id) == set(datasets.load("cpu-avx2-1t", features=False).config_id)
    assert df[["sentinel_ms", "speed_index", "latency_ms_norm"]].notna().all().all()
    card = (resources.files("carb") / "data" / "cpu-avx2-2t.md").read_text()
    m = re.search(
        r"x([\d.]+) of the campaign's state \(([\d.]+) ms.*?: (\d+) of (\d+) first visits.*?(\d+) retakes, "
        r"(\d+) back in the state, (\d+) left as measured",
        card,
    )
    assert m, "the card has no retakes line"
    factor, ref = float(m[1]), float(m[2])
    off, n, visits, back, left = (int(m[i]) for i in range(3, 8))
    assert n == 2 * 592 and off == back + left and visits >= off
    extra = df.extra.map(json.loads)
    retakes = extra.map(lambda e: e.get("retakes", 0))
    assert retakes.sum() == visits
    pooled = extra.map(lambda e: e.get("pooled_visits"))
    assert (pooled.notna() == (retakes > 0)).all()
    assert all(len(p) == 2 for p in pooled.dropna())
    dist = np.abs(np.log(np.concatenate([e["round_sentinel_ms"] for e in extra]) / ref))
    # the card rounds the state to 3 decimals: a round on the edge may fall either side
    edge = 0.002
    assert (dist > np.log(factor) + edge).sum() <= left <= (dist > np.log(factor) - edge).sum()


@pytest.mark.parametrize("rows", [300, 1500])  # row by row, and once per distinct config (>= 1,000 rows)
def test_a_dataset_of_another_family_reads_back_by_path(tmp_path, rows):
    # nb201 rows (real, from the shipped public data) written to a file: read() asks for the
    # family's own parameters (edge_0 .. edge_5 ...), not the ResNets'; load(path) adds the
    # family's features, equal to those of load("nb201")
    ref = datasets.load("nb201", device="edgegpu")
    part = ref.groupby("dataset", group_keys=False).head(rows // 3).reset_index(drop=True)
    from carb.families import nb201

    p = tmp_path / "nb.parquet"
    part.drop(columns=nb201.FEATURE_COLUMNS).to_parquet(p, index=False)
    back = datasets.read(p)
    assert len(back) == rows and list(back.config_id) == list(part.config_id)
    loaded = datasets.load(str(p))
    pd.testing.assert_frame_equal(loaded[nb201.FEATURE_COLUMNS], part[nb201.FEATURE_COLUMNS], check_dtype=False)
    bad = part.drop(columns=nb201.FEATURE_COLUMNS)
    bad.loc[rows - 2, "edge_2"] = "conv"
    bad.to_parquet(p, index=False)
    with pytest.raises(DatasetError, match=f"row {rows - 2}: edges\\[2\\]: unknown operation 'conv'"):
        datasets.read(p)
    bad = part.drop(columns=nb201.FEATURE_COLUMNS)
    bad.loc[rows - 1, "config_id"] = "0" * 16
    bad.to_parquet(p, index=False)
    with pytest.raises(DatasetError, match=f"row {rows - 1}: config_id '0{{16}}' does not match"):
        datasets.read(p)
    part.drop(columns=["edge_3"]).to_parquet(p, index=False)
    with pytest.raises(DatasetError, match="missing column 'edge_3' .*edge_0, edge_1"):
        datasets.read(p)


def test_shipped_h200_has_measured_energy_that_adds_up():
    # h200: every row has energy from the GPU's counter; net = gross - idle power x
    # latency (per window) with the idle power the store recorded; each row's busy power (gross energy /
    # latency) lies between the idle power and the power limit and within 10% of the power
    # sampled while it ran; clocks are recorded (not locked) and whole architectures were
    # measured at several batches
    import json

    df = datasets.load("h200", features=False)
    ok = df[df.status == "ok"]
    assert len(ok) >= 150 and ok[["energy_j", "energy_gross_j", "latency_ms", "memory_mb"]].notna().all().all()
    extra = ok.extra.map(json.loads)
    idle = extra.map(lambda d: d["idle_power_w"])
    # per window exactly; the stored figures are medians over the windows, so within a few % of gross
    assert ((ok.energy_j - (ok.energy_gross_j - idle * ok.latency_ms / 1e3)).abs() <= 0.05 * ok.energy_gross_j).all()
    busy = ok.energy_gross_j / (ok.latency_ms / 1e3)
    assert (busy > idle * 0.95).all() and (busy < 700).all()
    sampled = extra.map(lambda d: d["power_w"])
    assert ((busy - sampled).abs() / sampled).max() <= 0.10
    assert not extra.map(lambda d: d["clock_locked"]).any() and extra.map(lambda d: d["sm_clock_mhz"]).notna().all()
    keys = ["block", "depth", "width", "early_downsample", "input_size", "precision"]
    assert (ok.groupby(keys).batch.nunique() >= 4).all() and set(ok.batch) == {1, 8, 32, 128, 256}
    from importlib import resources

    card = (resources.files("carb") / "data" / "h200.md").read_text()
    assert "not locked" in card and "every config's own energy check" in card


def test_h200_card_and_rows_rebuild_from_the_kept_store(tmp_path):
    # the shipped h200 dataset is the device run's store (kept in benchmarks/results) through
    # scripts/ship.py dataset: rebuilding it gives the same rows and the same card (but the
    # date it was generated)
    from importlib import resources

    run = ROOT / "benchmarks" / "results" / "h200-2026-12-04"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "ship.py"),
            "dataset",
            "--store",
            str(run / "h200.duckdb"),
            "--name",
            "h200",
            "--validation",
            str(run / "validate.json"),
            "--code-commit",
            "6cba329",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    data = resources.files("carb") / "data"
    strip = lambda text: [ln for ln in text.splitlines() if not ln.startswith("Generated by")]  # noqa: E731
    assert strip((tmp_path / "h200.md").read_text()) == strip((data / "h200.md").read_text())
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "h200.parquet"), pd.read_parquet(data / "h200.parquet"))


def test_dataset_info_on_a_gpu_store_says_which_gpu_clocks_and_counter():
    # the H200 run's store (kept unedited): info names the GPU, that clocks were not locked
    # and why, the energy counter's period and window, and why there is no speed index
    r = run_carb("dataset", "info", "--store", ROOT / "benchmarks" / "results" / "h200-2026-12-04" / "h200.duckdb")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())  # the console wraps long lines
    assert "GPU NVIDIA H200 (driver 580.159.04" in out and "clocks not locked (lock_clocks=False" in out
    assert "energy counter every 100 ms, windows of >= 4 updates; idle 122.8 W subtracted" in out
    assert "host CPU Intel" in out and "GPU campaigns take no sentinel readings" in out


def test_write_never_leaves_a_tmp(tmp_path):
    from carb.datasets import DatasetError, write

    (tmp_path / "d.csv").mkdir()
    with pytest.raises(DatasetError, match="is a directory"):
        write(pd.DataFrame([RESNET_ROW]), tmp_path / "d.csv")
    (tmp_path / "f").write_text("x")
    with pytest.raises(DatasetError, match="cannot create its folder"):
        write(pd.DataFrame([RESNET_ROW]), tmp_path / "f" / "d.csv")
    assert not list(tmp_path.rglob("*.tmp"))
