"""A config model's uncalibrated memory against a fresh process on this machine.

A CARB config model is trained on a shipped CPU dataset less a held-out random sample of its
configs (``carb train``'s preset: the data's family preset), and predicts the held-out configs'
peak memory uncalibrated. Each held-out config is then measured here in a fresh Python process
(this file's ``_fresh``: what a user's program that imported torch sees), pinned to one core
(``taskset``), with the dataset's threads and C allocator (glibc's default rules): its resident
set after the imports is the baseline; the network is built and cast, the peak is reset
(``/proc/self/clear_refs``), and the dataset's visit runs (warm-up 2 forwards and >= 0.1 s, then
forwards for 0.5 s) under ``torch.inference_mode()``; memory is ``VmHWM`` above the baseline
(MB = 1e6 bytes). The figure: the share of held-out configs whose prediction lies within +-10%
of the fresh process. Beside it, the same for a model trained on the dataset's memory as first
measured (``memory_mb_older``, where the dataset keeps it) and for the dataset's own measurement
of each held-out config (the truth's agreement with itself across the two ways of measuring).

``measure``   the held-out configs, each in a fresh process (``--core``), into a JSON.
``evaluate``  the model trained on the rest, its prediction judged against ``measure``'s JSON.

    python benchmarks/bench_memory_fresh.py measure --data cpu-1t --holdout 100 --core 0 \
        --json benchmarks/results/memory_fresh_cpu-1t_measured.json
    python benchmarks/bench_memory_fresh.py evaluate --data cpu-1t \
        --measured benchmarks/results/memory_fresh_cpu-1t_measured.json --json benchmarks/results/memory_fresh_cpu-1t.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common

#: the shipped datasets' visit (their cards): warm-up iterations and seconds, then seconds of forwards
WARMUP, WARMUP_S, FORWARDS_S = 2, 0.1, 0.5
#: how close a prediction must be to the fresh process to count (relative)
WITHIN = 0.10


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def fresh(row: dict, threads: int) -> dict:
    """Measure one config's peak memory in this (fresh) process. Units: MB."""
    import ctypes
    import gc

    import torch

    from carb import families
    from carb.families import arch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    libc = ctypes.CDLL("libc.so.6")
    cfg = families.config_from_row(row)
    dtype = arch.dtype_of(cfg.precision)
    gc.collect()
    libc.malloc_trim(0)
    base_kb = _status_kb("VmRSS")
    model = arch.build(cfg).to(dtype)
    x = torch.randn(cfg.batch, 3, cfg.input_size, cfg.input_size, dtype=dtype)
    gc.collect()
    libc.malloc_trim(0)  # the fp32 build copy of a reduced-precision model goes back first
    model_kb = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    forwards = 0
    with torch.inference_mode():
        t0 = time.perf_counter()
        while forwards < WARMUP or time.perf_counter() - t0 < WARMUP_S:
            model(x)
            forwards += 1
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < FORWARDS_S:
            model(x)
            forwards += 1
    return {
        "memory_mb": (_status_kb("VmHWM") - base_kb) * 1024 / 1e6,
        "model_mb": (model_kb - base_kb) * 1024 / 1e6,
        "baseline_mb": base_kb * 1024 / 1e6,
        "forwards": forwards,
        "threads": torch.get_num_threads(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "loadavg": list(os.getloadavg()),
    }


def measure_fresh(rows: list[dict], threads: int, core: int) -> list[dict]:
    """Each row measured by :func:`fresh` in a new process pinned to ``core``."""
    out = []
    for i, r in enumerate(rows):
        cmd = ["taskset", "-c", str(core), sys.executable, __file__, "_fresh", json.dumps(r), "--threads", str(threads)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=_common.ROOT)
        if p.returncode != 0:
            raise RuntimeError(f"fresh process failed on {r['config_id']}: {p.stderr.strip().splitlines()[-1:]}")
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"[{i + 1}/{len(rows)}] {r['config_id']}: {out[-1]['memory_mb']:.2f} MB", flush=True)
    return out


