"""The campaign store and runner with a synthetic backend (no hardware: values are
synthetic, produced by the fake backend below)."""

import duckdb
import pytest

from carb import datasets, space
from carb.campaign import run_campaign
from carb.measure.base import Backend, Measurement, Stats
from carb.store import Store, StoreError


class SyntheticBackend(Backend):
    """Returns made-up measurements; fails on configs whose batch is in ``fail_batches``."""

    device = "cpu"

    def __init__(self, fail_batches=(), interrupt_after=None):
        self.fail_batches = set(fail_batches)
        self.calls = 0
        self.interrupt_after = interrupt_after

    def provenance(self):
        return {"threads": 1, "synthetic": True}

    def measure(self, config):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        if config.batch in self.fail_batches:
            return Measurement(status="error", message="synthetic failure")
        v = float(config.depth * config.batch)
        st = Stats(median=v, mean=v, p5=v, p95=v, cov=0.01, n=5, ci_rel=float("nan"))
        return Measurement(status="ok", latency_ms=st, memory_mb=v / 10, timed_s=0.5, wall_s=0.6,
                           energy_missing_reason="synthetic: no sensor", extra={"threads": 1})


def test_campaign_stores_resumes_and_never_duplicates(tmp_path):
    configs = list(space.load("tiny"))
    path = tmp_path / "c.duckdb"
    with Store(path) as store:
        r = run_campaign(configs, SyntheticBackend(fail_batches={4}), store)
        assert r.platform == "cpu-1t" and r.measured == 8 and r.by_status == {"ok": 4, "error": 4}
        # the same command again resumes: nothing to do
        b = SyntheticBackend()
        r2 = run_campaign(configs + configs, b, store)
        assert (r2.skipped, r2.measured, b.calls) == (8, 0, 0)
        # retrying failures measures only the failed ones
        r3 = run_campaign(configs, b, store, retry_failed=True)
        assert r3.measured == 4 and b.calls == 4
        df = store.measurements()
        assert len(df) == 8 and df.config_id.is_unique and set(df.status) == {"ok"}
        assert df.energy_j.isna().all() and (df.energy_missing_reason == "synthetic: no sensor").all()
        assert len(store.runs()) == 2
        # a direct insert of a stored key is refused, not duplicated
        assert store.add(configs[0], "cpu-1t", b.measure(configs[0]), "x") is False
        assert len(store.measurements()) == 8


def test_interrupt_keeps_what_is_done(tmp_path):
    configs = list(space.load("tiny"))
    with Store(tmp_path / "c.duckdb") as store:
        r = run_campaign(configs, SyntheticBackend(interrupt_after=3), store)
        assert r.interrupted and r.measured == 3
        assert len(store.measurements()) == 3
        r = run_campaign(configs, SyntheticBackend(), store)
        assert r.skipped == 3 and r.measured == 5


def test_remeasure_goes_to_its_own_table(tmp_path):
    configs = list(space.load("tiny"))[:3]
    with Store(tmp_path / "c.duckdb") as store:
        run_campaign(configs, SyntheticBackend(), store)
        r = run_campaign(configs, SyntheticBackend(), store, remeasure=True)
        assert r.measured == 3
        assert len(store.measurements()) == 3
        assert len(store.measurements(table="remeasurements")) == 3


def test_store_is_plain_duckdb_and_exports(tmp_path):
    path = tmp_path / "c.duckdb"
    with Store(path) as store:
        run_campaign(list(space.load("tiny")), SyntheticBackend(), store, platform="synthetic")
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT count(*) FROM measurements WHERE status = 'ok'").fetchone()[0] == 8
    con.close()
    with Store(path, read_only=True) as store:
        df = datasets.from_store(store, with_features=False)
    assert {"config_id", "device", "latency_ms", "latency_ms_cov", "memory_mb", "energy_j"} <= set(df.columns)
    assert set(df.device) == {"synthetic"}
    out = datasets.write(df, tmp_path / "d.csv")
    assert out.read_text().count("\n") == 9
    with pytest.raises(ValueError, match="expected .parquet or .csv"):
        datasets.write(df, tmp_path / "d.xlsx")


def test_store_errors_are_one_line(tmp_path):
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "missing.duckdb", read_only=True)
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a database")
    with pytest.raises(StoreError, match="cannot open"):
        Store(bad)
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    with pytest.raises(StoreError, match="not a CARB store"):
        Store(other, read_only=True)
