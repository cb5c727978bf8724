"""Speed sentinel, campaign-wide rounds and drift-aware values (issue 16), with a synthetic
backend: its values are made up here (synthetic), and its "machine speed" is a number the
test changes between visits."""

import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from carb.campaign import rounds as states
from carb.report import figures
from carb.campaign import speed as drift
from carb.families import space
from carb.campaign.runner import run_campaign
from carb.measure.base import Backend, Measurement, Protocol
from carb.measure.protocol import summarize
from carb.measure.sentinel import CPU_SENTINEL, Sentinel, effective_sentinel_ms
from carb.families.space import Config
from carb.campaign.store import Store

SENT = Config(family="cifar", block="basic", depth=20, width=1.0, early_downsample=False, input_size=32,
              batch=8, precision="fp32", classes=10)


class DriftingBackend(Backend):
    """Synthetic: latency = depth x slowness ms; the slowness (the machine's speed) moves
    by ``step`` after every call, the sentinel config included."""

    device = "cpu"

    def __init__(self, step=0.05, fail_sentinel=False, interrupt_after=None, sentinel_spread=0.004):
        self.protocol = Protocol(max_time_s=2.0)
        self.slowness = 1.0
        self.step = step
        self.log = []  # (kind, config) in call order
        self.fail_sentinel = fail_sentinel
        self.interrupt_after = interrupt_after
        self.sentinel_spread = sentinel_spread

    def provenance(self):
        return {"threads": 1, "synthetic": True}

    def measure(self, config, protocol=None):
        if self.interrupt_after is not None and len(self.log) >= self.interrupt_after:
            raise KeyboardInterrupt
        kind = "sentinel" if config == SENT else "visit"
        self.log.append((kind, config))
        s = self.slowness
        self.slowness *= 1 + self.step
        if kind == "sentinel" and self.fail_sentinel:
            return Measurement(status="error", message="synthetic sentinel failure")
        base = (3.0 if kind == "sentinel" else float(config.depth)) * s
        spread = self.sentinel_spread if kind == "sentinel" else 0.004
        samples = [base * f for f in np.linspace(1 - spread, 1 + spread, 8)]  # 8 samples: a defined CI
        return Measurement(status="ok", latency_ms=summarize(samples), memory_mb=10.0, timed_s=0.0, wall_s=0.0,
                           extra={"latency_samples_ms": samples})


def every_visit(every_s=0.0, window_s=0.0):
    """A reading before every visit; each visit's sentinel interpolated between readings."""
    return Sentinel(configs=(SENT,), protocol=Protocol(max_time_s=0.2), every_s=every_s, window_s=window_s,
                    name="synthetic")


def test_a_visits_sentinel_is_the_median_of_the_readings_in_its_window():
    from carb.campaign.runner import _sentinel_at

    t, ms = [0.0, 10.0, 20.0, 200.0], [1.0, 3.0, 2.0, 5.0]
    assert _sentinel_at(12.0, t, ms, window_s=60) == 2.0  # median of 1, 3, 2: one bad reading moves nothing
    assert _sentinel_at(150.0, t, ms, window_s=60) == 5.0  # none within 30 s: the nearest
    assert _sentinel_at(15.0, t, ms, window_s=0) == pytest.approx(2.5)  # 0: linear interpolation
    assert _sentinel_at(-5.0, t, ms, window_s=0) == 1.0 and _sentinel_at(300.0, t, ms, window_s=0) == 5.0


def test_with_the_default_window_a_short_campaign_shares_one_level(tmp_path):
    with Store(tmp_path / "w.duckdb") as store:
        r = run_campaign(list(space.load("tiny")), DriftingBackend(step=0.05), store,
                         sentinel=every_visit(window_s=CPU_SENTINEL.window_s))
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


def test_effective_sentinel_matches_per_sample_normalization():
    samples = [[10.0, 10.2, 9.9], [12.0, 12.5, 11.8, 12.1]]
    sent = [2.0, 2.4]
    eff = effective_sentinel_ms(samples, sent)
    per_sample = np.median(np.concatenate([np.array(v) / s for v, s in zip(samples, sent)]))
    assert np.median(np.concatenate(samples)) / eff == pytest.approx(per_sample)
    assert effective_sentinel_ms([[5.0, 5.0]], [1.7]) == pytest.approx(1.7)


def test_a_failing_sentinel_leaves_a_gap_not_a_value(tmp_path):
    with Store(tmp_path / "f.duckdb") as store:
        r = run_campaign(list(space.load("tiny"))[:3], DriftingBackend(fail_sentinel=True), store,
                         sentinel=every_visit())
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


