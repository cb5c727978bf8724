"""Decisions never rest on extrapolation: screening with a model of another family or device kind
than the space accepts nothing it extrapolates, and in-domain screening keeps its figures.

Three parts, one run, CARB ``--preset`` (default ``fast``) everywhere, seeds fixed:

* **out of family**: CARB fitted on the shipped ``nb201`` dataset's Jetson TX2 rows
  (``edgegpu``, CIFAR-10: NAS-Bench-201 cells) screens the ResNet ``cpu`` space (2,904 configs)
  under a latency budget at the median latency measured on ``cpu-1t``;
* **out of device**: CARB fitted on the shipped ``h200`` dataset (159 CIFAR ResNets measured on an
  NVIDIA H200), saved as ``carb train`` saves it (with its dataset's machine fingerprint where
  ``carb.datasets.fingerprint`` has one, else its device label) and loaded back, screens the
  ``cpu`` space for a CPU under the same latency budget, and the ``screening`` space for a GPU
  (its own kind: not refused) under latency and memory budgets at the H200's measured medians.

  Each is refused without ``allow_foreign`` (the line is recorded). With it, the counts: configs,
  configs extrapolated, accepts, **accepts on extrapolated configs (target 0)**, and the accepts
  the same intervals would give without the guard (``guard off``: :func:`carb.decide._calls.calls`
  on the screening's own predictions with the ``extrapolated`` column dropped), and with only
  the model's own domain flags (no family / device check);
* **in domain**: the ``cpu-1t -> cpu-2t`` pair of ``benchmarks/bench_decisions.py`` (its
  ``OutOfFold`` device model, 5 folds by architecture, and the source calibrated from K = 20
  ``choose_samples`` configs), budgets on latency and memory at the quantiles q of the
  measured ``cpu-2t`` values, four calls (``decide`` interval rule = the default, ``decide``
  joint rule, two-way ``point`` and ``safe``): accuracy, false accepts both ways, false rejects,
  decided share, front recall, beside the same figures with the guard off, from the same run.

    python benchmarks/bench_screen_domain.py [--json benchmarks/results/screen_domain.json] [--preset fast]

One thread per library (set before numpy is imported); library versions in the JSON.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import _common  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import OutOfFold, cpu_pair_data  # noqa: E402

QS = (0.1, 0.25, 0.5, 0.75)
#: the calls compared in domain: (label, screen() keyword arguments)
METHODS = (
    ("decide, interval rule", {"rule": "interval"}),
    ("decide, joint rule", {"rule": "joint"}),
    ("point", {"risk": "point"}),
    ("safe", {"risk": "safe"}),
)


def _fit(df: pd.DataFrame, preset: str):
    from carb.model import CARB

    return CARB(preset=preset, random_state=0).fit(df)


def _saved(model, dataset: str, directory: Path):
    """The model as ``carb train`` writes it: its dataset's fingerprint (or device label) in the manifest."""
    from carb import datasets
    from carb.model import load, save

    fingerprint = getattr(datasets, "fingerprint", None)
    fp = fingerprint(dataset) if fingerprint is not None else None
    training = {"fingerprint": fp.to_dict()} if fp is not None else {"device": dataset}
    save(model, directory, training=training)
    return load(directory), training


def _raw_calls(d: pd.DataFrame, budgets: dict, confidence: float, rule: str, keep: np.ndarray | None = None):
    """The calls the same predictions give without the guard (``keep``: the extrapolated flags to keep)."""
    from carb.decide import calls

    frame = d.drop(columns="extrapolated")
    if keep is not None:
        frame = frame.assign(extrapolated=keep)
    return calls(frame, budgets, confidence, rule)


