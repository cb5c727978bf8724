"""How much peak memory each op class's first run adds to a process that already ran a classifier's ops.

A network's peak memory in a fresh process holds, beside its tensors, what its kernels bring the
first time they run: library code pages faulted in, oneDNN's JIT kernels and primitive caches,
the allocator's keeping of their working buffers. Single layers measure it with the process's
own baseline (3.7-14.6 MB above their tensors on the AVX-512 EPYC kind); a network shares most of
it between its ops. This measures, per op class of a layer model's data, the increment over a
**reference** process that already ran one layer of each class every carb.zoo classifier has
(:data:`REFERENCE`): for a class outside the reference, after all of them; for a class of the
reference, after all the others (what a network without that class does not pay).

Each measurement is a fresh process (allocator ``retain``, 1 thread, pinned to ``--core``): the
modules are built and the reference layers run three times each, then ``VmHWM`` is reset and the
class's layer runs three times; the increment is ``VmHWM`` over the ``VmRSS`` before it, less the
layer's output bytes (MB = 1e6 B). The layer of each class is the median-sized of its layers
under 0.5 MB of tensors in the model's data (the smallest where none is), so its tensors barely
count. ``--repeats`` fresh processes per class; the median is kept.

    taskset -c 1 python experiments/memory/op_code_memory.py --core 1 \\
        --json experiments/memory/results/op_code_memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402

#: Op classes every carb.zoo classifier runs (a convolution through oneDNN, BN, ReLU, a residual add,
#: a max-pool, global average pooling and the linear head).
REFERENCE = ("conv", "bn", "relu", "add", "pool", "gap", "linear")
#: Tensors (inputs, output, weights) under this are a small layer (B).
SMALL_BYTES = 0.5e6


def _kb() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[k] = int(v.split()[0])
    return out


def pick_layers(parquet: Path) -> dict[str, dict]:
    """One layer config per op class of a layer model's data (see the module docstring)."""
    import numpy as np
    import pandas as pd

    from carb.families import layers as L
    from carb.netmodel.layers import onednn_conv, op_class

    d = pd.read_parquet(parquet)
    d = d[d["status"] == "ok"].reset_index(drop=True)
    frame = L.layer_frame(d).reset_index(drop=True)
    cls = op_class(frame)
    on = onednn_conv(frame, 1, all_ranks=True)
    tens = (frame["in_bytes"] + frame["out_bytes"] + frame["weight_bytes"]).to_numpy(np.float64)
    picked = {}
    for c in sorted(set(cls)):
        idx = np.flatnonzero(cls == c)
        if c == "conv":  # the reference's convolution runs through oneDNN, as the classifiers' do
            idx = idx[on[idx]]
        small = idx[tens[idx] < SMALL_BYTES]
        pool = small if len(small) else idx[np.argsort(tens[idx])[:1]]
        j = pool[np.argsort(tens[pool])[len(pool) // 2]]
        cfg = L._from_row(d.iloc[j].to_dict()).to_dict()
        picked[c] = {
            "config": cfg,
            "tensor_mb": float(tens[j] / 1e6),
            "out_mb": float(frame["out_bytes"].iloc[j] / 1e6),
        }
    return picked


def one(target: str, picked: dict[str, dict]) -> dict:
    """The increment (MB) of ``target``'s first runs in this fresh process (see the module docstring)."""
    import gc

    from carb.measure.cpu import _retain_freed_memory  # the workers' allocator ``retain``

    if not _retain_freed_memory():
        raise RuntimeError("allocator 'retain': glibc mallopt is not available")
    import torch

    from carb.families import layers as L

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    ref = [c for c in REFERENCE if c != target and c in picked]
    mods = {c: L.build(picked[c]["config"]) for c in [*ref, target]}
    x = torch.zeros(1)
    with torch.inference_mode():
        for c in ref:
            for _ in range(3):
                mods[c](x)
    gc.collect()
    before = _kb()
    Path("/proc/self/clear_refs").write_text("5")
    with torch.inference_mode():
        for _ in range(3):
            mods[target](x)
    after = _kb()
    mb = 1024 / 1e6
    return {
        "class": target,
        "increment_mb": (after["VmHWM"] - before["VmRSS"]) * mb - picked[target]["out_mb"],
        "file_mb": (after["RssFile"] - before["RssFile"]) * mb,
        "anon_mb": (after["RssAnon"] - before["RssAnon"]) * mb,
    }


def main(argv: list[str] | None = None) -> int:
    """Every class ``--repeats`` times, each in its own fresh process; a table and ``--json``."""
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--data", default=str(ROOT / "carb/data/layers-cpu-epyc512-1t.parquet"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--picked", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one, json.loads(Path(a.picked).read_text()))))
        return 0
    picked = pick_layers(Path(a.data))
    tmp = Path(a.json or "op_code_memory.json").with_suffix(".picked.json")
    tmp.write_text(json.dumps(picked))
    t0 = time.time()
    rows = []
    try:
        for rep in range(a.repeats):
            for c in picked:
                p = subprocess.run(
                    ["taskset", "-c", str(a.core), sys.executable, __file__, "--one", c, "--picked", str(tmp)],
                    capture_output=True,
                    text=True,
                )
                if p.returncode:
                    print(f"{c}: failed: {p.stderr.strip().splitlines()[-1:]}", flush=True)
                    continue
                r = json.loads(p.stdout.strip().splitlines()[-1])
                r["repeat"] = rep
                rows.append(r)
            print(f"repeat {rep + 1}/{a.repeats} done in {time.time() - t0:.0f} s", flush=True)
    finally:
        tmp.unlink(missing_ok=True)
    per = {}
    for c in picked:
        v = [r["increment_mb"] for r in rows if r["class"] == c]
        if v:
            per[c] = {
                "increment_mb": float(np.median(v)),
                "runs_mb": v,
                "reference": c in REFERENCE,
                "tensor_mb": picked[c]["tensor_mb"],
                "config": picked[c]["config"],
            }
            print(
                f"{c:20s} {'ref' if c in REFERENCE else '   '} {per[c]['increment_mb']:6.2f} MB  runs {np.round(v, 2)}"
            )
    if a.json:
        doc = {
            "what": "peak memory (MB = 1e6 B) a layer of each op class adds the first time it runs in a process that "
            "already ran one layer of each reference class (a reference class: the others)",
            "reference": list(REFERENCE),
            "classes": per,
            "runs": rows,
            "data": str(Path(a.data).relative_to(ROOT)) if Path(a.data).is_relative_to(ROOT) else a.data,
            "seconds": time.time() - t0,
        }
        _common.write_json(a.json, doc)
        print(f"written {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
