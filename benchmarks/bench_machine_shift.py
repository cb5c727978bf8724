"""The shipped network model on a machine kind it was not fitted on, before and after
``carb calibrate``'s one command, judged by a harness independent of CARB's own worker.

The truth: public torchvision CNNs the model never saw, and the carb.zoo candidates
``carb calibrate`` chooses its K networks from (the K among them), all measured in one run,
shuffled and interleaved, in rounds (each network visited once per round, the rounds at
different moments), so that truth and calibration share the machine's speed. Each visit is
a fresh process in the model's allocator state (``retain``: glibc ``mallopt`` keeps freed
memory, no trimming, no mapping below 1 GiB), pinned to one core (``taskset -c 1``), one
intra-op and inter-op thread, ``torch.inference_mode``, warm-up, then the median of timed
forwards; peak memory is ``VmHWM`` above the resident set before the model was built.

Each timed sample is read on two clocks: wall time and the forwarding thread's CPU time
(``time.thread_time_ns``). With one thread every forward runs on that thread, so on a quiet
core the two agree; on our shared 2-core VMs other tenants' processes take turns on the
pinned core (wall x2-3 under a load of 4-5), and the CPU time leaves their turns out. The
truth is the CPU time (``latency_ms``); the wall time is kept beside it (``latency_wall_ms``).

Needs torchvision, which CARB itself never requires. Beside the project's torch 2.13.0+cpu,
torchvision 0.28.0's model definitions import into a folder of their own (its C ops, built
for CUDA, do not load; the classification networks do not use them)::

    pip install --no-deps --target /tmp/tvsite torchvision==0.28.0
    PYTHONPATH=/tmp/tvsite python benchmarks/bench_machine_shift.py measure
    PYTHONPATH=/tmp/tvsite python benchmarks/bench_machine_shift.py evaluate

Subcommands (repository root):

``measure``   the visits, into ``benchmarks/results/machine_shift_measurements.json`` (resumes).
``evaluate``  the torchvision networks predicted by (a) the shipped model as it is and
              (b) the model calibrated on the K networks ``carb calibrate --samples K``
              chooses (:func:`carb.netmodel.calibrate_on`, its default method) and (c) the
              same K under the previous rule (mean factor, conformal level), per network
              and pooled: mean latency error, share within +-10%, Spearman, 90% interval
              coverage and median half-width; beside them the truth's own round-to-round
              noise, and the same calibration judged on the zoo candidates left out of many
              draws of K, also with one of the K measured 30% slow (what decides the
              interval rule: never the torchvision networks).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common

# the torchvision networks (batch 1, their usual input size) of bench_public_zoo, the same set
from _common import AT_224, OTHER_SIZES

ROOT = _common.ROOT
MODEL = "layers-cpu-avx2-1t"  # carb predict's default network model
RESULTS = _common.RESULTS
MEASUREMENTS = RESULTS / "machine_shift_measurements.json"

#: glibc malloc.h, and the bytes below which freed memory stays with the process (as the model's workers)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, RETAIN_BYTES = -1, -3, 1 << 30
#: the two schemas of torchvision's C ops defined here where its C library does not load (kept alive)
_TV_LIB = None


def import_torchvision():
    """torchvision's model definitions, also where its C ops (built for another torch) do not load.

    torchvision registers fake kernels for two of its C ops on import; where the C library
    cannot load, the two schemas are defined here first so that the import goes through.
    """
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        sys.exit("error: torchvision is not importable (see this file's docstring: PYTHONPATH=/tmp/tvsite)")
    so = Path(spec.submodule_search_locations[0]) / "_C.so"
    try:
        torch.ops.load_library(str(so))
    except OSError:
        global _TV_LIB
        _TV_LIB = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _TV_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision


# -- the networks


def public_specs() -> list[dict]:
    """The torchvision networks: ``{"kind": "tv", "name", "input_size", "batch"}``."""
    out = [{"kind": "tv", "name": n, "input_size": 224, "batch": 1} for n in AT_224]
    return out + [{"kind": "tv", "name": n, "input_size": s, "batch": 1} for n, s in OTHER_SIZES]


def zoo_spec(cfg) -> dict:
    return {"kind": "zoo", "config": cfg.to_dict(), "label": cfg.label()}


def spec_label(spec: dict) -> str:
    if spec["kind"] == "zoo":
        return spec["label"]
    return f"{spec['name']}-i{spec['input_size']}-b{spec['batch']}-fp32"


def spec_config(spec: dict):
    """The carb config of a spec (torchvision: a :class:`carb.families.nets.NetConfig`)."""
    from carb.families import nets, zoo

    if spec["kind"] == "zoo":
        return zoo.ZooConfig.from_dict(spec["config"])
    return nets.NetConfig(f"torchvision.models:{spec['name']}", spec["input_size"], spec["batch"])


# -- one visit, in its own process


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def cmd_time(args: argparse.Namespace) -> None:
    """Time one network in this fresh process; print one JSON line."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    retained = bool(libc.mallopt(M_TRIM_THRESHOLD, RETAIN_BYTES)) and bool(libc.mallopt(M_MMAP_THRESHOLD, RETAIN_BYTES))
    import gc

    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    spec = json.loads(args.spec)
    if spec["kind"] == "tv":
        tv = import_torchvision()
        build = lambda: getattr(tv.models, spec["name"])()  # noqa: E731
        shape = (spec["batch"], 3, spec["input_size"], spec["input_size"])
    else:
        from carb.families import zoo

        cfg = zoo.ZooConfig.from_dict(spec["config"])
        build = lambda: zoo.build(cfg)  # noqa: E731
        shape = (cfg.batch, 3, cfg.input_size, cfg.input_size)
    gc.collect()
    _reset_peak()
    base_kb = _status_kb("VmRSS")
    model = build().eval()
    x = torch.randn(*shape)
    gc.collect()
    libc.malloc_trim(0)
    _reset_peak()
    with torch.inference_mode():
        t0, n_warm = time.perf_counter(), 0
        while n_warm < 3 or time.perf_counter() - t0 < args.warmup_s:
            model(x)
            n_warm += 1
        per_iter = (time.perf_counter() - t0) / n_warm
        iters = max(1, math.ceil(0.02 / per_iter))
        wall, cpu = [], []
        t0 = time.perf_counter()
        while len(wall) < 5 or time.perf_counter() - t0 < args.max_time:
            a, c = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(iters):
                model(x)
            cpu.append((time.thread_time_ns() - c) / iters / 1e6)
            wall.append((time.perf_counter_ns() - a) / iters / 1e6)
    print(
        json.dumps(
            {
                "latency_ms": statistics.median(cpu),
                "latency_ms_min": min(cpu),
                "latency_wall_ms": statistics.median(wall),
                "latency_wall_ms_min": min(wall),
                "samples": len(wall),
                "iters": iters,
                "warmup": n_warm,
                "memory_mb": (_status_kb("VmHWM") - base_kb) * 1024 / 1e6,
                "retain": retained,
                "affinity": sorted(os.sched_getaffinity(0)),
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
            }
        )
    )