def foreign_case(label: str, model, cands: pd.DataFrame, budgets: dict, device: str | None, conf: float) -> dict:
    """Screen ``cands`` with a foreign model: refused, then allowed; the accepts with and without the guard."""
    from carb.decide.screen import screen

    out: dict = {"case": label, "budgets": budgets, "device": device, "candidates": len(cands)}
    try:
        screen(cands, model, budgets, device=device, confidence=conf)
        out["refused"] = None
    except ValueError as e:
        out["refused"] = str(e)
    t0 = time.perf_counter()
    res = screen(cands, model, budgets, device=device, confidence=conf, allow_foreign=True)
    out["screen_s"] = time.perf_counter() - t0
    d = res.decisions
    ext = d["extrapolated"].to_numpy(bool)
    own = model.predict(cands.set_index("config_id").loc[d.config_id].reset_index())
    own_flag = own["extrapolated"].to_numpy(bool) if "extrapolated" in own.columns else np.zeros(len(d), bool)
    off = _raw_calls(d, budgets, conf, "interval")
    own_only = _raw_calls(d, budgets, conf, "interval", keep=own_flag)
    dec = d["decision"].to_numpy()
    out.update(
        extrapolated=int(ext.sum()),
        flagged_by_the_model_itself=int(own_flag.sum()),
        accepts=int((dec == "accept").sum()),
        accepts_on_extrapolated=int(((dec == "accept") & ext).sum()),
        measure=int((dec == "measure").sum()),
        reject=int((dec == "reject").sum()),
        feasible=int(res.summary["feasible"]),
        shortlist=int(res.summary["shortlist"]),
        guard_off_accepts=int((off == "accept").sum()),
        model_flags_only_accepts=int((own_only == "accept").sum()),
    )
    print(
        f"{label}: refused: {out['refused'] is not None}; with allow_foreign: {out['extrapolated']:,} of "
        f"{len(cands):,} extrapolated, accepts {out['accepts']} (on extrapolated {out['accepts_on_extrapolated']}); "
        f"guard off {out['guard_off_accepts']:,} accepts, model's own flags only {out['model_flags_only_accepts']:,}",
        flush=True,
    )
    return out


def out_of_family(preset: str, conf: float, cpu_space: pd.DataFrame, cpu1t: pd.DataFrame) -> dict:
    from carb import datasets

    nb = datasets.load("nb201", device="edgegpu")
    nb = nb[(nb["status"] == "ok") & (nb["dataset"] == "cifar10")].reset_index(drop=True)
    t0 = time.perf_counter()
    model = _fit(nb, preset)
    fit_s = time.perf_counter() - t0
    budgets = {"latency_ms": float(cpu1t["latency_ms"].median())}
    out = foreign_case("nb201 edgegpu model on the cpu space", model, cpu_space, budgets, "cpu", conf)
    out.update(train_rows=len(nb), fit_s=fit_s, model_families=model.domain_["categories"].get("family"))
    return out


def out_of_device(preset: str, conf: float, cpu_space: pd.DataFrame, cpu1t: pd.DataFrame, tmp: Path) -> list[dict]:
    from carb import datasets
    from carb.families import space

    h = datasets.load("h200")
    h = h[h["status"] == "ok"].reset_index(drop=True)
    model, training = _saved(_fit(h, preset), "h200", tmp / "h200-model")
    budgets = {"latency_ms": float(cpu1t["latency_ms"].median())}
    out = foreign_case("h200 model on the cpu space, for a CPU", model, cpu_space, budgets, "cpu", conf)
    out.update(train_rows=len(h), recorded=training)
    # the same model screening for its own kind of device (budgets at the H200's measured medians): not refused
    screening = space.load("screening").to_frame()
    own = {t: float(h[t].median()) for t in ("latency_ms", "memory_mb")}
    same = foreign_case("h200 model on the screening space, for a GPU", model, screening, own, "cuda", conf)
    return [out, same]


def _full_calls(res, cands: pd.DataFrame, calls_of_survivors: np.ndarray) -> np.ndarray:
    """Every candidate's call: the survivors' given, Stage 1 prunes reject."""
    by_id = dict(zip(res.decisions.config_id, calls_of_survivors))
    return np.array([by_id.get(c, "reject") for c in cands.config_id])


def _scores(calls: np.ndarray, feas: np.ndarray, three_way: bool) -> dict:
    from carb.decide.validate import budget_metrics, decision_metrics

    m = decision_metrics(calls, feas) if three_way else budget_metrics(calls == "accept", feas)
    keep = ("accuracy", "false_accept_rate", "false_discovery_rate", "false_reject_rate", "false_accepts")
    out = {k: m[k] for k in keep + ("accepted", "over_budget") if k in m}
    out["decided"] = m.get("decided", 1.0)
    out["measure_share"] = m.get("measure_share", 0.0)
    return out


