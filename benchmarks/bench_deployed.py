"""Networks deployment engineers ship outside classification: the shipped network model's
predictions, as it is and after ``carb.calibrate(model, "here")``, against an independent
harness, all taken in one run on one machine.

The networks are those of ``benchmarks/nets/deployed_nets.py`` (segmentation, detection necks
and heads, modern convnets, CNN-attention and CNN-recurrent hybrids, video, audio,
super-resolution, pose, style transfer; plain torch, loaded as user code by path), each at
its declared input, batch 1.

The truth is an independent harness, not CARB's worker: each network is timed in a fresh
process (``python benchmarks/bench_deployed.py _time NAME``) pinned to one core, with one
intra-op and one inter-op thread and the model's allocator (``retain``: glibc ``mallopt``
keeps freed memory below 1 GiB), under ``torch.inference_mode``: warm-up, then at least 30
forwards each timed alone on the wall clock (and at least ``--min-time-s`` of them); the
latency is their median. Peak memory follows CARB's worker's definition
(:data:`carb.measure.cpu.MEMORY_DEFINITION`) in that fresh process: ``VmHWM``, reset once the
network is built, minus ``VmRSS`` after the imports (torch and the networks' file) and
before the network exists. The forwarding thread's CPU time is kept beside the wall time.

Subcommands (repository root, ``. .venv/bin/activate``):

``measure``   in one run, shuffled: truth A (every network, one visit each), the one-command
              calibration (``carb.transfer.here.calibrate_here``, what
              ``carb.calibrate(model, "here", samples=K)`` runs: K zoo networks measured by
              CARB's own worker with the speed sentinel), then truth B (the harness again),
              into ``benchmarks/results/deployed_measurements.json`` (resumes where it stopped;
              ``--restart`` begins again). ``--quick``: three small networks, into
              ``deployed_quick_measurements.json``.
``evaluate``  re-reads the measurements (nothing is measured): the networks captured once,
              predicted by the shipped model as ``carb predict --module`` answers for the
              measuring machine, and by the calibrated model (refitted from the K's stored
              measurements, checked against the maps the run fitted); the truth is the median
              of A and B per network, their disagreement reported. Per network and pooled:
              mean and median |latency error|, share within +-10%, 90% interval coverage and
              median half-width, Spearman; memory error and share within +-10%; the operators
              the model has not measured (layers, FLOPs, predicted time), pooled by networks
              whose every operator is known and the others. ``--later FILE``: a later
              run of ``measure`` (an hour on, its own truth and calibration): the earlier
              calibration scored against the later truth, and whether the two calibrations
              agree within each other's intervals. Writes
              ``benchmarks/results/deployed.json`` (``deployed_quick.json`` with ``--quick``).
``report``    prints the tables of an evaluation's JSON.

    python benchmarks/bench_deployed.py measure     # 50 visits of 3-6 s and the calibration: 6-8 minutes
    python benchmarks/bench_deployed.py evaluate    # about a minute (capturing the networks)
    python benchmarks/bench_deployed.py report      # the tables again
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common

ROOT = _common.ROOT
RESULTS = _common.RESULTS
#: the networks' file, loaded by path as user code
NETS = ROOT / "benchmarks" / "nets" / "deployed_nets.py"
#: the three networks of ``--quick``: small, of three kinds (audio, recurrent, convnet)
QUICK = ("audio_m11", "crnn_lstm", "convnext_lite")
#: glibc malloc.h, and the bytes below which freed memory stays with the process (the model's workers' ``retain``)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, RETAIN_BYTES = -1, -3, 1 << 30
#: the two visits of each network: before and after the calibration
PHASES = ("A", "B")
#: the names of the two predictors in the results
SHIPPED, CALIBRATED = "shipped, uncalibrated", "calibrated here"
#: the calibration with each op's speed measured here first (``measure --ops``)
PER_OP = "calibrated here, per op"


def load_nets() -> Any:
    """The networks' module, imported from its file (as ``carb predict --module FILE:BUILDER`` imports it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("deployed_nets", NETS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # kept, so that its builders pickle by reference into capture workers
    spec.loader.exec_module(module)
    return module


def _paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The measurements file and the evaluation's JSON (``--quick``: their ``_quick`` variants)."""
    tag = "_quick" if args.quick else ""
    return RESULTS / f"deployed{tag}_measurements.json", RESULTS / f"deployed{tag}.json"