def _old_store(path):
    """A store as written before the sentinel existed (schema 2 without the speed_index table,
    the drift columns and the fastest sample), holding 3 rows measured by the synthetic backend."""
    from carb.campaign.store import DRIFT_COLUMNS, MEASUREMENT_COLUMNS, TARGETS

    src = path.with_name("src.duckdb")
    with Store(src) as store:
        run_campaign(list(space.load("tiny"))[:3], DriftingBackend(step=0.0), store, sentinel=None)
    cols = [(c, t) for c, t in MEASUREMENT_COLUMNS
            if (c, t) not in DRIFT_COLUMNS and c not in {f"{x}_min" for x in TARGETS}]
    ddl = ", ".join(f"{c} {t}" for c, t in cols)
    names = ", ".join(c for c, _ in cols)
    con = duckdb.connect(str(path))
    con.execute(f"ATTACH '{src}' AS src (READ_ONLY)")
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta SELECT * FROM src.meta")
    con.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, platform VARCHAR, "
                "device VARCHAR, command VARCHAR, carb_version VARCHAR, provenance JSON, protocol JSON)")
    con.execute("INSERT INTO runs SELECT * FROM src.runs")
    con.execute(f"CREATE TABLE measurements ({ddl}, PRIMARY KEY (config_id, platform))")
    con.execute(f"CREATE TABLE remeasurements ({ddl})")
    con.execute(f"CREATE TABLE rounds ({ddl}, round INTEGER, PRIMARY KEY (config_id, platform, round))")
    con.execute(f"INSERT INTO measurements SELECT {names} FROM src.measurements")
    con.close()


def test_a_store_from_before_the_sentinel_opens_and_says_no_speed_index(tmp_path):
    path = tmp_path / "old.duckdb"
    _old_store(path)
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


def test_speed_summary_lines_and_plot(tmp_path):
    with Store(tmp_path / "p.duckdb") as store:
        run_campaign(list(space.load("tiny")), DriftingBackend(step=0.02), store, sentinel=every_visit())
        rd = store.speed_readings()
    s = drift.speed_summary(rd)
    p = s["platforms"]["cpu-1t"]
    assert s["readings"] == 10 and p["index_min"] < 1 < p["index_max"]
    assert p["max_ratio"] == pytest.approx(1.02 ** 17, rel=1e-6)  # 18 calls, the first and last read the sentinel
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


