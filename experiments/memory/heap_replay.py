"""Where a network's heap outgrows its tensors: glibc's heap replayed from torch's own allocations.

With the allocator ``retain`` (glibc keeps what is freed, nothing is mapped per call) every tensor
of a forward comes from the process's heap, and the peak memory holds the heap's high-water mark,
not the peak of the tensors alive at once. Per network of ``benchmarks/nets/deployed_nets.py``,
each figure in its own fresh process (1 thread, allocator ``retain``, MB = 1e6 B):

* ``heap_mb``: the heap's growth (``mallinfo2().arena``) over five forwards of the built network;
* ``torch_peak_mb``: the peak of torch's own live allocations over three forwards (``torch.profiler``
  memory events: the activations and the kernels' reorders and scratchpads);
* ``torch_replay_mb``: the heap's growth when that same sequence of allocations and frees is replayed
  through ``posix_memalign(64)`` and ``free``, as torch's CPU allocator calls them;
* ``torch_replay_malloc_mb``: the same replay through plain ``malloc`` (no alignment asked);
* ``graph_live_mb`` and ``graph_replay_mb``: the captured graph's peak of live outputs (what the
  network model's ``peak_live_bytes`` term reads) and the heap's growth when its outputs' allocations
  and frees (three forwards) are replayed through ``posix_memalign(64)``.

With ``--zoo``, the heap and torch's own peak of the carb.zoo networks a model was fitted on
(``results/zoo_networks.json``), which :mod:`memory_terms_screen` reads as oracles.

    taskset -c 1 python experiments/memory/heap_replay.py --core 1 --json experiments/memory/results/heap_replay.json
    taskset -c 1 python experiments/memory/heap_replay.py --core 1 --zoo --json experiments/memory/results/heap_zoo.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "nets"))

import _common  # noqa: E402

#: glibc malloc.h: mallopt's trim and mmap thresholds, and the bytes below which freed memory stays (``retain``)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, RETAIN_BYTES = -1, -3, 1 << 30
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()


def _libc():
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    for k in (M_TRIM_THRESHOLD, M_MMAP_THRESHOLD):
        libc.mallopt(k, RETAIN_BYTES)

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in FIELDS]

    libc.mallinfo2.restype = MallInfo2
    libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


#: The carb.zoo networks a model was fitted on (configs and measured memory), for ``--zoo``
ZOO_NETWORKS = ROOT / "experiments/memory/results/zoo_networks.json"


def _torch(name: str):
    """Torch, the network and its input: a deployed network by name, or ``zoo:I`` (the I-th of :data:`ZOO_NETWORKS`)."""
    import deployed_nets
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if name.startswith("zoo:"):
        from carb.families import zoo

        cfg = zoo.ZooConfig.from_dict(json.loads(ZOO_NETWORKS.read_text())["networks"][int(name[4:])]["config"])
        return torch, zoo.build(cfg), torch.randn(cfg.batch, 3, cfg.input_size, cfg.input_size)
    spec = deployed_nets.NETWORKS[name]
    return torch, spec.build().eval(), torch.randn(*spec.input)


def heap(name: str) -> dict:
    """The heap's growth over five forwards (MB)."""
    libc = _libc()
    torch, net, x = _torch(name)
    a0 = libc.mallinfo2().arena
    with torch.inference_mode():
        for _ in range(5):
            net(x)
    return {"heap_mb": (libc.mallinfo2().arena - a0) / 1e6}


def trace(name: str, out: str) -> dict:
    """Torch's allocations over three forwards, written to ``out`` as ``[address, bytes]`` (bytes < 0: a free)."""
    _libc()
    torch, net, x = _torch(name)
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            net(x)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    events.sort(key=lambda e: e["ts"])
    seq = [[int(e["args"]["Addr"]), int(e["args"]["Bytes"])] for e in events]
    Path(out).write_text(json.dumps(seq))
    cur = peak = 0
    for _, b in seq:
        cur += b
        peak = max(peak, cur)
    return {"torch_peak_mb": peak / 1e6, "events": len(seq)}


def replay(path: str, how: str) -> dict:
    """The heap's growth (MB) when a sequence of ``[key, bytes]`` is allocated and freed in order."""
    import ctypes

    libc = _libc()
    seq = json.loads(Path(path).read_text())
    a0 = libc.mallinfo2().arena
    live: dict = {}
    for key, b in seq:
        key = str(key)
        if b > 0:
            if how == "memalign":
                p = ctypes.c_void_p()
                libc.posix_memalign(ctypes.byref(p), 64, b)
                live[key] = p.value
            else:
                live[key] = libc.malloc(b)
        elif key in live:
            libc.free(live.pop(key))
    return {"replay_mb": (libc.mallinfo2().arena - a0) / 1e6}