# -- one visit, in its own process ---------------------------------------------------------------


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident set (``/proc/self/clear_refs``); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def cmd_time(args: argparse.Namespace) -> None:
    """Time one network in this fresh process; print one JSON line."""
    import ctypes
    import gc

    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    libc = ctypes.CDLL("libc.so.6")
    if args.allocator == "retain" and not all(
        libc.mallopt(k, RETAIN_BYTES) for k in (M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)
    ):
        sys.exit("error: allocator 'retain': glibc mallopt failed")
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    spec = load_nets().NETWORKS[args.name]  # the user code's pages load ahead of the baseline
    gc.collect()
    libc.malloc_trim(0)
    can_reset = _reset_peak()
    base_kb = _status_kb("VmRSS")
    model = spec.build().eval()
    x = torch.randn(*spec.input)
    gc.collect()
    libc.malloc_trim(0)
    model_kb = _status_kb("VmRSS")
    _reset_peak()  # the peak from here on: the ready network and its inference
    with torch.inference_mode():
        t0, n_warm = time.perf_counter(), 0
        while n_warm < 3 or time.perf_counter() - t0 < args.warmup_s:
            model(x)
            n_warm += 1
        wall, cpu = [], []
        t0 = time.perf_counter()
        while len(wall) < args.forwards or time.perf_counter() - t0 < args.min_time_s:
            a, c = time.perf_counter_ns(), time.thread_time_ns()
            model(x)
            cpu.append((time.thread_time_ns() - c) / 1e6)
            wall.append((time.perf_counter_ns() - a) / 1e6)
    peak_kb = _status_kb("VmHWM")
    print(
        json.dumps(
            {
                "latency_ms": statistics.median(wall),
                "latency_ms_p10": statistics.quantiles(wall, n=10)[0],
                "latency_ms_p90": statistics.quantiles(wall, n=10)[-1],
                "latency_cpu_ms": statistics.median(cpu),
                "forwards": len(wall),
                "warmup": n_warm,
                "memory_mb": (peak_kb - base_kb) * 1024 / 1e6,
                "memory_model_mb": (model_kb - base_kb) * 1024 / 1e6,
                "memory_method": "VmHWM (clear_refs reset) - VmRSS baseline" if can_reset else "no clear_refs",
                "allocator": args.allocator,
                "affinity": sorted(os.sched_getaffinity(0)),
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
            }
        )
    )


