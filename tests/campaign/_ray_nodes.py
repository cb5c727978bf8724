"""Ray nodes on this machine for the tests, each a separate `ray start` as a user runs it on a node.

Each node gets its own temp dir and its own process group, so a test stops exactly its own
nodes (never `ray stop`, which stops every Ray node of the machine) and can kill one node's
raylet by pid. The environment is the one the install leaves, less Ray's usage-stats prompt.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = os.path.dirname(sys.executable)  # the install's scripts: `ray`, `carb`
RAY = os.path.join(BIN, "ray")
CARB = os.path.join(BIN, "carb")
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
ENV.pop("RAY_ADDRESS", None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A head and worker nodes started with `ray start`, stopped by process group."""

    def __init__(self) -> None:
        # a short folder of its own: a node's socket paths (temp dir + ~70 characters of session
        # and socket names) must fit in 107 bytes, which a pytest temp dir under xdist does not
        self.root = Path(tempfile.mkdtemp(prefix="carb-ray-"))
        self.groups: dict[str, int] = {}
        self.address = ""

    def _start(self, name: str, args: list[str]) -> None:
        tmp = self.root / name
        tmp.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [
                RAY,
                "start",
                *args,
                "--num-gpus=0",
                "--object-store-memory=80000000",
                f"--temp-dir={tmp}",
                "--disable-usage-stats",
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its daemons keep this process group: the node's handle
        )
        self.groups[name] = proc.pid
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"ray start ({name}) failed:\n{out[-3000:]}"

    def start_head(self, cpus: int = 0) -> str:
        """A head, by default with no CPU: nothing is measured on it."""
        port = free_port()
        self._start("head", ["--head", f"--port={port}", f"--num-cpus={cpus}", "--include-dashboard=false"])
        self.address = f"127.0.0.1:{port}"
        return self.address

    def add_node(self, name: str, cpus: int = 1) -> None:
        """A worker node with ``cpus`` CPU slots, as `ray start --address HEAD` on another machine."""
        self._start(name, [f"--address={self.address}", f"--num-cpus={cpus}"])

    def _pids(self, name: str) -> list[int]:
        pgid, pids = self.groups[name], []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.getpgid(int(d)) == pgid:
                        pids.append(int(d))
                except OSError:
                    pass
        return pids

    def raylet(self, name: str) -> tuple[int, str]:
        """The node's raylet: its pid and the node id it serves."""
        for pid in self._pids(name):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0].decode()) == "raylet":
                node = [a.decode().split("=", 1)[1] for a in argv if a.startswith(b"--node_id=")]
                return pid, node[0]
        raise AssertionError(f"no raylet in node {name}'s process group")

    def stop_node(self, name: str) -> None:
        """Kill every process of the node (as a machine that goes away)."""
        try:
            os.killpg(self.groups[name], signal.SIGKILL)
        except OSError:
            pass  # gone already

    def stop(self) -> None:
        for name in self.groups:
            self.stop_node(name)
        time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)
