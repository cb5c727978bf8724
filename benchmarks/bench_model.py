"""Accuracy, training time and prediction throughput of CARB presets, side by side.

In one run, on one measured dataset:

1. **Accuracy**: for every split (random, stratified, grouped, batch-tier), each preset
   (``default``, ``paper``, and the baselines ``flops-linear`` and ``lgbm``) is fitted on
   the train side and scored on the test side (:func:`carb.model.evaluation.evaluate`); one table
   holds every split, target and model. R² is on the original scale (J, ms, MB); R² log
   on log(target).
2. **Training time** of each preset on the whole dataset.
3. **Throughput** of prediction, features included (the per-network feature cache is
   cleared before each timed run): the whole ``paper`` space (17,280 configs) and
   1,000,000 configs drawn from it with replacement, in configs/s, with the threads each
   learner may use (``--jobs``; pin the process with ``taskset`` to count cores).

Run (one core)::

    taskset -c 0 python benchmarks/bench_model.py --data cpu-1t --seeds 0 1 2 [--json OUT.json]

With ``--json``: the accuracy of every split (mean over the seeds) and the training time and
throughput of every preset, with the run's provenance.
"""

from __future__ import annotations

import os
import platform
import time
import warnings

import _common
import numpy as np
import pandas as pd


def _load(spec: str) -> pd.DataFrame:
    from carb import datasets

    if hasattr(datasets, "load"):
        return datasets.load(spec)
    return pd.read_parquet(spec) if spec.endswith(".parquet") else pd.read_csv(spec)


def _throughput(model, frame: pd.DataFrame, repeats: int) -> float:
    """Median seconds to predict ``frame`` (parameters only: features computed inside)."""
    from carb.families import features

    times = []
    for _ in range(repeats):
        features.arch_features.cache_clear()
        t0 = time.perf_counter()
        model.predict(frame)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _mean_of(runs: list[dict]) -> dict:
    """The first run's result with every metric and fit time averaged over ``runs``."""
    out = dict(runs[0])
    out["results"] = {
        m: {t: {k: float(np.mean([r["results"][m][t][k] for r in runs])) for k in v} for t, v in by_t.items()}
        for m, by_t in runs[0]["results"].items()
    }
    out["fit_seconds"] = {m: float(np.mean([r["fit_seconds"][m] for r in runs])) for m in runs[0]["fit_seconds"]}
    return out


