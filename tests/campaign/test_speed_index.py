"""Campaigns with a speed sentinel: readings, the speed index of each row, rounds spread over
the campaign, paired sentinels, and stores written without a speed index. The backend is
synthetic (tests/_helpers.py): its values are made up, and its "machine speed" is a number
the test changes between visits."""

import math

import numpy as np
import pandas as pd
import pytest

from carb.campaign import speed as drift
from carb.campaign.runner import run_campaign
from carb.campaign.store import Store
from carb.families import space
from carb.measure.base import Measurement
from carb.measure.protocol import summarize
from carb.measure.sentinel import CPU_SENTINEL
from carb.report import figures
from tests._helpers import SENT, DriftingBackend, every_visit, old_store


def test_a_visits_sentinel_is_the_median_of_the_readings_in_its_window():
    from carb.campaign.runner import _sentinel_at

    t, ms = [0.0, 10.0, 20.0, 200.0], [1.0, 3.0, 2.0, 5.0]
    assert _sentinel_at(12.0, t, ms, window_s=60) == 2.0  # median of 1, 3, 2: one bad reading moves nothing
    assert _sentinel_at(150.0, t, ms, window_s=60) == 5.0  # none within 30 s: the nearest
    assert _sentinel_at(15.0, t, ms, window_s=0) == pytest.approx(2.5)  # 0: linear interpolation
    assert _sentinel_at(-5.0, t, ms, window_s=0) == 1.0 and _sentinel_at(300.0, t, ms, window_s=0) == 5.0


def test_with_the_default_window_a_short_campaign_shares_one_level(tmp_path):
    with Store(tmp_path / "w.duckdb") as store:
        r = run_campaign(
            list(space.load("tiny")),
            DriftingBackend(step=0.05),
            store,
            sentinel=every_visit(window_s=CPU_SENTINEL.window_s),
        )
        df = store.measurements()
        med = float(np.median(store.speed_readings().sentinel_ms))
    # a campaign of a few seconds lies in one window: every row at the median of all readings
    assert r.readings == 10 and df.sentinel_ms.to_numpy() == pytest.approx(np.full(len(df), med))


def test_normalized_latency_removes_the_synthetic_drift(tmp_path):
    configs = list(space.load("tiny"))
    with Store(tmp_path / "s.duckdb") as store:
        b = DriftingBackend(step=0.05)
        r = run_campaign(configs, b, store, sentinel=every_visit())
        # every_s=0: a reading at the start, before every visit and at the end
        assert r.readings == len(configs) + 2 and r.measured == len(configs)
        df = store.measurements()
        readings = store.speed_readings()
    assert len(readings) == r.readings and readings["speed_index"].notna().all()
    ref = float(np.median(readings["sentinel_ms"]))
    assert store.path.exists()
    # raw latency / depth drifts with the machine (it grows 5% per call); normalized does not
    raw = df.latency_ms / df.depth
    norm = df.latency_ms_norm / df.depth
    assert raw.max() / raw.min() > 1.5
    # each visit (slowness 1.05 s) lies between the readings one call before (s) and after
    # (1.05^2 s) it: its sentinel is interpolated between the two, so its normalized value
    # is ref / 3 within 5%
    assert norm.to_numpy() == pytest.approx(np.full(len(df), ref / 3.0), rel=0.051)
    assert norm.max() / norm.min() < 1.11
    assert df.latency_ms_norm.to_numpy() == pytest.approx((df.latency_ms * ref / df.sentinel_ms).to_numpy())
    assert df.speed_index.to_numpy() == pytest.approx((ref / df.sentinel_ms).to_numpy())


def test_auto_sentinel_only_for_real_cpu_backends(tmp_path):
    b = DriftingBackend(step=0.0)
    with Store(tmp_path / "a.duckdb") as store:
        r = run_campaign(list(space.load("tiny"))[:2], b, store)  # synthetic backend: no sentinel
        assert r.readings == 0 and all(k == "visit" for k, _ in b.log)
        assert store.measurements().sentinel_ms.isna().all()
    assert CPU_SENTINEL.configs and CPU_SENTINEL.every_s > 0


def test_rounds_spread_over_the_whole_campaign_in_alternating_order(tmp_path):
    configs = list(space.load("tiny"))
    with Store(tmp_path / "r.duckdb") as store:
        b = DriftingBackend(step=0.0)
        run_campaign(configs, b, store, rounds=2, sentinel=None)
    order = [c for _, c in b.log]
    assert order == configs + configs[::-1]  # round 2 runs backwards: same mean moment for all
    with Store(tmp_path / "c.duckdb") as store:
        b = DriftingBackend(step=0.0)
        run_campaign(configs, b, store, rounds=2, chunk=4, sentinel=None)  # explicit chunks still work
    assert [c for _, c in b.log][:8] == configs[:4] + configs[:4][::-1]