def visit(name: str, phase: str, args: argparse.Namespace) -> dict[str, Any]:
    """One visit of one network: the harness in a fresh process; its figures, or an ``error``."""
    t0 = time.time()
    cmd = [sys.executable, __file__, "_time", name, "--core", str(args.core), "--allocator", args.allocator]
    cmd += ["--forwards", str(args.forwards), "--min-time-s", str(args.min_time_s), "--warmup-s", str(args.warmup_s)]
    out: dict[str, Any] = {"network": name, "phase": phase, "at": t0}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        out["error"] = "no answer in 600 s"
    else:
        try:
            out.update(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            out["error"] = (p.stderr.strip().splitlines() or ["no output"])[-1]
    out["wall_s"] = time.time() - t0
    out["load1"] = os.getloadavg()[0]
    return out


# -- the run ---------------------------------------------------------------------------------------


def _cpu_line() -> str:
    info = Path("/proc/cpuinfo").read_text()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    isa = "avx512_bf16" if "avx512_bf16" in flags else ("avx512f" if "avx512f" in flags else "avx2")
    return f"{name}, {os.cpu_count()} logical CPUs, {isa}"


def _visits(doc: dict, phase: str, names: list[str], args: argparse.Namespace, out: Path) -> None:
    """Visit every network of ``names`` not yet visited in ``phase``, in an order shuffled per phase."""
    done = {v["network"] for v in doc["visits"] if v["phase"] == phase and "error" not in v}
    order = list(names)
    random.Random(args.seed + PHASES.index(phase)).shuffle(order)
    todo = [n for n in order if n not in done]
    t_start = time.time()
    for i, name in enumerate(todo):
        v = visit(name, phase, args)
        doc["visits"].append(v)
        _common.write_json(out, doc)
        eta = (time.time() - t_start) / (i + 1) * (len(todo) - i - 1)
        figure = f"{v['latency_ms']:.2f} ms, {v['memory_mb']:.1f} MB" if "latency_ms" in v else f"error: {v['error']}"
        print(
            f"truth {phase} [{i + 1}/{len(todo)}] {name}: {figure} ({v['wall_s']:.1f} s, ETA {eta:.0f} s)", flush=True
        )


def _calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """The one-command calibration on this machine; what it measured and fitted, JSON-ready."""
    from carb import families
    from carb.transfer.here import calibrate_here

    t0 = time.time()
    res = calibrate_here(
        args.model,
        samples=args.samples,
        rounds=args.cal_rounds,
        max_time_s=args.cal_max_time,
        seed=args.seed,
        say=lambda line: print(f"calibration: {line}", flush=True),
        ops=args.ops,
    )
    rows = res.measured.reset_index(drop=True)
    keep = [c for c in ("config_id", "latency_ms", "memory_mb", "sentinel_ms", "status") if c in rows.columns]
    measured = json.loads(rows[keep].to_json(orient="records"))
    for m, r in zip(measured, rows.to_dict("records")):
        m["label"] = res.labels.get(r["config_id"], r["config_id"])
        m["config"] = families.to_row(families.config_from_row(r))
    visits = res.visits
    vkeep = [c for c in ("config_id", "round", "status", "latency_ms", "memory_mb", "sentinel_ms") if c in visits]
    return {
        "what": res.what,
        "method": res.model.meta.get("calibration_method"),
        "measured": measured,
        "visits": json.loads(visits[vkeep].to_json(orient="records")),
        "left_out": [list(x) for x in res.left_out],
        "maps": res.model.calibration,
        "meta": res.model.meta,
        **({"ops": _ops_json(res.ops)} if res.ops is not None else {}),
        "started": t0,
        "ended": time.time(),
    }


def _ops_json(ops: Any) -> list[dict[str, Any]]:
    """The layers the calibration measured again per op: each one's op, latency there and here (ms), config."""
    from carb import families

    rows = ops.to_dict("records")
    return [
        {
            "config_id": r["config_id"],
            "op_unit": r["op_unit"],
            "there_ms": float(r["there_ms"]),
            "here_ms": None if r["here_ms"] != r["here_ms"] else float(r["here_ms"]),
            "config": families.to_row(families.config_from_row(r)),
        }
        for r in rows
    ]


def scaled_by_ops(nm: Any, ops: list[dict[str, Any]], name: str | None = None) -> Any:
    """``nm`` with each op priced by its speed measured here (the run's op layers), as ``calibrate_here`` does.

    ``name``: the shipped model whose data each layer's time there is read from now (its layer dataset and op
    campaigns, as :func:`carb.netmodel.op_scale.op_layers` reads them), so that a layer dataset shipped after the
    run is compared with what the model prices from; a layer it no longer holds keeps the run's value.
    """
    import copy
    import dataclasses

    import numpy as np
    import pandas as pd

    from carb.netmodel.op_scale import fit_op_scale, op_layers

    layers = pd.DataFrame(ops)
    if name is not None:
        everything = 1 << 30  # every layer of the model's data in the measured band, not a draw
        now = op_layers(name, per_op=everything, reference=everything).set_index("config_id")["there_ms"]
        layers["there_ms"] = layers["config_id"].map(now).fillna(layers["there_ms"])
    here = np.array([np.nan if v is None else v for v in layers["here_ms"]], dtype=float)
    out = copy.copy(nm)
    out.layer = dataclasses.replace(nm.layer, op_scale=fit_op_scale(layers, here))
    return out


def cmd_measure(args: argparse.Namespace) -> None:
    from carb import netmodel
    from carb.measure.cpu import MEMORY_DEFINITION
    from carb.measure.fingerprint import here

    nets = load_nets()
    names = list(QUICK if args.quick else (args.networks or nets.NETWORKS))
    unknown = [n for n in names if n not in nets.NETWORKS]
    if unknown:
        sys.exit(f"error: --networks: unknown {', '.join(unknown)} (the file has {', '.join(nets.NETWORKS)})")
    args.model = args.model or netmodel.default_model()  # carb predict's: the shipped model of this machine's kind
    args.allocator = netmodel.allocator_of(netmodel.load(args.model))  # the truth in the model's allocator state
    out = Path(args.json or _paths(args)[0])
    settings = {
        "networks": names,
        "model": args.model,
        "samples": args.samples,
        "seed": args.seed,
        "calibration_rounds": args.cal_rounds,
        "calibration_max_time_s": args.cal_max_time,
        "forwards_min": args.forwards,
        "min_time_s": args.min_time_s,
        "warmup_s": args.warmup_s,
        "core": args.core,
        "allocator": args.allocator,
        "ops": bool(args.ops),
    }
    doc = json.loads(out.read_text()) if out.exists() and not args.restart else {}
    if doc and doc.get("settings") != settings:
        sys.exit(f"error: {out} holds a run with other settings; --restart begins again")
    doc.setdefault("visits", [])
    doc.update(
        settings=settings,
        inputs={n: list(nets.NETWORKS[n].input) for n in names},
        machine=here("cpu").to_dict(),
        conditions={
            "cpu": _cpu_line(),
            "harness": "a fresh process per visit, this file's `_time` (not CARB's worker): pinned to one core, "
            "1 intra-op and 1 inter-op thread, inference_mode, warm-up, each forward timed alone on the wall clock; "
            "the median",
            "memory": "CARB's worker's definition, in a fresh process: VmHWM reset once the network is built, minus "
            "VmRSS after the imports (torch and the networks' file) and before the network exists; MB = 1e6 bytes",
            "carb_memory_definition": MEMORY_DEFINITION,
            "order": "truth A, the calibration, truth B; each phase's networks shuffled (seed + phase)",
        },
    )
    print(f"{len(names)} networks, K = {args.samples} calibration networks -> {out}", flush=True)
    _visits(doc, "A", names, args, out)
    if "calibration" not in doc:
        print(f"calibration: carb.calibrate({args.model!r}, 'here', samples={args.samples}) ...", flush=True)
        doc["calibration"] = _calibrate(args)
        _common.write_json(out, doc)
        c = doc["calibration"]
        print(
            f"calibration: {c['what']} in {c['ended'] - c['started']:.0f} s, maps {json.dumps(c['maps'])}", flush=True
        )
    _visits(doc, "B", names, args, out)
    then = f" --measurements {out}" if args.json else " --quick" if args.quick else ""
    print(f"written {out}; next: python benchmarks/bench_deployed.py evaluate{then}")


# -- the judgement ---------------------------------------------------------------------------------


def scores(y, pred, lo=None, hi=None) -> dict[str, float]:
    """:func:`_common.metrics` (``mape``: mean |error| %) with the median |error| and, with an interval,
    its median half-width (% of the prediction)."""
    import numpy as np

    y, pred = np.asarray(y, float), np.asarray(pred, float)
    out = _common.metrics(y, pred, lo, hi)
    out["median_ape"] = float(100 * np.median(np.abs(pred / y - 1)))
    if lo is not None:
        half = (np.asarray(hi, float) - np.asarray(lo, float)) / 2 / pred
        out["half_width_median"] = float(100 * np.median(half))
    return out


def truth(doc: dict):
    """Per network: each phase's latency and memory, their median (the truth) and disagreement; the visits."""
    import numpy as np
    import pandas as pd

    v = pd.DataFrame(doc["visits"])
    v = v[v["latency_ms"].notna()] if "latency_ms" in v else v.iloc[:0]
    v = v.drop_duplicates(["network", "phase"], keep="last")
    w = v.pivot_table(index="network", columns="phase", values=["latency_ms", "memory_mb", "latency_cpu_ms"])
    per = pd.DataFrame(index=w.index)
    for t in ("latency_ms", "memory_mb", "latency_cpu_ms"):
        for ph in PHASES:
            per[f"{t}_{ph}"] = w[t][ph] if ph in w[t] else np.nan
        per[t] = per[[f"{t}_{ph}" for ph in PHASES]].median(axis=1)
    per["phases"] = per[[f"latency_ms_{ph}" for ph in PHASES]].notna().sum(axis=1)
    per["latency_disagreement_pct"] = 100 * (per["latency_ms_B"] - per["latency_ms_A"]).abs() / per["latency_ms"]
    per["memory_disagreement_pct"] = 100 * (per["memory_mb_B"] - per["memory_mb_A"]).abs() / per["memory_mb"]
    return per, v


def drift(per, v) -> dict[str, Any]:
    """How the machine moved between the two phases, and the truth's own noise (A predicting B)."""
    import numpy as np

    both = per.dropna(subset=["latency_ms_A", "latency_ms_B"])
    out: dict[str, Any] = {"networks_with_both": int(len(both))}
    if len(both):
        ratio = both["latency_ms_B"] / both["latency_ms_A"]
        out.update(
            b_over_a_median=float(np.median(ratio)),
            b_over_a_min=float(ratio.min()),
            b_over_a_max=float(ratio.max()),
            disagreement_pct_median=float(np.median(both["latency_disagreement_pct"])),
            disagreement_pct_max=float(both["latency_disagreement_pct"].max()),
            memory_disagreement_pct_median=float(np.median(both["memory_disagreement_pct"])),
        )
        if len(both) > 2:
            out["a_predicting_b"] = scores(both["latency_ms_B"], both["latency_ms_A"])
    if len(v):
        out["wall_over_cpu_median"] = float(np.median(v["latency_ms"] / v["latency_cpu_ms"]))
        out["load1_median"] = float(np.median(v["load1"]))
    return out


def calibrated_model(nm, cal: dict):
    """The calibrated model, refitted from the K's stored measurements as the run fitted it; whether its maps match."""
    import numpy as np
    import pandas as pd

    from carb import families, netmodel

    tables = [netmodel.capture_config(families.config_from_row(m["config"])) for m in cal["measured"]]
    y = pd.DataFrame(cal["measured"])[["latency_ms", "memory_mb"]]
    # the run's widening for the machine's state spread over its rounds, as calibrate_here applied it
    sd = float((cal["meta"].get("state_widening") or {}).get("state_sd", 0.0))
    model = netmodel.calibrate_on(nm, tables, y, method=cal["method"], meta=cal["meta"], state_sd=sd)

    def numbers(o: Any) -> list[float]:
        if isinstance(o, dict):
            return [x for k in sorted(o) for x in numbers(o[k])]
        if isinstance(o, (list, tuple)):
            return [x for e in o for x in numbers(e)]
        return [float(o)] if isinstance(o, (int, float)) and not isinstance(o, bool) else []

    a, b = numbers(json.loads(json.dumps(_common.clean(model.calibration)))), numbers(cal["maps"])
    same = len(a) == len(b) and bool(np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True))
    return model, same


