"""CPU energy from RAPL (zones found through Zeus), tested against a FAKE powercap tree.

Every sysfs tree here is synthetic (made in ``tmp_path``): zone names, counters and
ranges are made up; no figure is a measurement. This machine (a VM) has no RAPL, so the
"unreadable" path is also checked against the real machine.
"""

from __future__ import annotations

import os
import stat

import pytest

from carb.families.space import Config
from carb.measure.base import Protocol
from carb.measure.cpu import CpuBackend, CpuJob, Rapl, _cpu_child, rapl_delta_uj
from tests._helpers import TINY


def _zone(parent, dirname, name, energy, max_range):
    """One synthetic powercap zone: name, energy_uj, max_energy_range_uj."""
    d = parent / dirname
    d.mkdir()
    (d / "name").write_text(f"{name}\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def _tree(tmp_path, dram=True):
    """A synthetic two-socket machine: packages 0 and 1, each with core (and dram) sub-zones,
    plus a psys platform zone that must not be counted (it contains the packages)."""
    root = tmp_path / "intel-rapl"
    root.mkdir()
    p0 = _zone(root, "intel-rapl:0", "package-0", 1_000_000, 2_000_000)
    _zone(p0, "intel-rapl:0:0", "core", 5, 10)  # part of package 0: not counted separately
    p1 = _zone(root, "intel-rapl:1", "package-1", 1_900_000, 2_000_000)
    d0 = _zone(p0, "intel-rapl:0:1", "dram", 300_000, 1_000_000) if dram else None
    d1 = _zone(p1, "intel-rapl:1:0", "dram", 950_000, 1_000_000) if dram else None
    _zone(root, "intel-rapl:2", "psys", 7, 100)
    return root, p0, p1, d0, d1


def test_rapl_wraparound_arithmetic():
    assert rapl_delta_uj(100, 250, 1000) == 150
    assert rapl_delta_uj(900, 50, 1000) == 150  # wrapped once: (1000 - 900) + 50
    assert rapl_delta_uj(0, 0, 1000) == 0


def test_rapl_packages_and_dram_on_a_fake_powercap_tree(tmp_path):
    root, p0, p1, d0, d1 = _tree(tmp_path)
    r = Rapl.discover(str(root))
    assert r.available and r.has_dram
    assert r.domains == (str(p0), str(p1))  # psys and core left out
    assert r.dram == (str(d0), str(d1)) and r.max_range_uj == (2_000_000, 2_000_000)
    before = r.read_uj()
    assert before == [1_000_000, 1_900_000, 300_000, 950_000]
    (p0 / "energy_uj").write_text("1500000")  # +0.5 J
    (p1 / "energy_uj").write_text("100000")  # wrapped: +0.1 + 0.1 = 0.2 J
    (d0 / "energy_uj").write_text("400000")  # +0.1 J
    (d1 / "energy_uj").write_text("50000")  # wrapped: +0.05 + 0.05 = 0.1 J
    pkg_j, dram_j = r.delta_j(before, r.read_uj())
    assert pkg_j == pytest.approx(0.7) and dram_j == pytest.approx(0.2)


def test_rapl_without_dram_zones(tmp_path):
    root, p0, p1, _, _ = _tree(tmp_path, dram=False)
    r = Rapl.discover(str(root))
    assert r.available and not r.has_dram and r.dram == (None, None)
    before = r.read_uj()
    (p0 / "energy_uj").write_text("1000100")
    assert r.delta_j(before, r.read_uj()) == (pytest.approx(1e-4), None)


def test_rapl_unreadable_or_absent_gives_a_reason(tmp_path):
    missing = Rapl.discover(str(tmp_path / "absent"))
    assert not missing.available and "absent" in missing.reason
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no RAPL package zone" in Rapl.discover(str(empty)).reason
    root, p0, *_ = _tree(tmp_path)
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode: the permission path needs a non-root user")
    (p0 / "energy_uj").chmod(0)
    try:
        r = Rapl.discover(str(root))
        assert not r.available and "not readable" in r.reason
    finally:
        (p0 / "energy_uj").chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_this_machine_without_rapl_keeps_the_missing_reason():
    """The real machine: where RAPL is absent (this VM), energy is missing with a reason."""
    r = Rapl.discover()
    if r.available:
        pytest.skip("this machine has readable RAPL")
    assert r.reason and not r.domains


def test_worker_records_package_and_dram_energy_from_a_fake_tree(tmp_path, monkeypatch):
    """The measuring worker reads the synthetic counters around each
    sample. The counters do not move (a fake tree), except that every read of package 0
    adds a synthetic 0.01 J, so that the split into package and DRAM is observable."""
    root, p0, p1, d0, d1 = _tree(tmp_path)
    r = Rapl.discover(str(root))
    reads = {"n": 0}
    real_read = Rapl.read_uj

    def ticking(self):
        reads["n"] += 1
        (p0 / "energy_uj").write_text(str(1_000_000 + 10_000 * reads["n"]))
        return real_read(self)

    monkeypatch.setattr(Rapl, "read_uj", ticking)
    job = CpuJob(
        config=TINY,
        threads=1,
        rapl=r,
        idle_power_w=0.0,
        protocol=Protocol(min_repeats=3, max_repeats=3, max_time_s=1.0, warmup=1, warmup_s=0.0, timeout_s=60),
    )
    # a forked child (it inherits the patched read), so that the worker's thread pinning
    # and memory resets do not touch the test process
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_cpu_child, args=(send, job))
    proc.start()
    send.close()
    assert recv.poll(120), "worker sent nothing"
    out = recv.recv()
    proc.join(10)
    assert out["status"] == "ok", out.get("message")
    k = out["extra"]["iters_per_sample"]
    assert out["extra"]["energy_pkg_j"] == pytest.approx(0.01 / k)  # one synthetic tick per sample
    assert out["extra"]["energy_dram_j"] == 0.0  # dram counters did not move
    assert out["energy_gross_j"].median == pytest.approx(0.01 / k)
    assert out["energy_j"].median == pytest.approx(0.01 / k)  # idle 0 W here


