"""Issue 15 evaluation: predict whole CNNs from their layers (carb.graph + carb.netmodel).

Subcommands (run from the repository root, ``. .venv/bin/activate``):

``measure``   measure the zoo (carb.families.zoo: 10 families of real CNN designs, plain torch) on this
              CPU, 1 thread, with the ordinary pipeline (``run_campaign``: a fresh worker per
              visit, 3 rounds spread over the whole campaign, the speed sentinel) into
              ``campaigns/zoo-cpu-1t.duckdb``; resumes.
``evaluate``  leave-one-family-out: per held-out family, the network model fitted on the
              other families (layer model from the measured ``layers`` campaign + network
              terms), calibrated with K = 10 whole-network measurements of the other
              families measured in the same run as the truth; MAPE, within +-10/20%,
              Spearman, 90% interval coverage, beside a FLOPs-only and a sum-of-layers-only
              baseline; memory too; the resnext/wideresnet pairs; the ResNets of cpu-1t.
              Writes ``benchmarks/results/bench_modules.json``.
``speed``     capture + predict of a ~100-layer network, and of 1,000 networks: network by
              network (``predict_module``) beside ``predict_modules`` in-process and in
              worker processes, in one run (ABBA).

The JSON subcommands write with ``--json PATH`` (``--out``), each adding its keys to the file.
Shipping the measured layers as a dataset and the network model fitted on them is
``scripts/ship.py dataset`` and ``scripts/ship.py netmodel``.

Every figure was measured on a 2-core machine shared with other sessions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import _common
from _common import drift_summary as _drift
from _common import measure_campaign, metrics

ROOT = _common.ROOT
CAMPAIGNS = ROOT / "campaigns"


def zoo_configs(per_family: int, seed: int):
    from carb.families import zoo

    return zoo.sample_configs(per_family=per_family, seed=seed)


def cmd_measure(args: argparse.Namespace) -> None:
    import pandas as pd

    from carb import families
    from carb.families import zoo

    if "zoo" not in families.names():
        families.register(zoo.ZOO)
    cfg_file = CAMPAIGNS / f"zoo-configs-{args.per_family}-s{args.seed}.parquet"
    if cfg_file.exists():
        configs = [
            zoo.ZooConfig.from_dict(r) for r in pd.read_parquet(cfg_file).drop(columns=["config_id"]).to_dict("records")
        ]
    else:
        configs = zoo_configs(args.per_family, args.seed)
        df = pd.DataFrame([c.to_dict() for c in configs])
        df.insert(0, "config_id", [c.config_id for c in configs])
        CAMPAIGNS.mkdir(exist_ok=True)
        df.to_parquet(cfg_file)
    print(f"{len(configs)} zoo networks -> {args.store}", flush=True)
    if args.layers_configs:
        # truth and layers in one campaign: the layer configs and the zoo networks shuffled
        # together, so both are measured in the same minutes (chunks keep a kill cheap)
        import random

        from carb.families.space import configs_from_frame

        lc = configs_from_frame(pd.read_parquet(args.layers_configs))
        configs = list(configs) + lc
        random.Random(args.seed).shuffle(configs)
        print(f"+ {len(lc)} layer configs ({args.layers_configs}), shuffled together", flush=True)
    measure_campaign(
        configs, args.store, rounds=args.rounds, chunk=args.chunk, max_time=args.max_time, allocator=args.allocator
    )


def loop_ms(f, warm_s: float = 0.3) -> float:
    """Median time of one call of ``f`` (ms) by an in-process loop (inference mode): warm-up,
    then 7 batches of about a quarter of what ran in ``warm_s``. Not the pipeline's protocol
    (a fresh worker per visit): the probes that use it label their figures so."""
    import numpy as np
    import torch

    with torch.inference_mode():
        for _ in range(3):
            f()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < warm_s:
            f()
            n += 1
        reps, ts = max(1, n // 4), []
        for _ in range(7):
            t1 = time.perf_counter()
            for _ in range(reps):
                f()
            ts.append((time.perf_counter() - t1) / reps)
    return 1000 * float(np.median(ts))


# --------------------------------------------------------------------------- data


def read_store(path: str | Path, family: str):
    """The ok rows of one family from a campaign store; a store that a running campaign
    holds is read from a copy (DuckDB allows one writer)."""
    import shutil
    import tempfile

    from carb.campaign.store import Store

    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix="carb-bench-"))
    shutil.copy(path, tmp / path.name)
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        shutil.copy(wal, tmp / wal.name)
    with Store(tmp / path.name) as st:
        df = st.measurements()
        speed = st.speed_readings()
        runs = st.runs()
        # the latency statistics only: the rest of a visit (its samples in `extra`) is not read
        rounds = st.con.execute(
            "SELECT COLUMNS('^(config_id|round|latency_ms.*)$') FROM rounds WHERE status = 'ok'"
        ).df()
    speed.attrs["rounds"] = rounds
    # the workers' allocator (carb.measure.cpu.ALLOCATORS; stores before it was recorded: default)
    provs = [json.loads(p) for p in runs["provenance"] if isinstance(p, str)] if len(runs) else []
    speed.attrs["allocator"] = sorted({p.get("allocator", "default") for p in provs}) or ["default"]
    shutil.rmtree(tmp, ignore_errors=True)
    df = df[(df["status"] == "ok") & (df["family"] == family)].reset_index(drop=True)
    return df, speed


def layer_data(path: str | Path | list, target: str = "latency_ms_p5", bridge: bool = False):
    """The measured layers of one campaign store, or of several (a list: their ok rows
    concatenated, a layer measured in two stores kept from the first).

    ``bridge``: each later store's ``target`` is scaled to the first store's speed by the
    median ratio over the layers both measured (campaigns at other times ran at other machine
    speeds); the ratios and counts are in ``speed.attrs["bridge"]``."""
    import numpy as np
    import pandas as pd

    from carb.families import layers as L

    paths = path if isinstance(path, list) else [path]
    parts = [read_store(p, "layers") for p in paths]
    scales = []
    if bridge and len(parts) > 1:
        first = parts[0][0].set_index("config_id")[target]
        for i, (d, _) in enumerate(parts[1:], 1):
            common = d[d["config_id"].isin(first.index)]
            if len(common) < 10:
                raise SystemExit(f"error: --bridge: {paths[i]} shares {len(common)} layers with {paths[0]}; need 10")
            ratio = float(np.median(first.loc[common["config_id"]].to_numpy() / common[target].to_numpy()))
            d = d.copy()
            d[target] = d[target] * ratio
            parts[i] = (d, parts[i][1])
            scales.append({"store": str(paths[i]), "common": int(len(common)), "scale_to_first": ratio})
            print(f"bridge: {paths[i]} x {ratio:.3f} ({len(common)} layers in common)", flush=True)
    df = pd.concat([d for d, _ in parts], ignore_index=True).drop_duplicates("config_id").reset_index(drop=True)
    speed = parts[0][1]
    speed.attrs["allocator"] = sorted({a for _, sp in parts for a in sp.attrs["allocator"]})
    speed.attrs["bridge"] = scales
    lf = L.layer_frame(df)
    # default: the 5th percentile of each layer's pooled samples, not the median: on the
    # shared machine the median of a long layer is inflated by other tenants' time slices
    # (median/p5 up to 12x), while the fast samples keep the layer's own cost
    return lf.reset_index(drop=True), df[target].to_numpy(float), df, speed


def zoo_data(path: str | Path):
    from carb import families
    from carb.families import zoo

    if "zoo" not in families.names():
        families.register(zoo.ZOO)
    df, speed = read_store(path, "zoo")
    configs = [zoo._from_row(r) for r in df.to_dict("records")]
    tables = [_capture_cached(c) for c in configs]
    return df, configs, tables, speed


def _capture_cached(c):
    """carb.graph.capture of a zoo config on the meta device, cached in the temp dir for
    reruns of this benchmark (the capture is deterministic)."""
    import pickle
    import tempfile

    from carb.families import zoo

    f = Path(tempfile.gettempdir()) / "carb-bench-modules-cache" / f"{c.config_id}.pkl"
    if f.exists():
        return pickle.loads(f.read_bytes())  # our own cache file, written just below
    t = zoo.capture(c)
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(pickle.dumps(t))
    return t


def _mean_metrics(ms: list[dict]) -> dict:
    keys = [k for k in ms[0] if k != "n"]
    out = {k: float(sum(m[k] for m in ms) / len(ms)) for k in keys}
    out["n"] = ms[0]["n"]
    return out


def _flops_fit(flops, y):
    import numpy as np

    X = np.column_stack([np.ones(len(y)), np.log(flops)])
    return np.linalg.lstsq(X, np.log(y), rcond=None)[0]


def cmd_evaluate(args: argparse.Namespace) -> None:
    import numpy as np
    import pandas as pd

    from carb import netmodel

    t0 = time.time()
    lf, ly, ldf, lspeed = layer_data(args.layers, args.layer_target, bridge=args.bridge)
    lmem = ldf["memory_mb"].to_numpy(float)  # for the layer model's oneDNN memory figure
    print(f"{len(lf)} measured layers ({time.time() - t0:.0f} s)", flush=True)
    # layer model: 5-fold CV for the record, then the model on all layers
    rng = np.random.default_rng(0)
    fold = rng.integers(0, 5, len(lf))
    cv = np.zeros(len(lf))
    for k in range(5):
        lm_k = netmodel.LayerModel.fit(
            lf[fold != k], ly[fold != k], trees=args.trees, features=args.layer_features, memory_mb=lmem[fold != k]
        )
        cv[fold == k] = lm_k.predict(lf[fold == k])
    keep = (lf["op"] != "se").to_numpy()
    cls = netmodel.op_class(lf)
    layer_cv = {"all": metrics(ly[keep], cv[keep])}
    for c in sorted(set(cls[keep])):
        m = keep & (cls == c)
        layer_cv[c] = metrics(ly[m], cv[m])
    lm = netmodel.LayerModel.fit(lf, ly, trees=args.trees, features=args.layer_features, memory_mb=lmem)
    # the SE composites against the sum of their primitives' predictions
    se = (lf["op"] == "se").to_numpy()
    se_check = None
    if se.any():
        from carb import graph
        from carb.families import layers as L

        sums = []
        for r in ldf[se].to_dict("records"):
            cfg = L.LayerConfig.from_dict({k: r[k] for k in L.PARAMETERS})
            sums.append(lm.predict(graph.capture(L.build(cfg), (1, 3, 1, 1)).layers).sum())
        se_check = metrics(ly[se], np.array(sums))
    print("layer model 5-fold CV:", json.dumps(layer_cv["all"]), flush=True)

    zdf, configs, tables, zspeed = zoo_data(args.zoo)
    print(f"{len(zdf)} measured networks ({time.time() - t0:.0f} s)", flush=True)
    rows = pd.DataFrame([netmodel.network_row(t, lm)[0] for t in tables])
    y = zdf[[args.target, "memory_mb"]].rename(columns={args.target: "latency_ms"}).reset_index(drop=True)
    arch = np.array([c.arch for c in configs])
    flops = rows["flops"].to_numpy()
    static_mb = (rows["model_bytes"] + rows["input_bytes"] + rows["peak_live_bytes"]).to_numpy() / 1e6
    results: dict = {"families": {}, "conditions": {}}
    per_net = []
    for fam in sorted(set(arch)):
        te, tr_all = arch == fam, arch != fam
        lat_runs: dict[str, list] = {"carb_k10": [], "carb_all": [], "flops_k10": [], "layers_only": []}
        mem_runs: dict[str, list] = {"carb_k10": [], "carb_all": [], "static": []}
        pred_k10 = np.zeros(te.sum())
        for seed in range(args.repeats):
            r = np.random.default_rng(100 + seed)
            k_idx = r.choice(np.flatnonzero(tr_all), size=min(args.k, tr_all.sum()), replace=False)
            nm = netmodel.fit_netmodel(lm, rows.iloc[k_idx], y.iloc[k_idx], groups=arch[k_idx], device="cpu-1t")
            p = nm.predict_rows(rows[te])
            pred_k10 += p["latency_ms"].to_numpy() / args.repeats
            lat_runs["carb_k10"].append(metrics(y.latency_ms[te], p.latency_ms, p.latency_ms_lo, p.latency_ms_hi))
            mem_runs["carb_k10"].append(metrics(y.memory_mb[te], p.memory_mb, p.memory_mb_lo, p.memory_mb_hi))
            c = _flops_fit(flops[k_idx], y.latency_ms.to_numpy()[k_idx])
            lat_runs["flops_k10"].append(metrics(y.latency_ms[te], np.exp(c[0] + c[1] * np.log(flops[te]))))
        nm_all = netmodel.fit_netmodel(lm, rows[tr_all], y[tr_all], groups=arch[tr_all], device="cpu-1t")
        p = nm_all.predict_rows(rows[te])
        lat_runs["carb_all"].append(metrics(y.latency_ms[te], p.latency_ms, p.latency_ms_lo, p.latency_ms_hi))
        mem_runs["carb_all"].append(metrics(y.memory_mb[te], p.memory_mb, p.memory_mb_lo, p.memory_mb_hi))
        lat_runs["layers_only"].append(metrics(y.latency_ms[te], rows["layer_sum_ms"][te]))
        mem_runs["static"].append(metrics(y.memory_mb[te], static_mb[te]))
        results["families"][fam] = {
            "latency": {k: _mean_metrics(v) for k, v in lat_runs.items()},
            "memory": {k: _mean_metrics(v) for k, v in mem_runs.items()},
        }
        for i, j in enumerate(np.flatnonzero(te)):
            per_net.append(
                {
                    "arch": fam,
                    "label": configs[j].label(),
                    "latency_ms": float(y.latency_ms[j]),
                    "pred_k10_ms": float(pred_k10[i]),
                    "pred_all_ms": float(p.latency_ms.iloc[i]),
                    "layer_sum_ms": float(rows.layer_sum_ms[j]),
                    "memory_mb": float(y.memory_mb[j]),
                    "pred_all_mb": float(p.memory_mb.iloc[i]),
                    "flops": float(flops[j]),
                    "nodes": int(rows.nodes[j]),
                }
            )
        fl = results["families"][fam]["latency"]["carb_k10"]
        fm = results["families"][fam]["memory"]["carb_k10"]
        print(
            f"{fam:13s} lat MAPE {fl['mape']:5.1f}% w10 {fl['within10']:5.1f}% rho {fl['spearman']:.3f} "
            f"cov {fl['coverage']:5.1f}% | mem MAPE {fm['mape']:5.1f}%",
            flush=True,
        )
    pn = pd.DataFrame(per_net)
    # pooled over all held-out networks (each predicted by the model that never saw its family)
    results["pooled"] = {
        "latency_k10": metrics(pn.latency_ms, pn.pred_k10_ms),
        "latency_all": metrics(pn.latency_ms, pn.pred_all_ms),
        "latency_layers_only": metrics(pn.latency_ms, pn.layer_sum_ms),
        "memory_all": metrics(pn.memory_mb, pn.pred_all_mb),
    }
    # grouped convolutions: resnext vs wideresnet of the same (width, depth, size, batch)
    pairs = []
    key = lambda c: (c.width, c.depth, c.input_size, c.batch)  # noqa: E731
    by = {(c.arch, key(c)): i for i, c in enumerate(configs)}
    for (a, kk), i in by.items():
        if a == "resnext" and ("wideresnet", kk) in by:
            j = by[("wideresnet", kk)]
            li, lj = pn.set_index("label").loc[configs[i].label()], pn.set_index("label").loc[configs[j].label()]
            pairs.append(
                {
                    "pair": configs[i].label(),
                    "measured_ratio": lj.latency_ms / li.latency_ms,
                    "predicted_ratio": lj.pred_k10_ms / li.pred_k10_ms,
                    "flops_ratio": lj.flops / li.flops,
                }
            )
    results["grouped_pairs"] = pairs
    # the truth's own noise: how well one round's figure (the statistic the networks' truth
    # is: median, fastest sample, ...) predicts another round's of the same network (3
    # visits minutes apart, same run): the floor for any predictor
    rd = zspeed.attrs.get("rounds")
    if rd is not None and len(rd) and args.target in rd.columns:
        rd = rd[rd["config_id"].isin(set(zdf["config_id"]))]  # a combined store holds the layers too
        w = rd.pivot_table(index="config_id", columns="round", values=args.target)
        w = w.dropna()
        if w.shape[1] >= 2:
            a, bb = w.iloc[:, 0].to_numpy(), w.iloc[:, 1].to_numpy()
            spread = (w.max(axis=1) / w.min(axis=1)).to_numpy()
            results["truth_noise"] = {
                "round0_vs_round1": metrics(bb, a),
                "round_max_over_min_median": float(np.median(spread)),
                "round_max_over_min_p90": float(np.quantile(spread, 0.9)),
            }
    results["layer_cv"] = layer_cv
    results["se_composite_check"] = se_check
    results["per_network"] = per_net
    results["conditions"] = {
        "layers": int(len(lf)),
        "networks": int(len(zdf)),
        "k": args.k,
        "repeats": args.repeats,
        "network_target": args.target,
        "layer_target": args.layer_target,
        "layer_speed": _drift(lspeed),
        "zoo_speed": _drift(zspeed),
        "allocator": {"layers": lspeed.attrs["allocator"], "zoo": zspeed.attrs["allocator"]},
        "layer_stores": [str(p) for p in args.layers],
        "bridge": lspeed.attrs.get("bridge", []),
        "zoo_measured": [str(zdf["measured_at"].min()), str(zdf["measured_at"].max())]
        if "measured_at" in zdf
        else None,
    }
    # keys other subcommands added to the same file (consistency, compare, speed) are kept
    out = _common.write_json(args.json, results, merge=True)
    print(json.dumps({k: results["pooled"][k] for k in results["pooled"]}, indent=1))
    print("pairs:", json.dumps(pairs, indent=0, default=float))
    print(f"written {out} ({time.time() - t0:.0f} s)")


def cmd_consistency(args: argparse.Namespace) -> None:
    """The ResNets of the shipped cpu-1t dataset through the layer path, beside the
    config-level CARB model, on the same held-out rows."""
    import numpy as np
    import pandas as pd

    from carb import datasets, graph, netmodel
    from carb.families import arch
    from carb.model import CARB

    t0 = time.time()
    shipped = netmodel.load(args.model) if args.model else None
    if shipped is not None:
        lm = shipped.layer  # the model's own layer model and network terms, calibrated on the K below
    else:
        lf, ly, ldf, _ = layer_data(args.layers, args.layer_target)
        lm = netmodel.LayerModel.fit(
            lf, ly, trees=args.trees, features=args.layer_features, memory_mb=ldf["memory_mb"].to_numpy(float)
        )
    if args.store:
        from carb.campaign.store import Store

        with Store(args.store, read_only=True) as st:
            df = datasets.from_store(st, args.dataset)
    else:
        df = datasets.load(args.dataset)
    df = df[df["status"] == "ok"].reset_index(drop=True)
    rng = np.random.default_rng(args.seed)
    test_idx = rng.choice(len(df), size=min(args.n, len(df)), replace=False)
    test = df.iloc[test_idx].reset_index(drop=True)
    rows = []
    import torch

    for r in test.to_dict("records"):
        from carb.families.space import configs_from_frame

        cfg = configs_from_frame(pd.DataFrame([r]))[0]
        with torch.device("meta"):
            m = arch.build(cfg)
        t = graph.capture(m, (cfg.batch, 3, cfg.input_size, cfg.input_size), cfg.precision)
        rows.append(netmodel.network_row(t, lm)[0])
    rows = pd.DataFrame(rows)
    y = test[["latency_ms", "memory_mb"]]
    print(f"{len(test)} {args.dataset} ResNets captured ({time.time() - t0:.0f} s)", flush=True)
    out: dict = {
        "n_test": int(len(test)),
        "dataset": args.dataset,
        "store": args.store,
        "model": args.model,
        "method": args.method,
        "layers": shipped.meta.get("layers") if shipped is not None else int(len(lf)),
    }
    # the layer path calibrated with K = 10 of these ResNets (repeated draws), scored on the rest
    ms, mm = [], []
    for seed in range(args.repeats):
        k = np.random.default_rng(200 + seed).choice(len(test), size=args.k, replace=False)
        rest = np.setdiff1d(np.arange(len(test)), k)
        if shipped is not None:
            # as carb calibrate maps the model: its network terms kept, mapped by --method on the K
            nm = netmodel.calibrate_rows(
                shipped, rows.iloc[k].reset_index(drop=True), y.iloc[k].reset_index(drop=True), args.method
            )
        else:
            nm = netmodel.fit_netmodel(lm, rows.iloc[k], y.iloc[k], device=args.dataset)
        p = nm.predict_rows(rows.iloc[rest])
        ms.append(metrics(y.latency_ms.iloc[rest], p.latency_ms, p.latency_ms_lo, p.latency_ms_hi))
        mm.append(metrics(y.memory_mb.iloc[rest], p.memory_mb, p.memory_mb_lo, p.memory_mb_hi))
    out["layer_path_k10"] = {"latency": _mean_metrics(ms), "memory": _mean_metrics(mm)}
    # the config-level CARB model, trained on every other cpu-1t row (not these), 'fast' preset
    train = df.drop(index=test_idx).reset_index(drop=True)
    carb_m = CARB(preset=args.preset).fit(train)
    p = carb_m.predict(test[[c for c in test.columns if c not in ("latency_ms", "memory_mb", "energy_j")]])
    out["config_model"] = {
        "preset": args.preset,
        "train_rows": int(len(train)),
        "latency": metrics(y.latency_ms, p.latency_ms, p.latency_ms_lo, p.latency_ms_hi),
        "memory": metrics(y.memory_mb, p.memory_mb, p.memory_mb_lo, p.memory_mb_hi),
    }
    print(json.dumps(out, indent=1), flush=True)
    key = "consistency_cpu1t" if args.dataset == "cpu-1t" and not args.model else f"consistency_{args.dataset}"
    res = _common.write_json(args.json, {key + ("_" + Path(args.store).stem if args.store else ""): out}, merge=True)
    print(f"written {res} ({time.time() - t0:.0f} s)")


def cmd_speed(args: argparse.Namespace) -> None:
    """Capture + predict time of one ~100-layer network, and of many networks."""
    import numpy as np

    from carb import netmodel
    from carb.families import zoo

    nm = netmodel.load(args.model)
    cfg = zoo.ZooConfig("resnext", 0.5, 26, 0, 224, 1)  # 135 layers as captured
    m = zoo.build(cfg)
    netmodel.predict_module(m, (1, 3, 224, 224), nm)  # warm (imports)
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        p = netmodel.predict_module(m, (1, 3, 224, 224), nm)
        ts.append(time.perf_counter() - t)
    print(f"one network ({len(p.layers)} layers): median {np.median(ts):.3f} s, min {min(ts):.3f} s", flush=True)
    cfgs = []
    rng = np.random.default_rng(0)
    archs = list(zoo.ARCHS)
    while len(cfgs) < args.n:
        a = archs[len(cfgs) % len(archs)]
        g = zoo.GRIDS[a]
        cfgs.append(
            zoo.ZooConfig(
                a,
                float(rng.choice(g["width"])),
                float(rng.choice(g["depth"])),
                int(rng.choice(g["kernel"])),
                int(rng.choice(zoo.SIZES)),
                1,
            )
        )
    if args.before:
        _speed_side_by_side(args, cfgs, nm)
        return
    _speed_many(args, cfgs, nm)


def _speed_many(args: argparse.Namespace, cfgs: list, nm) -> None:
    """1,000 networks (build on meta + capture + predict) three ways, in one run, ABBA over
    the two halves (each way sees the same drift): ``loop`` = ``predict_module`` network by
    network; ``batch`` = ``predict_modules(workers=1)`` (in-process capture, one batched
    prediction); ``workers N`` = ``predict_modules(workers=N)`` (N loky capture processes;
    their start-up is counted in the first call, which starts them)."""
    import functools
    import os

    import numpy as np

    from carb import netmodel
    from carb.families import zoo

    shapes = [(c.batch, 3, c.input_size, c.input_size) for c in cfgs]
    half = len(cfgs) // 2
    parts = [(cfgs[:half], shapes[:half]), (cfgs[half:], shapes[half:])]
    ways: dict[str, Any] = {}

    def loop(cs, ss):
        return [netmodel.predict_module(zoo._meta_build(c), s, nm) for c, s in zip(cs, ss)]

    ways["loop"] = loop
    for w in [int(x) for x in str(args.workers).split(",")]:
        ways["batch" if w == 1 else f"workers {w}"] = lambda cs, ss, w=w: netmodel.predict_modules(
            [functools.partial(zoo._meta_build, c) for c in cs], ss, nm, workers=w
        )
    names = list(ways)
    ts = {k: 0.0 for k in names}
    lat: dict[str, list[float]] = {k: [] for k in names}
    layers = 0
    for k, (cs, ss) in enumerate(parts):
        for name in names if k % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            ps = ways[name](cs, ss)
            ts[name] += time.perf_counter() - t
            lat[name] += [p.latency_ms for p in ps]
            if name == "loop":
                layers += sum(len(p.layers) for p in ps)
    for name in names[1:]:
        if not np.allclose(lat[name], lat["loop"], rtol=1e-9):
            raise SystemExit(f"{name}: predictions differ from predict_module's")
    n = len(cfgs)
    cpus = len(os.sched_getaffinity(0))
    print(
        f"{n} networks (build on meta + capture + predict; {layers / n:.0f} layers on average; ABBA over two halves; "
        f"{cpus} usable CPUs; predictions equal):",
        flush=True,
    )
    for name in names:
        print(
            f"  {name:10s} {ts[name]:6.1f} s  {1000 * ts[name] / n:6.1f} ms/network  "
            f"{ts['loop'] / ts[name]:.2f}x the loop",
            flush=True,
        )
    out = {
        "n": n,
        "layers_mean": layers / n,
        "usable_cpus": cpus,
        "seconds": ts,
        "speedup_vs_loop": {k: ts["loop"] / v for k, v in ts.items()},
    }
    _common.write_json(args.json, {"speed_many": out}, merge=True)


def _speed_side_by_side(args: argparse.Namespace, cfgs: list, nm) -> None:
    """The same networks through carb.graph as of git revision ``args.before`` (its
    capture; the build on meta as it was: with weight initialisation) and through the
    current code, alternating network by network in one run (same machine load), each
    table checked equal (layers, FLOP, peak live bytes)."""
    import subprocess
    import types

    import numpy as np
    import torch

    from carb import graph, netmodel
    from carb.families import zoo

    src = subprocess.run(
        ["git", "show", f"{args.before}:carb/graph.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    old = types.ModuleType("carb_graph_before")
    sys.modules[old.__name__] = old  # dataclasses look their module up
    exec(compile(src, f"carb/graph.py@{args.before}", "exec"), old.__dict__)  # our own file at that revision

    def before(c):
        with torch.device("meta"):
            m = zoo.build(c)
        return old.capture(m, (c.batch, 3, c.input_size, c.input_size), c.precision)

    def after(c):
        return graph.capture(zoo._meta_build(c), (c.batch, 3, c.input_size, c.input_size), c.precision)

    ts: dict[str, list[float]] = {"before": [], "after": []}
    layers = 0
    for i, c in enumerate(cfgs):
        tabs = {}
        for name, f in (("before", before), ("after", after)) if i % 2 == 0 else (("after", after), ("before", before)):
            t = time.perf_counter()
            tab = f(c)
            netmodel.predict_table(tab, nm)
            ts[name].append(time.perf_counter() - t)
            tabs[name] = tab
        a, b = tabs["after"], tabs["before"]
        if len(a.layers) != len(b.layers) or a.flops != b.flops or a.peak_live_bytes != b.peak_live_bytes:
            raise SystemExit(
                f"tables differ for {c.label()}: {len(a.layers)}/{len(b.layers)} layers, "
                f"{a.flops}/{b.flops} FLOP, {a.peak_live_bytes}/{b.peak_live_bytes} B"
            )
        layers += len(a.layers)
    tb, ta = float(np.sum(ts["before"])), float(np.sum(ts["after"]))
    print(
        f"{len(cfgs)} networks ({layers / len(cfgs):.0f} layers on average), build on meta + capture + predict, "
        f"alternating: before ({args.before}) {tb:.1f} s ({1000 * tb / len(cfgs):.1f} ms/network), "
        f"now {ta:.1f} s ({1000 * ta / len(cfgs):.1f} ms/network): {tb / ta:.2f}x faster; tables equal",
        flush=True,
    )
    out = {
        "n": len(cfgs),
        "before_rev": args.before,
        "before_s": tb,
        "after_s": ta,
        "speedup": tb / ta,
        "layers_mean": layers / len(cfgs),
        "before_ms_median": 1000 * float(np.median(ts["before"])),
        "after_ms_median": 1000 * float(np.median(ts["after"])),
    }
    _common.write_json(args.json, {"speed_side_by_side": out}, merge=True)


#: how a captured layer's operator maps onto the ``layers`` family (ops sampled from real networks)
_ZOO_LAYER_OPS = (
    "conv",
    "bn",
    "relu",
    "relu6",
    "hardswish",
    "hardsigmoid",
    "sigmoid",
    "silu",
    "add",
    "mul",
    "maxpool",
    "avgpool",
    "gap",
    "linear",
)


def zoo_layer_configs(tables) -> list:
    """The distinct layers of captured networks as ``layers`` configs (the operators of
    :data:`_ZOO_LAYER_OPS` whose shape the family can build: square maps, ``kernel // 2``
    padding, no dilation); the others are skipped."""
    from carb.families import layers as L

    out: dict = {}
    for t in tables:
        for r in t.layers.to_dict("records"):
            if r["op"] not in _ZOO_LAYER_OPS or r["h"] != r["w"]:
                continue
            if r["op"] == "conv" and (
                r["padding"] != r["kernel"] // 2 or r["dilation"] != 1 or r["kernel"] != r["kernel_w"]
            ):
                continue
            if r["op"] in ("maxpool", "avgpool") and r["padding"] != (r["kernel"] - 1) // 2:
                continue
            c = L.LayerConfig(
                r["op"],
                int(r["cin"]),
                int(r["cout"]),
                int(r["h"]),
                int(r["kernel"]),
                int(r["stride"]),
                int(r["groups"]),
                int(r["batch"]),
            )
            out.setdefault(c.config_id, c)
    return list(out.values())


def cmd_zoo_layers(args: argparse.Namespace) -> None:
    """Layers to measure, drawn from the zoo's own networks (real shapes), most of them at the
    feature-map sizes the measured layers lack, plus bridge layers already measured (to scale
    one campaign to the other)."""
    import numpy as np
    import pandas as pd

    from carb.families import layers as L
    from carb.families import zoo

    have = pd.read_parquet(args.have)
    have_ids = set(have["config_id"])
    tables = [zoo.capture(c) for s in args.seeds for c in zoo.sample_configs(per_family=args.per_family, seed=s)]
    pool = [c for c in zoo_layer_configs(tables) if c.config_id not in have_ids]
    seen = {(g, int(s)) for g, s in zip((L.op_group(c) for c in L_configs(have)), have["input_size"])}
    unseen = [c for c in pool if (L.op_group(c), c.input_size) not in seen]
    n_new = int(round(args.n * args.unseen_share))
    first = L.balanced_sample(unseen, n=n_new, seed=args.seed)
    ids = {c.config_id for c in first}
    rest = L.balanced_sample([c for c in pool if c.config_id not in ids], n=args.n - len(first), seed=args.seed)
    rng = np.random.default_rng(args.seed)
    bridge = have.iloc[rng.choice(len(have), size=min(args.bridge, len(have)), replace=False)]
    configs = first + rest
    df = pd.DataFrame(
        [{"config_id": c.config_id, "family": "layers", **{p: getattr(c, p) for p in L.PARAMETERS}} for c in configs]
    )
    df["role"] = "new"
    b = bridge[["config_id", "family", *L.PARAMETERS]].copy()
    b["role"] = "bridge"
    out = pd.concat([df, b], ignore_index=True).sample(frac=1, random_state=args.seed).reset_index(drop=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    out.drop(columns=["role"]).to_parquet(args.out)
    out[["config_id", "role"]].to_csv(Path(args.out).with_suffix(".roles.csv"), index=False)
    groups = pd.Series([L.op_group(c) for c in configs]).value_counts()
    print(
        f"{len(pool)} distinct unmeasured layers in {len(tables)} zoo networks (seeds {args.seeds}), "
        f"{len(unseen)} at a map size their group lacks; chose {len(first)} of those + {len(rest)} others + "
        f"{len(b)} bridge -> {args.out}"
    )
    print(groups.to_string())
    print(pd.Series([c.input_size for c in configs]).value_counts().sort_index().to_string())


def cmd_narrow_layers(args: argparse.Namespace) -> None:
    """Layers of narrow CNNs to measure: dense and depthwise convolutions of 3-48 channels on
    4-64 px maps at batch 1-32 (width-0.25..0.5 ResNets and MobileNets live there, and the
    first campaigns hold few such layers), plus bridge convolutions already measured."""
    import numpy as np
    import pandas as pd

    from carb.families import layers as L

    rng = np.random.default_rng(args.seed)
    chans = [3, 4, 6, 8, 12, 16, 24, 32, 48]
    seen, cfgs = set(), []
    while len(cfgs) < args.n:
        dw = rng.random() < 0.15
        cin = int(rng.choice(chans[1:] if dw else chans))
        # outputs within 4x of the input, as blocks widen and narrow
        cout = cin if dw else int(rng.choice([c for c in chans[1:] if c <= 4 * cin and 4 * c >= cin] or [cin]))
        k = int(rng.choice([1, 3, 3, 5, 7] if not dw else [3, 3, 5]))
        st = int(rng.choice([1, 1, 1, 2]))
        hw = int(rng.choice([4, 8, 12, 16, 24, 32, 48, 64]))
        b = int(rng.choice([1, 2, 4, 8, 16, 32]))
        if k > hw:
            continue
        c = L.LayerConfig(
            op="conv", cin=cin, cout=cout, input_size=hw, kernel=k, stride=st, groups=cin if dw else 1, batch=b
        )
        if c.config_id not in seen:
            seen.add(c.config_id)
            cfgs.append(c)
    old, _ = read_store(args.bridge_from, "layers")
    old = old[(old["op"] == "conv") & old["latency_ms_min"].between(0.05, 20)]
    bridge = old.sample(args.bridge, random_state=1)
    cols = ["config_id", "family", *L.PARAMETERS]
    df = (
        pd.concat(
            [pd.DataFrame([c.to_dict() | {"config_id": c.config_id} for c in cfgs]), bridge[cols]], ignore_index=True
        )
        .sample(frac=1, random_state=2)
        .reset_index(drop=True)[cols]
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(args.out)
    print(f"{len(cfgs)} narrow convolutions + {len(bridge)} bridge layers of {args.bridge_from} -> {args.out}")


def L_configs(df):
    """``layers`` configs of a frame of layer rows."""
    from carb.families import layers as L
    from carb.families.space import configs_from_frame

    return configs_from_frame(df[["config_id", "family", *L.PARAMETERS]])


def cmd_compare(args: argparse.Namespace) -> None:
    """Two measurements of the same zoo networks (two runs): how much the machine drifted,
    and how well one run predicts the other (the floor for any model scored on one run)."""
    import numpy as np

    a, _ = read_store(args.a, "zoo")
    b, _ = read_store(args.b, "zoo")
    j = a.merge(b, on="config_id", suffixes=("_a", "_b"))
    ya, yb = j[f"{args.target}_a"], j[f"{args.target}_b"]
    out = {
        "networks": int(len(j)),
        "target": args.target,
        "latency_ratio_b_over_a": {
            "median": float(np.median(yb / ya)),
            "p10": float(np.quantile(yb / ya, 0.1)),
            "p90": float(np.quantile(yb / ya, 0.9)),
        },
        "latency_b_predicted_by_a": metrics(yb, ya),
        "memory_b_predicted_by_a": metrics(j.memory_mb_b, j.memory_mb_a),
        "measured": {
            "a": [str(a.measured_at.min()), str(a.measured_at.max())],
            "b": [str(b.measured_at.min()), str(b.measured_at.max())],
        },
    }
    print(json.dumps(out, indent=1))
    key = "zoo_runs_compared" + ("" if args.target == "latency_ms" else f"_{args.target}")
    _common.write_json(args.json, {key: out}, merge=True)


def cmd_report(args: argparse.Namespace) -> None:
    """Markdown tables of a results JSON."""
    d = json.loads(Path(args.json).read_text())
    f = lambda m, cov=True: (
        f"{m['mape']:.1f}% | {m['within10']:.0f}% | {m['within20']:.0f}% | "  # noqa: E731
        f"{m['spearman']:.3f}" + (f" | {m['coverage']:.0f}%" if cov and "coverage" in m else "")
    )
    if "families" in d:
        print(
            "| held-out family | n | CARB K=10 MAPE | ±10% | ±20% | Spearman | 90% cov. | CARB, all 9 other "
            "families: MAPE | FLOPs-only K=10: MAPE / Spearman | sum of layers only: MAPE / Spearman | "
            "memory CARB K=10: MAPE / 90% cov. | memory, static liveness only: MAPE |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for fam, v in d["families"].items():
            la, me = v["latency"], v["memory"]
            print(
                f"| {fam} | {la['carb_k10']['n']} | {f(la['carb_k10'])} | {la['carb_all']['mape']:.1f}% | "
                f"{la['flops_k10']['mape']:.1f}% / {la['flops_k10']['spearman']:.3f} | "
                f"{la['layers_only']['mape']:.1f}% / {la['layers_only']['spearman']:.3f} | "
                f"{me['carb_k10']['mape']:.1f}% / {me['carb_k10'].get('coverage', float('nan')):.0f}% | "
                f"{me['static']['mape']:.1f}% |"
            )
        print()
        print("| pooled over every held-out prediction | MAPE | ±10% | ±20% | Spearman |")
        print("|---|---|---|---|---|")
        for k, m in d["pooled"].items():
            print(f"| {k} | {f(m, False)} |")
        if "truth_noise" in d:
            t = d["truth_noise"]
            print(
                f"| truth noise: round 1 predicted by round 0 of the same network | {f(t['round0_vs_round1'], False)} |"
            )
        print()
        pairs = d.get("grouped_pairs", [])
        if pairs:
            print(
                "| resnext config (its wideresnet twin: same widths, depth, size, batch) | measured wide/resnext | "
                "predicted (K=10, held out) | FLOPs ratio |"
            )
            print("|---|---|---|---|")
            for p_ in pairs:
                print(
                    f"| {p_['pair']} | {p_['measured_ratio']:.2f} | {p_['predicted_ratio']:.2f} | "
                    f"{p_['flops_ratio']:.2f} |"
                )
            print()
        print("layer model 5-fold CV:", json.dumps(d["layer_cv"]["all"]))
        print("SE composites vs sum of their primitives:", json.dumps(d.get("se_composite_check")))
        print("conditions:", json.dumps(d["conditions"]))
    if "consistency_cpu1t" in d:
        c = d["consistency_cpu1t"]
        print(
            "| cpu-1t ResNets | latency MAPE | ±10% | ±20% | Spearman | 90% cov. | memory MAPE | ±10% | ±20% | "
            "Spearman | 90% cov. |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        print(
            f"| layer path, K=10 of these ResNets ({c['layer_path_k10']['latency']['n']} scored) | "
            f"{f(c['layer_path_k10']['latency'])} | {f(c['layer_path_k10']['memory'])} |"
        )
        print(
            f"| config-level CARB ({c['config_model']['preset']}, {c['config_model']['train_rows']} other rows) | "
            f"{f(c['config_model']['latency'])} | {f(c['config_model']['memory'])} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the zoo on this CPU (1 thread)")
    m.add_argument("--store", default=str(CAMPAIGNS / "zoo-cpu-1t.duckdb"))
    m.add_argument("--per-family", type=int, default=10)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--max-time", type=float, default=3.0)
    m.add_argument(
        "--chunk", type=int, default=None, help="configs visited round-robin together (default: all of them)"
    )
    m.add_argument(
        "--allocator",
        default="default",
        choices=["default", "retain"],
        help="the workers' C allocator (carb.measure.cpu.ALLOCATORS)",
    )
    m.add_argument(
        "--layers-configs", default=None, help="also measure these layer configs (parquet), shuffled in with the zoo"
    )
    m.set_defaults(func=cmd_measure)
    e = sub.add_parser("evaluate", help="leave-one-family-out evaluation on the measured zoo")
    e.add_argument(
        "--layers",
        nargs="+",
        default=[str(CAMPAIGNS / "layers-cpu-1t.duckdb")],
        help="campaign store(s) of the measured layers (several: pooled)",
    )
    e.add_argument("--zoo", default=str(CAMPAIGNS / "zoo-cpu-1t.duckdb"))
    e.add_argument("--k", type=int, default=10)
    e.add_argument("--repeats", type=int, default=5, help="K draws per held-out family (metrics averaged)")
    e.add_argument("--trees", type=int, default=200)
    e.add_argument(
        "--layer-features",
        type=int,
        default=None,
        help="feature version of the layer model (default: carb.netmodel.FEATURES_VERSION)",
    )
    e.add_argument(
        "--target",
        default="latency_ms",
        help="the networks' latency column: latency_ms (median), latency_ms_min (fastest sample), latency_ms_p5, latency_ms_norm",
    )
    e.add_argument(
        "--layer-target",
        default="latency_ms_p5",
        help="the layers' latency column the layer model learns: latency_ms_p5 or latency_ms (median)",
    )
    e.add_argument(
        "--bridge",
        action="store_true",
        help="scale each later layer store to the first by the median ratio of the layers both measured",
    )
    _common.add_json(e, str(_common.RESULTS / "bench_modules.json"), aliases=("--out",))
    e.set_defaults(func=cmd_evaluate)
    c = sub.add_parser("consistency", help="cpu-1t ResNets: layer path vs config-level model")
    c.add_argument("--layers", nargs="+", default=[str(CAMPAIGNS / "layers-cpu-1t.duckdb")])
    c.add_argument(
        "--dataset",
        default="cpu-1t",
        help="shipped ResNet dataset whose configs are predicted (with --store: the store's platform)",
    )
    c.add_argument("--store", default=None, help="a campaign store of ResNet configs instead of a shipped dataset")
    c.add_argument(
        "--model",
        default=None,
        help="a network model (shipped name or directory): its terms calibrated on the K by --method, "
        "instead of a layer model fitted on --layers with network terms fitted on the K",
    )
    c.add_argument("--method", default="factor", choices=("factor", "log", "refit"))
    c.add_argument("--n", type=int, default=300)
    c.add_argument("--k", type=int, default=10)
    c.add_argument("--repeats", type=int, default=5)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--trees", type=int, default=200)
    c.add_argument(
        "--layer-features",
        type=int,
        default=None,
        help="feature version of the layer model (default: carb.netmodel.FEATURES_VERSION)",
    )
    c.add_argument("--preset", default="fast")
    c.add_argument("--layer-target", default="latency_ms_p5")
    _common.add_json(c, str(_common.RESULTS / "bench_modules.json"), aliases=("--out",))
    c.set_defaults(func=cmd_consistency)
    nl = sub.add_parser("narrow-layers", help="layers of narrow CNNs to measure (3-48 channels, 4-64 px)")
    nl.add_argument("--n", type=int, default=170)
    nl.add_argument("--bridge", type=int, default=20)
    nl.add_argument(
        "--bridge-from",
        default=str(CAMPAIGNS / "retain-avx2-1t.duckdb"),
        help="campaign store whose measured convolutions are measured again as bridges",
    )
    nl.add_argument("--seed", type=int, default=20261205)
    nl.add_argument("--out", default=str(CAMPAIGNS / "layers-narrow.parquet"))
    nl.set_defaults(func=cmd_narrow_layers)
    zl = sub.add_parser("zoo-layers", help="layers to measure, drawn from the zoo's own networks")
    zl.add_argument(
        "--have",
        default=str(ROOT / "carb" / "data" / "layers-cpu-avx2-1t.parquet"),
        help="the layers measured already (a dataset parquet)",
    )
    zl.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[11, 12, 13],
        help="zoo draws whose layers are sampled (not 0: the evaluation's networks)",
    )
    zl.add_argument("--per-family", type=int, default=10)
    zl.add_argument("--n", type=int, default=480)
    zl.add_argument("--unseen-share", type=float, default=0.7)
    zl.add_argument("--bridge", type=int, default=60)
    zl.add_argument("--seed", type=int, default=0)
    zl.add_argument("--out", default=str(CAMPAIGNS / "layers-zoo-shapes.parquet"))
    zl.set_defaults(func=cmd_zoo_layers)

    cp = sub.add_parser("compare", help="two runs of the zoo: drift and run-to-run agreement")
    cp.add_argument("a")
    cp.add_argument("b")
    cp.add_argument("--target", default="latency_ms", help="the latency column compared (e.g. latency_ms_min)")
    _common.add_json(cp, str(_common.RESULTS / "bench_modules.json"), aliases=("--out",))
    cp.set_defaults(func=cmd_compare)
    rp = sub.add_parser("report", help="markdown tables of a results JSON")
    rp.add_argument("json")
    rp.set_defaults(func=cmd_report)
    sp = sub.add_parser("speed", help="capture + predict time")
    sp.add_argument("--model", required=True)
    sp.add_argument("--n", type=int, default=1000)
    sp.add_argument(
        "--before", default=None, help="git revision: also time carb/graph.py as of it, network by network alternating"
    )
    _common.add_json(sp, str(_common.RESULTS / "bench_modules_quiet.json"), aliases=("--out",))
    sp.add_argument(
        "--workers",
        default="1,2",
        help="predict_modules worker counts to time beside the per-network loop (1 = in-process)",
    )
    sp.set_defaults(func=cmd_speed)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
