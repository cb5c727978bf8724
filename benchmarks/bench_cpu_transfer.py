"""From one CPU platform to another, on the shipped measured data: few-shot calibration
against K, and the paper-style two-stage screening table.

Source ``cpu-1t`` (one thread), target ``cpu-2t`` (two threads), both measured on the
same machine by our pipeline (``carb dataset list``). The source model is CARB
(``--preset``) trained on every ``cpu-1t`` row.

1. **Calibration against K** (``carb calibrate``'s method, :mod:`carb.transfer.calibrate`): K
   ``cpu-2t`` measurements chosen by the active sampler (and, for comparison, at
   random) calibrate the source model; the rest of ``cpu-2t`` is the test set. Beside it,
   the HELP-style NNLS map over the source prediction and cost features
   (``carb calibrate --method nnls``) on the same K configs. Spearman,
   MAPE and interval coverage per target, mean over ``--seeds``; "K = 0" is the source
   model as it is. HELP's reference: Spearman 0.932 from 10 target samples.
2. **Screening table** (:func:`carb.decide.screen.screen` then
   :func:`carb.decide.validate.validate_against_truth`): Stage 1 ranks with the ``cpu-1t``
   model; Stage 2 uses a ``cpu-2t`` model, either the device-specific model of the study
   (CARB trained on ``cpu-2t``, out-of-fold: each config is predicted by a model that never
   saw its architecture: folds group rows by :data:`carb.model.evaluation.GROUP_KEYS`, the key of
   ``carb evaluate``'s grouped split, so every input size and class count of an
   architecture is on one side; 5 folds) or the source calibrated from K = 20 measurements (the
   product's path to a new device; those 20 are left out of the table). Budgets on
   latency and memory at the 25th, 50th and 75th percentiles of the measured ``cpu-2t``
   values; budgets applied on the upper bound of the interval (``risk=safe``, the default)
   and on the point prediction (``risk=point``). The study: >90% pruning, 95.8% budget
   accuracy, 2.1% false accepts.

    python benchmarks/bench_cpu_transfer.py [--seeds 0 1 2 3 4] [--preset default] [--json OUT.json]

Deterministic: every draw is seeded, every learner runs on one thread (CARB ``n_jobs=1``:
XGBoost, ExtraTrees; BLAS pinned to one thread), and the output starts with the library
versions and the git commit. The active sampler's picks follow the source model's exact
predictions, so a change to the model code (or a library version) changes the picks and
the active columns by a few points; the per-seed spread is printed beside the means.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads BLAS
    os.environ.setdefault(_v, "1")

import itertools
import subprocess
import sys
import warnings

import _common
import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from carb.model.evaluation import arch_folds

TARGETS = ("latency_ms", "memory_mb")


def _metrics(y: np.ndarray, p: pd.DataFrame, t: str) -> dict[str, float]:
    pred = p[t].to_numpy(float)
    return {
        "spearman": float(spearmanr(y, pred).statistic),
        "mape": float(np.mean(np.abs(pred - y) / y)),
        "coverage": float(np.mean((p[f"{t}_lo"].to_numpy(float) <= y) & (y <= p[f"{t}_hi"].to_numpy(float)))),
    }


class _Fixed:
    """A predictor that returns precomputed (out-of-fold) predictions by config_id."""

    def __init__(self, pred: pd.DataFrame, targets: list[str]) -> None:
        self.pred, self.targets_ = pred, targets

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame:
        return self.pred.loc[configs["config_id"].to_numpy()].reset_index(drop=True)


def versions() -> str:
    """Python, the libraries the figures depend on, and the git commit of the tree."""
    import importlib

    # module versions: xgboost ships as the xgboost-cpu distribution
    libs = ("numpy", "scipy", "pandas", "sklearn", "xgboost", "lightgbm")
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            timeout=10,
        ).stdout.strip()
    except OSError:
        commit = ""
    mods = ", ".join(f"{n} {importlib.import_module(n).__version__}" for n in libs)
    return f"python {sys.version.split()[0]}, {mods}; git {commit or 'unknown'}"


def _out_of_fold(df: pd.DataFrame, preset: str, folds: int = 5, seed: int = 0) -> pd.DataFrame:
    from carb.model import CARB

    fold_of = arch_folds(df, folds, seed)
    parts = []
    for f in range(folds):
        m = CARB(preset=preset, random_state=seed, n_jobs=1).fit(df[fold_of != f])
        p = m.predict(df[fold_of == f])
        p.index = df.loc[fold_of == f, "config_id"].to_numpy()
        parts.append(p)
    return pd.concat(parts)


def calibration_rows(tgt: pd.DataFrame, source, seeds, ks) -> pd.DataFrame:
    """Spearman, MAPE and coverage on the target's other configs, one row per seed, K,
    method (source, active, random, nnls) and target."""
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    rows = []
    for seed in seeds:
        for k in [0, *ks]:
            for method in ("source",) if k == 0 else ("active", "random"):
                if k == 0:
                    chosen = tgt.iloc[:0]
                elif method == "active":
                    chosen = choose_samples(tgt, source, k, seed=seed)
                else:
                    chosen = tgt.sample(k, random_state=seed)
                test = tgt[~tgt.config_id.isin(chosen.config_id)]
                model = source if k == 0 else fit_calibrated(source, chosen)
                p = model.predict(test)
                for t in TARGETS:
                    rows.append(
                        {"k": k, "method": method, "seed": seed, "target": t, **_metrics(test[t].to_numpy(float), p, t)}
                    )
                if method == "active":  # the map before it held its ratio outside the K's range
                    for m in model.maps_.values():
                        m.s_range = None
                    p = model.predict(test)
                    for t in TARGETS:
                        rows.append(
                            {
                                "k": k,
                                "method": "active, slope carried",
                                "seed": seed,
                                "target": t,
                                **_metrics(test[t].to_numpy(float), p, t),
                            }
                        )
                if method == "active":  # the HELP-style NNLS map (carb calibrate --method nnls), same K
                    p = fit_calibrated(source, chosen, method="nnls").predict(test)
                    for t in TARGETS:
                        rows.append(
                            {
                                "k": k,
                                "method": "nnls",
                                "seed": seed,
                                "target": t,
                                **_metrics(test[t].to_numpy(float), p, t),
                            }
                        )
    return pd.DataFrame(rows)


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--source", default="cpu-1t")
    ap.add_argument("--target", default="cpu-2t")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 10, 20, 50])
    ap.add_argument("--no-screening", action="store_true", help="part 1 only (calibration against K)")
    ap.add_argument(
        "--latency",
        choices=["corrected", "raw"],
        default="corrected",
        help="the target's latency where it has a speed index: at the campaign's median speed "
        "(default, as `carb train` uses it) or the raw medians",
    )
    a = ap.parse_args()
    warnings.filterwarnings("ignore")

    from carb import datasets
    from carb.decide.screen import screen
    from carb.decide.validate import validate_against_truth
    from carb.model import CARB
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    src = datasets.load(a.source)
    tgt = datasets.load(a.target)
    src, tgt = src[src.status == "ok"].reset_index(drop=True), tgt[tgt.status == "ok"].reset_index(drop=True)
    if a.latency == "corrected":  # no-ops for data without a speed index (cpu-1t, cpu-2t)
        from carb.campaign.speed import corrected

        src, tgt = corrected(src, paired_only=True), corrected(tgt, paired_only=True)
    print(f"command: {_common.command_line()}")
    print(versions())
    print(
        f"latency: {a.latency} ({', '.join(n for n, d in ((a.source, src), (a.target, tgt)) if 'latency_ms_raw' in d) or 'neither'} has a speed index)"
    )
    print(
        f"source {a.source}: {len(src)} configs; target {a.target}: {len(tgt)} configs; "
        f"{len(set(src.config_id) & set(tgt.config_id))} configs measured on both"
    )
    source = CARB(preset=a.preset, random_state=0, n_jobs=1).fit(src)

    # -- 1. calibration against K --------------------------------------------------------
    rows = calibration_rows(tgt, source, a.seeds, a.ks)
    g = rows.groupby(["target", "method", "k"])[["spearman", "mape", "coverage"]]
    curve = g.mean().join(g.std(ddof=0)[["mape"]].rename(columns={"mape": "mape sd"}))
    print(
        f"\n1. calibration {a.source} -> {a.target} against K (mean over seeds {a.seeds}; "
        "test = the target's other configs)"
    )
    print(curve.round(4).to_string())
    print("(mape sd: standard deviation over the seeds)")
    print(
        "\nas a Markdown table: | target | K | active | random | nnls | active, slope carried | "
        "(Spearman / MAPE / coverage)"
    )
    cell = lambda r: f"{r.spearman:.3f} / {100 * r.mape:.{1 if r.mape >= 0.1 else 2}f}% / {100 * r.coverage:.0f}%"
    for t in TARGETS:
        print(f"| {t.split('_')[0]} | 0 (source) | {cell(curve.loc[(t, 'source', 0)])} | | |")
        for k in a.ks:
            print(
                f"| {t.split('_')[0]} | {k} | "
                + " | ".join(cell(curve.loc[(t, m, k)]) for m in ("active", "random", "nnls", "active, slope carried"))
                + " |"
            )
    res: dict = {
        "source": a.source,
        "target": a.target,
        "preset": a.preset,
        "seeds": a.seeds,
        "latency": a.latency,
        "calibration": curve.reset_index().to_dict("records"),
        "calibration_per_seed": rows.to_dict("records"),
    }
    if a.no_screening:
        if a.json:
            _common.write_json(a.json, res)
        return

    # -- 2. paper-style screening table --------------------------------------------------
    oof = _out_of_fold(tgt, a.preset)
    device_model = _Fixed(oof, list(TARGETS))
    chosen = choose_samples(tgt, source, 20, seed=0)
    calibrated = fit_calibrated(source, chosen)
    rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
    print(f"\n2. screening {a.target} with Stage 1 from {a.source}; budgets at quantiles of measured {a.target}")
    out = []
    for q in (0.25, 0.5, 0.75):
        budgets = {t: float(tgt[t].quantile(q)) for t in TARGETS}
        for (name, target, cands), risk in itertools.product(
            (("device model (OOF)", device_model, tgt), ("calibrated K=20", calibrated, rest)), ("safe", "point")
        ):
            res = screen(cands, target, budgets, source=source, risk=risk)
            objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in res.summary["objectives"]]
            v = validate_against_truth(
                list(res.feasible.config_id), list(res.shortlist.config_id), cands, budgets, objs
            )
            s = res.summary
            out.append(
                {
                    "budget q": q,
                    "stage 2 model": name,
                    "risk": risk,
                    "candidates": s["candidates"],
                    "after stage 1": s["after_stage1"],
                    "feasible": s["feasible"],
                    "shortlist": s["shortlist"],
                    "pruning": s["pruning_ratio"],
                    "budget acc": v["accuracy"],
                    "false accept": v["false_accept_rate"],
                    "false reject": v["false_reject_rate"],
                    "pareto recall": v.get("pareto_recall"),
                    "HV ratio": v.get("hypervolume_ratio"),
                }
            )
    table = pd.DataFrame(out)
    if a.json:
        _common.write_json(a.json, {**res, "screening": out})
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("study (RTX 5090 -> 3080, 3,072 configs): pruning >0.90, budget accuracy 0.958, false accepts 0.021")
    print("\nas Markdown tables:")
    for r in table.itertuples(index=False):
        print(
            f"| {r[0]:.2f} | {r[1].replace(' (OOF)', '')} | {r[2]} | {r[3]:,} | {r[4]:,} | {r[6]:,} | "
            f"{100 * r[7]:.1f}% | {r[8]:.3f} | {100 * r[9]:.1f}% | {100 * r[10]:.1f}% | {r[11]:.2f} | {r[12]:.3f} |"
        )


if __name__ == "__main__":
    main()