def test_pooled_rounds_correct_each_visit_for_its_own_moment(tmp_path):
    configs = list(space.load("tiny"))
    with Store(tmp_path / "p.duckdb") as store:
        b = DriftingBackend(step=0.03)
        r = run_campaign(configs, b, store, rounds=2, sentinel=every_visit())
        df = store.measurements()
        rounds = store.con.execute("SELECT count(*) FROM rounds WHERE sentinel_ms IS NOT NULL").fetchone()[0]
        ref = store.speed_ref_ms("cpu-1t")
    assert r.measured == len(configs) and rounds == 2 * len(configs)
    # with a reading before every visit (step drift), each visit's sentinel is exact
    norm = df.latency_ms_norm / df.depth
    assert norm.to_numpy() == pytest.approx(np.full(len(df), ref / 3.0), rel=0.03)
    raw = df.latency_ms / df.depth
    assert np.std(np.log(norm)) < 0.2 * np.std(np.log(raw))


def test_a_failing_sentinel_leaves_a_gap_not_a_value(tmp_path):
    with Store(tmp_path / "f.duckdb") as store:
        r = run_campaign(
            list(space.load("tiny"))[:3], DriftingBackend(fail_sentinel=True), store, sentinel=every_visit()
        )
        assert r.measured == 3 and r.by_status == {"ok": 3} and r.readings == 0
        df = store.measurements()
        assert df.sentinel_ms.isna().all() and df.latency_ms_norm.isna().all()
        assert drift.speed_summary(store.speed_readings())["note"] == drift.NO_INDEX


def test_interrupted_campaign_with_sentinel_resumes_without_duplicates(tmp_path):
    configs = list(space.load("tiny"))
    path = tmp_path / "k.duckdb"
    with Store(path) as store:
        b = DriftingBackend(interrupt_after=9)
        r = run_campaign(configs, b, store, rounds=2, sentinel=every_visit())
        assert r.interrupted
        kept = store.con.execute("SELECT count(*) FROM rounds").fetchone()[0]
        r2 = run_campaign(configs, DriftingBackend(), store, rounds=2, sentinel=every_visit())
        df = store.measurements()
        dup = store.con.execute("SELECT config_id, round FROM rounds GROUP BY ALL HAVING count(*) > 1").fetchall()
        runs = store.speed_readings().run_id.nunique()
    assert kept > 0 and r2.measured + r.measured == len(configs)
    assert len(df) == len(configs) and df.config_id.is_unique and not dup
    assert df.latency_ms_norm.notna().all() and runs == 2
    # one reference for the whole platform: every row normalized to the median of all readings
    assert (df.speed_index * df.sentinel_ms).round(9).nunique() == 1


def test_a_store_from_before_the_sentinel_opens_and_says_no_speed_index(tmp_path):
    path = tmp_path / "old.duckdb"
    old_store(path)
    with Store(path, read_only=True) as store:
        assert not store.has_speed_index()
        assert store.speed_readings().empty and store.speed_ref_ms("cpu-1t") is None
        old = store.measurements()
        assert len(old) == 3 and "latency_ms_norm" not in old.columns and "latency_ms_min" not in old.columns
        # rows rebuilt from it have no fastest sample, and say so with nan
        st = Store.measurement_from_row(old.iloc[0].to_dict()).latency_ms
        assert st.median == old.latency_ms.iloc[0] and math.isnan(st.min)
        s = drift.speed_summary(store.speed_readings())
    assert s == {"readings": 0, "note": drift.NO_INDEX}
    assert drift.speed_lines(s)[0].startswith("no speed index")
    assert figures.speed_plot(pd.DataFrame(), tmp_path / "x.png") is None and not (tmp_path / "x.png").exists()
    # opened for writing, it gains the table and columns and a new campaign fills them
    with Store(path) as store:
        r = run_campaign(list(space.load("tiny")), DriftingBackend(), store, sentinel=every_visit())
        df = store.measurements()
        assert r.measured == len(df) - 3 and r.readings > 0
        assert df.latency_ms_norm.isna().sum() == 3  # the old rows stay without an index
        assert df.latency_ms_min.isna().sum() == 3 and (df.latency_ms_min.dropna() > 0).all()


def test_a_noisy_reading_is_kept_but_corrects_nothing(tmp_path):
    with Store(tmp_path / "n.duckdb") as store:
        # synthetic sentinel samples spread by +-40%: 95% CI of the median far over 5%
        r = run_campaign(
            list(space.load("tiny"))[:3], DriftingBackend(sentinel_spread=0.4), store, sentinel=every_visit()
        )
        df = store.measurements()
        rd = store.speed_readings()
    assert r.readings == 5 and r.noisy_readings == 5 and (~rd.used).all()
    assert df.sentinel_ms.isna().all() and df.latency_ms_norm.isna().all()
    s = drift.speed_summary(rd)
    assert s["platforms"]["cpu-1t"]["readings"] == 0 and "too noisy" in drift.speed_lines(s, rd)[0]
    assert figures.speed_plot(rd, tmp_path / "n.png") is None