def _row(name: str, spec: Any, t: Any, preds: dict, p_layers: dict) -> dict[str, Any]:
    r: dict[str, Any] = {
        "network": name,
        "task": spec.task,
        "input": list(spec.input),
        "ops": spec.ops,
        "latency_ms": float(t["latency_ms"]),
        "latency_ms_A": _f(t["latency_ms_A"]),
        "latency_ms_B": _f(t["latency_ms_B"]),
        "latency_disagreement_pct": _f(t["latency_disagreement_pct"]),
        "latency_cpu_ms": _f(t["latency_cpu_ms"]),
        "memory_mb": float(t["memory_mb"]),
        "memory_mb_A": _f(t["memory_mb_A"]),
        "memory_mb_B": _f(t["memory_mb_B"]),
    }
    ship = preds[SHIPPED]
    r.update(
        flops=int(ship.flops),
        params=int(ship.params),
        coverage_layers=float(ship.coverage_layers),
        coverage_flops=float(ship.coverage_flops),
        unknown_layers_share=1 - float(ship.coverage_layers),
        unknown_flops_share=1 - float(ship.coverage_flops),
        unknown_latency_share=p_layers[name],
        unknown_ops=list(ship.unknown_ops),
        extrapolated=bool(ship.extrapolated),
        outside=list(ship.outside),
        machine_line=ship.machine_line,
    )
    for key, p in preds.items():
        r[key] = {
            "latency_ms": [p.latency_ms, p.latency_ms_lo, _f(p.latency_ms_hi)],
            "memory_mb": [p.memory_mb, p.memory_mb_lo, _f(p.memory_mb_hi)],
            "latency_error_pct": 100 * (p.latency_ms / r["latency_ms"] - 1),
            "memory_error_pct": 100 * (p.memory_mb / r["memory_mb"] - 1),
            "latency_covered": bool(p.latency_ms_lo <= r["latency_ms"] <= p.latency_ms_hi),
        }
    return r


