"""The `carb` command end to end, on this machine's CPU with tiny configs (real
measurements in subprocesses: seconds each)."""

import json
import os
import random
import signal
import subprocess
import time

import pandas as pd
import pytest

from carb.campaign.store import Store
from carb.cli.space import COUNTS_FORMAT, builtin_counts, counts_file
from carb.families import space
from tests._helpers import CARB_CLI, run_carb


def carb(*args, check=True, timeout=300):
    p = run_carb(*args, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"carb {' '.join(map(str, args))} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def test_space_list_and_show(cli):
    code, out, err = cli("space", "show", "paper", "--json")
    assert code == 0, err
    out = json.loads(out)
    assert out["count"] == 17_280 and out["values"]["batch"][-1] == 256
    code, out, err = cli("space", "list", "--json")
    assert code == 0, err
    names = {s["name"]: s["count"] for s in json.loads(out)}
    assert names["screening"] == 3_072 and "cpu" in names
    kept = json.loads(counts_file().read_text())["counts"]  # kept for the next listing
    assert {n: e["count"] for n, e in kept.items()} == names


def test_space_list_prints_full_descriptions(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, _ = cli("space", "list")
    assert rc == 0
    desc = " ".join(space.load("cpu").description.split())
    assert desc.split()[-1] in out and len(desc) > 80  # its last word: the whole text, not its first line


def test_space_counts_are_kept_and_a_changed_space_is_counted_again(tmp_path, monkeypatch):
    """A kept count serves while its key (the space's TOML, carb's version, the code of carb.families) is the current
    one; under another key it is counted again, and a kept file that cannot be read or written is counted over."""
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path))
    names = ["screening", "tiny"]
    assert builtin_counts(names) == {"screening": 3_072, "tiny": 8}
    doc = json.loads(counts_file().read_text())
    assert doc["format"] == COUNTS_FORMAT and set(doc["counts"]) == set(names)
    doc["counts"]["tiny"]["count"] = 999  # served as kept: the space is not listed again
    doc["counts"]["screening"] = {"key": "another space or code", "count": 5}
    counts_file().write_text(json.dumps(doc))
    assert builtin_counts(names) == {"screening": 3_072, "tiny": 999}
    counts_file().write_text("{not json")
    assert builtin_counts(names) == {"screening": 3_072, "tiny": 8}
    assert json.loads(counts_file().read_text())["counts"]["tiny"]["count"] == 8
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "afile"))  # no folder can be made there
    assert builtin_counts(["tiny"]) == {"tiny": 8}


