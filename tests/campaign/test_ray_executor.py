"""Campaigns on a Ray cluster started here as a user starts one (`ray start`, the installed `carb`,
the environment the install leaves): the same config set as a local run, a worker killed
mid-campaign, the CLI with and without --address. Real measurements (tiny configs on this CPU,
a very short protocol). tests/campaign/test_ray_cluster.py rehearses several nodes."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.campaign._ray_nodes import CARB, ENV, Cluster

ray = pytest.importorskip("ray")

from carb.campaign.ray_executor import RayExecutor  # noqa: E402
from carb.campaign.runner import run_campaign  # noqa: E402
from carb.campaign.store import Store  # noqa: E402
from carb.families import space  # noqa: E402
from carb.measure import get_backend  # noqa: E402
from carb.measure.base import Protocol  # noqa: E402

# real campaigns, but what is checked is bookkeeping (rows, visits, retries, errors), never timing: they share
# the CPU
pytestmark = [pytest.mark.slow, pytest.mark.shares_cpu]
FAST = Protocol(min_repeats=3, max_repeats=20, max_time_s=0.2, warmup=1, warmup_s=0.0, timeout_s=120.0)


def test_ray_imports_here_whatever_amdsmi_does():
    # Zeus installs AMD's amdsmi binding, whose import raises KeyError without ROCm's library;
    # the Ray that carb's extras install must import (and so start nodes) all the same
    amd = subprocess.run([sys.executable, "-c", "import amdsmi"], env=ENV, capture_output=True, text=True)
    p = subprocess.run(
        [sys.executable, "-c", "import ray; print(ray.__version__)"], env=ENV, capture_output=True, text=True
    )
    assert p.returncode == 0, f"import ray fails (import amdsmi: rc {amd.returncode}):\n{p.stderr[-2000:]}"


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU Ray head on this machine, outliving every driver of the tests."""
    c = Cluster()
    try:
        c.start_head(cpus=2)
        yield c.address
    finally:
        c.stop()


@pytest.fixture
def env(monkeypatch):
    # the drivers below run in this process: Ray's usage-stats prompt off, as for the nodes
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


def _rows(path):
    with Store(path, read_only=True) as s:
        df = s.measurements()
        dup_rounds = s.con.execute(
            "SELECT config_id, round, count(*) FROM rounds GROUP BY ALL HAVING count(*) > 1"
        ).fetchall()
    return df, dup_rounds


def test_ray_campaign_measures_exactly_the_local_config_set(cluster, tmp_path, env):
    configs = list(space.load("tiny"))
    # one local round: the config set is what is compared (the Ray run's two rounds are checked below)
    with get_backend("cpu", threads=1, protocol=FAST) as b, Store(tmp_path / "local.duckdb") as store:
        local = run_campaign(configs, b, store, rounds=1, chunk=4)
    with RayExecutor("cpu", address=cluster, threads=1, protocol=FAST) as ex, Store(tmp_path / "ray.duckdb") as store:
        assert ex.workers == 2
        prov = ex.provenance()
        assert prov["executor"] == "ray" and len(prov["ray_slots"]) == 2
        # the two slots hold different cores of this machine
        assert len({tuple(s["affinity"]) for s in prov["ray_slots"]}) == 2
        r = run_campaign(configs, ex, store, rounds=2, chunk=4)
        assert ex.platform() == local.platform == "cpu-1t"
    assert r.measured == local.measured == 8 and r.by_status == {"ok": 8}
    (a, _), (b_, dup) = _rows(tmp_path / "local.duckdb"), _rows(tmp_path / "ray.duckdb")
    assert set(a.config_id) == set(b_.config_id) and b_.config_id.is_unique and not dup
    assert (b_.latency_ms > 0).all() and (b_.memory_mb > 0).all()
    with Store(tmp_path / "ray.duckdb", read_only=True) as s:
        assert s.con.execute("SELECT count(*) FROM rounds").fetchone()[0] == 16
        extra = [json.loads(x) for x in s.measurements().extra]
    assert all(e.get("ray_host") and e.get("ray_node") and e.get("ray_cpu") for e in extra)


def test_a_killed_worker_is_replaced_and_its_visit_retried(cluster, tmp_path, env):
    configs = list(space.load("tiny"))
    killed, events = [], []
    with (
        RayExecutor("cpu", address=cluster, threads=1, protocol=FAST, poll_s=0.5, on_event=events.append) as ex,
        Store(tmp_path / "k.duckdb") as store,
    ):

        def on_result(cfg, m):
            if not killed:  # kill one slot's process while the campaign goes on
                pid = ex.slot_pids()[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        r = run_campaign(configs, ex, store, rounds=2, chunk=4, on_result=on_result)
        assert killed and ex.retried >= 1 and killed[0] not in ex.slot_pids()
        # its node is alive: a replacement is started (or has joined already)
        assert ex.workers + ex.starting == 2, events
    assert any(e.startswith("ray: lost the slot on node") for e in events), events
    assert r.measured == 8 and r.by_status == {"ok": 8}
    df, dup = _rows(tmp_path / "k.duckdb")
    assert len(df) == 8 and df.config_id.is_unique and not dup


BASE = [CARB, "characterize", "--space", "tiny", "--max-time", "0.1", "--rounds", "1"]


def test_cli_executor_ray_with_address_and_its_errors(cluster, tmp_path, cli):
    args = [*BASE, "--store", str(tmp_path / "cli.duckdb")]
    p = subprocess.run(
        [*args, "--executor", "ray", "--address", cluster, "--workers", "1", "--json"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["measured"] == 8 and out["platform"] == "cpu-1t"
    assert "ray: 1 worker slot(s) of 2 in the cluster" in p.stderr
    assert "1 slot(s), cores " in p.stderr and "ray: visits per node: node " in p.stderr
    # the refusals come before anything is measured or connected: in-process (the cli fixture)
    code, _, err = cli(*args[1:], "--executor", "spark")
    assert code == 2 and "--executor: unknown value 'spark'" in err
    code, _, err = cli(*args[1:], "--address", cluster)
    assert code == 2 and "apply to --executor ray only" in err


def test_cli_executor_ray_without_address_starts_a_cluster_here(tmp_path):
    # what a new user types first: no cluster, no RAY_ADDRESS; Ray starts one on this machine
    p = subprocess.run(
        [*BASE, "--executor", "ray", "--store", str(tmp_path / "local.duckdb"), "--json"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["measured"] == 8 and out["platform"] == "cpu-1t"
    assert "worker slot(s) of" in p.stderr and "ray: visits per node: node " in p.stderr
