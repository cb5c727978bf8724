"""Unlucky and hostile runs end in one line ``error: ...`` naming the path or the value, with no partial output and
nothing lost from a store: a full or read-only disk (a small tmpfs, mounted where the tests run as root, else
skipped; a file-size limit otherwise), user code that exits or interrupts, a DuckDB file that is not a store,
paths with spaces in the hints carb prints. Models are fitted on SYNTHETIC data."""

import os
import resource
import shlex
import signal
import subprocess

import pandas as pd
import pytest

from tests._helpers import CARB_CLI, RESNET_ROW, one_line_error
from tests.cli.test_bad_input import synthetic


@pytest.fixture
def small_disk(tmp_path):
    """``mount(name, options)``: a tmpfs with those options under ``tmp_path``; the test is skipped where this
    process may not mount (not root)."""
    mounted = []

    def mount(name, options):
        d = tmp_path / name
        d.mkdir()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {p.stderr.decode().strip()[:100]}")
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", str(d)], capture_output=True)


@pytest.fixture
def data(tmp_path):
    """A SYNTHETIC dataset file of the cpu space."""
    f = tmp_path / "synthetic.parquet"
    synthetic(300).to_parquet(f)
    return f


def run_with_file_limit(*args, cwd):
    """``carb ARGS`` in a subprocess that may not grow any file (RLIMIT_FSIZE 1 byte: every write fails, as on a
    full disk)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))

    return subprocess.run(
        [*CARB_CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, preexec_fn=limit, timeout=300
    )


# -- a full disk ----------------------------------------------------------------------------


def test_train_refuses_a_full_disk_before_training(cli, small_disk, data):
    d = small_disk("full", "size=1m")
    rc, out, err = cli("train", "--data", data, "--preset", "fast", "--out", d / "model")
    one_line_error(rc, err, f"--out {d / 'model'}", "MB free", "16 MB")
    assert "wrote" not in out and list(d.iterdir()) == []


def test_train_that_cannot_write_its_bundle_leaves_nothing(cli, small_disk, data):
    # room to spare but one free inode: the bundle's folder is made, its first file (xgboost's) fails
    d = small_disk("inodes", "size=64m,nr_inodes=2")
    rc, out, err = cli("train", "--data", data, "--preset", "fast", "--out", d / "model")
    one_line_error(rc, err, f"--out {d / 'model'}", "writing the bundle failed", "No space left", "nothing was written")
    assert "Stack trace" not in err and list(d.iterdir()) == []


def test_a_report_that_fills_the_disk_leaves_nothing_and_keeps_the_earlier_one(cli, small_disk, data):
    d = small_disk("report", "size=1m")  # 1 MB: the check passes, the PNGs and the page do not fit
    old = d / "old"
    old.mkdir()
    (old / "report.html").write_text("an earlier report")
    rc, out, err = cli("report", "--data", data, "--no-transfer", "--out", old)
    assert rc == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [err.strip().splitlines()[-1]], err
    assert f"--out {old}: cannot write the report (No space left on device); nothing was written" in errors[0]
    assert [p.name for p in old.iterdir()] == ["report.html"] and (old / "report.html").read_text() == (
        "an earlier report"
    )
    assert [p.name for p in d.iterdir()] == ["old"]


def test_export_and_calibrate_refuse_a_full_disk(cli, small_disk, tmp_path):
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure.base import Measurement

    store = tmp_path / "s.duckdb"
    with Store(store) as s:
        run = s.begin_run("cpu-1t", "cpu", {"synthetic": True}, {}, "test")
        s.add(space.Config(**RESNET_ROW), "cpu-1t", Measurement(status="error", message="synthetic"), run)
    d = small_disk("full", "size=64k")
    (d / "filler").write_bytes(b"x" * (64 * 1024))
    rc, _, err = cli("dataset", "export", "--store", store, "--out", d / "data.parquet")
    one_line_error(rc, err, f"--out {d / 'data.parquet'}", "0.0 MB free")
    rc, _, err = cli("calibrate", "--model", "layers-cpu-avx2-1t", "--out", d / "cal")
    one_line_error(rc, err, f"--out {d / 'cal'}", "0.0 MB free", "at least")
    assert [p.name for p in d.iterdir()] == ["filler"]


def test_a_campaign_that_cannot_write_keeps_its_store(tmp_path):
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure.base import Measurement

    store = tmp_path / "s.duckdb"
    with Store(store) as s:
        run = s.begin_run("cpu-1t", "cpu", {"synthetic": True}, {}, "test")
        for depth in (20, 32):
            s.add(space.Config(**{**RESNET_ROW, "depth": depth}), "cpu-1t", Measurement(status="error"), run)
    p = run_with_file_limit("characterize", "--space", "tiny", "--store", store, "--max-time", "0.1", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --store {store}: writing failed") and "committed before is kept" in last
    assert sum(line.startswith("error") for line in p.stderr.splitlines()) == 1
    with Store(store, read_only=True) as s:
        assert len(s.measurements()) == 2


# -- a read-only disk -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--data", "{data}", "--out", "{ro}/model"],
        ["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{ro}/cal"],
        ["calibrate", "--model", "{bundle}", "--out", "{ro}/cal"],
        ["report", "--data", "{data}", "--out", "{ro}/report"],
        ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{ro}/p.csv"],
        ["characterize", "--space", "tiny", "--store", "{ro}/s.duckdb"],
        ["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{ro}/screen"],
        ["demo", "--out", "{ro}/demo"],
    ],
    ids=lambda a: a[0] if a[0] != "calibrate" else f"calibrate-{a[2][:6]}",
)
def test_a_read_only_out_is_refused_before_any_work(cli, small_disk, data, probe_bundle, args):
    ro = small_disk("ro", "ro,size=1m")
    rc, out, err = cli(*[a.format(ro=ro, data=data, bundle=probe_bundle) for a in args])
    one_line_error(rc, err, f"cannot write in {ro}", "Read-only file system")
    assert out == ""


# -- user code that exits or interrupts -----------------------------------------------------


def test_user_code_that_exits_in_a_campaign_is_a_failed_row(cli, tmp_path):
    from carb.campaign.store import Store

    (tmp_path / "nets.py").write_text(
        "def exits():\n    raise SystemExit(7)\n\n\ndef interrupts():\n    raise KeyboardInterrupt\n"
    )
    (tmp_path / "exit_at_import.py").write_text("import sys\n\nsys.exit(5)\n")
    rows = [
        {"family": "net", "module": f"{tmp_path}/{m}", "input_size": 32, "batch": 1, "precision": "fp32"}
        for m in ("nets.py:exits", "nets.py:interrupts", "exit_at_import.py:build")
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "nets.csv", index=False)
    store = tmp_path / "s.duckdb"
    args = ["--store", store, "--rounds", "1", "--no-sentinel", "--max-time", "0.1"]
    rc, _, err = cli("characterize", "--configs", tmp_path / "nets.csv", *args)
    assert rc == 0 and "Traceback" not in err, err
    with Store(store, read_only=True) as s:
        got = dict(zip(s.measurements().module, zip(s.measurements().status, s.measurements().message)))
    assert got == {
        f"{tmp_path}/nets.py:exits": ("error", "SystemExit: 7"),
        f"{tmp_path}/nets.py:interrupts": ("error", "KeyboardInterrupt"),
        f"{tmp_path}/exit_at_import.py:build": ("error", "SystemExit: 5"),
    }


# -- hints that paste -----------------------------------------------------------------------


def test_the_export_hint_pastes_for_a_store_path_with_spaces(cli, tmp_path):
    store = tmp_path / "my campaigns" / "tiny store.duckdb"
    rc, out, err = cli(
        "characterize", "--space", "tiny", "--samples", "1", "--rounds", "1", "--no-sentinel", "--max-time", "0.1",
        "--store", store, cwd=tmp_path,
    )  # fmt: skip
    assert rc == 0, err
    hint = " ".join(out.split()).split("(export: ", 1)[1].rsplit(")", 1)[0]
    args = shlex.split(hint)
    assert args[:3] == ["carb", "dataset", "export"] and args[4] == str(store)
    rc, _, err = cli(*args[1:], cwd=tmp_path)
    assert rc == 0, err
    assert len(pd.read_parquet(tmp_path / "data.parquet")) == 1


# -- fixes outside the command line ----------------------------------------------------------


def test_screen_with_one_predicted_objective(cli, tmp_path, probe_bundle):
    rc, _, err = cli(
        "screen",
        "--space",
        "tiny",
        "--target-model",
        probe_bundle,
        "--objective",
        "latency_ms",
        "--out",
        tmp_path / "o",
    )
    assert rc == 0, err


def test_a_254_byte_output_name_is_written(cli, tmp_path, probe_bundle):
    out = tmp_path / ("p" * 250 + ".csv")
    rc, _, err = cli("predict", "--model", probe_bundle, "--space", "tiny", "--out", out)
    assert rc == 0 and out.is_file(), err


def test_a_name_too_long_for_any_file_system_is_refused_first(cli, tmp_path, probe_bundle):
    out = tmp_path / ("p" * 252 + ".csv")
    rc, _, err = cli("predict", "--model", probe_bundle, "--space", "tiny", "--out", out)
    one_line_error(rc, err, "256 bytes", "above the 255")


def test_the_cpus_this_process_may_use_bound_threads(cli, tmp_path):
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rc, _, err = cli("characterize", "--space", "tiny", "--threads", n + 1, "--store", tmp_path / "s.duckdb")
    one_line_error(rc, err, f"--threads {n + 1}", f"{n} CPU(s)", "--oversubscribe")
    assert not (tmp_path / "s.duckdb").exists()