class PairedDriftingBackend(DriftingBackend):
    """Synthetic: as DriftingBackend, and when a campaign sets ``paired_sentinel`` it times
    the sentinel inside each visit: 4 blocks whose ratio (config sample / sentinel sample)
    does not depend on the machine's slowness, as on a machine whose speed both share."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.paired_sentinel = None
        self.paired_seen = []  # (config, pairing) per call

    def measure(self, config, protocol=None):
        self.paired_seen.append((config, self.paired_sentinel))
        m = super().measure(config, protocol)
        p = self.paired_sentinel
        if p is None or config == p.config or m.status != "ok":
            return m
        s = self.slowness
        sent = [3.0 * s] * 4
        ratios = [float(config.depth) / 3.0] * 4
        return Measurement(
            status="ok",
            latency_ms=m.latency_ms,
            memory_mb=m.memory_mb,
            timed_s=0.0,
            wall_s=0.0,
            extra={**m.extra, "pair_ratio": ratios, "pair_sentinel_ms": sent},
        )


def test_paired_sentinel_cancels_drift_exactly_and_is_restored_after_the_campaign(tmp_path):
    """Synthetic drift of 10% per call: the raw latencies of equal-depth configs differ, the
    paired-normalized ones are identical (and the campaign hands the backend back unpaired)."""
    from dataclasses import replace as dc_replace

    sent = dc_replace(every_visit(), name="synthetic-paired")
    b = PairedDriftingBackend(step=0.10)
    cfgs = [c for c in space.load("tiny") if c.depth == 8][:4]
    with Store(tmp_path / "p.duckdb") as store:
        r = run_campaign(cfgs, b, store, sentinel=sent, rounds=2)
        df = store.measurements().set_index("config_id")
    assert r.measured == len(cfgs) and b.paired_sentinel is None
    paired_calls = [p for c, p in b.paired_seen if c != SENT]
    assert paired_calls and all(p is not None and p.config == SENT for p in paired_calls)
    raw = df.latency_ms.to_numpy(float)
    norm = df.latency_ms_norm.to_numpy(float)
    assert raw.max() / raw.min() > 1.2  # the machine slowed down while measuring
    assert np.allclose(norm, norm[0], rtol=1e-9)  # paired: the slowdown cancels
    # the pooled row's sentinel is median(all samples) / median(all block ratios)
    row = df.iloc[0]
    assert row.sentinel_ms > 0 and math.isclose(
        row.latency_ms_norm, row.latency_ms * store_ref(tmp_path) / row.sentinel_ms, rel_tol=1e-9
    )


def store_ref(tmp_path):
    with Store(tmp_path / "p.duckdb", read_only=True) as s:
        return s.speed_ref_ms(s.measurements().platform.iloc[0])


def test_reference_falls_back_to_all_readings_when_none_is_precise(tmp_path):
    """Synthetic readings: the reference (the level of latency_ms_norm) is the median of the
    precise readings, or of all of them when every one was too noisy to correct with."""
    with Store(tmp_path / "r.duckdb") as s:
        run = s.begin_run("p", "cpu", {}, {})
        s.add_speed_reading(run, "p", 2.0, 0.2, 0.1, used=False)
        s.add_speed_reading(run, "p", 4.0, 0.2, 0.1, used=False)
        assert s.speed_ref_ms("p") == 3.0
        s.add_speed_reading(run, "p", 10.0, 0.01, 0.1, used=True)
        assert s.speed_ref_ms("p") == 10.0
        assert s.speed_ref_ms("other") is None


def test_the_fastest_sample_is_kept_pooled_and_stored(tmp_path):
    from carb.campaign.runner import pool_rounds

    assert summarize([3.0, 1.5, 2.0]).min == 1.5
    visits = [
        Measurement(status="ok", latency_ms=summarize(x), memory_mb=1.0, extra={"latency_samples_ms": x})
        for x in ([2.0, 2.5, 3.0], [1.8, 4.0, 2.2])
    ]
    assert pool_rounds(visits).latency_ms.min == 1.8  # the fastest of every visit's samples
    with Store(tmp_path / "f.duckdb") as store:
        run_campaign(list(space.load("tiny"))[:2], DriftingBackend(step=0.0), store, sentinel=None)
        df = store.measurements()
        # the synthetic samples are depth x (1 - 0.004) .. depth x (1 + 0.004)
        assert df.latency_ms_min.to_numpy() == pytest.approx(df.depth.to_numpy() * 0.996)
        st = Store.measurement_from_row(df.iloc[0].to_dict()).latency_ms
        assert st.min == pytest.approx(df.latency_ms_min.iloc[0])