# -- the run


def _networks(args: argparse.Namespace) -> tuple[list[dict], dict[str, str], list]:
    """Every network to visit, its role(s) and the K calibration configs."""
    from carb import netmodel
    from carb.families import zoo

    nm = netmodel.load(args.model)
    cal = netmodel.choose_networks(nm, args.k, seed=args.seed)  # what `carb calibrate --samples K` measures
    pool = zoo.sample_configs(per_family=4, seed=args.seed, max_gflops=netmodel.CALIBRATION_MAX_GFLOPS)
    roles: dict[str, str] = {}
    specs: list[dict] = []
    for c in pool + [c for c in cal if c not in pool]:
        specs.append(zoo_spec(c))
        roles[c.label()] = "pool;calibration" if c in cal else "pool"
    for s in public_specs()[: args.limit]:
        specs.append(s)
        roles[spec_label(s)] = "public"
    return specs, roles, cal


def cmd_measure(args: argparse.Namespace) -> None:
    specs, roles, cal = _networks(args)
    out = Path(args.json)
    doc = json.loads(out.read_text()) if out.exists() else {"visits": []}
    doc.update(
        roles=roles,
        calibration=[c.label() for c in cal],
        specs={spec_label(s): s for s in specs},
        conditions={
            "cpu": _cpu_line(),
            "core": args.core,
            "threads": 1,
            "allocator": "retain (glibc mallopt: M_TRIM_THRESHOLD and M_MMAP_THRESHOLD 1 GiB)",
            "max_time_s": args.max_time,
            "warmup_s": args.warmup_s,
            "model": args.model,
            "k": args.k,
            "seed": args.seed,
            "harness": "a fresh process per visit, this file's `_time` (not CARB's worker)",
        },
    )
    done = {(v["network"], v["round"]) for v in doc["visits"]}
    todo = [
        (r, s) for r in range(args.rounds) for s in _shuffled(specs, args.seed + r) if (spec_label(s), r) not in done
    ]
    print(f"{len(specs)} networks x {args.rounds} rounds: {len(todo)} visits to go -> {out}", flush=True)
    t_start = time.time()
    for i, (r, s) in enumerate(todo):
        t0 = time.time()
        cmd = ["taskset", "-c", str(args.core), sys.executable, __file__, "_time", json.dumps(s)]
        cmd += ["--max-time", str(args.max_time), "--warmup-s", str(args.warmup_s)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        visit = {"network": spec_label(s), "round": r, "at": time.time(), "wall_s": time.time() - t0}
        try:
            visit.update(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            visit["error"] = (p.stderr.strip().splitlines() or ["no output"])[-1]
        visit["load1"] = os.getloadavg()[0]
        doc["visits"].append(visit)
        _common.write_json(out, doc)
        eta = (time.time() - t_start) / (i + 1) * (len(todo) - i - 1)
        print(
            f"[{i + 1}/{len(todo)}] r{r} {visit['network']}: "
            + (f"{visit['latency_ms']:.2f} ms" if "latency_ms" in visit else visit["error"])
            + f" ({visit['wall_s']:.1f} s, ETA {eta / 60:.1f} min)",
            flush=True,
        )


def _shuffled(specs: list[dict], seed: int) -> list[dict]:
    out = list(specs)
    random.Random(seed).shuffle(out)
    return out


def _cpu_line() -> str:
    info = Path("/proc/cpuinfo").read_text()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    isa = "avx512_bf16" if "avx512_bf16" in flags else ("avx512f" if "avx512f" in flags else "avx2")
    return f"{name}, {os.cpu_count()} logical CPUs, {isa}"


# -- the judgement


def metrics(y, pred, lo=None, hi=None) -> dict:
    """:func:`_common.metrics` and, with ``lo``/``hi``, the intervals' median half-width (% of the prediction)."""
    import numpy as np

    out = _common.metrics(y, pred, lo, hi)
    if lo is not None:
        half = (np.asarray(hi, float) - np.asarray(lo, float)) / 2 / np.asarray(pred, float)
        out["half_width_median"] = float(100 * np.median(half))
    return out


def truth(doc: dict):
    """Per network: the median over its rounds of each visit's median (ms), memory (MB), rounds; and the visits."""
    import pandas as pd

    v = pd.DataFrame(doc["visits"])
    v = v[v["latency_ms"].notna()] if "latency_ms" in v else v.iloc[:0]
    per = v.groupby("network").agg(
        latency_ms=("latency_ms", "median"), memory_mb=("memory_mb", "median"), rounds=("round", "nunique")
    )
    return per, v


def round_noise(v) -> dict:
    """The truth's own noise: one round's median predicting another's, same network."""
    import numpy as np

    w = v.pivot_table(index="network", columns="round", values="latency_ms").dropna()
    if w.shape[1] < 2:
        return {}
    ratio = w.max(axis=1) / w.min(axis=1)
    m = metrics(w.iloc[:, 1], w.iloc[:, 0])
    return {
        "networks": int(len(w)),
        "round0_vs_round1_mape": m["mape"],
        "round0_vs_round1_within10": m["within10"],
        "max_over_min_median": float(np.median(ratio)),
        "max_over_min_p90": float(np.quantile(ratio, 0.9)),
        "half_spread_of_median_pct": float(100 * np.median((ratio - 1) / (ratio + 1))),
    }


def previous_rule(nm, rows, measured):
    """``nm`` calibrated as ``carb calibrate --method factor`` did before its intervals pooled the
    model's own error: the mean log ratio as the factor, the finite-sample conformal level of
    the K leave-one-out residuals as the half-width (their largest at K = 10)."""
    from carb.model.maps import fit_log_map
    from carb.netmodel import NetModel

    base = NetModel(nm.layer, nm.lat_coef, nm.mem_coef, nm.q, {}, nm.coverage, nm.device, dict(nm.meta))
    pred = base.predict_rows(rows)
    for t in ("latency_ms", "memory_mb"):
        lm = fit_log_map(
            pred[t].to_numpy(),
            measured[t].to_numpy(float),
            rows["batch"].to_numpy(float),
            nm.coverage,
            additive=t == "memory_mb",
            max_terms=1,
        )
        base.calibration[t] = lm.to_dict()
    return base


def judge(y, p) -> dict:
    return {
        "latency": metrics(y.latency_ms, p.latency_ms, p.latency_ms_lo, p.latency_ms_hi),
        "memory": metrics(y.memory_mb, p.memory_mb, p.memory_mb_lo, p.memory_mb_hi),
    }


def cmd_evaluate(args: argparse.Namespace) -> None:
    import numpy as np

    from carb import netmodel

    import_torchvision()
    doc = json.loads(Path(args.measurements).read_text())
    per, visits = truth(doc)
    labels = [n for n in doc["specs"] if n in per.index]
    roles = doc["roles"]
    t0 = time.time()
    tables = {n: netmodel.capture_config(spec_config(doc["specs"][n])) for n in labels}
    print(f"{len(labels)} networks measured, captured in {time.time() - t0:.0f} s", flush=True)
    nm = netmodel.load(args.model)
    pub = [n for n in labels if roles[n] == "public"]
    pool = [n for n in labels if "pool" in roles[n]]
    cal = [n for n in doc["calibration"] if n in per.index]
    rows = {k: netmodel._network_rows([tables[n] for n in v], nm.layer)[0] for k, v in (("pub", pub), ("cal", cal))}
    y_pub, y_cal = per.loc[pub], per.loc[cal, ["latency_ms", "memory_mb"]]
    model = netmodel.calibrate_on(nm, [tables[n] for n in cal], y_cal)  # carb calibrate's default method
    before = previous_rule(nm, rows["cal"], y_cal)
    from carb.measure.fingerprint import here
    from carb.netmodel.domain import standing

    # what `carb predict --module` answers on this machine: intervals widened to the measured
    # step between machine kinds (and the fitted range) where this machine is another kind
    answered, where = standing(
        nm, rows["pub"], nm.predict_rows(rows["pub"]), [tables[n].precision for n in pub], here()
    )
    print(f"this machine against the model's: {'same kind' if where.machine.same_kind else where.machine.differences}")
    preds = {
        "shipped, uncalibrated (its own interval)": nm.predict_rows(rows["pub"]),
        "shipped, uncalibrated, as answered here (widened)": answered,
        "calibrated (carb calibrate, K = %d)" % len(cal): model.predict_rows(rows["pub"]),
        "calibrated, previous rule (mean factor, conformal level)": before.predict_rows(rows["pub"]),
    }
    out: dict = {"pooled": {k: judge(y_pub, p) for k, p in preds.items()}, "per_network": []}
    for i, n in enumerate(pub):
        r = {"network": n, "latency_ms": float(y_pub.latency_ms.iloc[i]), "memory_mb": float(y_pub.memory_mb.iloc[i])}
        for key, p in preds.items():
            r[key] = {
                t: [round(float(p[c].iloc[i]), 3) for c in (t, f"{t}_lo", f"{t}_hi")]
                for t in ("latency_ms", "memory_mb")
            }
        r["unknown_share"] = float(rows["pub"]["unknown_ms"].iloc[i] / rows["pub"]["layer_sum_ms"].iloc[i])
        out["per_network"].append(r)
    pool_cfgs = [spec_config(doc["specs"][n]) for n in pool]
    pool_rows = netmodel._network_rows([tables[n] for n in pool], nm.layer)[0]
    out["zoo_left_out"] = zoo_left_out(nm, pool_cfgs, pool_rows, per.loc[pool], args.draws)
    out["calibration"] = {
        "networks": cal,
        "maps": model.calibration,
        "previous_rule_maps": before.calibration,
        "interval": model.meta.get("calibration_interval"),
    }
    out["truth_noise"] = {"public": round_noise(visits[visits["network"].isin(pub)]), "all": round_noise(visits)}
    at = visits["at"]
    out["conditions"] = {
        **doc["conditions"],
        "visits": int(len(visits)),
        "measured": f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(at.min()))}-{time.strftime('%H:%M UTC', time.gmtime(at.max()))}",
        "visit_wall_s_zoo_median": float(np.median(visits.loc[visits["network"].isin(pool), "wall_s"])),
        "load1_median": float(np.median(visits["load1"])),
        "wall_over_cpu_median": float(np.median(visits["latency_wall_ms"] / visits["latency_ms"])),
        "torch": visits["torch"].iloc[0],
        "torchvision": __import__("torchvision").__version__,
        "command": "PYTHONPATH=/tmp/tvsite python benchmarks/bench_machine_shift.py measure && ... evaluate",
    }
    _common.write_json(args.json, out)
    report(out)
    print(f"written {args.json}")


