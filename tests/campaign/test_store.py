"""The campaign store and runner with a synthetic backend (no hardware: values are
synthetic, produced by the fake backends of tests/_helpers.py)."""

import duckdb
import pytest

from carb import datasets
from carb.campaign.runner import run_campaign
from carb.campaign.store import Store, StoreError
from carb.families import space
from tests._helpers import SampledBackend, SyntheticBackend


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


def test_rounds_pool_visits_and_resume_from_partial_rounds(tmp_path):
    configs = list(space.load("tiny"))
    with Store(tmp_path / "c.duckdb") as store:
        b = SampledBackend()
        r = run_campaign(configs, b, store, rounds=3, chunk=3)
        assert r.measured == 8 and r.by_status == {"ok": 8}
        assert all(v == 3 for v in b.visits.values())
        assert all(p.max_time_s == pytest.approx(1.0) for p in b.protocols)  # 3 s shared by 3 visits
        df = store.measurements()
        row = df[df.config_id == configs[0].config_id].iloc[0]
        d = configs[0].depth
        assert row.latency_ms_n == 9 and row.latency_ms == pytest.approx(d * 1.1)  # median of 9 pooled samples
        assert row.memory_mb == 11.0  # median of 10, 11, 12
        assert len(store.con.execute("SELECT * FROM rounds").fetchall()) == 24

    # a campaign killed after some visits resumes from the stored rounds
    with Store(tmp_path / "k.duckdb") as store:
        b = SampledBackend()
        b.interrupt_after = 5  # the 6th visit raises KeyboardInterrupt
        r = run_campaign(configs, b, store, rounds=2, chunk=4)
        # visits 1-4: round 0 of the chunk; visit 5 completes (and stores) the first config
        assert r.interrupted and r.measured == 1
        assert store.con.execute("SELECT count(*) FROM rounds").fetchone()[0] == 5
        b2 = SampledBackend()
        r = run_campaign(configs, b2, store, rounds=2, chunk=4)
        assert r.skipped == 1 and r.measured == 7  # the first config was stored before the kill
        assert sum(b2.visits.values()) == 16 - 5  # only the missing visits


def test_a_failed_round_fails_the_config(tmp_path):
    with Store(tmp_path / "c.duckdb") as store:
        b = SampledBackend(fail_on_visit=1)
        r = run_campaign(list(space.load("tiny"))[:2], b, store, rounds=3, chunk=2)
        assert r.by_status == {"timeout": 2}
        assert all(v == 2 for v in b.visits.values())  # no third visit after a failure
        assert set(store.measurements().message) == {"round 2: synthetic timeout"}
        # retrying clears the failed rounds too
        r = run_campaign(list(space.load("tiny"))[:2], SampledBackend(), store, rounds=3, chunk=2, retry_failed=True)
        assert r.by_status == {"ok": 2}


def test_on_visit_counts_every_visit_against_the_plan(tmp_path):
    """The progress count: every visit comes back once, against the visits the campaign plans
    (less those stored before a resume, less the rounds a failed config will not get)."""
    configs = list(space.load("tiny"))
    seen = []
    on_visit = lambda c, m, planned: seen.append(planned)  # noqa: E731
    with Store(tmp_path / "c.duckdb") as store:
        run_campaign(configs, SampledBackend(), store, rounds=3, on_visit=on_visit)
        assert seen == [24] * 24
    with Store(tmp_path / "k.duckdb") as store:
        b = SampledBackend()
        b.interrupt_after = 5
        seen.clear()
        run_campaign(configs, b, store, rounds=2, chunk=4, on_visit=on_visit)
        assert seen == [16] * 5
        seen.clear()
        run_campaign(configs, SampledBackend(), store, rounds=2, chunk=4, on_visit=on_visit)
        assert seen == [11] * 11  # the 5 stored visits are not planned again
    with Store(tmp_path / "f.duckdb") as store:
        seen.clear()
        run_campaign(configs[:2], SampledBackend(fail_on_visit=1), store, rounds=3, chunk=2, on_visit=on_visit)
        # 6 planned; each config's failed second visit drops its third: 4 visits, the plan ends at 4
        assert len(seen) == 4 and seen[-1] == 4 and seen[0] == 6
    with Store(tmp_path / "one.duckdb") as store:
        seen.clear()
        run_campaign(configs, SyntheticBackend(fail_batches={4}), store, on_visit=on_visit)
        assert seen == [8] * 8  # one round: a failure costs no planned visit


def test_a_store_is_created_whole_or_not_at_all(tmp_path, monkeypatch):
    """A process stopped while it makes a store (a failure injected half-way) leaves no file that
    looks like a store but is not one, and the next campaign makes it whole."""
    path = tmp_path / "s.duckdb"

    def half_way(self):
        self.con.execute("CREATE TABLE runs (run_id VARCHAR)")
        raise duckdb.IOException("No space left on device")

    monkeypatch.setattr(Store, "_create", half_way)
    with pytest.raises(StoreError, match="cannot write the store"):
        Store(path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    Store(path).close()
    assert [p.name for p in tmp_path.iterdir()] == ["s.duckdb"]
    with Store(path, read_only=True) as s:
        assert s.measurements().empty