def main() -> None:
    ap = _common.parser(__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="dataset name or .parquet/.csv file (one device)")
    ap.add_argument("--splits", nargs="*", default=["random", "stratified", "grouped", "batch-tier"])
    ap.add_argument("--presets", nargs="+", default=["default", "paper", "flops-linear", "lgbm"])
    ap.add_argument("--throughput-presets", nargs="+", default=["default", "fast", "paper"])
    ap.add_argument("--rows", type=int, default=1_000_000, help="configs of the large throughput sample")
    ap.add_argument("--repeats", type=int, default=1, help="timed repeats of each throughput run (median)")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="seeds of the splits and models; metrics are the mean over them",
    )
    ap.add_argument("--jobs", type=int, default=1, help="threads per learner")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from carb.families import space
    from carb.model import CARB, UNITS
    from carb.model.evaluation import evaluate

    console = Console(width=170)
    df = _load(args.data)
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    console.print(
        f"data: {args.data}: {len(df)} rows, {len(ok)} ok, device(s) "
        f"{', '.join(map(str, ok['device'].unique())) if 'device' in ok else '?'}; "
        f"targets with labels: {', '.join(t for t in UNITS if t in ok and ok[t].notna().any())}"
    )
    console.print(
        f"machine: {platform.processor() or platform.machine()}, {cores} core(s) usable, "
        f"{args.jobs} thread(s) per learner"
    )

    # 1. accuracy, every split side by side
    table = Table(
        "split",
        "target",
        "model",
        "R²",
        "R² log",
        "MAPE",
        "±10%",
        "ρ",
        "cover",
        "rel. width",
        "budget acc",
        "false acc",
        "fit s",
        title="accuracy on the test side of each split "
        "(R² on the original scale; intervals at 90% nominal; budget = test median)",
    )
    summary = {}
    for sp in args.splits:
        runs = []
        for seed in args.seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                runs.append(evaluate(ok, sp, args.presets, seed=seed, n_jobs=args.jobs))
        res = _mean_of(runs)
        summary[sp] = res
        for t in res["targets"]:
            for k, m in enumerate(args.presets):
                r = res["results"][m][t]
                table.add_row(
                    sp if t == res["targets"][0] and k == 0 else "",
                    t if k == 0 else "",
                    m,
                    f"{r['r2']:.3f}",
                    f"{r['r2_log']:.3f}",
                    f"{100 * r['mape']:.2f}%",
                    f"{100 * r['within_10pct']:.0f}%",
                    f"{r['spearman']:.4f}",
                    f"{100 * r['coverage']:.0f}%",
                    f"{100 * r['median_rel_width']:.0f}%",
                    f"{100 * r['budget_accuracy']:.0f}%",
                    f"{100 * r['false_accept_rate']:.0f}%",
                    f"{res['fit_seconds'][m]:.1f}",
                )
            table.add_section()
        console.print(
            f"split {sp}: {res['rows']['train']} train / {res['rows']['test']} test rows "
            f"(seed {args.seeds[0]}), metrics averaged over seeds {', '.join(map(str, args.seeds))}"
        )
    console.print(table)

    if "default" in args.presets and "paper" in args.presets:
        t2 = Table(
            "split",
            "target",
            "MAPE default / paper",
            "R² default",
            "R² paper",
            "R² log default",
            "R² log paper",
            "±10% default",
            "±10% paper",
            "better in MAPE, R², R² log?",
            title="default vs paper",
        )
        for sp, res in summary.items():
            for t in res["targets"]:
                d, p = res["results"]["default"][t], res["results"]["paper"][t]
                better = d["mape"] < p["mape"] and d["r2_log"] > p["r2_log"] and d["r2"] > p["r2"]
                t2.add_row(
                    sp,
                    t,
                    f"{d['mape'] / p['mape']:.2f}",
                    f"{d['r2']:.3f}",
                    f"{p['r2']:.3f}",
                    f"{d['r2_log']:.4f}",
                    f"{p['r2_log']:.4f}",
                    f"{100 * d['within_10pct']:.0f}%",
                    f"{100 * p['within_10pct']:.0f}%",
                    "yes" if better else "no",
                )
        console.print(t2)

    # 2. training time and 3. throughput
    paper_space = space.load("paper").to_frame()
    params_only = paper_space.drop(columns=["config_id"])
    rng = np.random.default_rng(args.seeds[0])
    big = params_only.iloc[rng.integers(0, len(params_only), args.rows)].reset_index(drop=True)
    t3 = Table(
        "preset",
        "train s (all rows)",
        f"paper space ({len(params_only):,}) configs/s",
        f"sample ({args.rows:,}) configs/s",
        f"s for {args.rows:,}",
        title=f"training time and prediction throughput, features included, {cores} core(s)",
    )
    speed = []
    for p in args.throughput_presets:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = CARB(preset=p, random_state=args.seeds[0], n_jobs=args.jobs).fit(ok)
        train_s = time.perf_counter() - t0
        s1 = _throughput(model, params_only, args.repeats)
        s2 = _throughput(model, big, args.repeats)
        t3.add_row(p, f"{train_s:.1f}", f"{len(params_only) / s1:,.0f}", f"{args.rows / s2:,.0f}", f"{s2:.1f}")
        speed.append(
            {
                "preset": p,
                "train_s": train_s,
                "space_configs": len(params_only),
                "space_configs_per_s": len(params_only) / s1,
                "sample_configs": args.rows,
                "sample_configs_per_s": args.rows / s2,
                "sample_s": s2,
            }
        )
        console.print(
            f"{p}: trained in {train_s:.1f} s; {len(params_only) / s1:,.0f} and {args.rows / s2:,.0f} configs/s"
        )
    console.print(t3)
    if args.json:
        _common.write_json(
            args.json,
            {
                "data": args.data,
                "rows": {"all": len(df), "ok": len(ok)},
                "seeds": args.seeds,
                "jobs": args.jobs,
                "usable_cores": cores,
                "accuracy": summary,
                "throughput": speed,
            },
        )
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
