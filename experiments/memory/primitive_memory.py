"""How much peak memory each distinct oneDNN convolution adds to a process, and how much of a network's peak
torch's own allocations explain.

Two measurements, each in fresh processes with bench_deployed's harness (1 thread, allocator ``retain``, the
baseline after the imports, the peak reset once the module is built, five forwards):

* **per primitive**: ``n`` 3x3 convolutions (dense 32 -> 32, or depthwise of 32 channels) that all read one
  ``32 x s x s`` input, either each with its own dilation (1..n, padding = dilation: ``n`` distinct oneDNN
  primitives, the same input, weights and output sizes) or all with dilation 1 (one primitive, cached). The
  difference over ``n - 1`` is what one more distinct convolution primitive holds (its JIT code, descriptors
  and cache entry). Repeated ``--repeats`` times.
* **per network** (``--networks``): for each network of ``benchmarks/nets/deployed_nets.py``, the peak of
  torch's own allocations within one warm forward (``torch.profiler`` memory timeline: the live activations,
  the kernels' reorders and scratchpads that go through torch's allocator), beside its captured peak of live
  activations and the fresh process's peak (the stored truth).

    python experiments/memory/primitive_memory.py --networks --json experiments/memory/results/primitive_memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402

#: glibc malloc.h: mallopt's trim and mmap thresholds, and the bytes below which freed memory stays (``retain``)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, RETAIN_BYTES = -1, -3, 1 << 30


def _kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def one(mode: str, n: int, kind: str, side: int) -> dict:
    """Peak memory (MB) of ``n`` convolutions of one input in this fresh process (see the module docstring)."""
    import ctypes
    import gc

    libc = ctypes.CDLL("libc.so.6")
    for k in (M_TRIM_THRESHOLD, M_MMAP_THRESHOLD):
        libc.mallopt(k, RETAIN_BYTES)
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    c = 32

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dil = [i + 1 if mode == "distinct" else 1 for i in range(n)]
            groups = c if kind == "dw" else 1
            self.convs = nn.ModuleList(
                nn.Conv2d(c, c, 3, padding=d, dilation=d, groups=groups, bias=False) for d in dil
            )
            self.register_buffer("x", torch.randn(1, c, side, side), persistent=False)

        def forward(self) -> None:
            for m in self.convs:
                m(self.x)

    gc.collect()
    libc.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    base = _kb("VmRSS")
    net = Net().eval()
    gc.collect()
    libc.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    with torch.inference_mode():
        for _ in range(5):
            net()
    return {"mode": mode, "n": n, "kind": kind, "side": side, "peak_mb": (_kb("VmHWM") - base) * 1024 / 1e6}


def per_primitive(repeats: int, n: int) -> list[dict]:
    rows = []
    for r in range(repeats):
        for kind in ("dense", "dw"):
            for side in (28, 56):
                for mode in ("distinct", "same"):
                    cmd = [sys.executable, __file__, "--one", mode, str(n), kind, str(side)]
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                    rows.append({**json.loads(out.strip().splitlines()[-1]), "repeat": r})
    return rows


def torch_peaks(predictions: Path) -> list[dict]:
    """Per deployed network: the peak of torch's allocations within a warm forward, its live activations, its truth."""
    import importlib.util

    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action

    from carb.graph import capture

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("deployed_nets", ROOT / "benchmarks" / "nets" / "deployed_nets.py")
    nets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nets)
    truth = {r["network"]: r for r in json.loads(predictions.read_text())["per_network"]}
    rows = []
    for name, net in nets.NETWORKS.items():
        m, x = net.build().eval(), torch.randn(*net.input)
        with torch.inference_mode():
            m(x)
            m(x)
            with profile(
                activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
            ) as p:
                m(x)
        cur = peak = 0
        for _, action, _, size in p._memory_profile().timeline:
            if action == Action.CREATE:
                cur += size
                peak = max(peak, cur)
            elif action == Action.DESTROY:
                cur -= size
        table = capture(net.build(), tuple(net.input))
        t = truth[name]
        rows.append(
            {
                "network": name,
                "truth_mb": t["memory_mb"],
                "model_mb": table.model_bytes / 1e6,
                "input_mb": table.input_bytes / 1e6,
                "live_activations_mb": table.peak_live_bytes / 1e6,
                "torch_forward_peak_mb": peak / 1e6,
                "rest_mb": t["memory_mb"] - (table.model_bytes + table.input_bytes + peak) / 1e6,
                "predicted_mb": t["calibrated here"]["memory_mb"][0],
            }
        )
        print(f"{name:20s} " + " ".join(f"{k} {v:6.1f}" for k, v in rows[-1].items() if k != "network"), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n", type=int, default=24, help="convolutions per module")
    ap.add_argument("--networks", action="store_true", help="also the deployed networks' torch allocation peaks")
    ap.add_argument("--predictions", default=str(ROOT / "benchmarks/results/deployed_epyc512_native.json"))
    ap.add_argument("--json")
    ap.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.one[2], int(a.one[3]))))
        return 0
    rows = per_primitive(a.repeats, a.n)
    summary = {}
    for kind in ("dense", "dw"):
        for side in (28, 56):
            got = {
                m: [r["peak_mb"] for r in rows if (r["kind"], r["side"], r["mode"]) == (kind, side, m)]
                for m in ("distinct", "same")
            }
            mean = {m: sum(v) / len(v) for m, v in got.items()}
            summary[f"{kind} {side}px"] = (mean["distinct"] - mean["same"]) / (a.n - 1)
            print(f"{kind:5s} {side:3d} px: {summary[f'{kind} {side}px']:.3f} MB per distinct primitive", flush=True)
    doc = {"per_primitive_mb": summary, "runs": rows}
    if a.networks:
        doc["networks"] = torch_peaks(Path(a.predictions))
    if a.json:
        _common.write_json(a.json, doc, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
