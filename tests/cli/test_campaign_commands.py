"""`carb characterize` stopped and resumed, `--remeasure` and what it says, and `carb dataset
info` on a store a campaign holds: real measurements of tiny configs, or synthetic rows."""

import json
import signal
import subprocess
import sys
import time

import pytest

from carb.campaign.store import Store
from carb.families import space
from carb.measure.base import Measurement
from tests._helpers import RESNET_ROW


def _rounds_stored(path):
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
    store = tmp_path / "s.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "carb.cli",
        "characterize",
        "--space",
        "tiny",
        "--rounds",
        "3",
        "--max-time",
        "1.5",
        "--no-sentinel",
        "--store",
        str(store),
    ]
    # SIGINT as a terminal sends it: a test runner started in the background (`cmd &` in a
    # script) passes SIGINT on ignored, and Python then installs no Ctrl-C handler, as a
    # background job should; the campaign would run to its end and exit 0
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
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


def test_remeasure_on_a_fresh_store_says_what_it_did(tmp_path, cli):
    rc, _, err = cli(
        "characterize",
        "--space",
        "tiny",
        "--samples",
        "1",
        "--remeasure",
        "--rounds",
        "1",
        "--max-time",
        "0.1",
        "--no-sentinel",
        "--store",
        tmp_path / "s.duckdb",
    )
    assert rc == 0, err
    text = " ".join(err.split())
    assert "--remeasure: 1 config(s) measured again into the remeasurements table" in text
    assert "1 of them had no first measurement there" in text


def test_remeasure_says_how_the_latency_repeated(tmp_path, cli):
    args = [
        "characterize",
        "--space",
        "tiny",
        "--samples",
        "1",
        "--rounds",
        "1",
        "--max-time",
        "0.1",
        "--no-sentinel",
        "--store",
        tmp_path / "s.duckdb",
    ]
    assert cli(*args)[0] == 0
    rc, out, err = cli(*args, "--remeasure", "--json")
    assert rc == 0, err
    rep = json.loads(out)["remeasure"]
    # no sentinel here: the raw median and the fastest sample, no drift-corrected figure
    assert rep["configs"] == 1 and set(rep["latency"]) == {"raw", "fastest"}
    text = " ".join(err.split())
    assert "1 config(s) measured again" in text and "fastest sample (latency_ms_min)" in text
    # and the store says it later
    rc, out, _ = cli("dataset", "info", "--store", tmp_path / "s.duckdb", "--json")
    assert rc == 0 and json.loads(out)["remeasure"]["cpu-1t"]["latency"].keys() == {"raw", "fastest"}


def test_dataset_info_reads_a_snapshot_of_a_store_in_use(tmp_path, cli):
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        run = store.begin_run("cpu-1t", "cpu", {"synthetic": True}, "test")
        store.add(space.Config(**RESNET_ROW), "cpu-1t", Measurement(status="error", message="synthetic"), run)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys, time\nc = duckdb.connect({str(path)!r}); print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        with pytest.raises(Exception, match="in use"):
            Store(path)  # a writer is still refused
        rc, out, err = cli("dataset", "info", "--store", path)
        assert rc in (0, None), err
        assert "reading a snapshot" in err and "1 run(s)" in out
        with Store(path, read_only=True) as s:
            snap = s.snapshot
            assert snap is not None and snap.exists() and len(s.measurements()) == 1
        assert not snap.parent.exists()  # the private copy is removed on close
    finally:
        holder.kill()
        holder.wait()
