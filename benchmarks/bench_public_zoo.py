"""Issue 15, judged as users will judge it: public model-zoo CNNs that the network model
never saw (torchvision's classification networks), measured on this CPU in the **same
campaign** as the K whole networks that calibrate the model.

Needs torchvision, which CARB itself never requires; on our machines it imports beside
torch 2.14.1 in a venv of its own (see ``../.library/env``)::

    python3.11 -m venv /tmp/tvenv && /tmp/tvenv/bin/pip install torch==2.14.1 torchvision==0.29.1
    /tmp/tvenv/bin/pip install -e .

Subcommands (repository root):

``measure``   one campaign (``run_campaign``: a fresh worker per visit, rounds spread over
              the whole campaign, the speed sentinel) of the K calibration networks that
              ``carb calibrate`` chooses for the shipped network model (``carb.families.zoo``, spread
              over its predicted latency) and of the torchvision networks, shuffled
              together, 1 thread, into ``campaigns/public-zoo-cpu-1t.duckdb``; resumes.
``evaluate``  the torchvision networks predicted by the shipped model as it is, after
              ``carb calibrate``'s two methods on the K (``log`` map, ``refit`` of the
              network terms), beside a FLOPs-only fit on the same K and the plain sum of the
              layers; per network and pooled: MAPE, within +-10/20%, Spearman, 90% interval
              coverage; memory; the resnext50/wide_resnet50 pair; how far the machine
              drifted (sentinel) and the truth's own round-to-round noise.
``report``    markdown tables of the results JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import _common
from _common import AT_224, AT_B4, OTHER_SIZES, measure_campaign, metrics
from _common import drift_summary as _drift

ROOT = _common.ROOT

MODEL = "layers-cpu-avx2-1t"  # carb predict's default; --model for another (a shipped name or a directory)
STORE = ROOT / "campaigns" / "public-zoo-cpu-1t.duckdb"


def public_configs() -> list:
    from carb.families.nets import NetConfig

    tv = "torchvision.models:"
    out = [NetConfig(tv + n, 224, 1) for n in AT_224]
    out += [NetConfig(tv + n, s, 1) for n, s in OTHER_SIZES]
    out += [NetConfig(tv + n, 160, 4) for n in AT_B4]
    return out


def cmd_measure(args: argparse.Namespace) -> None:
    import random

    import pandas as pd

    from carb import netmodel

    nm = netmodel.load(args.model)
    # what `carb calibrate --samples K` measures, for each largest-network cap asked for
    cal_sets = {g: netmodel.choose_networks(nm, args.k, seed=args.seed, max_gflops=g) for g in args.cal_gflops}
    pub = public_configs()[: args.limit]
    roles: dict = {c: "public" for c in pub}
    for g, cs in cal_sets.items():
        for c in cs:
            roles[c] = f"{roles[c]};" if c in roles else ""
            roles[c] += f"calibration-{g:g}"
    if args.pool:
        # every candidate `carb calibrate` chooses from (its default cap), so that any way of
        # choosing K of them can be scored afterwards on the same measurements
        from carb.families import zoo

        for c in zoo.sample_configs(per_family=4, seed=args.seed, max_gflops=netmodel.CALIBRATION_MAX_GFLOPS):
            roles[c] = f"{roles[c]};pool" if roles.get(c) else "pool"
    configs = list(roles)
    random.Random(args.seed).shuffle(configs)
    Path(args.store).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"config_id": c.config_id, "role": roles[c], "label": c.label()} for c in configs]).to_csv(
        Path(args.store).with_suffix(".roles.csv"), index=False
    )
    print(
        f"{len(configs) - len(pub)} calibration networks ({', '.join(f'{len(v)} up to {g:g} GFLOP' for g, v in cal_sets.items())}) "
        f"+ {len(pub)} torchvision networks -> {args.store}",
        flush=True,
    )
    # with the allocator the model's own data were measured with, as `carb calibrate` does
    measure_campaign(
        configs,
        args.store,
        rounds=args.rounds,
        chunk=len(configs),
        max_time=args.max_time,
        allocator=netmodel.allocator_of(nm),
    )


def _read(path: str | Path):
    import shutil
    import tempfile

    from carb.campaign.store import Store

    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix="carb-bench-"))
    shutil.copy(path, tmp / path.name)
    with Store(tmp / path.name) as st:
        df = st.measurements()
        speed = st.speed_readings()
        rounds = st.con.execute("SELECT config_id, round, latency_ms FROM rounds WHERE status = 'ok'").df()
    shutil.rmtree(tmp, ignore_errors=True)
    return df, speed, rounds


def cmd_evaluate(args: argparse.Namespace) -> None:
    import numpy as np
    import pandas as pd

    from carb import families, netmodel
    from carb.campaign import speed as drift

    df, speed, rounds = _read(args.store)
    roles = pd.read_csv(Path(args.store).with_suffix(".roles.csv")).set_index("config_id")
    df = df[df["status"] == "ok"].reset_index(drop=True)
    df["role"] = roles.loc[df["config_id"], "role"].to_numpy()
    # networks only (a probe's store may hold single layers too)
    df = df[df["role"].str.contains("public|calibration|pool")].reset_index(drop=True)
    configs = [families.config_from_row(r) for r in df.to_dict("records")]
    t0 = time.time()
    tables = [netmodel.capture_config(c) for c in configs]
    print(f"{len(df)} networks measured ok, captured in {time.time() - t0:.1f} s", flush=True)
    nm = netmodel.load(args.model)
    tokens = df["role"].str.split(";")
    pub = tokens.apply(lambda t: "public" in t).to_numpy()
    sets = sorted({t for ts in tokens for t in ts if t.startswith("calibration")})
    pub_tables = [t for t, p in zip(tables, pub) if p]
    y = df[pub].reset_index(drop=True)
    rows_pub = netmodel._network_rows(pub_tables, nm.layer)[0]
    flops = rows_pub["flops"].to_numpy()
    out: dict = {"pooled": {}, "per_network": [], "calibration_sets": {}, "conditions": {}}
    preds: dict = {"shipped": nm.predict_rows(rows_pub)}
    for cs in sets:
        cal = tokens.apply(lambda t: cs in t).to_numpy()
        fit_rows, ref = drift.at_median_speed(df[cal].reset_index(drop=True))  # as `carb calibrate` does
        cal_tables = [t for t, c in zip(tables, cal) if c]
        cal_rows = netmodel._network_rows(cal_tables, nm.layer)[0]
        X = np.column_stack([np.ones(cal.sum()), np.log(cal_rows["flops"].to_numpy())])
        c = np.linalg.lstsq(X, np.log(fit_rows["latency_ms"].to_numpy()), rcond=None)[0]
        preds[f"flops {cs}"] = pd.DataFrame({"latency_ms": np.exp(c[0] + c[1] * np.log(flops))})
        fitted = {}
        for method in netmodel.CALIBRATION_METHODS:
            m = netmodel.calibrate_on(nm, cal_tables, fit_rows, method)
            fitted[method] = m
            preds[f"{method} {cs}"] = m.predict_rows(netmodel._network_rows(pub_tables, m.layer)[0])
        out["calibration_sets"][cs] = {
            "networks": [cf.label() for cf, k in zip(configs, cal) if k],
            "gflops": [float(v) / 1e9 for v in cal_rows["flops"]],
            "at_median_sentinel": ref is not None,
            "factor_map": fitted["factor"].calibration,
            "log_map": fitted["log"].calibration,
            "refit_lat_coef": fitted["refit"].lat_coef,
        }
    names = {"shipped": "shipped, uncalibrated"}
    for cs in sets:
        names.update(
            {
                f"factor {cs}": f"carb calibrate --method factor, K = {cs}",
                f"log {cs}": f"carb calibrate --method log, K = {cs}",
                f"refit {cs}": f"carb calibrate --method refit, K = {cs}",
                f"flops {cs}": f"FLOPs-only, fitted on K = {cs}",
            }
        )
    for key, label in names.items():
        p = preds[key]
        lat = (
            metrics(y.latency_ms, p.latency_ms, p.latency_ms_lo, p.latency_ms_hi)
            if "latency_ms_lo" in p
            else metrics(y.latency_ms, p.latency_ms)
        )
        out["pooled"][label] = {"latency": lat}
        if "memory_mb" in p:
            out["pooled"][label]["memory"] = metrics(y.memory_mb, p.memory_mb, p.memory_mb_lo, p.memory_mb_hi)
    out["pooled"]["sum of layers only (shipped layer model)"] = {
        "latency": metrics(y.latency_ms, rows_pub["layer_sum_ms"])
    }
    main_key = f"{args.method} {args.cal_set or sets[0]}"
    for i, (cfg, r) in enumerate(zip([c for c, p in zip(configs, pub) if p], y.to_dict("records"))):
        out["per_network"].append(
            {
                "network": cfg.label(),
                "flops": float(flops[i]),
                "layers": int(rows_pub["nodes"].iloc[i]),
                "layers_known": float(rows_pub["layers_known_share"].iloc[i]),
                "latency_ms": float(r["latency_ms"]),
                "memory_mb": float(r["memory_mb"]),
                **{f"pred {k}": float(v["latency_ms"].iloc[i]) for k, v in preds.items()},
                "main": main_key,
                "lo": float(preds[main_key]["latency_ms_lo"].iloc[i]),
                "hi": float(preds[main_key]["latency_ms_hi"].iloc[i]),
                "pred_memory_mb": float(preds[main_key]["memory_mb"].iloc[i]),
            }
        )
    pn = pd.DataFrame(out["per_network"]).set_index("network")
    out["grouped_pairs"] = []
    for size in ("i224-b1", "i160-b4"):
        rx = [n for n in pn.index if n.startswith("resnext50_32x4d") and f"-{size}-" in n]
        wd = [n for n in pn.index if n.startswith("wide_resnet50_2") and f"-{size}-" in n]
        if rx and wd:
            r_, w_ = pn.loc[rx[0]], pn.loc[wd[0]]
            out["grouped_pairs"].append(
                {
                    "pair": size,
                    "measured_ratio": w_.latency_ms / r_.latency_ms,
                    "predicted_shipped": w_["pred shipped"] / r_["pred shipped"],
                    "predicted_main": w_[f"pred {main_key}"] / r_[f"pred {main_key}"],
                    "flops_ratio": w_.flops / r_.flops,
                }
            )
    # the truth's own noise: one round's median predicting another round's, same network
    w = (
        rounds[rounds["config_id"].isin(set(df.loc[pub, "config_id"]))]
        .pivot_table(index="config_id", columns="round", values="latency_ms")
        .dropna()
    )
    if w.shape[1] >= 2:
        out["truth_noise_round0_vs_round1"] = metrics(w.iloc[:, 1], w.iloc[:, 0])
        out["round_max_over_min"] = {
            "median": float(np.median(w.max(axis=1) / w.min(axis=1))),
            "p90": float(np.quantile(w.max(axis=1) / w.min(axis=1), 0.9)),
        }
    out["conditions"] = {
        "networks_ok": int(len(df)),
        "public": int(pub.sum()),
        "calibration_sets": sets,
        "speed": _drift(speed),
        "measured": [str(df["measured_at"].min()), str(df["measured_at"].max())],
        "torch": __import__("torch").__version__,
        "torchvision": __import__("torchvision").__version__,
        "model": str(args.model),
        "allocator": netmodel.allocator_of(nm),
    }
    _common.write_json(args.json, out)
    print(
        json.dumps(
            {k: {t: {m: round(x, 3) for m, x in v[t].items()} for t in v} for k, v in out["pooled"].items()}, indent=1
        )
    )
    print(f"written {args.json}")


def cmd_choice(args: argparse.Namespace) -> None:
    """How the choice of the K calibration networks decides what calibration does to the
    torchvision networks: every candidate ``carb calibrate`` chooses from was measured
    (``measure --pool``) in the same campaign as the torchvision networks, so each rule
    (:data:`carb.netmodel.CHOICE_RULES`, and K at random) is drawn ``--draws`` times (its
    ties broken by a different seed each time) and scored per calibration method."""
    import numpy as np
    import pandas as pd

    from carb import families, netmodel
    from carb.campaign import speed as drift

    df, speed, rounds = _read(args.store)
    roles = pd.read_csv(Path(args.store).with_suffix(".roles.csv")).set_index("config_id")
    df = df[df["status"] == "ok"].reset_index(drop=True)
    df["role"] = roles.loc[df["config_id"], "role"].to_numpy()
    tokens = df["role"].str.split(";")
    pub = tokens.apply(lambda t: "public" in t).to_numpy()
    pool = tokens.apply(lambda t: "pool" in t).to_numpy()
    configs = [families.config_from_row(r) for r in df.to_dict("records")]
    tables = [netmodel.capture_config(c) for c in configs]
    nm = netmodel.load(args.model)
    pub_rows = netmodel._network_rows([t for t, p in zip(tables, pub) if p], nm.layer)[0]
    y = df.loc[pub, "latency_ms"].to_numpy()
    base = nm.predict_rows(pub_rows)["latency_ms"].to_numpy()
    pool_idx = np.flatnonzero(pool)
    pool_cfgs = [configs[i] for i in pool_idx]
    pool_tables = [tables[i] for i in pool_idx]
    pool_rows = netmodel._network_rows(pool_tables, nm.layer)[0]
    pool_pred = nm.predict_rows(pool_rows)["latency_ms"].to_numpy()
    pool_y = df.loc[pool, "latency_ms"].to_numpy()
    by_size = (
        pd.DataFrame({"size": [c.input_size for c in pool_cfgs], "ratio": pool_y / pool_pred})
        .groupby("size")["ratio"]
        .agg(["median", "count"])
    )
    out: dict = {
        "uncalibrated": metrics(y, base),
        "uncalibrated_pool": metrics(pool_y, pool_pred),
        "pool": int(pool.sum()),
        "public": int(pub.sum()),
        "pool_measured_over_predicted_by_size": by_size.reset_index().to_dict("records"),
        "public_measured_over_predicted_median": float(np.median(y / base)),
        "rules": {},
    }
    print(
        f"{pub.sum()} torchvision networks, {pool.sum()} pool networks; uncalibrated MAPE "
        f"{out['uncalibrated']['mape']:.1f}%, on the pool {out['uncalibrated_pool']['mape']:.1f}%",
        flush=True,
    )
    print(by_size.round(3).to_string(), flush=True)
    for rule in (*netmodel.CHOICE_RULES, "random"):
        res: dict = {m: [] for m in netmodel.CALIBRATION_METHODS}
        sizes_used = []
        for d in range(args.draws):
            rng = np.random.default_rng(d)
            if rule == "random":
                pick = list(rng.choice(len(pool_idx), size=args.k, replace=False))
            else:
                pick = netmodel.pick_networks(pool_cfgs, pool_pred, args.k, rng, rule)
            sizes_used.append(int(pd.Series([pool_cfgs[i].input_size for i in pick]).value_counts().max()))
            fit_rows, _ = drift.at_median_speed(df[pool].reset_index(drop=True).iloc[pick].reset_index(drop=True))
            for method in netmodel.CALIBRATION_METHODS:
                m = netmodel.calibrate_rows(nm, pool_rows.iloc[pick].reset_index(drop=True), fit_rows, method)
                p = m.predict_rows(pub_rows)  # the layer model is kept, so are the networks' layer sums
                r = metrics(y, p["latency_ms"].to_numpy(), p["latency_ms_lo"].to_numpy(), p["latency_ms_hi"].to_numpy())
                # the pool's other networks: a validation set that is not the torchvision judge
                rest = np.setdiff1d(np.arange(len(pool_idx)), pick)
                r["pool_rest_mape"] = metrics(pool_y[rest], m.predict_rows(pool_rows.iloc[rest])["latency_ms"])["mape"]
                res[method].append(r)
        out["rules"][rule] = {"most_networks_at_one_size": float(np.mean(sizes_used))}
        for method, ms in res.items():
            mape = np.array([r["mape"] for r in ms])
            out["rules"][rule][method] = {
                "mape_median": float(np.median(mape)),
                "mape_p10": float(np.quantile(mape, 0.1)),
                "mape_p90": float(np.quantile(mape, 0.9)),
                "within10_median": float(np.median([r["within10"] for r in ms])),
                "spearman_median": float(np.median([r["spearman"] for r in ms])),
                "coverage_median": float(np.median([r.get("coverage", np.nan) for r in ms])),
                "draws_better_than_uncalibrated": float(np.mean(mape < out["uncalibrated"]["mape"])),
                "pool_rest_mape_median": float(np.median([r["pool_rest_mape"] for r in ms])),
                "pool_rest_mape_p90": float(np.quantile([r["pool_rest_mape"] for r in ms], 0.9)),
            }
            print(
                f"{rule:9s} {method:6s} MAPE median {np.median(mape):5.1f}% (p10-p90 {np.quantile(mape, 0.1):.1f}-"
                f"{np.quantile(mape, 0.9):.1f}), better than uncalibrated in "
                f"{100 * out['rules'][rule][method]['draws_better_than_uncalibrated']:.0f}% of draws; the pool's "
                f"other networks {out['rules'][rule][method]['pool_rest_mape_median']:.1f}% "
                f"(p90 {out['rules'][rule][method]['pool_rest_mape_p90']:.1f})",
                flush=True,
            )
    out["conditions"] = {
        "store": str(args.store),
        "model": str(args.model),
        "k": args.k,
        "draws": args.draws,
        "measured": [str(df["measured_at"].min()), str(df["measured_at"].max())],
        "speed": _drift(speed),
    }
    _common.write_json(args.json, out)
    print(f"written {args.json}")


def cmd_report(args: argparse.Namespace) -> None:
    d = json.loads(Path(args.json).read_text())
    print(
        "| predictor (torchvision networks) | latency MAPE | ±10% | ±20% | Spearman | 90% cov. | memory MAPE | memory 90% cov. |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, v in d["pooled"].items():
        lat, mem = v["latency"], v.get("memory")
        print(
            f"| {k} | {lat['mape']:.1f}% | {lat['within10']:.0f}% | {lat['within20']:.0f}% | {lat['spearman']:.3f} | "
            + (f"{lat['coverage']:.0f}% | " if "coverage" in lat else "- | ")
            + (f"{mem['mape']:.1f}% | {mem['coverage']:.0f}% |" if mem else "- | - |")
        )
    print()
    print(
        f"per network; log, refit, FLOPs-only on K = {d['per_network'][0]['main'].split(' ', 1)[1]}; "
        f"interval and memory of {d['per_network'][0]['main']}"
    )
    print()
    print(
        "| network | GFLOP | measured ms | shipped | log | refit | 90% interval | FLOPs-only | measured MB | predicted MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in d["per_network"]:
        cs = r["main"].split(" ", 1)[1]
        print(
            f"| {r['network']} | {r['flops'] / 1e9:.2f} | {r['latency_ms']:.1f} | {r['pred shipped']:.1f} | "
            f"{r['pred log ' + cs]:.1f} | {r['pred refit ' + cs]:.1f} | [{r['lo']:.1f}, {r['hi']:.1f}] | "
            f"{r['pred flops ' + cs]:.1f} | {r['memory_mb']:.0f} | {r['pred_memory_mb']:.0f} |"
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="the K calibration networks and the torchvision networks, one campaign")
    m.add_argument("--store", default=str(STORE))
    m.add_argument("--model", default=MODEL, help="network model whose calibration networks are measured")
    m.add_argument("--k", type=int, default=10)
    m.add_argument(
        "--cal-gflops",
        type=float,
        nargs="+",
        default=[3.0],
        help="one calibration set of K per cap on the zoo networks' GFLOP (choose_networks' max_gflops)",
    )
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--max-time", type=float, default=2.0)
    m.add_argument(
        "--pool", action="store_true", help="also every candidate network carb calibrate chooses from (role `pool`)"
    )
    m.add_argument("--limit", type=int, default=None, help="only the first N torchvision networks (a smoke run)")
    e = sub.add_parser("evaluate", help="predict the torchvision networks; JSON")
    e.add_argument("--store", default=str(STORE))
    e.add_argument("--model", default=MODEL, help="network model to evaluate (a shipped name or a directory)")
    e.add_argument(
        "--method",
        default="log",
        choices=("factor", "log", "refit"),
        help="whose intervals the per-network table shows",
    )
    e.add_argument("--cal-set", default=None, help="the calibration set of the per-network table (e.g. calibration-3)")
    _common.add_json(e, str(_common.RESULTS / "public_zoo.json"), aliases=("--out",))
    ch = sub.add_parser("choice", help="score the rules that choose the K calibration networks (needs measure --pool)")
    ch.add_argument("--store", default=str(STORE))
    ch.add_argument("--model", default=MODEL)
    ch.add_argument("--k", type=int, default=10)
    ch.add_argument("--draws", type=int, default=40)
    _common.add_json(ch, str(_common.RESULTS / "public_zoo_choice.json"), aliases=("--out",))
    r = sub.add_parser("report", help="markdown tables of a results JSON")
    r.add_argument("json")
    args = p.parse_args(argv)
    {"measure": cmd_measure, "evaluate": cmd_evaluate, "choice": cmd_choice, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