def zoo_left_out(nm, cfgs: list, rows, y, draws: int, ks: tuple = (5, 10, 15)) -> dict:
    """Both rules judged on the zoo candidates left out of ``draws`` draws of K (``carb calibrate``'s choice rule).

    The interval rule is decided here, never on the torchvision networks. ``noisy``: the
    same draws with one of the K measured 30% slow (a visit slowed by other tenants).
    """
    import numpy as np

    from carb import netmodel

    pred = nm.predict_rows(rows)["latency_ms"].to_numpy()
    res: dict = {"summary": {}}
    for k in ks:
        for noisy in (False, True):
            ms: dict = {"calibrated": [], "previous rule": []}
            for d in range(draws):
                pick = netmodel.pick_networks(cfgs, pred, k, np.random.default_rng(d))
                rest = np.setdiff1d(np.arange(len(cfgs)), pick)
                yk = y.iloc[pick][["latency_ms", "memory_mb"]].reset_index(drop=True)
                if noisy:
                    yk.loc[int(np.random.default_rng(100 + d).integers(k)), "latency_ms"] *= 1.3
                rk = rows.iloc[pick].reset_index(drop=True)
                for key, m in (
                    ("calibrated", netmodel.calibrate_rows(nm, rk, yk, netmodel.DEFAULT_CALIBRATION_METHOD)),
                    ("previous rule", previous_rule(nm, rk, yk)),
                ):
                    ms[key].append(judge(y.iloc[rest], m.predict_rows(rows.iloc[rest])))
            for key, v in ms.items():
                name = f"K={k}{', one of K 30% slow' if noisy else ''}, {key}"
                res["summary"][name] = {
                    t: {
                        **{s: float(np.mean([m[t][s] for m in v])) for s in v[0][t] if s != "n"},
                        "half_width_p90": float(np.quantile([m[t]["half_width_median"] for m in v], 0.9)),
                        "coverage_p10": float(np.quantile([m[t]["coverage"] for m in v], 0.1)),
                    }
                    for t in ("latency", "memory")
                }
    res["draws"], res["networks"] = draws, len(cfgs)
    return res