def _fit_predict(train, test, target: str, seed: int):
    """A config model trained on ``train``'s ``target`` as memory; its uncalibrated prediction of ``test``."""
    from carb.model import CARB, auto_preset

    train = train.assign(memory_mb=train[target])
    preset, _ = auto_preset(train)
    model = CARB(preset=preset, random_state=seed).fit(train, train[["memory_mb"]])
    return model.predict(test), preset


def judge(pred, truth) -> dict:
    """How a prediction (MB) compares with the fresh process (MB): share within +-10%, median and spread of the ratio."""
    import numpy as np

    r = np.asarray(pred, dtype=float) / np.asarray(truth, dtype=float)
    return {
        "within_10pct": float(np.mean(np.abs(r - 1) <= WITHIN)),
        "ratio_median": float(np.median(r)),
        "ratio_p10": float(np.quantile(r, 0.1)),
        "ratio_p90": float(np.quantile(r, 0.9)),
        "n": int(len(r)),
    }


def held_out(df, n: int, seed: int):
    """The held-out random sample: ``n`` rows of the ok rows in config-id order (memory plays no part)."""
    import numpy as np

    df = df[df.status == "ok"].sort_values("config_id").reset_index(drop=True)
    mask = np.zeros(len(df), dtype=bool)
    mask[np.random.default_rng(seed).choice(len(df), size=n, replace=False)] = True
    return df[~mask], df[mask].reset_index(drop=True)


def cmd_measure(a) -> dict:
    """The held-out configs measured in fresh processes (the truth), with the sample's definition."""
    import torch

    from carb import datasets
    from carb.measure.cpu import KERNEL_ENV

    fp = datasets.fingerprint(a.data)
    here = str(torch.backends.cpu.get_cpu_capability())
    if fp is not None and fp.kernels and fp.kernels != here:  # memory of other kernels: cap torch's and oneDNN's
        sys.exit(
            f"error: {a.data} ran on {fp.kernels} kernels, this process on {here}: run with "
            f"ATEN_CPU_CAPABILITY={fp.kernels.lower()} ONEDNN_MAX_CPU_ISA={fp.kernels}"
        )
    df = datasets.load(a.data, features=False)
    threads = int(json.loads(df["extra"].iloc[0]).get("threads", 1))
    _, test = held_out(df, a.holdout, a.seed)
    params = ["config_id", "family", "block", "depth", "width", "early_downsample", "input_size", "batch"]
    params += ["precision", "classes"]
    rows = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in test[params].to_dict("records")]
    t0 = time.time()
    got = measure_fresh(rows, threads, a.core)
    return {
        "data": a.data,
        "held_out": len(rows),
        "seed": a.seed,
        "threads": threads,
        "core": a.core,
        "fresh_process_s": round(time.time() - t0, 1),
        "fresh_visit": {"warmup": WARMUP, "warmup_s": WARMUP_S, "forwards_s": FORWARDS_S, "allocator": "default"},
        # torch's and oneDNN's kernels capped (an AVX2 dataset measured on an AVX-512 CPU): the processes inherit it
        "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
        "fresh": [{"config_id": r["config_id"], **g} for r, g in zip(rows, got)],
    }