def _in_domain_rows(name: str, model, source, cands: pd.DataFrame, conf: float) -> list[dict]:
    from carb.decide.screen import screen
    from carb.decide.validate import truly_feasible, validate_against_truth

    rows = []
    for q in QS:
        budgets = {t: float(cands[t].quantile(q)) for t in ("latency_ms", "memory_mb")}
        feas = truly_feasible(cands, budgets)
        for method, kw in METHODS:
            res = screen(cands, model, budgets, source=source, confidence=conf, **kw)
            three = res.summary["risk"] == "decide"
            d = res.decisions
            now = _full_calls(res, cands, d["decision"].to_numpy())
            if three:
                off = _full_calls(res, cands, _raw_calls(d, budgets, conf, kw["rule"]))
            else:  # the risk's two-way rule on every survivor
                col = {"safe": "_hi", "point": ""}[kw["risk"]]
                ok = np.all([d[f"{t}{col}"].to_numpy(float) <= b for t, b in budgets.items()], axis=0)
                off = _full_calls(res, cands, np.where(ok, "accept", "reject"))
            objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in res.summary["objectives"]]
            v = validate_against_truth(
                list(res.feasible.config_id), list(res.shortlist.config_id), cands, budgets, objs
            )
            row = {
                "model": name,
                "method": method,
                "q": q,
                "budgets": budgets,
                "candidates": len(cands),
                "extrapolated": res.summary["extrapolated"]["configs"],
                "accepts_withheld": int(((off == "accept") & (now != "accept")).sum()),
                "front_recall": v.get("pareto_recall"),
                "shortlist": res.summary["shortlist"],
                "now": _scores(now, feas, three),
                "guard_off": _scores(off, feas, three),
            }
            rows.append(row)
            n, o = row["now"], row["guard_off"]
            print(
                f"  {name:20s} q={q:<5} {method:22s} extrapolated {row['extrapolated']:4d} withheld "
                f"{row['accepts_withheld']:3d} | acc {n['accuracy']:.4f} (off {o['accuracy']:.4f}) FA "
                f"{n['false_accept_rate']:.4f}/{n['false_discovery_rate']:.4f} (off {o['false_accept_rate']:.4f}/"
                f"{o['false_discovery_rate']:.4f}) decided {n['decided']:.3f} (off {o['decided']:.3f})",
                flush=True,
            )
    return rows


def in_domain(preset: str, conf: float) -> list[dict]:
    from carb.transfer.calibrate import choose_samples, fit_calibrated

    src, tgt = cpu_pair_data("cpu-2t")
    t0 = time.perf_counter()
    source = _fit(src, preset)
    device = OutOfFold(tgt, preset)
    chosen = choose_samples(tgt, source, 20, seed=0)
    calibrated = fit_calibrated(source, chosen)
    rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
    print(f"cpu-1t -> cpu-2t: models fitted in {time.perf_counter() - t0:.0f} s", flush=True)
    return _in_domain_rows("device model (OOF)", device, source, tgt, conf) + _in_domain_rows(
        "calibrated K=20", calibrated, source, rest, conf
    )


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0], json_default="benchmarks/results/screen_domain.json")
    ap.add_argument("--preset", default="fast")
    ap.add_argument("--confidence", type=float, default=0.9)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from carb import datasets
    from carb.families import space

    t0 = time.perf_counter()
    cpu_space = space.load("cpu").to_frame()
    cpu1t = datasets.load("cpu-1t")
    cpu1t = cpu1t[cpu1t["status"] == "ok"]
    out: dict = {
        "command": _common.command_line(),
        "machine": _common.machine()["cpu_model"],
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "versions": _common.versions(),
        "preset": a.preset,
        "confidence": a.confidence,
    }
    with tempfile.TemporaryDirectory() as tmp:
        out["out_of_family"] = out_of_family(a.preset, a.confidence, cpu_space, cpu1t)
        out["out_of_device"] = out_of_device(a.preset, a.confidence, cpu_space, cpu1t, Path(tmp))
    out["in_domain"] = in_domain(a.preset, a.confidence)
    out["wall_s"] = time.perf_counter() - t0
    _common.write_json(a.json, out)
    print(f"wrote {a.json} ({out['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