def _f(x: Any) -> float | None:
    import math

    return float(x) if x is not None and math.isfinite(float(x)) else None


def judge(rows: list[dict], key: str) -> dict[str, Any]:
    """Latency and memory scores of predictor ``key`` over ``rows``."""
    import numpy as np

    if not rows:
        return {}
    y = np.array([r["latency_ms"] for r in rows])
    lat = np.array([r[key]["latency_ms"] for r in rows], dtype=float)
    mem_y = np.array([r["memory_mb"] for r in rows])
    mem = np.array([r[key]["memory_mb"] for r in rows], dtype=float)
    inf = lambda a: np.where(np.isnan(a), np.inf, a)  # noqa: E731 - an unbounded upper end
    return {
        "latency": scores(y, lat[:, 0], lat[:, 1], inf(lat[:, 2])),
        "memory": scores(mem_y, mem[:, 0], mem[:, 1], inf(mem[:, 2])),
    }


def cmd_evaluate(args: argparse.Namespace) -> None:
    import numpy as np

    from carb import netmodel
    from carb.graph import build_meta, capture
    from carb.measure.fingerprint import Fingerprint

    measurements, default_json = _paths(args)
    doc = json.loads(Path(args.measurements or measurements).read_text())
    if "calibration" not in doc:
        sys.exit("error: the measurements hold no calibration yet (measure did not reach it)")
    per, visits = truth(doc)
    nets = load_nets()
    names = [n for n in doc["settings"]["networks"] if n in per.index]
    missing = [n for n in doc["settings"]["networks"] if n not in per.index]
    scored = args.model or doc["settings"]["model"]  # another model is calibrated on the same K measured here
    nm = netmodel.load(scored)
    t0 = time.time()
    tables = [capture(build_meta(nets.NETWORKS[n].build), tuple(doc["inputs"][n])) for n in names]
    print(f"{len(names)} networks measured, captured in {time.time() - t0:.0f} s", flush=True)
    cal_model, reproduced = calibrated_model(nm, doc["calibration"])
    machine = Fingerprint.from_dict(doc["machine"])  # the answers are for the machine measured
    preds = {
        SHIPPED: netmodel.predict_tables(tables, nm, machine),
        CALIBRATED: netmodel.predict_tables(tables, cal_model, machine),
    }
    own = scored == doc["settings"]["model"]
    if "ops" in doc["calibration"] and own:  # the run measured this model's op layers: the per-op calibration too
        # the run's fit, from the op layers' times there as the run read them: reproduced, or not
        reproduced = calibrated_model(scaled_by_ops(nm, doc["calibration"]["ops"]), doc["calibration"])[1]
        ops_model = calibrated_model(scaled_by_ops(nm, doc["calibration"]["ops"], scored), doc["calibration"])[0]
        preds[PER_OP] = netmodel.predict_tables(tables, ops_model, machine)
    if not own:
        reproduced = None  # the run fitted its maps for another model: nothing to reproduce
    unknown_time = {}
    for n, p in zip(names, preds[SHIPPED]):
        L = p.layers
        unknown_time[n] = float(L.loc[~L["known"].astype(bool), "latency_ms"].sum() / max(L["latency_ms"].sum(), 1e-12))
    rows = [
        _row(n, nets.NETWORKS[n], per.loc[n], {k: v[i] for k, v in preds.items()}, unknown_time)
        for i, n in enumerate(names)
    ]
    known = [r for r in rows if not r["unknown_ops"]]
    some = [r for r in rows if r["unknown_ops"]]
    cal = doc["calibration"]
    out: dict[str, Any] = {
        "pooled": {k: judge(rows, k) for k in preds},
        "pooled_every_op_known": {k: judge(known, k) for k in preds},
        "pooled_some_op_unknown": {k: judge(some, k) for k in preds},
        "unknown_ops": {
            "networks_with_some": len(some),
            "networks_all_known": len(known),
            "layers_share_median": float(np.median([r["unknown_layers_share"] for r in rows])),
            "flops_share_median": float(np.median([r["unknown_flops_share"] for r in rows])),
            "latency_share_median": float(np.median([r["unknown_latency_share"] for r in rows])),
            "ops": sorted({o for r in rows for o in r["unknown_ops"]}),
        },
        "truth": drift(per, visits),
        "per_network": rows,
        "calibration": {
            "what": cal["what"],
            "method": cal["method"],
            "networks": [m["label"] for m in cal["measured"]],
            "maps": cal["maps"],
            "refitted_maps_match_the_run": reproduced,
            "model_scored": str(scored),
            **(
                {"ops_layers": sum(o["here_ms"] is not None for o in cal["ops"]), "ops_of": len(cal["ops"])}
                if "ops" in cal
                else {}
            ),
            "seconds": cal["ended"] - cal["started"],
            "sentinel_ms": [m.get("sentinel_ms") for m in cal["measured"]],
            "left_out": cal["left_out"],
        },
        "conditions": {
            **doc["conditions"],
            **doc["settings"],
            "networks_missing": missing,
            "measured_utc": [
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(v["at"] for v in doc["visits"]))),
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(max(v["at"] for v in doc["visits"]))),
            ],
            "calibration_between": [
                time.strftime("%H:%M:%SZ", time.gmtime(cal["started"])),
                time.strftime("%H:%M:%SZ", time.gmtime(cal["ended"])),
            ],
            "measurements": str(Path(args.measurements or measurements)),
            "measurements_provenance": doc.get("provenance"),
            "truth": "median of the two phases' medians (A before the calibration, B after)",
            "torch": visits["torch"].iloc[0] if len(visits) else None,
        },
    }
    if args.later:
        out["later"] = later(Path(args.later), doc, names, tables, nm, machine, preds[CALIBRATED])
    if reproduced is False:
        print("warning: the calibration refitted from the stored K differs from the run's maps", flush=True)
    path = _common.write_json(args.json or default_json, out)
    report(out)
    print(f"written {path}")


