"""carb.campaign.speed: the speed summary and its lines, drift between two phases, rows put
at one speed, and how a remeasurement repeated each latency figure. Rows and backends are
synthetic (made-up values)."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from carb.campaign import speed as drift
from carb.campaign.runner import run_campaign
from carb.campaign.store import Store
from carb.families import space
from carb.report import figures
from tests._helpers import ROOT, DriftingBackend, every_visit


def test_speed_summary_lines_and_plot(tmp_path):
    with Store(tmp_path / "p.duckdb") as store:
        run_campaign(list(space.load("tiny")), DriftingBackend(step=0.02), store, sentinel=every_visit())
        rd = store.speed_readings()
    s = drift.speed_summary(rd)
    p = s["platforms"]["cpu-1t"]
    assert s["readings"] == 10 and p["index_min"] < 1 < p["index_max"]
    assert p["max_ratio"] == pytest.approx(1.02**17, rel=1e-6)  # 18 calls, the first and last read the sentinel
    lines = drift.speed_lines(s, rd)
    assert "speed index" in lines[0] and "index over time" in lines[1]
    png = figures.speed_plot(rd, tmp_path / "speed.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_phase_drift_and_normalize_on_synthetic_rows():
    cal = pd.DataFrame({"latency_ms": [10.0, 20.0], "sentinel_ms": [2.0, 2.0]})
    val = pd.DataFrame({"latency_ms": [12.5, 25.0], "sentinel_ms": [2.5, 2.5]})
    d = drift.phase_drift(cal, val)
    assert d["speed_change"] == pytest.approx(2.0 / 2.5 - 1) and d["exceeds"]
    assert "slower" in drift.drift_line(d)
    both = pd.concat([cal, val], ignore_index=True)
    n = drift.normalize(both)
    assert n.iloc[:2].to_numpy() == pytest.approx(n.iloc[2:].to_numpy())
    assert drift.phase_drift(cal, val.drop(columns="sentinel_ms")) == {"note": drift.NO_INDEX}
    assert math.isnan(drift.normalize(cal.drop(columns="sentinel_ms")).iloc[0])
    c = drift.corrected(both.assign(latency_ms_norm=n))
    assert (c.latency_ms_raw == both.latency_ms).all() and c.latency_ms.to_numpy() == pytest.approx(n.to_numpy())


def test_rows_put_at_their_median_speed_only_when_every_ok_row_has_a_sentinel():
    """Synthetic rows: latency x median(sentinel) / sentinel, raw kept; failed rows ignored;
    a row without a sentinel leaves the rows as they are."""
    rows = pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "error"],
            "latency_ms": [10.0, 20.0, 30.0, np.nan],
            "sentinel_ms": [1.0, 2.0, 4.0, np.nan],
        }
    )
    out, ref = drift.at_median_speed(rows)
    assert ref == 2.0
    assert out.latency_ms.tolist()[:3] == [20.0, 20.0, 15.0] and out.latency_ms_raw.tolist()[:3] == [10.0, 20.0, 30.0]
    same, none = drift.at_median_speed(rows.assign(sentinel_ms=[1.0, np.nan, 4.0, np.nan]))
    assert none is None and same.latency_ms.tolist()[:3] == [10.0, 20.0, 30.0]
    assert drift.at_median_speed(rows.drop(columns="sentinel_ms"))[1] is None


def test_phase_drift_noise_is_the_chance_variation_of_the_medians_not_of_single_rows():
    """Synthetic rows whose sentinels scatter ±20% from row to row (as paired sentinels of
    different configs do): a 15% speed change is within chance with 4 rows a phase, beyond
    it with 200 (the noise shrinks like 1/sqrt(n))."""
    from statistics import NormalDist

    def phases(n):
        # n rows at evenly spaced quantiles of a log-normal spread of 0.2 (no random draw)
        z = np.array([NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)])
        a = pd.DataFrame({"sentinel_ms": np.exp(0.2 * z)})
        b = pd.DataFrame({"sentinel_ms": np.exp(np.log(1.15) + 0.2 * z[::-1])})
        return drift.phase_drift(a, b)

    few, many = phases(4), phases(200)
    assert few["noise"] > 0.15 and not few["exceeds"]
    assert many["noise"] < 0.1 and many["exceeds"] and many["speed_change"] < -0.08


def _repeat_rows(lat, norm=None, fastest=None, status=None):
    df = pd.DataFrame(
        {
            "config_id": [f"c{i}" for i in range(len(lat))],
            "latency_ms": lat,
            "status": status or ["ok"] * len(lat),
            "memory_mb": 10.0,
            "measured_at": pd.Timestamp("2026-12-04T10:00:00Z"),
        }
    )
    if norm is not None:
        df["latency_ms_norm"] = norm
    if fastest is not None:
        df["latency_ms_min"] = fastest
    return df


def test_remeasure_figures_compare_each_latency_figure_that_both_sides_carry():
    first = _repeat_rows([1.0, 2.0, 4.0, 8.0], norm=[1.0, 2.0, 4.0, 8.0], fastest=[0.9, 1.8, 3.6, 7.2])
    # synthetic: the machine ran 20% slower; the sentinel saw it (norm repeats within 1%), the
    # fastest samples moved 2% and 4%
    again = _repeat_rows([1.2, 2.4, 4.8, 9.6], norm=[1.01, 1.98, 4.0, 8.0], fastest=[0.918, 1.836, 3.744, 7.2])
    again["measured_at"] = pd.Timestamp("2026-12-04T10:30:00Z")
    f = drift.remeasure_figures(first, again)
    assert f["configs"] == 4 and f["hours_between"] == pytest.approx(0.5) and f["memory_ratio_median"] == 1.0
    assert f["latency"]["raw"]["ratio_median"] == pytest.approx(1.2) and f["latency"]["raw"]["within_5pct"] == 0
    assert f["latency"]["corrected"]["abs_diff_mean"] == pytest.approx((0.01 + 0.01) / 4)
    assert f["latency"]["fastest"]["abs_diff_mean"] == pytest.approx((0.02 + 0.02 + 0.04 + 0) / 4)
    lines = drift.remeasure_lines(f)
    assert "30.0 min later" in lines[0] and any("fastest sample (latency_ms_min): 2.0%" in ln for ln in lines)
    # a store from before the sentinel and the fastest sample: the raw figure only; a failed
    # remeasurement and a config never remeasured do not count
    old = drift.remeasure_figures(_repeat_rows([1.0, 2.0]), _repeat_rows([1.1, 5.0], status=["ok", "error"]))
    assert old["configs"] == 1 and set(old["latency"]) == {"raw"}
    assert old["latency"]["raw"]["abs_diff_mean"] == pytest.approx(0.1)
    none = drift.remeasure_figures(_repeat_rows([1.0]), _repeat_rows([1.0]).assign(config_id="other"))
    assert none["configs"] == 0 and drift.remeasure_lines(none)[0].startswith("no config")


def test_a_card_reports_how_the_remeasurement_repeated_each_figure(tmp_path):
    store = tmp_path / "s.duckdb"
    configs = list(space.load("tiny"))
    with Store(store) as s:
        run_campaign(configs, DriftingBackend(step=0.02), s, sentinel=every_visit())
        run_campaign(configs[:3], DriftingBackend(step=0.02), s, sentinel=every_visit(), remeasure=True)
    script = ROOT / "scripts" / "ship.py"
    r = subprocess.run(
        [sys.executable, str(script), "dataset", "--store", str(store), "--name", "cpu-1t", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in (tmp_path / "cpu-1t.md").read_text().splitlines() if ln.startswith("- drift")]
    # synthetic: the second campaign's backend starts at the first one's speed, so raw repeats
    assert len(lines) == 3 and "3 configs measured again" in lines[0] and "ratio 1.000" in lines[0]
    assert "`latency_ms_norm`" in lines[1] and "fastest sample (`latency_ms_min`)" in lines[2]