def test_cli_dataset_info_shows_the_index_or_says_there_is_none(tmp_path):
    import json
    import subprocess
    import sys

    def info(path, *extra):
        p = subprocess.run([sys.executable, "-m", "carb.cli", "dataset", "info", "--store", str(path), *extra],
                           capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", **__import__("os").environ})
        assert p.returncode == 0, p.stderr
        return p.stdout

    old = tmp_path / "old.duckdb"
    _old_store(old)
    assert "no speed index" in info(old)
    new = tmp_path / "new.duckdb"
    with Store(new) as store:
        run_campaign(list(space.load("tiny")), DriftingBackend(step=0.02), store, sentinel=every_visit())
    out = info(new)
    assert "10 sentinel readings" in out and "index over time" in out
    doc = json.loads(info(new, "--json"))
    assert doc["speed_index"]["platforms"]["cpu-1t"]["readings"] == 10


def test_a_noisy_reading_is_kept_but_corrects_nothing(tmp_path):
    with Store(tmp_path / "n.duckdb") as store:
        # synthetic sentinel samples spread by +-40%: 95% CI of the median far over 5%
        r = run_campaign(list(space.load("tiny"))[:3], DriftingBackend(sentinel_spread=0.4), store,
                         sentinel=every_visit())
        df = store.measurements()
        rd = store.speed_readings()
    assert r.readings == 5 and r.noisy_readings == 5 and (~rd.used).all()
    assert df.sentinel_ms.isna().all() and df.latency_ms_norm.isna().all()
    s = drift.speed_summary(rd)
    assert s["platforms"]["cpu-1t"]["readings"] == 0 and "too noisy" in drift.speed_lines(s, rd)[0]
    assert figures.speed_plot(rd, tmp_path / "n.png") is None


def test_demo_reports_drift_first_and_scores_raw_and_corrected(tmp_path):
    """run_demo with a synthetic measure(): calibration rows at sentinel 1.0 ms, validation
    rows measured 25% slower (latency and sentinel x1.25): synthetic values, real pipeline."""
    import warnings

    from carb import datasets
    from carb.demo import DemoSettings, run_demo
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = CARB(preset="fast").fit(datasets.load("cpu-1t"))  # as the demo trains it

    def measure(frame, what):
        # a synthetic device 1.5x the source's prediction, 1.25x slower still while validating
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        slow = 1.25 if what == "validating" else 1.0
        return f.assign(status="ok", latency_ms=p["latency_ms"].to_numpy() * 1.5 * slow,
                        memory_mb=p["memory_mb"].to_numpy(), energy_j=np.nan, sentinel_ms=0.6 * slow)

    said = []
    s = run_demo(DemoSettings(out=tmp_path / "demo", samples=6, validate=3, control=3), measure, say=said.append)
    d = s["drift"]
    assert d["speed_change"] == pytest.approx(1 / 1.25 - 1) and d["exceeds"]
    assert "slower" in d["line"]
    # the drift line comes before the validation figures when it exceeds the noise
    assert said.index(d["line"]) < next(i for i, m in enumerate(said) if m.startswith("validated on"))
    raw, corr = s["validation_median_abs_error"]["latency_ms"], s["validation_median_abs_error_corrected"]["latency_ms"]
    # the map learnt the 1.5x; raw, only the drift is left (pred / measured - 1 = 1 / 1.25 - 1)
    assert raw == pytest.approx(0.2, abs=0.02) and corr < 0.02
    # the corrected values sit on the map: every one inside its interval, whatever the raw coverage
    assert s["validation_interval_coverage_corrected"]["latency_ms"] == 1.0
    val = pd.read_csv(tmp_path / "demo" / "validation.csv")
    assert val.latency_ms_corrected.to_numpy() == pytest.approx(val.latency_ms.to_numpy() / 1.25)
    # the budget calls are scored against the corrected latencies too
    from carb.decide.validate import decision_metrics, truly_feasible

    vc = s["validation_corrected"]
    assert vc["reference"] == "the calibration's median sentinel speed" and vc["reference_ms"] == pytest.approx(0.6)
    want = decision_metrics(val.call.to_numpy(), truly_feasible(val.assign(latency_ms=val.latency_ms_corrected),
                                                                 s["budgets"]))
    assert {k: vc[k] for k in want} == pytest.approx(want)
    assert any("drift-corrected (false accepts" in m for m in said if m.startswith("validated on"))
    # synthetic truth is a line of the source's prediction in log: the sitting's floor is ~0
    assert s["validation_floor_median_abs_error"]["latency_ms"] < 1e-6
    assert s["validation_floor_median_abs_error_raw"]["latency_ms"] < 1e-6
    assert any(m.startswith("this sitting's floor") and "raw" in m for m in said)
    assert not any("added scatter" in m for m in said)


def test_demo_says_when_the_drift_correction_adds_scatter(tmp_path):
    """SYNTHETIC: the device's latencies are an exact line of the source's prediction, but
    the validation rows' sentinels scatter (+-40%, as a sentinel that does not follow the
    configs): corrected, they scatter too, and the demo says the correction added scatter."""
    import warnings

    from carb import datasets
    from carb.demo import DemoSettings, run_demo
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = CARB(preset="fast").fit(datasets.load("cpu-1t"))
    rng = np.random.default_rng(0)

    def measure(frame, what):
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        sent = 0.6 * (np.exp(rng.uniform(-0.4, 0.4, len(f))) if what == "validating" else np.ones(len(f)))
        return f.assign(status="ok", latency_ms=p["latency_ms"].to_numpy() * 1.5, memory_mb=p["memory_mb"].to_numpy(),
                        energy_j=np.nan, sentinel_ms=sent)

    said = []
    # retakes=0: the scattered sentinels would otherwise be measured again (test below)
    s = run_demo(DemoSettings(out=tmp_path / "demo", samples=6, validate=5, control=5, retakes=0), measure,
                 say=said.append)
    assert s["validation_floor_median_abs_error_raw"]["latency_ms"] < 1e-6
    assert s["validation_floor_median_abs_error"]["latency_ms"] > 0.05
    assert any("added scatter" in m for m in said)


def test_sitting_floor_is_the_in_sample_map_error():
    """sitting_floor fits log y = a + b log(source) on the rows themselves: synthetic
    truth 2 x source^0.8 with every other row 10% high leaves a median error near 5%."""
    from carb.demo import sitting_floor

    class Source:
        def predict(self, df):
            return pd.DataFrame({"latency_ms": df["s"].to_numpy(float)})

    rows = pd.DataFrame({"s": np.geomspace(0.5, 500, 16)})
    bump = np.where(np.arange(16) % 2 == 0, 1.1, 1.0)
    truth = pd.DataFrame({"latency_ms": 2 * rows.s ** 0.8 * bump})
    fl = sitting_floor(Source(), rows, truth, ["latency_ms", "memory_mb"])
    assert set(fl) == {"latency_ms"}  # no truth column for memory
    # the fit sits midway in log between the two groups: each misses by about sqrt(1.1) - 1
    assert fl["latency_ms"] == pytest.approx(np.sqrt(1.1) - 1, rel=0.05)
    exact = sitting_floor(Source(), rows, pd.DataFrame({"latency_ms": 2 * rows.s ** 0.8}), ["latency_ms"])
    assert exact["latency_ms"] < 1e-9


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
        return Measurement(status="ok", latency_ms=m.latency_ms, memory_mb=m.memory_mb, timed_s=0.0, wall_s=0.0,
                           extra={**m.extra, "pair_ratio": ratios, "pair_sentinel_ms": sent})


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
    assert row.sentinel_ms > 0 and math.isclose(row.latency_ms_norm, row.latency_ms * store_ref(tmp_path) / row.sentinel_ms,
                                                rel_tol=1e-9)


def store_ref(tmp_path):
    with Store(tmp_path / "p.duckdb", read_only=True) as s:
        return s.speed_ref_ms(s.measurements().platform.iloc[0])


def test_pairing_switch_and_paired_sentinel_formula():
    from carb.measure.sentinel import Pairing, paired_sentinel_ms

    assert CPU_SENTINEL.pairing() == Pairing(CPU_SENTINEL.configs[0], CPU_SENTINEL.pair_every_s,
                                             CPU_SENTINEL.pair_sample_s, CPU_SENTINEL.pair_share)
    from dataclasses import replace as dc_replace

    assert dc_replace(CPU_SENTINEL, pair=False).pairing() is None
    assert dc_replace(CPU_SENTINEL, configs=(SENT, SENT)).pairing() is None
    visits = [{"latency_samples_ms": [2.0, 4.0, 6.0], "pair_ratio": [2.0, 4.0]},
              {"latency_samples_ms": [8.0], "pair_ratio": [3.0]}]
    assert paired_sentinel_ms(visits) == 5.0 / 3.0  # median(2,4,6,8) / median(2,4,3)
    assert paired_sentinel_ms([visits[0], {"latency_samples_ms": [1.0]}]) is None  # one visit unpaired


def test_cpu_backend_times_the_paired_sentinel_inside_a_visit(tmp_path):
    """Real worker on this CPU: the visit carries its paired sentinel blocks; a visit of the
    sentinel's own config is not paired with itself."""
    from carb.measure.cpu import CpuBackend
    from carb.measure.sentinel import Pairing

    cfg = Config(family="cifar", block="basic", depth=8, width=0.25, early_downsample=False, input_size=32,
                 batch=2, precision="fp32", classes=10)
    with CpuBackend(threads=1, protocol=Protocol(max_time_s=0.3, ci_target=1e-6)) as b:
        b.paired_sentinel = Pairing(CPU_SENTINEL.configs[0])
        m = b.measure(cfg)
        own = b.measure(CPU_SENTINEL.configs[0])
        b.paired_sentinel = None
        alone = b.measure(cfg)
    assert m.status == "ok", m.message
    assert len(m.extra["pair_ratio"]) >= 2 and len(m.extra["pair_ratio"]) == len(m.extra["pair_sentinel_ms"])
    assert all(r > 0 for r in m.extra["pair_ratio"]) and 0 < m.extra["pair_share"] < 1
    assert m.memory_mb is not None and m.memory_mb > 0
    assert own.status == "ok" and "pair_ratio" not in own.extra
    # memory means what it means unpaired: read before the sentinel exists (built first, its
    # runtime buffers made the config read ~17 MB less; run during the peak, ~1-2 MB more)
    assert alone.status == "ok" and abs(m.memory_mb - alone.memory_mb) < 0.1 * alone.memory_mb
    assert "pair_ratio" not in alone.extra


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


def test_rows_put_at_their_median_speed_only_when_every_ok_row_has_a_sentinel():
    """Synthetic rows: latency x median(sentinel) / sentinel, raw kept; failed rows ignored;
    a row without a sentinel leaves the rows as they are."""
    rows = pd.DataFrame({"status": ["ok", "ok", "ok", "error"], "latency_ms": [10.0, 20.0, 30.0, np.nan],
                         "sentinel_ms": [1.0, 2.0, 4.0, np.nan]})
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


def test_drift_corrected_calls_score_at_the_calibrations_speed():
    """SYNTHETIC rows: budget 10 ms; config b was timed while the machine ran 2x slow
    (sentinel 2.0 ms against the calibration's 1.0 ms): 16 ms raw, 8 ms at the
    calibration's speed. Accepting it is a false accept raw, right drift-corrected."""
    from carb.decide.validate import corrected_latency, drift_corrected_calls

    val = pd.DataFrame({"config_id": ["a", "b", "c", "d"], "latency_ms": [5.0, 16.0, 30.0, 9.0],
                        "memory_mb": [10.0] * 4, "sentinel_ms": [1.0, 2.0, 1.0, 1.1]})
    calls = np.array(["accept", "accept", "reject", "measure"])
    budgets = {"latency_ms": 10.0, "memory_mb": 20.0}
    r = drift_corrected_calls(val, budgets, calls, calibration_sentinel_ms=[1.0, 1.0, 1.02, 0.98])
    c = r["corrected"]
    assert c["reference"] == "the calibration's median sentinel speed" and c["reference_ms"] == pytest.approx(1.0)
    assert c["n"] == 3 and c["false_accepts"] == 0 and c["accuracy"] == 1.0 and c["rows"] == 4
    from carb.decide.validate import decision_metrics, truly_feasible

    assert decision_metrics(calls, truly_feasible(val, budgets))["false_accepts"] == 1  # raw: b is over
    # the validation's median sentinel (1.05 ms) sits 5% slower than the calibration's, within noise
    assert r["drift"]["speed_change"] == pytest.approx(1 / 1.05 - 1) and "slower" in r["drift"]["line"]
    cl = corrected_latency(val, 1.0)
    assert cl.latency_ms.tolist() == pytest.approx([5.0, 8.0, 30.0, 9.0 / 1.1])
    assert cl.latency_ms_raw.tolist() == val.latency_ms.tolist()
    # no calibration readings: the validation's own median speed is the reference
    r2 = drift_corrected_calls(val, budgets, calls)
    assert r2["corrected"]["reference"] == "this validation's median sentinel speed"
    assert "no calibration speed index" in r2["drift"]["line"]
    # rows without a sentinel, or no latency budget: nothing to correct, the raw calls stand
    assert "corrected" not in drift_corrected_calls(val.drop(columns="sentinel_ms"), budgets, calls, [1.0])
    assert "corrected" not in drift_corrected_calls(val, {"memory_mb": 20.0}, calls, [1.0])
    # a row whose sentinel failed (NaN) keeps its raw latency
    gap = val.assign(sentinel_ms=[1.0, np.nan, 1.0, 1.0])
    assert corrected_latency(gap, 1.0).latency_ms.tolist() == pytest.approx([5.0, 16.0, 30.0, 9.0])


def test_cli_validate_on_device_reports_drift_and_scores_corrected_calls(tmp_path, monkeypatch, capsys):
    """carb calibrate's sentinel readings travel through carb screen to carb validate
    --device, which reports the drift since calibration and scores the calls at the
    calibration's speed too. SYNTHETIC device: 1.5x the source's latency; calibrated at
    sentinel 0.6 ms, validated with the machine 2x slower (latency and sentinel x2)."""
    import json
    import sys
    import warnings

    from carb import datasets
    from carb.transfer.calibrate import fit_calibrated
    from carb.cli import main
    from carb.model import CARB, save
    from carb.decide.validate import decision_metrics, truly_feasible

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = CARB(preset="fast").fit(datasets.load("cpu-1t"))
    save(source, tmp_path / "src")
    cands = space.load("cpu").to_frame()

    def device_rows(frame, slow):
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        return f.assign(status="ok", latency_ms=p["latency_ms"].to_numpy() * 1.5 * slow,
                        memory_mb=p["memory_mb"].to_numpy(), energy_j=np.nan, sentinel_ms=0.6 * slow)

    k = cands.sample(12, random_state=0)
    cal = fit_calibrated(source, device_rows(k, 1.0), meta={"device": "cpu"})
    cal.save(tmp_path / "cal", source_dir=tmp_path / "src")

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["carb", *map(str, args)])
        with pytest.raises(SystemExit) as e:
            main()
        out = capsys.readouterr()
        assert e.value.code == 0, out.err
        return out.out

    pred = cal.predict(cands)
    lat_b, mem_b = float(pred.latency_ms.median()), float(pred.memory_mb.median())
    run("screen", "--space", "cpu", "--target-model", tmp_path / "cal", "--budget", f"latency_ms={lat_b}",
        "--budget", f"memory_mb={mem_b}", "--out", tmp_path / "scr")
    assert json.loads((tmp_path / "scr" / "summary.json").read_text())["calibration_sentinel_ms"] == [0.6] * 12
    seen = {}

    def fake_measure(df, device, threads, max_time, store_path, what, rounds=1, again=False):
        seen.setdefault("again", []).append(len(df) if again else 0)
        if not again:
            seen["rows"] = device_rows(df, 2.0)
        return device_rows(df, 2.0)  # the whole machine slower: a retake is no faster

    monkeypatch.setattr("carb.cli.screening._measure_frame", fake_measure)
    res = json.loads(run("validate", "--screen", tmp_path / "scr", "--device", "cpu", "--limit", "10",
                         "--control", "10", "--json"))
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
    calls = np.where(rows.config_id.isin(set(m.config_id)), "measure",
                     np.where(rows.config_id.isin(acc), "accept", "reject"))
    want = decision_metrics(calls, truly_feasible(rows.assign(latency_ms=rows.latency_ms / 2), {
        "latency_ms": lat_b, "memory_mb": mem_b}))
    assert {k: c[k] for k in want} == pytest.approx(want)
    # the map learnt the 1.5x: at the calibration's speed every accept is right; raw, the 2x
    # slow-down breaks the latency budget of accepted configs
    assert c["false_accepts"] == 0 and res["decisions"]["false_accepts"] > 0
    table = run("validate", "--screen", tmp_path / "scr", "--device", "cpu", "--limit", "10", "--control", "10")
    flat = " ".join(table.split())
    assert flat.index("50.0% slower") < flat.index("validation (measured on cpu)")
    assert "drift-corrected" in flat