def later(path: Path, doc: dict, names: list, tables: list, nm: Any, machine: Any, earlier: list) -> dict[str, Any]:
    """The calibration held over time: a later run of ``measure`` (its own truth and calibration) against this one.

    The earlier calibration's answers scored against the later truth (the median of the later A and B), the
    later calibration's against the same truth, and whether the two calibrations agree: each one's answer
    inside the other's 90% interval.
    """
    import numpy as np

    from carb import netmodel

    doc2 = json.loads(path.read_text())
    per1, _ = truth(doc)
    per2, _ = truth(doc2)
    cal2, same2 = calibrated_model(nm, doc2["calibration"])
    keep = [i for i, n in enumerate(names) if n in per2.index]
    p2 = netmodel.predict_tables([tables[i] for i in keep], cal2, machine)
    p1 = [earlier[i] for i in keep]
    y = np.array([per2.loc[names[i], "latency_ms"] for i in keep], float)

    def cols(ps: list) -> tuple:
        hi = [np.inf if p.latency_ms_hi is None or not np.isfinite(p.latency_ms_hi) else p.latency_ms_hi for p in ps]
        return np.array([p.latency_ms for p in ps]), np.array([p.latency_ms_lo for p in ps]), np.array(hi)

    (a, alo, ahi), (b, blo, bhi) = cols(p1), cols(p2)
    agree = (a >= blo) & (a <= bhi) & (b >= alo) & (b <= ahi)
    return {
        "measurements": str(path),
        "networks": len(keep),
        "hours_between_calibrations": (doc2["calibration"]["started"] - doc["calibration"]["started"]) / 3600,
        "earlier_calibration_vs_later_truth": scores(y, a, alo, ahi),
        "later_calibration_vs_later_truth": scores(y, b, blo, bhi),
        "calibrations_agree_share": float(agree.mean()) if len(agree) else None,
        "later_over_earlier_median": float(np.median(b / a)) if len(a) else None,
        "later_truth_over_earlier_median": float(
            np.median(y / np.array([per1.loc[names[i], "latency_ms"] for i in keep]))
        ),
        # the fresh-process memory of the same networks, later minus earlier (MB): the truth's own run-to-run move
        "later_memory_minus_earlier_mb": _spread(
            np.array([per2.loc[names[i], "memory_mb"] - per1.loc[names[i], "memory_mb"] for i in keep], float)
        ),
        "later_refitted_maps_match_the_run": same2,
        "later_maps": doc2["calibration"]["maps"],
        "later_measurements_provenance": doc2.get("provenance"),
    }


