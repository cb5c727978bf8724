"""Commands that report the machine's speed: `carb dataset info` shows a store's speed index,
`carb validate --device` the drift since calibration, and `carb calibrate` measures again
the visits timed in another machine state. Devices and backends are synthetic."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from carb.campaign.runner import run_campaign
from carb.campaign.store import Store
from carb.families import space
from tests._helpers import DriftingBackend, every_visit, old_store, run_carb


def test_cli_dataset_info_shows_the_index_or_says_there_is_none(tmp_path, cli, monkeypatch):
    """The index shown by a `carb dataset info` process; the other two stores' info in-process."""
    monkeypatch.setenv("COLUMNS", "200")

    def info(path, *extra):
        rc, out, err = cli("dataset", "info", "--store", path, *extra)
        assert rc == 0, err
        return out

    old = tmp_path / "old.duckdb"
    old_store(old)
    assert "no speed index" in info(old)
    new = tmp_path / "new.duckdb"
    with Store(new) as store:
        run_campaign(list(space.load("tiny")), DriftingBackend(step=0.02), store, sentinel=every_visit())
    p = run_carb("dataset", "info", "--store", new, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    assert "10 sentinel readings" in p.stdout and "index over time" in p.stdout
    doc = json.loads(info(new, "--json"))
    assert doc["speed_index"]["platforms"]["cpu-1t"]["readings"] == 10


def test_cli_validate_on_device_reports_drift_and_scores_corrected_calls(tmp_path, monkeypatch, cli, cpu1t_source):
    """carb calibrate's sentinel readings travel through carb screen to carb validate
    --device, which reports the drift since calibration and scores the calls at the
    calibration's speed too. SYNTHETIC device: 1.5x the source's latency; calibrated at
    sentinel 0.6 ms, validated with the machine 2x slower (latency and sentinel x2)."""
    from carb.decide.validate import decision_metrics, truly_feasible
    from carb.model import save
    from carb.transfer.calibrate import fit_calibrated

    source = cpu1t_source
    save(source, tmp_path / "src")
    cands = space.load("cpu").to_frame()

    def device_rows(frame, slow):
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        return f.assign(
            status="ok",
            latency_ms=p["latency_ms"].to_numpy() * 1.5 * slow,
            memory_mb=p["memory_mb"].to_numpy(),
            energy_j=np.nan,
            sentinel_ms=0.6 * slow,
        )

    k = cands.sample(12, random_state=0)
    cal = fit_calibrated(source, device_rows(k, 1.0), meta={"device": "cpu"})
    cal.save(tmp_path / "cal", source_dir=tmp_path / "src")

    def run(*args):
        rc, out, err = cli(*args)
        assert rc == 0, err
        return out

    pred = cal.predict(cands)
    lat_b, mem_b = float(pred.latency_ms.median()), float(pred.memory_mb.median())
    run(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cal",
        "--budget",
        f"latency_ms={lat_b}",
        "--budget",
        f"memory_mb={mem_b}",
        "--out",
        tmp_path / "scr",
    )
    assert json.loads((tmp_path / "scr" / "summary.json").read_text())["calibration_sentinel_ms"] == [0.6] * 12
    seen = {}

    def fake_measure(df, store, *, again=False, **settings):
        seen.setdefault("again", []).append(len(df) if again else 0)
        if not again:
            seen["rows"] = device_rows(df, 2.0)
        return device_rows(df, 2.0)  # the whole machine slower: a retake is no faster

    monkeypatch.setattr("carb.campaign.here.measure_frame", fake_measure)
    res = json.loads(
        run("validate", "--screen", tmp_path / "scr", "--device", "cpu", "--limit", "10", "--control", "10", "--json")
    )
    d = res["drift"]
    assert d["speed_change"] == pytest.approx(-0.5) and d["exceeds"] and "50.0% slower" in d["line"]
    # every visit 2x off the calibration's state: measured again twice, kept as measured (nothing lost)
    st = res["machine_state"]
    assert seen["again"] == [0, 20, 20] and (st["off"], st["back"], st["left"], st["visits"]) == (20, 0, 20, 40)
    c = res["corrected"]
    assert c["reference"] == "the calibration's median sentinel speed" and c["reference_ms"] == pytest.approx(0.6)
    rows = seen["rows"]
    m = pd.read_parquet(tmp_path / "scr" / "measure.parquet")
    acc = set(pd.read_parquet(tmp_path / "scr" / "feasible.parquet").config_id)
    calls = np.where(
        rows.config_id.isin(set(m.config_id)), "measure", np.where(rows.config_id.isin(acc), "accept", "reject")
    )
    want = decision_metrics(
        calls, truly_feasible(rows.assign(latency_ms=rows.latency_ms / 2), {"latency_ms": lat_b, "memory_mb": mem_b})
    )
    assert {k: c[k] for k in want} == pytest.approx(want)
    # the map learnt the 1.5x: at the calibration's speed every accept is right; raw, the 2x
    # slow-down breaks the latency budget of accepted configs
    assert c["false_accepts"] == 0 and res["decisions"]["false_accepts"] > 0
    table = run("validate", "--screen", tmp_path / "scr", "--device", "cpu", "--limit", "10", "--control", "10")
    flat = " ".join(table.split())
    assert flat.index("50.0% slower") < flat.index("validation (measured on cpu)")
    assert "drift-corrected" in flat


def test_calibrate_measures_again_the_visits_of_another_state(tmp_path, cpu1t_source):
    """calibrate_here (carb calibrate): 4 of 12 K visits timed in the slow state (SYNTHETIC device 1.5x the
    source; slow state: sentinel 1.2 ms against 0.6, configs x1.2) are measured again, come
    back in the fast state, and the map is fitted on one state: it recovers the 1.5x."""
    from carb.model import save
    from carb.transfer.calibrate import load_predictor
    from carb.transfer.here import calibrate_here

    source = cpu1t_source
    save(source, tmp_path / "src")
    calls = []

    def fake_measure(df, what, again=False, allocator="default"):
        calls.append((len(df), again))
        f = df.reset_index(drop=True)
        slow = (np.arange(len(f)) % 3 == 0) if not again else np.zeros(len(f), bool)
        p = source.predict(f)["latency_ms"].to_numpy() * 1.5
        return f.assign(
            status="ok",
            latency_ms=p * np.where(slow, 1.2, 1.0),
            memory_mb=50.0,
            energy_j=np.nan,
            sentinel_ms=np.where(slow, 1.2, 0.6),
        )

    said = []
    res = calibrate_here(tmp_path / "src", samples=12, out=tmp_path / "cal", measure=fake_measure, say=said.append)
    assert calls == [(12, False), (4, True), (12, True)] and res.kind == "config"  # then the K's second round
    assert any("4 of 12 calibration visits were timed in another state" in " ".join(s.split()) for s in said)
    cal = load_predictor(tmp_path / "cal")
    cands = space.load("cpu").to_frame().sample(50, random_state=1)
    ratio = cal.predict(cands)["latency_ms"].to_numpy() / source.predict(cands)["latency_ms"].to_numpy()
    assert np.median(np.abs(ratio / 1.5 - 1)) < 0.01