def test_the_fastest_sample_is_kept_pooled_and_stored(tmp_path):
    from carb.campaign.runner import pool_rounds

    assert summarize([3.0, 1.5, 2.0]).min == 1.5
    visits = [Measurement(status="ok", latency_ms=summarize(x), memory_mb=1.0, extra={"latency_samples_ms": x})
              for x in ([2.0, 2.5, 3.0], [1.8, 4.0, 2.2])]
    assert pool_rounds(visits).latency_ms.min == 1.8  # the fastest of every visit's samples
    with Store(tmp_path / "f.duckdb") as store:
        run_campaign(list(space.load("tiny"))[:2], DriftingBackend(step=0.0), store, sentinel=None)
        df = store.measurements()
        # the synthetic samples are depth x (1 - 0.004) .. depth x (1 + 0.004)
        assert df.latency_ms_min.to_numpy() == pytest.approx(df.depth.to_numpy() * 0.996)
        st = Store.measurement_from_row(df.iloc[0].to_dict()).latency_ms
        assert st.min == pytest.approx(df.latency_ms_min.iloc[0])


def _repeat_rows(lat, norm=None, fastest=None, status=None):
    df = pd.DataFrame({"config_id": [f"c{i}" for i in range(len(lat))], "latency_ms": lat,
                       "status": status or ["ok"] * len(lat), "memory_mb": 10.0,
                       "measured_at": pd.Timestamp("2026-12-04T10:00:00Z")})
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
    import subprocess
    import sys
    from pathlib import Path

    store = tmp_path / "s.duckdb"
    configs = list(space.load("tiny"))
    with Store(store) as s:
        run_campaign(configs, DriftingBackend(step=0.02), s, sentinel=every_visit())
        run_campaign(configs[:3], DriftingBackend(step=0.02), s, sentinel=every_visit(), remeasure=True)
    script = Path(__file__).resolve().parents[1] / "scripts" / "ship_dataset.py"
    r = subprocess.run([sys.executable, str(script), "--store", str(store), "--name", "cpu-1t", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in (tmp_path / "cpu-1t.md").read_text().splitlines() if ln.startswith("- drift")]
    # synthetic: the second campaign's backend starts at the first one's speed, so raw repeats
    assert len(lines) == 3 and "3 configs measured again" in lines[0] and "ratio 1.000" in lines[0]
    assert "`latency_ms_norm`" in lines[1] and "fastest sample (`latency_ms_min`)" in lines[2]


def test_machine_state_is_the_largest_group_never_between_two():

    # SYNTHETIC sentinels: two states of the machine, 0.5 and 1.1 ms
    assert states.machine_state([0.52, 0.53, 1.1, 1.1, 1.12, 0.54]) == pytest.approx(0.53)  # a tie: the faster
    assert states.machine_state([0.52, 1.1, 1.1, 1.12, 0.54]) == pytest.approx(1.1)
    assert states.machine_state([]) is None and states.machine_state([np.nan, 0]) is None
    rows = pd.DataFrame({"status": ["ok", "ok", "failed", "ok"], "sentinel_ms": [1.0, 1.05, 0.5, 2.0]})
    assert states.machine_state(rows) == pytest.approx(np.sqrt(1.05))  # in log; the failed row is no evidence
    off = states.off_state(rows, 1.0)
    assert off.tolist() == [False, False, False, True]
    assert states.off_state(rows.drop(columns="sentinel_ms"), 1.0).tolist() == [False] * 4


def test_retake_off_state_keeps_the_visit_nearest_the_reference():
    """SYNTHETIC rows: configs a-e, c and d timed in the slow state (sentinel 1.1 ms against
    0.5 ms); the first retake brings c back and d stays slow, the second fails for d (its
    slow visit is kept, nothing lost); e has no sentinel."""
    from carb.campaign import speed as drift

    rows = pd.DataFrame({"config_id": list("abcde"), "status": "ok",
                         "sentinel_ms": [0.5, 0.52, 1.1, 1.12, np.nan], "latency_ms": [1.0, 2.0, 3.6, 4.8, 5.0]})
    calls = []

    def again(f):
        calls.append(sorted(f.config_id))
        if len(calls) == 1:
            return pd.DataFrame({"config_id": ["c", "d"], "status": "ok", "sentinel_ms": [0.51, 1.3],
                                 "latency_ms": [3.0, 9.9]})
        return pd.DataFrame({"config_id": ["d"], "status": "failed", "sentinel_ms": [0.5], "latency_ms": [np.nan]})

    out, d = states.retake_off_state(rows, again)
    assert calls == [["c", "d"], ["d"]]  # only the visits still off, at most RETAKES times
    assert out.latency_ms.tolist()[:4] == [1.0, 2.0, 3.0, 4.8]  # c retaken; d's retake was farther: kept
    assert out.retakes.tolist() == [0, 0, 1, 2, 0]
    assert d["ref_ms"] == pytest.approx(np.sqrt(0.5 * 0.52)) and (d["off"], d["visits"], d["back"], d["left"]) == (2, 3, 1, 1)
    line = states.state_line(d)
    assert line.startswith("2 of 4 validation visits were timed in another state") and "1 left" in line
    # no retakes asked for, or every visit in the reference state: nothing measured again
    out0, d0 = states.retake_off_state(rows, again, tries=0)
    assert len(calls) == 2 and d0["off"] == 2 and d0["left"] == 2 and out0.latency_ms.tolist()[2] == 3.6
    _, d1 = states.retake_off_state(rows.iloc[:2], again)
    assert len(calls) == 2 and states.state_line(d1) is None
    assert states.retake_off_state(rows.drop(columns="sentinel_ms"), again)[1] == {"note": drift.NO_INDEX}


@pytest.fixture(scope="module")
def demo_source():
    """The demo's source model (CARB fast on cpu-1t), fitted once for the two-state tests."""
    import warnings

    from carb import datasets
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CARB(preset="fast").fit(datasets.load("cpu-1t"))


def _two_state_demo(out, source, slow_of, retakes=2):
    """run_demo on a SYNTHETIC device 1.5x the source's latency with two states, as a
    2-thread worker on our VMs: in the slow one the sentinel takes 1.0 ms against 0.5 and a
    config 1.2x (no one ratio corrects both). ``slow_of(what, again, n, asked)``: which of
    the n configs of a call are timed in the slow state. Returns (summary, said, asked), asked
    the (what, again, n) of every measure() call."""
    from carb.demo import DemoSettings, run_demo

    asked, said = [], []

    def measure(frame, what, again=False):
        f = frame.reset_index(drop=True)
        slow = np.broadcast_to(slow_of(what, again, len(f), asked), len(f))
        asked.append((what, again, len(f)))
        p = source.predict(f)["latency_ms"].to_numpy() * 1.5
        return f.assign(status="ok", latency_ms=p * np.where(slow, 1.2, 1.0), memory_mb=50.0, energy_j=np.nan,
                        sentinel_ms=np.where(slow, 1.0, 0.5))

    s = run_demo(DemoSettings(out=out, samples=6, validate=4, control=4, retakes=retakes), measure, say=said.append)
    return s, said, asked


AGAIN = "measuring again (another machine state)"


def test_demo_measures_again_the_visits_of_another_machine_state(tmp_path, demo_source):
    """Half the validation visits fall in the slow state; measured again they come back in
    the fast one and the demo's error is the map's (~0), where without retakes it is the
    state's."""
    def slow_of(what, again, n, asked):
        return (np.arange(n) % 2 == 0) & (what == "validating")

    s, said, asked = _two_state_demo(tmp_path / "d2", demo_source, slow_of)
    st = s["machine_state"]["validation"]
    assert (st["off"], st["back"], st["left"], st["visits"]) == (4, 4, 0, 4) and st["ref_ms"] == pytest.approx(0.5)
    assert s["machine_state"]["calibration"]["off"] == 0
    assert asked == [("characterizing", False, 6), ("validating", False, 8), (AGAIN, True, 4)]
    assert any(m.startswith("4 of 8 validation visits were timed in another state") for m in said)
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01
    val = pd.read_csv(tmp_path / "d2" / "validation.csv")
    assert (val.sentinel_ms == 0.5).all() and sorted(val.retakes) == [0] * 4 + [1] * 4
    s0, _, asked0 = _two_state_demo(tmp_path / "d0", demo_source, slow_of, retakes=0)
    assert len(asked0) == 2 and s0["machine_state"]["validation"]["left"] == 4
    # without retakes the slow half corrected by the sentinel's 2x: 1.2 / 2 = 0.6 of the truth
    assert s0["validation_median_abs_error_corrected"]["latency_ms"] > 0.2


def test_demo_recalibrates_in_the_faster_state_validation_ran_in(tmp_path, demo_source):
    """The whole calibration is timed in the slow state, validation and every retake in the
    fast one. The demo measures the K configs again in the validation's state and refits
    the map on them: its error is the map's (~0); without retakes it is the state's (1.2x:
    20%)."""
    def slow_of(what, again, n, asked):
        return what == "characterizing"

    s, said, asked = _two_state_demo(tmp_path / "d2", demo_source, slow_of)
    st = s["machine_state"]
    assert st["recalibrated"] and st["calibration"]["back"] == 6 and st["calibration"]["ref_ms"] == pytest.approx(0.5)
    assert st["calibration"]["first"]["off"] == 0 and st["validation"]["off"] == 0
    assert asked == [("characterizing", False, 6), ("validating", False, 8), (AGAIN, True, 6)]
    assert any(m.startswith("6 of 6 calibration visits timed in another state than the faster state validation ran in")
               for m in said)
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01
    k = pd.read_csv(tmp_path / "d2" / "characterized.csv")
    assert (k.sentinel_ms == 0.5).all() and (k.retakes == 1).all()
    s0, _, asked0 = _two_state_demo(tmp_path / "d0", demo_source, slow_of, retakes=0)
    assert len(asked0) == 2 and not s0["machine_state"]["recalibrated"]
    assert s0["validation_median_abs_error"]["latency_ms"] == pytest.approx(0.2, abs=0.02)  # predicted 1.2x


def test_demo_measures_the_calibration_again_after_a_slow_spell(tmp_path, demo_source):
    """3 of 6 calibration visits in the slow state and both of their retakes during
    calibration too (a spell of tens of seconds); validation and later retakes in the fast
    state. After validation the 3 are measured again, come back, and the map is refitted
    on K visits of one state."""
    def slow_of(what, again, n, asked):
        if what == "characterizing":
            return np.arange(n) % 2 == 1
        return again and not any(w == "validating" for w, _, _ in asked)  # the spell ends with calibration

    s, said, asked = _two_state_demo(tmp_path / "d", demo_source, slow_of)
    st = s["machine_state"]
    assert st["recalibrated"] and st["calibration"]["first"]["left"] == 3 and st["calibration"]["back"] == 3
    # K, two retakes in the spell, validation, one after it
    assert [n for _, _, n in asked] == [6, 3, 3, 8, 3]
    assert any(m.startswith("3 of 3 calibration visits timed in another state than the calibration's state") for m in said)
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01


def test_cli_calibrate_measures_again_the_visits_of_another_state(tmp_path, monkeypatch, capsys):
    """carb calibrate: 4 of 12 K visits timed in the slow state (SYNTHETIC device 1.5x the
    source; slow state: sentinel 1.2 ms against 0.6, configs x1.2) are measured again, come
    back in the fast state, and the map is fitted on one state: it recovers the 1.5x."""
    import sys
    import warnings

    from carb import datasets
    from carb.cli import main
    from carb.model import CARB, save
    from carb.transfer.calibrate import load_predictor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = CARB(preset="fast").fit(datasets.load("cpu-1t"))
    save(source, tmp_path / "src")
    calls = []

    def fake_measure(df, device, threads, max_time, store_path, what, rounds=1, again=False):
        calls.append((len(df), again))
        store_path.touch()  # carb calibrate keeps the store beside the model
        f = df.reset_index(drop=True)
        slow = (np.arange(len(f)) % 3 == 0) if not again else np.zeros(len(f), bool)
        p = source.predict(f)["latency_ms"].to_numpy() * 1.5
        return f.assign(status="ok", latency_ms=p * np.where(slow, 1.2, 1.0), memory_mb=50.0, energy_j=np.nan,
                        sentinel_ms=np.where(slow, 1.2, 0.6))

    monkeypatch.setattr("carb.cli.screening._measure_frame", fake_measure)
    monkeypatch.setattr(sys, "argv", ["carb", "calibrate", "--model", str(tmp_path / "src"), "--device", "cpu",
                                      "--samples", "12", "--out", str(tmp_path / "cal")])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    assert calls == [(12, False), (4, True)]
    assert "4 of 12 calibration visits were timed in another state" in " ".join(out.out.split())
    cal = load_predictor(tmp_path / "cal")
    cands = space.load("cpu").to_frame().sample(50, random_state=1)
    ratio = cal.predict(cands)["latency_ms"].to_numpy() / source.predict(cands)["latency_ms"].to_numpy()
    assert np.median(np.abs(ratio / 1.5 - 1)) < 0.01
