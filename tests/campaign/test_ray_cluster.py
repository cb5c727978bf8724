"""A multi-node rehearsal on this machine, as a user runs it: a head with no CPU, worker nodes
that are separate `ray start` processes (own temp dirs, one CPU slot each), and the installed
`carb characterize --executor ray --address HEAD`. One node's raylet is killed mid-campaign, a
node joins mid-campaign, the driver is killed and the command run again. Real measurements
(a few dozen tiny CIFAR configs, a very short protocol)."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from carb.campaign.store import Store
from carb.measure import cpu_model
from tests.campaign._ray_nodes import CARB, ENV, Cluster

pytest.importorskip("ray")
# real campaigns, but what is checked is bookkeeping (rows, visits, nodes), never timing: they share the CPU
pytestmark = [pytest.mark.slow, pytest.mark.shares_cpu]

# configs that measure in well under a second each: 12 at one input size, 24 at two
SPACE = """
name = "rehearsal"
[[grid]]
family = ["cifar"]
block = ["basic"]
depth = [8, 14, 20]
width = [0.25, 0.5]
early_downsample = [true]
input_size = %s
batch = [1, 2]
precision = ["fp32"]
"""
N = 24


def _space(path, n=N):
    """The rehearsal space of ``n`` configs (12 or 24) written to ``path``."""
    path.write_text(SPACE % {12: "[32]", 24: "[16, 32]"}[n])
    return path


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start_head()
        c.add_node("a")
        c.add_node("b")
        yield c
    finally:
        c.stop()


def _command(address, space, store, rounds=2):
    return [
        CARB,
        "characterize",
        "--space",
        str(space),
        "--max-time",
        "0.1",
        "--rounds",
        str(rounds),
        "--executor",
        "ray",
        "--address",
        address,
        "--store",
        str(store),
    ]


def _driver(address, space, store, rounds=2):
    return subprocess.Popen(
        _command(address, space, store, rounds),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _visits(path):
    """Stored rows and visits (rounds), read from a copy when a driver holds the store."""
    with Store(path, read_only=True) as s:
        rows = s.measurements()
        visits = s.con.execute("SELECT config_id, round, extra FROM rounds").fetchall()
    return rows, visits


def _check_complete(path, nodes, rounds=2, n=N):
    rows, visits = _visits(path)
    assert len(rows) == n and rows.config_id.is_unique and set(rows.status) == {"ok"}
    # every config visited exactly once per round: nothing lost, no visit counted twice
    assert sorted((c, r) for c, r, _ in visits) == sorted((c, r) for c in rows.config_id for r in range(rounds))
    extras = [json.loads(e) for _, _, e in visits] + [json.loads(e) for e in rows.extra]
    # each row names the worker node that measured it, with that node's host and CPU
    assert {e["ray_node"] for e in extras} <= set(nodes)
    assert {e["ray_host"] for e in extras} == {socket.gethostname()}
    assert {e["ray_cpu"] for e in extras} == {cpu_model()}
    return rows, visits


def test_a_node_lost_mid_campaign_leaves_the_rest_to_the_surviving_node(cluster, tmp_path):
    # 12 configs: a quarter of the 24 visits is shared by both nodes, the rest left to one
    _space(tmp_path / "space.toml", 12)
    raylet_a, node_a = cluster.raylet("a")
    _, node_b = cluster.raylet("b")
    p = _driver(cluster.address, tmp_path / "space.toml", tmp_path / "loss.duckdb")
    lines, killed_at = [], None
    for line in p.stderr:
        lines.append(line.rstrip())
        if killed_at is None and line.startswith("measuring:"):  # a quarter of the visits done
            os.kill(raylet_a, signal.SIGKILL)
            killed_at = len(lines)
    assert p.wait(timeout=300) == 0, "\n".join(lines)
    log = "\n".join(lines)
    assert killed_at is not None, log
    assert "ray: 2 worker slot(s) of 2 in the cluster" in log
    assert f"node {node_a[:8]}" in log and f"node {node_b[:8]}" in log  # the nodes and slots in use
    assert f"lost the slot on node {node_a[:8]}" in log
    assert "measuring: 24/24 visits (100%)" in log
    rows, visits = _check_complete(tmp_path / "loss.duckdb", [node_a, node_b], n=12)
    by_node = {n: sum(json.loads(e)["ray_node"] == n for _, _, e in visits) for n in (node_a, node_b)}
    assert by_node[node_a] >= 1 and by_node[node_b] > by_node[node_a], by_node


def test_a_joining_node_gets_work_and_a_killed_driver_resumes(cluster, tmp_path):
    """Node b alone (node a is lost above, or stopped here), then node c joins; the driver is killed."""
    cluster.stop_node("a")
    _space(tmp_path / "space.toml")
    store = tmp_path / "join.duckdb"
    _, node_b = cluster.raylet("b")
    p = _driver(cluster.address, tmp_path / "space.toml", store, rounds=3)  # long enough for c to join
    lines: list[str] = []
    joined = threading.Event()

    def read():
        for line in p.stderr:
            lines.append(line.rstrip())
            if line.startswith("ray: +1 slot on node"):
                joined.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(ln.startswith("ray: 1 worker slot(s)") for ln in lines):
        assert time.monotonic() < deadline and p.poll() is None, "\n".join(lines)
        time.sleep(0.2)
    cluster.add_node("c")  # mid-campaign
    _, node_c = cluster.raylet("c")
    assert joined.wait(timeout=120), "\n".join(lines)
    # the new node measures: wait for a visit of it in the store, then kill the driver
    while True:
        _, visits = _visits(store)
        if any(json.loads(e)["ray_node"] == node_c for _, _, e in visits):
            break
        assert time.monotonic() < deadline + 120 and p.poll() is None, "\n".join(lines)
        time.sleep(0.5)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    reader.join(timeout=10)
    assert f"ray: +1 slot on node {node_c[:8]}" in "\n".join(lines)
    rows, visits = _visits(store)  # opens: not corrupt
    assert len(rows) < N and rows.config_id.is_unique
    assert len(set((c, r) for c, r, _ in visits)) == len(visits)
    # the same command again measures the rest, on both nodes
    again = subprocess.run(
        _command(cluster.address, tmp_path / "space.toml", store, rounds=3),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    # only the visits not stored yet (3 rounds a config): nothing measured twice
    left = 3 * N - len(visits)
    assert 0 < left < 3 * N and f"measuring: {left}/{left} visits (100%)" in again.stderr, again.stderr
    assert "ray: 2 worker slot(s) of 2 in the cluster" in again.stderr
    _check_complete(store, [node_b, node_c], rounds=3)
