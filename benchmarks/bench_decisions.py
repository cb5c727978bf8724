"""Decisions users can trust (issue 18): three-way budget calls and a shortlist that keeps
the true front, against today's two-way point and safe calls, in one run.

Pair ``cpu-1t -> cpu-2t`` (shipped, measured by our pipeline): Stage 1 ranks with CARB
(``--preset``) trained on every ``cpu-1t`` row; Stage 2 uses a ``cpu-2t`` model, either

* ``device model (OOF)``: CARB trained on ``cpu-2t``, each config predicted by the fold
  model that never saw its architecture (5 folds by architecture), with its own
  conformal intervals (``predict(..., coverage=)``), or
* ``device model (OOF), source prior``: the same, each fold model also reading the
  Stage 1 source model's predictions (``CARB(prior=source)``, ``carb train --prior``), or
* ``calibrated K=20``: the source calibrated from 20 actively chosen ``cpu-2t``
  measurements (``carb calibrate``'s path; those 20 are left out of the candidates).

Budgets on latency and memory at the same quantile q (10/25/50/75%) of the measured
``cpu-2t`` values. Per row: ``point`` and ``safe`` (today's two-way calls, shortlist =
Pareto front of the predicted feasible set), and ``decide`` (three-way calls at
``--confidence``, probable-front shortlist): pruning (1 - shortlist / candidates), front
recall (share of the true front of the truly feasible configs in the shortlist),
hypervolume ratio, decided share, accuracy / false accepts (both ways: the share of the
over-budget configs accepted, ``false_accept``, and the share of the accepts over budget,
``false_discovery``) / false rejects over the decided configs (all configs are decided with point and safe), and the share sent to
``measure``. Also: front recall against shortlist size (the probable front ranked by
chance of being on the front), a confidence sweep, and the coverage of the 90% intervals
per batch, per batch regime, near each budget and on the true fronts, with the plain
(constant-width) CV-conformal intervals beside the locally adaptive ones.

Ablation of the interval scale: the device model with the scale fitted by quantile
regression of ``log |r|`` at 0.9 (``ConformalScale.fit(tail=0.9)``) beside the default
least-squares scale (``carb/model/conformal.py``), decisions and coverage, on both pairs.

``--nb201``: adds the NAS-Bench-201 energy pair (Stage 1 from the ``titan_rtx_b1``
latency model, Stage 2 ``edgegpu`` energy + latency, device model out-of-fold by
architecture) when ``carb.datasets.load("nb201")`` is there.

``--seeds N`` (default 10): the ``calibrated K=20`` decide rows over seeds 0..N-1 with each calibration
sampler (``choose_samples`` with and without its corner picks), their means and paired per-seed
differences: one seed's 20 measurements are one draw.

``--target NAME``: another CPU dataset as the pair's target instead of ``cpu-2t`` (e.g.
``cpu-avx2-1t``, another kind of CPU); ``--no-ablations`` skips the ablation models.

    python benchmarks/bench_decisions.py --json OUT.json [--confidence 0.9] [--nb201] [--target cpu-2t]

Deterministic: seeds fixed, one thread per library (set before numpy is imported),
library versions in the JSON.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import time  # noqa: E402
import warnings  # noqa: E402

import _common  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import OutOfFold, cpu_pair_data  # noqa: E402

QS = (0.1, 0.25, 0.5, 0.75)
REGIMES = ((1, 2, "b<=2"), (3, 8, "b 4-8"), (9, 10**9, "b>=16"))


class RefitIntervals:
    """A calibrated model (``carb calibrate``'s) whose intervals are re-fitted on its own K
    measurements: each config's width is the source model's locally adaptive 90% log
    half-width times the conformal quantile of the K scores ``|log(y / p)| / halfwidth``.
    ``carb.transfer.calibrate`` instead widens the mapped source interval by the map's own error,
    counting the source's error twice (coverage 99-100% at 90% nominal). A benchmark
    variant, not product code; the K residuals are in-sample for the map (1-3
    coefficients fitted on them)."""

    def __init__(self, calibrated, source, measured: pd.DataFrame) -> None:
        from carb.model.conformal import conformal_quantile  # noqa: F401 - checked importable here

        self.cal, self.source = calibrated, source
        self.targets_, self.coverage = list(calibrated.targets_), 0.9
        p, sp = calibrated.predict(measured), source.predict(measured, coverage=0.9)
        self.scores = {}
        for t in self.targets_:
            r = np.abs(np.log(measured[t].to_numpy(float) / p[t].to_numpy(float)))
            self.scores[t] = np.sort(r / np.log(sp[f"{t}_hi"].to_numpy(float) / sp[t].to_numpy(float)))

    def predict(self, configs: pd.DataFrame, coverage: float | None = None) -> pd.DataFrame:
        from carb.model.conformal import conformal_quantile

        c = 0.9 if coverage is None else coverage
        p, sp = self.cal.predict(configs), self.source.predict(configs, coverage=0.9)
        for t in self.targets_:
            hw = np.log(sp[f"{t}_hi"].to_numpy(float) / sp[t].to_numpy(float)) * conformal_quantile(self.scores[t], c)
            p[f"{t}_lo"], p[f"{t}_hi"] = p[t] * np.exp(-hw), p[t] * np.exp(hw)
        return p


def _coverage_table(
    model,
    cands: pd.DataFrame,
    targets: list[str],
    budgets_by_q: dict[float, dict[str, float]],
    fronts: set,
    conf: float = 0.9,
) -> list[dict]:
    from carb.decide.screen import predict_at

    p = predict_at(model, cands, conf).reset_index(drop=True)
    c = cands.reset_index(drop=True)
    rows = []
    for t in targets:
        y = c[t].to_numpy(float)
        inside = (p[f"{t}_lo"].to_numpy(float) <= y) & (y <= p[f"{t}_hi"].to_numpy(float))
        width = np.log(p[f"{t}_hi"].to_numpy(float) / p[f"{t}_lo"].to_numpy(float)) / 2

        def add(group: str, m: np.ndarray) -> None:
            rows.append(
                {
                    "target": t,
                    "group": group,
                    "n": int(m.sum()),
                    "coverage": float(inside[m].mean()) if m.any() else float("nan"),
                    "median_halfwidth_log": float(np.median(width[m])) if m.any() else float("nan"),
                }
            )

        add("all", np.ones(len(c), bool))
        if "batch" in c.columns:
            b = c["batch"].to_numpy()
            for lo, hi, name in REGIMES:
                add(f"regime {name}", (b >= lo) & (b <= hi))
            for v in sorted(np.unique(b)):
                add(f"batch {int(v)}", b == v)
        for q, budgets in budgets_by_q.items():
            if t in budgets:
                add(f"within 10% of budget q={q}", np.abs(np.log(y / budgets[t])) <= np.log(1.1))
        add("true fronts", c["config_id"].isin(fronts).to_numpy())
    return rows


def _recall_curve(res, truth: pd.DataFrame, budgets: dict, objs, sizes=(5, 10, 20, 30, 40, 60, 80, 100, 120, 160)):
    """Front recall of the top-N of the probable front (ranked by p_front) against N, and at
    p_front thresholds."""
    from carb.decide import pareto
    from carb.decide.validate import truly_feasible, with_per_image

    truth = with_per_image(truth.reset_index(drop=True))
    tf = truth[truly_feasible(truth, budgets)]
    true_front = set(tf.loc[pareto.front_mask(tf, objs), "config_id"]) if len(tf) else set()
    d = res.decisions
    if "p_front" not in d.columns or not true_front:
        return {}
    ranked = d[d["p_front"] > 0].sort_values("p_front", ascending=False)["config_id"].tolist()
    n = len(truth)
    curve = [
        {"size": k, "pruning": 1 - k / n, "front_recall": len(true_front & set(ranked[:k])) / len(true_front)}
        for k in sizes
        if k <= len(ranked)
    ]
    thr = []
    for p in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5):
        ids = set(d.loc[d["p_front"] >= p, "config_id"])
        thr.append(
            {
                "p_min": p,
                "size": len(ids),
                "pruning": 1 - len(ids) / n,
                "front_recall": len(true_front & ids) / len(true_front),
            }
        )
    return {"true_front": len(true_front), "ranked": len(ranked), "by_size": curve, "by_threshold": thr}


#: the calls compared: (label, screen() keyword arguments)
#: (labels as in the recorded JSON: "decide" is the joint rule, the default when it was run)
METHODS = (
    ("point", {"risk": "point"}),
    ("safe", {"risk": "safe"}),
    ("decide", {"rule": "joint"}),
    ("decide, interval rule", {"rule": "interval"}),
    ("decide, no cap", {"shortlist_share": None, "rule": "joint"}),
)


def _rows_for(
    dataset: str,
    name: str,
    model,
    source,
    cands: pd.DataFrame,
    targets: list[str],
    conf: float,
    sweep: list[float],
    log: list,
    methods: tuple[str, ...] | None = None,
) -> tuple[list[dict], list[dict], list[dict]]:
    from carb.decide.screen import screen
    from carb.decide.validate import validate_against_truth

    rows, curves, sweeps = [], [], []
    for q in QS:
        budgets = {t: float(cands[t].quantile(q)) for t in targets}
        for method, kw in METHODS:
            if methods is not None and method not in methods:
                continue
            for c in [conf] if method != "decide" else sorted({conf, *sweep}):
                t0 = time.perf_counter()
                res = screen(cands, model, budgets, source=source, confidence=c, **kw)
                decide = res.summary["risk"] == "decide"
                el = time.perf_counter() - t0
                objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in res.summary["objectives"]]
                v = validate_against_truth(
                    list(res.feasible.config_id),
                    list(res.shortlist.config_id),
                    cands,
                    budgets,
                    objs,
                    measure_ids=list(res.measure.config_id) if decide else None,
                )
                dm = v.get("decisions", {**v, "decided": 1.0, "measure_share": 0.0})
                row = {
                    "dataset": dataset,
                    "model": name,
                    "method": method,
                    "confidence": c if decide else None,
                    "rule": res.summary.get("rule"),
                    "q": q,
                    "budgets": budgets,
                    "candidates": len(cands),
                    "after_stage1": res.summary["after_stage1"],
                    "shortlist": res.summary["shortlist"],
                    "pruning": res.summary["pruning_ratio"],
                    "front_recall": v.get("pareto_recall"),
                    "true_front": v.get("true_front"),
                    "hv_ratio": v.get("hypervolume_ratio"),
                    "decided": dm["decided"],
                    "measure_share": dm["measure_share"],
                    "accuracy": dm["accuracy"],
                    "false_accept": dm["false_accept_rate"],
                    "false_discovery": dm["false_discovery_rate"],
                    "false_accepts": dm["false_accepts"],
                    "over_budget": dm["over_budget"],
                    "accepted": dm["accepted"],
                    "false_reject": dm["false_reject_rate"],
                    "accuracy_after_measuring": dm.get("accuracy_after_measuring", dm["accuracy"]),
                    "expected_front": res.summary.get("expected_front"),
                    "share_for_front": res.summary.get("share_for_front"),
                    "screen_s": el,
                }
                if method == "decide" and c != conf:
                    sweeps.append(row)
                    continue
                rows.append(row)
                if method == "decide":
                    curves.append(
                        {"dataset": dataset, "model": name, "q": q, **_recall_curve(res, cands, budgets, objs)}
                    )
                log.append(row)
                print(
                    f"  {name:28s} q={q:<5} {method:15s} shortlist {row['shortlist']:4d} pruning {row['pruning']:.3f} "
                    f"recall {row['front_recall']:.2f} hv {row['hv_ratio']:.3f} decided {row['decided']:.3f} "
                    f"acc {row['accuracy']:.3f} FA {row['false_accepts']}/{row['over_budget']} over-budget "
                    f"{row['false_accept']:.3f}, {row['false_accepts']}/{row['accepted']} accepts "
                    f"{row['false_discovery']:.3f} FR {row['false_reject']:.3f}",
                    flush=True,
                )
    return rows, curves, sweeps


def _true_fronts(cands: pd.DataFrame, targets: list[str], objs) -> set:
    from carb.decide import pareto
    from carb.decide.validate import truly_feasible, with_per_image

    c = with_per_image(cands.reset_index(drop=True))
    out: set = set()
    for q in QS:
        b = {t: float(c[t].quantile(q)) for t in targets}
        tf = c[truly_feasible(c, b)]
        if len(tf):
            out |= set(tf.loc[pareto.front_mask(tf, objs), "config_id"])
    return out


def _cpu_pair(a, out: dict) -> tuple:
    from carb.families.features import compute
    from carb.model import CARB
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    src, tgt = cpu_pair_data(a.target)
    pair = f"cpu-1t->{a.target}"
    targets = ["latency_ms", "memory_mb"]
    t0 = time.perf_counter()
    source = CARB(preset=a.preset, random_state=0).fit(src)
    device = OutOfFold(tgt, a.preset)
    # the same device model reading the Stage 1 source model's predictions (CARB(prior=))
    device_prior = OutOfFold(tgt, a.preset, prior=source)
    chosen = choose_samples(tgt, source, 20, seed=0)
    calibrated = fit_calibrated(source, chosen)
    rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
    print(f"{pair}: models fitted in {time.perf_counter() - t0:.0f} s", flush=True)
    objs = [("latency_ms", "min"), ("memory_mb", "min"), ("flops_per_image", "max")]
    refit = RefitIntervals(calibrated, source, chosen)
    # ablation: the interval scale without the blend members' spread
    device_nospread = device_qs = None
    if not a.no_ablations:
        t0 = time.perf_counter()
        device_nospread = OutOfFold(tgt, a.preset, interval_spread=False)
        print(f"device model without the spread scale fitted in {time.perf_counter() - t0:.0f} s", flush=True)
        device_qs = _quantile_scale(tgt, a.preset)
    for name, model, cands in (
        ("device model (OOF)", device, tgt),
        ("device model (OOF), source prior", device_prior, tgt),
        ("calibrated K=20", calibrated, rest),
        ("calibrated K=20, intervals refit", refit, rest),
    ):
        cf = cands if "flops_per_image" in cands.columns else cands.join(compute(cands)[["flops_per_image"]])
        rows, curves, sweeps = _rows_for(pair, name, model, source, cands, targets, a.confidence, a.sweep, [])
        out["rows"] += rows
        out["recall_curves"] += curves
        out["confidence_sweep"] += sweeps
        budgets_by_q = {q: {t: float(cands[t].quantile(q)) for t in targets} for q in QS}
        fronts = _true_fronts(cf, targets, objs)
        variants = [("adaptive", model)] + (
            [
                ("plain", model.plain()),
                ("adaptive, no spread", device_nospread),
                ("adaptive, quantile scale", device_qs),
            ]
            if model is device and not a.no_ablations
            else []
        )
        for kind, m in variants:
            for r in _coverage_table(m, cands, targets, budgets_by_q, fronts):
                out["coverage"].append({"dataset": pair, "model": name, "intervals": kind, **r})
        if model is device and not a.no_ablations:  # decisions with the plain intervals, for the ablation
            rows, _, _ = _rows_for(
                pair,
                name + ", plain intervals",
                model.plain(),
                source,
                cands,
                targets,
                a.confidence,
                [],
                [],
                methods=("decide", "decide, interval rule"),
            )
            out["ablation_plain_intervals"] += rows
            rows, _, _ = _rows_for(
                pair,
                name + ", scale without spread",
                device_nospread,
                source,
                cands,
                targets,
                a.confidence,
                [],
                [],
                methods=("decide", "decide, interval rule"),
            )
            out["ablation_no_spread"] += rows
            rows, _, _ = _rows_for(
                pair,
                name + ", quantile scale",
                device_qs,
                source,
                cands,
                targets,
                a.confidence,
                [],
                [],
                methods=("decide", "decide, interval rule"),
            )
            out["ablation_quantile_scale"] += rows
    return source, tgt


#: the calibration samplers compared over seeds: (label, ``choose_samples`` corners)
SAMPLERS = (("corners, then bins", True), ("bins only", False))


def _calibrated_over_seeds(a, source, tgt: pd.DataFrame, targets: list[str], out: dict) -> None:
    """The ``calibrated K=20`` decide rows for seeds 0..``--seeds``-1, per sampler: one seed's 20 measurements
    are one draw, so the samplers are compared on the mean over seeds (and the paired per-seed differences)."""
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    rows = []
    for seed in range(a.seeds):
        for label, corners in SAMPLERS:
            chosen = choose_samples(tgt, source, 20, seed=seed, corners=corners)
            model = fit_calibrated(source, chosen)
            rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
            got, _, _ = _rows_for(
                "cpu-1t->" + a.target,
                "calibrated K=20",
                model,
                source,
                rest,
                targets,
                a.confidence,
                [],
                [],
                ("decide", "decide, interval rule"),
            )
            rows += [{**r, "sampler": label, "seed": seed} for r in got]
    df = pd.DataFrame(rows)
    keys = ["decided", "accuracy", "false_accepts", "false_accept", "false_discovery", "front_recall"]
    summary, paired = [], {}
    for method, dm in df.groupby("method"):
        for label, _ in SAMPLERS:
            d = dm[dm.sampler == label]
            summary.append({"method": method, "sampler": label, "q": "all", **{k: float(d[k].mean()) for k in keys}})
            summary += [
                {"method": method, "sampler": label, "q": q, **{k: float(g[k].mean()) for k in keys}}
                for q, g in d.groupby("q")
            ]
        w = dm.pivot_table(index=["seed", "q"], columns="sampler", values=["accuracy", "false_accepts"])
        paired[method] = {
            k: (w[k][SAMPLERS[0][0]] - w[k][SAMPLERS[1][0]]).groupby(level="seed").mean().tolist()
            for k in ("accuracy", "false_accepts")
        }
    out["calibrated_seeds"] = {"seeds": a.seeds, "summary": summary, "paired_per_seed": paired, "rows": rows}
    for r in summary:
        print(
            f"  over {a.seeds} seeds, {r['method']:21s} {r['sampler']:18s} q={r['q']}: decided {r['decided']:.3f} "
            f"accuracy {r['accuracy']:.4f} false accepts {r['false_accepts']:.2f}",
            flush=True,
        )


def _quantile_scale(tgt: pd.DataFrame, preset: str, **kw) -> "OutOfFold":
    """The device model with the interval scale fitted by quantile regression of log |r| at
    0.9 instead of least squares (``CARB(interval_tail=0.9)``), for the ablation."""
    t0 = time.perf_counter()
    model = OutOfFold(tgt, preset, interval_tail=0.9, **kw)
    print(f"device model with the quantile scale fitted in {time.perf_counter() - t0:.0f} s", flush=True)
    return model


def _nb201_pair(a, out: dict) -> None:
    """NAS-Bench-201 energy pair: Stage 1 CARB on ``titan_rtx_b1`` latency, Stage 2 CARB on
    ``edgegpu`` energy + latency out-of-fold by architecture (the six edge operations),
    CIFAR-10 rows; budgets on energy and latency. Recorded as not run, with the reason,
    when the dataset or a model of its family is not available."""
    from carb import datasets
    from carb.model import CARB

    try:
        nb = datasets.load("nb201")
        nb = nb[(nb["status"] == "ok") & (nb["dataset"] == "cifar10")]
        src = nb[nb["device"] == "titan_rtx_b1"].reset_index(drop=True)
        tgt = nb[nb["device"] == "edgegpu"].reset_index(drop=True)
        if not len(src) or not len(tgt):
            raise ValueError("no titan_rtx_b1 or edgegpu rows")
        targets = ["energy_j", "latency_ms"]
        source = CARB(preset=a.preset, random_state=0).fit(src.drop(columns=["energy_j", "memory_mb"]))
        device = OutOfFold(tgt, a.preset, arch_keys=[f"edge_{i}" for i in range(6)])
    except Exception as e:  # not built yet, or CARB cannot model the family yet: say so, keep the CPU pair
        out["nb201"] = f"not run: {type(e).__name__}: {' '.join(str(e).split())[:240]}"
        print("nb201:", out["nb201"])
        return
    rows, curves, sweeps = _rows_for(
        "nb201 titan_rtx_b1->edgegpu", "device model (OOF)", device, source, tgt, targets, a.confidence, a.sweep, []
    )
    out["rows"] += rows
    out["recall_curves"] += curves
    out["confidence_sweep"] += sweeps
    device_qs = _quantile_scale(tgt, a.preset, arch_keys=[f"edge_{i}" for i in range(6)])
    rows, _, _ = _rows_for(
        "nb201 titan_rtx_b1->edgegpu",
        "device model (OOF), quantile scale",
        device_qs,
        source,
        tgt,
        targets,
        a.confidence,
        [],
        [],
        methods=("decide", "decide, interval rule"),
    )
    out["ablation_quantile_scale"] += rows
    budgets_by_q = {q: {t: float(tgt[t].quantile(q)) for t in targets} for q in QS}
    objs = [("energy_j_per_image", "min"), ("latency_ms", "min"), ("flops_per_image", "max")]
    fronts = _true_fronts(tgt, targets, objs)
    for kind, m in (("adaptive", device), ("adaptive, quantile scale", device_qs)):
        for r in _coverage_table(m, tgt, targets, budgets_by_q, fronts):
            out["coverage"].append(
                {"dataset": "nb201 titan_rtx_b1->edgegpu", "model": "device model (OOF)", "intervals": kind, **r}
            )
    out["nb201"] = "run"


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0], json_required=True)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--sweep", type=float, nargs="*", default=[0.8, 0.95])
    ap.add_argument("--nb201", action="store_true", help="add the NAS-Bench-201 energy pair")
    ap.add_argument("--target", default="cpu-2t", help="the CPU pair's target dataset (source: cpu-1t)")
    ap.add_argument(
        "--no-ablations",
        action="store_true",
        help="the shipped intervals only (no plain / no-spread / quantile-scale models: a third of the time)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="the calibrated K=20 rows over this many seeds, per sampler (0: seed 0's rows only)",
    )
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    out: dict = {
        "command": _common.command_line(),
        "versions": _common.versions(),
        "threads": {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        "confidence": a.confidence,
        "rows": [],
        "recall_curves": [],
        "confidence_sweep": [],
        "coverage": [],
        "ablation_plain_intervals": [],
        "ablation_no_spread": [],
        "ablation_quantile_scale": [],
    }
    source, tgt = _cpu_pair(a, out)
    if a.seeds:
        _calibrated_over_seeds(a, source, tgt, ["latency_ms", "memory_mb"], out)
    if a.nb201:
        _nb201_pair(a, out)
    out["wall_s"] = time.perf_counter() - t0
    _common.write_json(a.json, out)
    print(f"wrote {a.json} ({out['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