def cmd_evaluate(a) -> dict:
    """Train on the dataset less the held-out sample, predict it uncalibrated, judge against the fresh processes."""
    import numpy as np

    from carb import datasets

    meas = json.loads(Path(a.measured).read_text())
    if meas["data"] != a.data:
        raise SystemExit(f"error: {a.measured} holds {meas['data']}'s held-out sample, not {a.data}'s")
    df = datasets.load(a.data)
    train, test = held_out(df, meas["held_out"], meas["seed"])
    fresh = {r["config_id"]: r for r in meas["fresh"]}
    if list(fresh) != test["config_id"].tolist():
        raise SystemExit(f"error: {a.measured}: its held-out configs are not the dataset's sample (--seed?)")
    truth = np.array([fresh[c]["memory_mb"] for c in test["config_id"]])
    # a config the memory pass did not reach has no memory: the model learns from the others, the judge skips it
    pred, preset = _fit_predict(train[train["memory_mb"].notna()], test, "memory_mb", meas["seed"])
    inside = (pred["memory_mb_lo"].to_numpy() <= truth) & (truth <= pred["memory_mb_hi"].to_numpy())
    out = {
        "data": a.data,
        "preset": preset,
        "train_rows": int(train["memory_mb"].notna().sum()),
        **{k: meas[k] for k in ("held_out", "seed", "threads", "core", "fresh_visit")},
        "fresh_measured": meas["provenance"]["utc"],
        "model": {**judge(pred["memory_mb"], truth), "interval_coverage": float(inside.mean())},
        "memory_provenance": _memory_provenance(a.data),
    }
    has = test["memory_mb"].notna().to_numpy()
    out["dataset_row"] = judge(test["memory_mb"][has], truth[has])
    rows = {"config_id": test["config_id"], "fresh_mb": truth, "predicted_mb": pred["memory_mb"].to_numpy()}
    rows["dataset_mb"] = test["memory_mb"].to_numpy()
    if "memory_mb_older" in test:
        older, _ = _fit_predict(train, test, "memory_mb_older", meas["seed"])
        out["model_older"] = judge(older["memory_mb"], truth)
        out["dataset_row_older"] = judge(test["memory_mb_older"], truth)
        rows["predicted_older_mb"] = older["memory_mb"].to_numpy()
    import pandas as pd

    out["rows"] = pd.DataFrame(rows).to_dict("records")
    return out


def _memory_provenance(name: str) -> dict | None:
    """Where the dataset's memory column comes from: its ``memory`` entry of ``carb/data/fingerprints.json``."""
    from importlib import resources

    doc = json.loads((resources.files("carb") / "data" / "fingerprints.json").read_text())
    memory = (doc.get(name) or {}).get("memory")
    keep = ("definition", "memory_baseline", "rows", "of", "measured", "code_commit")
    return (
        {k: memory[k] for k in keep if k in memory} | {"machine": memory.get("machine", {}).get("name")}
        if memory
        else None
    )


def main(argv: list[str] | None = None) -> int:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["measure", "evaluate", "_fresh"])
    ap.add_argument("row", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--data", default="cpu-1t", help="a shipped CPU dataset")
    ap.add_argument("--holdout", type=int, default=100, help="measure: held-out configs (a random sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--core", type=int, default=1, help="measure: the core each fresh process is pinned to")
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--measured", help="evaluate: measure's JSON (the fresh processes)")
    a = ap.parse_args(argv)
    if a.cmd == "_fresh":
        print(json.dumps(fresh(json.loads(a.row), a.threads)))
        return 0
    if a.cmd == "measure":
        out = cmd_measure(a)
        print(f"{a.data}: {out['held_out']} held-out configs measured in fresh processes ({out['fresh_process_s']} s)")
    else:
        if not a.measured:
            raise SystemExit("error: evaluate: give --measured, measure's JSON")
        out = cmd_evaluate(a)
        m = out["model"]
        print(
            f"{a.data}: uncalibrated config-model memory within +-10% of a fresh process for "
            f"{100 * m['within_10pct']:.0f}% of {out['held_out']} held-out configs (median ratio "
            f"{m['ratio_median']:.3f}, 90% interval coverage {100 * m['interval_coverage']:.0f}%)"
            + (
                f"; trained on the memory as first measured: {100 * out['model_older']['within_10pct']:.0f}% "
                f"(median ratio {out['model_older']['ratio_median']:.3f})"
                if "model_older" in out
                else ""
            )
        )
    if a.json:
        _common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
