"""Campaigns on a local Ray cluster (2 CPU worker slots, started by these tests): the same
config set as a local run, a worker killed mid-campaign, a driver killed mid-campaign.
Measurements are real (tiny configs on this CPU, very short protocol)."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

# A loopback test cluster: no token authentication, whatever ~/.ray/auth_token holds
# (Ray >= 2.5x turns it on for new clusters when a token file exists).
os.environ["RAY_AUTH_MODE"] = "disabled"
# Zeus installs amdsmi; without ROCm its import raises KeyError and breaks Ray's AMD probe.
# carb's driver masks it (carb.campaign.ray_executor.mask_broken_amdsmi); the `ray start` processes
# below run Ray's own code, so they get the same mask as a module on their path.
from carb.campaign.ray_executor import mask_broken_amdsmi  # noqa: E402

AMDSMI_MASKED = mask_broken_amdsmi() is not None
SHIMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shims")  # tests/shims
ray = pytest.importorskip("ray")

from carb.campaign.ray_executor import RayExecutor  # noqa: E402
from carb.campaign.runner import run_campaign  # noqa: E402
from carb.campaign.store import Store  # noqa: E402
from carb.families import space  # noqa: E402
from carb.measure import get_backend  # noqa: E402
from carb.measure.base import Protocol  # noqa: E402

pytestmark = pytest.mark.slow
FAST = Protocol(min_repeats=3, max_repeats=20, max_time_s=0.2, warmup=1, warmup_s=0.0, timeout_s=120.0)
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 2-CPU Ray head on this machine, outliving every driver of the tests."""
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    if AMDSMI_MASKED or "amdsmi" in sys.modules and sys.modules["amdsmi"] is None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIMS, env.get("PYTHONPATH")) if p)
    tmp = tmp_path_factory.mktemp("ray")
    subprocess.run(
        [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--object-store-memory=100000000",
            f"--temp-dir={tmp}",
            "--disable-usage-stats",
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=180,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)


def _rows(path):
    with Store(path, read_only=True) as s:
        df = s.measurements()
        dup_rounds = s.con.execute(
            "SELECT config_id, round, count(*) FROM rounds GROUP BY ALL HAVING count(*) > 1"
        ).fetchall()
    return df, dup_rounds


def test_ray_campaign_measures_exactly_the_local_config_set(cluster, tmp_path):
    configs = list(space.load("tiny"))
    with get_backend("cpu", threads=1, protocol=FAST) as b, Store(tmp_path / "local.duckdb") as store:
        local = run_campaign(configs, b, store, rounds=2, chunk=4)
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
    assert all(e.get("ray_host") for e in extra)


def test_a_killed_worker_is_replaced_and_its_visit_retried(cluster, tmp_path):
    configs = list(space.load("tiny"))
    killed = []
    with RayExecutor("cpu", address=cluster, threads=1, protocol=FAST) as ex, Store(tmp_path / "k.duckdb") as store:

        def on_result(cfg, m):
            if not killed:  # kill one slot's process while the campaign goes on
                pid = ex.slot_pids()[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        r = run_campaign(configs, ex, store, rounds=2, chunk=4, on_result=on_result)
        assert killed and ex.retried >= 1 and killed[0] not in ex.slot_pids() and ex.workers == 2
    assert r.measured == 8 and r.by_status == {"ok": 8}
    df, dup = _rows(tmp_path / "k.duckdb")
    assert len(df) == 8 and df.config_id.is_unique and not dup


DRIVER = textwrap.dedent("""
    import sys
    from carb.families import space
    from carb.campaign.runner import run_campaign
    from carb.measure.base import Protocol
    from carb.campaign.ray_executor import RayExecutor
    from carb.campaign.store import Store

    address, path = sys.argv[1], sys.argv[2]
    fast = Protocol(min_repeats=3, max_repeats=20, max_time_s=0.4, warmup=1, warmup_s=0.0, timeout_s=120.0)
    with RayExecutor("cpu", address=address, protocol=fast) as ex, Store(path) as store:
        run_campaign(list(space.load("tiny")), ex, store, rounds=2, chunk=4,
                     on_result=lambda c, m: print("stored", c.config_id, flush=True))
""")


def test_a_killed_driver_resumes_from_the_store(cluster, tmp_path):
    path = tmp_path / "d.duckdb"
    p = subprocess.Popen(
        [sys.executable, "-c", DRIVER, cluster, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    stored = []
    deadline = time.monotonic() + 240
    while len(stored) < 3 and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith("stored"):
            stored.append(line.split()[1])
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert len(stored) == 3, "the driver stored nothing before the kill"
    df, dup = _rows(path)  # opens: not corrupt
    assert set(stored) <= set(df.config_id) and len(df) < 8 and not dup
    before = set(df.config_id)
    # the next run resumes: only the rest is measured, nothing twice
    with RayExecutor("cpu", address=cluster, protocol=FAST) as ex, Store(path) as store:
        r = run_campaign(list(space.load("tiny")), ex, store, rounds=2, chunk=4)
    assert r.skipped == len(before) and r.measured == 8 - len(before)
    df, dup = _rows(path)
    assert len(df) == 8 and df.config_id.is_unique and not dup and set(df.status) == {"ok"}


def test_cli_executor_ray_and_its_errors(cluster, tmp_path):
    store = tmp_path / "cli.duckdb"
    base = [
        sys.executable,
        "-m",
        "carb.cli",
        "characterize",
        "--space",
        "tiny",
        "--max-time",
        "0.1",
        "--rounds",
        "1",
        "--store",
        str(store),
    ]
    args = [*base, "--executor", "ray", "--address", cluster, "--workers", "1", "--json"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["measured"] == 8 and out["platform"] == "cpu-1t"
    assert "1 worker slot(s) of 2" in p.stderr
    bad = subprocess.run([*base, "--executor", "spark"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--executor: unknown value 'spark'" in bad.stderr
    bad = subprocess.run([*base, "--address", cluster], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "apply to --executor ray only" in bad.stderr