def report(out: dict) -> None:
    """Print the pooled tables of an evaluation (markdown)."""
    print(
        "| torchvision networks | latency MAPE | within 10% | Spearman | 90% coverage | median half-width | memory MAPE | memory coverage |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, v in out["pooled"].items():
        lat, mem = v["latency"], v["memory"]
        print(
            f"| {k} | {lat['mape']:.1f}% | {lat['within10']:.0f}% | {lat['spearman']:.3f} | {lat['coverage']:.0f}% | "
            f"±{lat['half_width_median']:.1f}% | {mem['mape']:.1f}% | {mem['coverage']:.0f}% |"
        )
    z = out["zoo_left_out"]
    print(f"\nzoo networks left out of the K ({z['draws']} draws of K from {z['networks']}; means over draws)\n")
    print("| rule | latency MAPE | within 10% | 90% coverage (p10) | median half-width (p90) | memory coverage |")
    print("|---|---:|---:|---:|---:|---:|")
    for k, v in z["summary"].items():
        lat, mem = v["latency"], v["memory"]
        print(
            f"| {k} | {lat['mape']:.1f}% | {lat['within10']:.0f}% | {lat['coverage']:.0f}% ({lat['coverage_p10']:.0f}%) | "
            f"±{lat['half_width_median']:.1f}% (±{lat['half_width_p90']:.1f}%) | {mem['coverage']:.0f}% |"
        )
    print("\ntruth's own noise (round 0 vs round 1):", json.dumps(out["truth_noise"]["public"]))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="visit the networks in rounds; JSON")
    m.add_argument("--model", default=MODEL)
    m.add_argument("--k", type=int, default=10, help="carb calibrate --samples")
    m.add_argument("--seed", type=int, default=0, help="carb calibrate --seed")
    m.add_argument("--rounds", type=int, default=2)
    m.add_argument("--max-time", type=float, default=1.5, help="timed seconds per visit")
    m.add_argument("--warmup-s", type=float, default=0.3)
    m.add_argument("--core", type=int, default=1)
    m.add_argument("--limit", type=int, default=None, help="only the first N torchvision networks (a smoke run)")
    _common.add_json(m, str(MEASUREMENTS), aliases=("--out",))
    t = sub.add_parser("_time", help=argparse.SUPPRESS)
    t.add_argument("spec")
    t.add_argument("--max-time", type=float, default=1.5)
    t.add_argument("--warmup-s", type=float, default=0.3)
    e = sub.add_parser("evaluate", help="predict the torchvision networks; JSON")
    e.add_argument("--measurements", default=str(MEASUREMENTS))
    e.add_argument("--model", default=MODEL)
    e.add_argument("--draws", type=int, default=60, help="draws of K from the zoo candidates (the rule's check)")
    _common.add_json(e, str(RESULTS / "machine_shift.json"), aliases=("--out",))
    args = p.parse_args(argv)
    {"measure": cmd_measure, "_time": cmd_time, "evaluate": cmd_evaluate}[args.cmd](args)


if __name__ == "__main__":
    main()