@pytest.mark.parametrize(
    "args, words",
    [
        (["space", "show", "nope"], "no such space"),
        (["characterize", "--space", "nope", "--store", "x.duckdb"], "no such space"),
        (["characterize", "--space", "tiny", "--device", "tpu", "--store", "x.duckdb"], "unknown device"),
        (["characterize", "--store", "x.duckdb"], "exactly one of --space or --configs"),
        (
            ["characterize", "--space", "tiny", "--rounds", "1", "--retakes", "2", "--store", "x.duckdb"],
            "--retakes needs",
        ),
        (["dataset", "info", "--store", "missing.duckdb"], "no such store"),
        (["dataset", "export", "--store", "missing.duckdb", "--out", "d.xlsx"], "unknown output type"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words, cli):
    code, _, err = cli(*args, cwd=tmp_path)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "x.duckdb").exists()


def test_bad_space_file_names_the_file(tmp_path, cli):
    f = tmp_path / "mine.toml"
    f.write_text("[[grid]]\ndepth = [8]\nbatch = [0]\n")
    code, _, err = cli("space", "show", f)
    assert code == 2 and str(f) in err and "batch = 0" in err


def test_characterize_resume_and_export(tmp_path, cli):
    """The campaign in subprocesses, as a user runs it; reading its store back in-process."""
    store = tmp_path / "c.duckdb"
    args = [
        "characterize",
        "--space",
        "tiny",
        "--samples",
        "3",
        "--seed",
        "1",
        "--max-time",
        "0.3",
        "--rounds",
        "2",
        "--store",
        store,
        "--json",
    ]
    first = json.loads(carb(*args).stdout)
    assert first["measured"] == 3 and first["by_status"] == {"ok": 3} and first["platform"] == "cpu-1t"
    again = json.loads(carb(*args).stdout)
    assert again["measured"] == 0 and again["skipped"] == 3
    code, text, err = cli("dataset", "info", "--store", store, "--json")
    assert code == 0, err
    info = json.loads(text)
    assert info["runs"] == 1 and info["summary"][0]["configs"] == 3
    out = tmp_path / "d.parquet"
    code, _, err = cli("dataset", "export", "--store", store, "--out", out)
    assert code == 0, err
    df = pd.read_parquet(out)
    assert len(df) == 3 and df.config_id.is_unique
    assert (df.latency_ms > 0).all() and (df.memory_mb > 0).all() and df.energy_j.isna().all()
    assert df.energy_missing_reason.notna().all()
    assert (df.flops > 0).all() and (df.params > 0).all() and (df.latency_ms_n >= 6).all()
    with Store(store, read_only=True) as s:
        prov = json.loads(s.runs().provenance[0])
    assert prov["threads"] == 1 and prov["torch"] and prov["cpu_model"]
    # the instruction-set facts that decide what reduced precisions cost, recorded and shown
    assert set(prov["cpu_isa"]) == {"flags", "torch_capability", "native"}
    code, text, err = cli("dataset", "info", "--store", store)
    assert code == 0, err
    # the console wraps long lines at its width (a CPU with many flags pushes the kernels onto the next line)
    assert f"torch kernels {prov['cpu_isa']['torch_capability']}" in " ".join(text.split())


def test_kill_9_mid_campaign_never_corrupts_or_duplicates(tmp_path):
    """Kill the whole campaign process group with SIGKILL at random moments, then resume."""
    store = tmp_path / "k.duckdb"
    args = [
        *CARB_CLI,
        "characterize",
        "--space",
        "tiny",
        "--max-time",
        "0.2",
        "--rounds",
        "2",
        "--chunk",
        "3",
        "--store",
        str(store),
    ]
    rng = random.Random(7)
    counts = []
    for _ in range(4):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(1.0, 5.0))  # from before the store exists to mid-campaign
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        if not store.exists():
            continue
        with Store(store, read_only=True) as s:  # opens: not corrupt
            df = s.measurements()
            rounds = s.con.execute(
                "SELECT config_id, round, count(*) FROM rounds GROUP BY ALL HAVING count(*) > 1"
            ).fetchall()
        assert df.config_id.is_unique and not rounds
        assert set(df.status) <= {"ok"}
        counts.append(len(df))
    assert counts == sorted(counts)  # nothing stored is ever lost
    last = carb(*args[3:]).stderr  # to a pipe, as in a log: plain progress lines, not a bar
    if counts and counts[-1]:
        assert f"resuming: {counts[-1]} of 8 configs already in {store}" in last
    assert counts and counts[-1] == 8 or "visits (100%)" in last
    with Store(store, read_only=True) as s:
        df = s.measurements()
    assert len(df) == 8 and df.config_id.is_unique and set(df.status) == {"ok"}


# -- one model concept: names agree, a calibrated model is self-contained -----------------


def test_calibrated_model_is_self_contained_and_refuses_bad_out(tmp_path) -> None:
    """Synthetic data (not a measurement): a tiny CARB model, calibrated on 6 made-up rows."""
    import numpy as np

    from carb.model import CARB, BundleError, save
    from carb.transfer.calibrate import check_model_out, fit_calibrated, load_predictor

    frame = space.load("cpu").to_frame().head(80).reset_index(drop=True)
    rng = np.random.default_rng(0)
    df = frame.assign(
        latency_ms=frame["batch"] * frame["depth"] * 0.01 * rng.uniform(0.9, 1.1, len(frame)),
        memory_mb=10 + frame["batch"] * 0.5,
        status="ok",
    )
    src_dir = tmp_path / "src"
    save(CARB(preset="fast").fit(df), src_dir)
    cal = fit_calibrated(load_predictor(src_dir), df.head(6).assign(latency_ms=lambda d: d.latency_ms * 2))
    with pytest.raises(ValueError, match="source model's directory"):
        cal.save(src_dir / "inside", source_dir=src_dir)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        check_model_out(tmp_path / "full")
    cal.save(tmp_path / "cal", source_dir=src_dir)
    # a calibration of a calibrated model: the chain is copied whole and loads
    cal2 = fit_calibrated(load_predictor(tmp_path / "cal"), df.head(6))
    cal2.save(tmp_path / "cal2", source_dir=tmp_path / "cal")
    import shutil

    shutil.rmtree(src_dir)  # self-contained: the original source is no longer needed
    p2 = load_predictor(tmp_path / "cal2").predict(frame.head(5))
    assert np.isfinite(p2["latency_ms"]).all()
    # an edited source no longer matches the checksum recorded at calibration
    man = tmp_path / "cal" / "source" / "manifest.json"
    man.write_text(man.read_text().replace('"coverage"', '"coverage" ', 1))
    with pytest.raises(BundleError, match="changed since calibration"):
        load_predictor(tmp_path / "cal")
    with pytest.raises(BundleError, match="not a model directory"):
        load_predictor(tmp_path / "full")