@pytest.mark.slow
@pytest.mark.shares_cpu  # a status and the energy sensor's presence: no timing is checked
def test_cpu_backend_here_reports_energy_missing_with_a_reason():
    b = CpuBackend(threads=1, protocol=Protocol(max_time_s=0.05, warmup=1, warmup_s=0.0, timeout_s=60))
    m = b.measure(TINY)
    assert m.status == "ok", m.message
    if b.rapl.available:
        assert m.energy_gross_j is not None and m.extra["energy_pkg_j"] is not None
    else:
        assert m.energy_j is None and m.energy_missing_reason == b.rapl.reason
        assert m.extra["energy_pkg_j"] is None and m.extra["energy_dram_j"] is None
        assert b.provenance()["energy_sensor"]["available"] is False


def test_store_keeps_package_and_dram_columns_and_migrates_old_stores(tmp_path, monkeypatch):
    """Synthetic measurements (made-up figures) through the store and the dataset export."""
    from carb import datasets
    from carb.campaign.store import Store
    from carb.measure.base import Measurement, Stats

    st = Stats(median=2.0, mean=2.0, p5=1.9, p95=2.1, cov=0.01, n=5, ci_rel=0.01)
    m = Measurement(
        status="ok",
        latency_ms=st,
        energy_j=st,
        energy_gross_j=st,
        memory_mb=3.0,
        extra={"energy_pkg_j": 1.5, "energy_dram_j": 0.5, "latency_samples_ms": [2.0] * 5},
    )
    path = tmp_path / "s.duckdb"
    with Store(path) as s:
        run = s.begin_run("cpu-synthetic", "cpu", {}, {})
        s.add(TINY, "cpu-synthetic", m, run)
        s.add(
            Config(depth=8, width=0.25, early_downsample=True, batch=4),
            "cpu-synthetic",
            Measurement(status="ok", latency_ms=st, memory_mb=3.0, energy_missing_reason="no RAPL"),
            run,
        )
        df = s.measurements()
    row = df.set_index("batch")
    assert row.loc[1, "energy_pkg_j"] == 1.5 and row.loc[1, "energy_dram_j"] == 0.5
    assert row[["energy_pkg_j", "energy_dram_j"]].loc[4].isna().all()  # not measured: NULL
    # an old store (written before the columns existed) gets them when opened for writing
    import carb.campaign.store as store_module

    old_cols = [c for c in store_module.MEASUREMENT_COLUMNS if c[0] not in ("energy_pkg_j", "energy_dram_j")]
    path = tmp_path / "old.duckdb"
    with monkeypatch.context() as mp:
        mp.setattr(store_module, "MEASUREMENT_COLUMNS", old_cols)
        mp.setattr(store_module, "_COLNAMES", [c for c, _ in old_cols])
        mp.setattr(store_module, "ENERGY_DOMAIN_COLUMNS", [])
        with Store(path) as s:
            run = s.begin_run("cpu-synthetic", "cpu", {}, {})
            s.add(TINY, "cpu-synthetic", m, run)
    with Store(path, read_only=True) as s:
        assert "energy_pkg_j" not in s.measurements().columns  # read-only: left as it is
    with Store(path) as s:
        df = s.measurements()
        assert "energy_pkg_j" in df.columns and df["energy_pkg_j"].isna().all()
        s.add(Config(depth=8, width=0.5, early_downsample=True, batch=1), "cpu-synthetic", m, run)
        out = datasets.from_store(s, "cpu-synthetic", with_features=False)
    assert sorted(out["energy_pkg_j"].dropna()) == [1.5] and sorted(out["energy_dram_j"].dropna()) == [0.5]


def test_pooled_rounds_take_the_median_energy_per_domain_not_the_first_visit():
    """Synthetic visits (made-up figures): three rounds of one config with package/DRAM
    energy 3, 1, 2 J pool to their median 2 J; a visit without DRAM energy gives no pooled DRAM."""
    from carb.campaign.runner import pool_rounds
    from carb.measure.base import Measurement, Stats

    def visit(pkg, dram):
        st = Stats(median=pkg, mean=pkg, p5=pkg, p95=pkg, cov=0.0, n=3, ci_rel=0.01)
        extra = {"energy_pkg_j": pkg, "latency_samples_ms": [2.0, 2.1, 1.9]}
        if dram is not None:
            extra["energy_dram_j"] = dram
        return Measurement(status="ok", latency_ms=st, energy_j=st, energy_gross_j=st, memory_mb=3.0, extra=extra)

    pooled = pool_rounds([visit(3.0, 0.3), visit(1.0, 0.1), visit(2.0, 0.2)])
    assert pooled.extra["energy_pkg_j"] == 2.0 and pooled.extra["energy_dram_j"] == 0.2
    assert pooled.energy_j.median == 2.0
    partial = pool_rounds([visit(3.0, 0.3), visit(1.0, None), visit(2.0, 0.2)])
    assert partial.extra["energy_pkg_j"] == 2.0 and partial.extra["energy_dram_j"] is None