def graph_events(module, shape, precision=None, forwards: int = 3) -> tuple[list, list[int]]:
    """The captured graph's output allocations and frees over ``forwards`` forwards (``[key, bytes]``, bytes < 0:
    a free; each output freed after the last node that reads it returns, the network's outputs at the end of
    its forward), and each node's output bytes.
    """  # noqa: D205
    from carb.graph._run import _root, _tensors
    from carb.graph.trace import _capture_graph, _meta_inputs

    inputs, dtype, _ = _meta_inputs(module, shape, precision)
    graph, run, _ = _capture_graph(module, inputs, dtype, "auto")
    out_node = next(nd for nd in graph.nodes if nd.op == "output")
    final = {run.owner.get(id(_root(t))) for t in _tensors(run.load(out_node.args))}
    alloc = [int(r["alloc_bytes"]) for r in run.rows]
    n = len(alloc)
    last = list(range(n))
    for i, reads in run.reads.items():
        for j in reads:
            last[j] = max(last[j], i)
    for j in final:
        if j is not None:
            last[j] = n
    frees: dict[int, list[int]] = {}
    for j in range(n):
        frees.setdefault(last[j], []).append(j)
    seq = []
    for f in range(forwards):
        for i in range(n + 1):
            if i < n and alloc[i] > 0:
                seq.append([f"{f}:{i}", alloc[i]])
            seq += [[f"{f}:{j}", -alloc[j]] for j in frees.get(i, []) if alloc[j] > 0]
    return seq, alloc


def graph_sequence(name: str, out: str, forwards: int = 3) -> dict:
    """The deployed network's :func:`graph_events`, written to ``out``; the peak of its live outputs (MB)."""
    import deployed_nets

    from carb.graph import build_meta

    spec = deployed_nets.NETWORKS[name]
    seq, _ = graph_events(build_meta(spec.build), tuple(spec.input), None, forwards)
    Path(out).write_text(json.dumps(seq))
    cur = peak = 0
    for _, b in seq[: len(seq) // forwards]:
        cur += b
        peak = max(peak, cur)
    return {"graph_live_mb": peak / 1e6}


def _child(core: int, *args: str) -> dict:
    p = subprocess.run(
        ["taskset", "-c", str(core), sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(p.stdout.strip().splitlines()[-1])


def _zoo(a: argparse.Namespace) -> int:
    """``--zoo``: each zoo network's heap growth and torch's own allocation peak, in fresh processes."""
    t0 = time.time()
    nets = json.loads(ZOO_NETWORKS.read_text())["networks"]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i, n in enumerate(nets):
            name = f"zoo:{i}"
            r = {"index": i, "config": n["config"], **_child(a.core, "heap", name)}
            r.update(_child(a.core, "trace", name, str(Path(d) / "seq.json")))
            rows.append(r)
            print(
                f"{i:3d} {n['config']['arch']:14s} heap {r['heap_mb']:5.1f}  torch peak {r['torch_peak_mb']:5.1f}",
                flush=True,
            )
    if a.json:
        doc = {
            "what": "per carb.zoo network of zoo_networks.json (MB = 1e6 B): the heap's growth over five forwards and "
            "torch's own allocation peak over three (allocator retain, a fresh process each)",
            "zoo": str(ZOO_NETWORKS.relative_to(ROOT)),
            "networks": rows,
            "seconds": time.time() - t0,
        }
        _common.write_json(a.json, doc)
        print(f"written {a.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Every network's figures, each in fresh processes; a table and ``--json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--predictions", default=str(ROOT / "benchmarks/results/deployed_epyc512_native.json"))
    ap.add_argument("--networks", nargs="*", help="a subset of the deployed networks (default: all measured)")
    ap.add_argument(
        "--zoo",
        action="store_true",
        help="instead, the heap and torch's own peak of each carb.zoo network of experiments/memory/results/"
        "zoo_networks.json (no replays)",
    )
    ap.add_argument("--json")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        what, *rest = a.child
        fn = {"heap": heap, "trace": trace, "replay": replay, "graph": graph_sequence}[what]
        print(json.dumps(fn(*rest)))
        return 0
    if a.zoo:
        return _zoo(a)
    pred = {r["network"]: r for r in json.loads(Path(a.predictions).read_text())["per_network"]}
    names = a.networks or list(pred)
    t0 = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            seq, gseq = str(Path(d) / f"{name}.json"), str(Path(d) / f"{name}.graph.json")
            r = {"network": name, **_child(a.core, "heap", name), **_child(a.core, "trace", name, seq)}
            r["torch_replay_mb"] = _child(a.core, "replay", seq, "memalign")["replay_mb"]
            r["torch_replay_malloc_mb"] = _child(a.core, "replay", seq, "malloc")["replay_mb"]
            r.update(_child(a.core, "graph", name, gseq))
            r["graph_replay_mb"] = _child(a.core, "replay", gseq, "memalign")["replay_mb"]
            if name in pred:
                r["model_memory_error_pct"] = pred[name]["calibrated here"]["memory_error_pct"]
            rows.append(r)
            print(
                f"{name:18s} heap {r['heap_mb']:5.1f}  torch peak {r['torch_peak_mb']:5.1f}  replayed: aligned "
                f"{r['torch_replay_mb']:5.1f} malloc {r['torch_replay_malloc_mb']:5.1f}  | graph live "
                f"{r['graph_live_mb']:5.1f} replayed {r['graph_replay_mb']:5.1f}",
                flush=True,
            )
    if a.json:
        doc = {
            "what": "per network (MB = 1e6 B): the heap's growth over five forwards, torch's own allocation peak, "
            "the heap's growth when torch's allocation sequence (or the captured graph's outputs) is replayed "
            "through glibc (allocator retain)",
            "networks": rows,
            "seconds": time.time() - t0,
            "predictions": str(Path(a.predictions).relative_to(ROOT)),
        }
        _common.write_json(a.json, doc)
        print(f"written {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