def _spread(x: Any) -> dict[str, float] | None:
    """The median, least and largest of ``x`` (``None`` when empty)."""
    import numpy as np

    return {"median": float(np.median(x)), "min": float(x.min()), "max": float(x.max())} if len(x) else None


def report(out: dict) -> None:
    """Print an evaluation's tables (markdown)."""
    print("\n| predictor | networks | latency mean err | median err | within 10% | Spearman | 90% coverage "
          "| median half-width | memory mean err | memory within 10% | memory coverage |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for group, label in (("pooled", "all"), ("pooled_every_op_known", "every op known"), ("pooled_some_op_unknown", "some op unknown")):  # fmt: skip
        for k, v in out[group].items():
            if not v:
                continue
            lat, mem = v["latency"], v["memory"]
            print(
                f"| {k} ({label}) | {lat['n']} | {lat['mape']:.1f}% | {lat['median_ape']:.1f}% | {lat['within10']:.0f}% "
                f"| {lat['spearman']:.3f} | {lat['coverage']:.0f}% | ±{lat['half_width_median']:.1f}% | {mem['mape']:.1f}% "
                f"| {mem['within10']:.0f}% | {mem['coverage']:.0f}% |"
            )
    print("\n| network | task | measured ms (A / B) | shipped ms [90%] | calibrated ms [90%] | measured MB "
          "| calibrated MB | unknown layers / FLOPs / time | unknown ops |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in out["per_network"]:
        s, c = r[SHIPPED]["latency_ms"], r[CALIBRATED]["latency_ms"]
        a_b = " / ".join("-" if r[f"latency_ms_{ph}"] is None else f"{r[f'latency_ms_{ph}']:.1f}" for ph in PHASES)
        hi = lambda v: "inf" if v is None else f"{v:.1f}"  # noqa: E731
        print(
            f"| {r['network']} | {r['task']} | {r['latency_ms']:.1f} ({a_b}) | {s[0]:.1f} [{s[1]:.1f}, {hi(s[2])}] "
            f"| {c[0]:.1f} [{c[1]:.1f}, {hi(c[2])}] | {r['memory_mb']:.1f} | {r[CALIBRATED]['memory_mb'][0]:.1f} "
            f"| {100 * r['unknown_layers_share']:.0f}% / {100 * r['unknown_flops_share']:.0f}% / "
            f"{100 * r['unknown_latency_share']:.0f}% | {', '.join(r['unknown_ops']) or '-'} |"
            + (f" per op: {r[PER_OP]['latency_ms'][0]:.1f} |" if PER_OP in r else "")
        )
    t = out["truth"]
    print(f"\ntruth B over A: median {t.get('b_over_a_median', float('nan')):.3f} "
          f"(min {t.get('b_over_a_min', float('nan')):.3f}, max {t.get('b_over_a_max', float('nan')):.3f}); "
          f"|A - B| / truth: median {t.get('disagreement_pct_median', float('nan')):.1f}%, "
          f"max {t.get('disagreement_pct_max', float('nan')):.1f}%; wall / CPU time {t.get('wall_over_cpu_median', float('nan')):.3f}")  # fmt: skip
    c = out["calibration"]
    print(f"calibration: {c['what']}, method {c['method']}, {c['seconds']:.0f} s; refitted maps match the run: "
          f"{c['refitted_maps_match_the_run']}")  # fmt: skip
    if "later" in out:
        lt = out["later"]
        e, la = lt["earlier_calibration_vs_later_truth"], lt["later_calibration_vs_later_truth"]
        print(f"\nlater run ({lt['hours_between_calibrations']:.2f} h after the calibration, {lt['networks']} networks; "
              f"later truth over earlier: median {lt['later_truth_over_earlier_median']:.3f}): the earlier calibration "
              f"against the later truth {e['mape']:.1f}% mean error, coverage {e['coverage']:.0f}% at "
              f"±{e['half_width_median']:.1f}%; the later calibration {la['mape']:.1f}%, coverage {la['coverage']:.0f}%; "
              f"the two agree within each other's interval on {100 * lt['calibrations_agree_share']:.0f}% "
              f"(later over earlier: median {lt['later_over_earlier_median']:.3f})")  # fmt: skip
        if lt.get("later_memory_minus_earlier_mb"):
            m = lt["later_memory_minus_earlier_mb"]
            print(f"fresh-process memory, later minus earlier: median {m['median']:+.1f} MB "
                  f"({m['min']:+.1f} to {m['max']:+.1f})")  # fmt: skip


def cmd_report(args: argparse.Namespace) -> None:
    report(json.loads(Path(args.json or _paths(args)[1]).read_text()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="truth A, the calibration here, truth B; JSON (resumes)")
    m.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    m.add_argument("--networks", nargs="+", default=None, help="only these networks (default: all)")
    m.add_argument(
        "--model", default=None, help="the network model to calibrate (default: carb predict's for this machine)"
    )
    m.add_argument("--samples", type=int, default=10, help="K: carb.calibrate's networks")
    m.add_argument("--seed", type=int, default=0, help="carb.calibrate's seed, and the visits' shuffle")
    m.add_argument("--cal-rounds", type=int, default=2, help="carb.calibrate's rounds (carb predict --calibrate's)")
    m.add_argument(
        "--cal-max-time", type=float, default=1.2, help="carb.calibrate's max_time_s per visit (predict --calibrate's)"
    )
    m.add_argument("--forwards", type=int, default=30, help="the fewest timed forwards per visit")
    m.add_argument("--min-time-s", type=float, default=1.0, help="the least timed seconds per visit")
    m.add_argument("--warmup-s", type=float, default=0.5)
    m.add_argument("--core", type=int, default=1, help="the core each visit is pinned to (-1: not pinned)")
    m.add_argument("--restart", action="store_true", help="discard the measurements file's earlier run")
    m.add_argument("--ops", action="store_true", help="the calibration measures each op's layers first (its --ops)")
    _common.add_json(m)  # default: benchmarks/results/deployed_measurements.json (deployed_quick_... with --quick)
    t = sub.add_parser("_time", help=argparse.SUPPRESS)
    t.add_argument("name")
    t.add_argument("--core", type=int, default=-1)
    t.add_argument("--allocator", default="retain")
    t.add_argument("--forwards", type=int, default=30)
    t.add_argument("--min-time-s", type=float, default=1.0)
    t.add_argument("--warmup-s", type=float, default=0.5)
    e = sub.add_parser("evaluate", help="predict the measured networks, score; JSON (measures nothing)")
    e.add_argument("--quick", action="store_true", help="evaluate the --quick measurements")
    e.add_argument("--measurements", default=None, help="the measurements file (default: measure's)")
    e.add_argument(
        "--model", default=None, help="score this network model, calibrated on the run's K (default: the run's model)"
    )
    e.add_argument(
        "--later", default=None, help="a later run's measurements file: the calibration held over time (its own K)"
    )
    _common.add_json(e)  # default: benchmarks/results/deployed.json (deployed_quick.json with --quick)
    r = sub.add_parser("report", help="print the tables of an evaluation's JSON")
    r.add_argument("--quick", action="store_true")
    _common.add_json(r)  # default: evaluate's
    args = p.parse_args(argv)
    {"measure": cmd_measure, "_time": cmd_time, "evaluate": cmd_evaluate, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
