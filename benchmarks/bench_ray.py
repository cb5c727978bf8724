"""Campaign throughput on a Ray cluster of one and of two worker nodes, next to the local
executor, and Ray's own per-task overhead, in one run on this machine.

The cluster is built as a user builds one: a head with no CPU (`ray start --head --num-cpus 0`)
and worker nodes that are separate `ray start --address HEAD --num-cpus 1` processes with their
own temp dirs. The same 24 small CIFAR configs are measured, into throw-away stores:

- local: this process's CPU backend, one config at a time;
- ray, 1 node: the head and one worker node (1 slot);
- ray, 2 nodes: a second worker node joined (2 slots);
- the round trip of an empty call to a slot (what Ray adds to every visit).

Then ``--pairs`` more campaigns of 1 and 2 slots, alternated on the 2-node cluster (with
``--workers 1`` one node measures while the other idles), since the load of a shared machine
drifts between minutes. Prints configs per minute of each, the ratio 2 nodes / 1 node of
each pair and their median, the per-visit overhead of Ray against local, and writes them as
JSON:

    python benchmarks/bench_ray.py [--max-time 0.5] [--rounds 1] [--pairs 2] [--json benchmarks/results/ray_nodes.json]

On a 2-core machine the driver, Ray's own processes and both slots share the cores, so the
2-node figure is a floor for machines where each node has its own cores or GPUs.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

SPACE = """
name = "bench-ray"
[[grid]]
family = ["cifar"]
block = ["basic"]
depth = [8, 14, 20]
width = [0.25, 0.5]
early_downsample = [true]
input_size = [16, 32]
batch = [1, 2]
precision = ["fp32"]
"""
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
ENV.pop("RAY_ADDRESS", None)


def start_node(root: Path, name: str, args: list[str]) -> int:
    """`ray start` in its own process group (returned: the node's handle) and temp dir."""
    (root / name).mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen(
        [RAY, "start", *args, "--num-gpus=0", "--object-store-memory=80000000", f"--temp-dir={root / name}"]
        + ["--disable-usage-stats"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out, _ = p.communicate(timeout=180)
    if p.returncode != 0:
        raise SystemExit(f"ray start ({name}) failed:\n{out[-2000:]}")
    return p.pid


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--max-time", type=float, default=0.5, help="sampling seconds per config")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=2, help="alternated 1-slot / 2-slot campaigns after the first two")
    a = ap.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.pop("RAY_ADDRESS", None)

    from dataclasses import replace

    import numpy as np
    import ray

    from carb.campaign.ray_executor import RayExecutor
    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure import cpu_model, get_backend
    from carb.measure.base import Protocol

    protocol = replace(Protocol.default_for("cpu"), max_time_s=a.max_time)
    load_before = os.getloadavg()
    print(f"command: python {' '.join(sys.argv)}")
    walls: dict[str, float] = {}
    visit_s: dict[str, float] = {}  # summed wall time of the visits: grows when slots contend for cores
    groups: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bray") as tmp:
        root = Path(tmp)
        (root / "space.toml").write_text(SPACE)
        configs = list(space.load(str(root / "space.toml")))
        print(
            f"{len(configs)} configs, max_time_s={a.max_time}, rounds={a.rounds}, 1 thread per slot, "
            f"{os.cpu_count()} cores ({cpu_model()}), load average {load_before[0]:.2f}"
        )

        def campaign(executor, name: str) -> None:
            with Store(root / f"{name}.duckdb") as store:
                t = time.monotonic()
                r = run_campaign(configs, executor, store, platform=name, rounds=a.rounds)
                walls[name] = time.monotonic() - t
                visit_s[name] = float(store.measurements().wall_s.sum())
            assert r.measured == len(configs) and r.by_status == {"ok": len(configs)}, r

        with get_backend("cpu", threads=1, protocol=protocol) as b:
            campaign(b, "local")
        port = socket.socket()
        port.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{port.getsockname()[1]}"
        port.close()
        try:
            groups.append(start_node(root, "h", ["--head", f"--port={address.split(':')[1]}", "--num-cpus=0"]))
            groups.append(start_node(root, "a", [f"--address={address}", "--num-cpus=1"]))
            with RayExecutor("cpu", address=address, protocol=protocol) as ex:
                assert ex.workers == 1, ex.slot_lines()
                campaign(ex, "ray-1-node")
                slot = ex._slots[0]
                ray.get(slot.info.remote())
                rtt = []
                for _ in range(50):
                    t = time.perf_counter()
                    ray.get(slot.info.remote())
                    rtt.append(time.perf_counter() - t)
            groups.append(start_node(root, "b", [f"--address={address}", "--num-cpus=1"]))
            with RayExecutor("cpu", address=address, protocol=protocol) as ex:
                assert ex.workers == 2, ex.slot_lines()
                campaign(ex, "ray-2-nodes")
            # the same pair again, alternated, on the 2-node cluster (--workers 1: one node
            # measures, the other idles): the machine's load drifts between minutes
            for k in range(a.pairs):
                for n in (1, 2):
                    with RayExecutor("cpu", address=address, protocol=protocol, workers=n) as ex:
                        campaign(ex, f"pair{k}-{n}")
        finally:
            for g in groups:
                try:
                    os.killpg(g, signal.SIGKILL)
                except OSError:
                    pass

    cpm = {k: 60 * len(configs) / w for k, w in walls.items()}
    ratio = cpm["ray-2-nodes"] / cpm["ray-1-node"]
    pair_ratios = [cpm[f"pair{k}-2"] / cpm[f"pair{k}-1"] for k in range(a.pairs)]
    ratios = [ratio, *pair_ratios]
    overhead_ms = 1000 * (walls["ray-1-node"] - walls["local"]) / (len(configs) * a.rounds)
    print(f"{'executor':<14}{'wall s':>9}{'configs/min':>13}{'sum of visit wall s':>21}")
    for name, wall in walls.items():
        print(f"{name:<14}{wall:>9.1f}{cpm[name]:>13.1f}{visit_s[name]:>21.1f}")
    print(f"configs/min 2 nodes / 1 node: {ratio:.2f}x (a 1-node cluster, then a second node joined)")
    if pair_ratios:
        print(
            f"alternated pairs (--workers 1 / 2 on 2 nodes): {', '.join(f'{r:.2f}x' for r in pair_ratios)}; "
            f"median of all {len(ratios)}: {float(np.median(ratios)):.2f}x"
        )
    print(
        f"ray 1 node vs local: {overhead_ms:+.0f} ms per visit (local also times the paired speed "
        "sentinel inside every visit; Ray slots do not)"
    )
    print(
        f"empty round trip to a slot: median {1000 * float(np.median(rtt)):.2f} ms "
        f"(p95 {1000 * float(np.percentile(rtt, 95)):.2f} ms, 50 calls)"
    )
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} (a shared machine reads higher)")
    if a.json:
        out = {
            "command": f"python {' '.join(sys.argv)}",
            "date": time.strftime("%Y-%m-%d"),
            "machine": {"cores": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version()},
            "ray_version": ray.__version__,
            "configs": len(configs),
            "max_time_s": a.max_time,
            "rounds": a.rounds,
            "wall_s": walls,
            "visit_wall_s_sum": visit_s,
            "configs_per_min": cpm,
            "ratio_2_nodes_to_1": ratio,
            "ratio_pairs": pair_ratios,
            "ratio_median": float(np.median(ratios)),
            "ray_overhead_ms_per_visit": overhead_ms,
            "rtt_ms_median": 1000 * float(np.median(rtt)),
            "loadavg_before_after": [load_before[0], os.getloadavg()[0]],
        }
        _common.write_json(a.json, out)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
