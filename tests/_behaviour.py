"""What CARB computes, recorded so that a refactor can be shown to change nothing.

``compute()`` returns a JSON-serialisable dict; ``python -m tests._behaviour OUT.json`` writes
it with sorted keys, so two runs or two trees compare byte for byte. Floats keep their exact
float64 value (Python's shortest round-trip repr); NaN and infinities are written as strings.

Sections:
  features    closed-form features of a seeded uniform sample of 15 configs of every
              built-in space, per config_id.
  netmodels   both shipped network models on the first 10 of those configs of every space,
              through carb.predict_modules: every field of each Prediction and its layers.
  zoo         50 carb.families.zoo networks through carb.predict_modules with both models,
              and the first 5 through carb.predict_module.
  demo        the demo's pair offline: CARB ``fast`` on cpu-1t, K = 12 chosen by
              choose_samples among the cpu configs cpu-2t holds, their cpu-2t rows as the
              measurements, fit_calibrated, budgets at the calibrated medians, then screen
              (seed 0) on those 1,200 configs and on the whole cpu space (2,904): per config
              the call, the stage it was decided at, the predictions and intervals.

The network predictions are asked for the model's own machine (``machine=``), so they do not
depend on the kind of machine that records them; a model whose machine facts are unknown
(``layers-cpu-1t``) is outside its domain on any machine, its intervals widened.
The figures are exact for one machine kind and library stack (BLAS, XGBoost, torch). The
network predictions depend in the last bit on how networks are grouped into one
predict_modules call, so the grouping (one call per space, precision and model) is fixed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

FEATURE_SAMPLE = 15
NETMODEL_SAMPLE = 10
ZOO_PER_FAMILY = 5
PREDICT_MODULE_N = 5
SEED = 0
DEMO_K = 12

_TIMINGS: dict[str, float] = {}


# --------------------------------------------------------------------------- JSON values


def _v(x: Any) -> Any:
    """A JSON value with no precision lost."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(x, dict):
        return {str(k): _v(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray, pd.Index, pd.Series)):
        return [_v(v) for v in list(x)]
    if x is pd.NA or x is pd.NaT:
        return "nan"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _v(getattr(x, f.name)) for f in dataclasses.fields(x)}
    return repr(x)


def _frame(df: pd.DataFrame, key: str = "config_id") -> dict[str, Any]:
    """A frame as {columns, dtypes, rows: {key: {column: value}}}."""
    cols = [c for c in df.columns if c != key]
    rows: dict[str, Any] = {}
    for rec in df[[key, *cols]].itertuples(index=False, name=None):
        k = str(rec[0])
        if k in rows:
            raise ValueError(f"duplicate {key} {k}")
        rows[k] = {c: _v(v) for c, v in zip(cols, rec[1:])}
    return {
        "columns": [str(c) for c in df.columns],
        "dtypes": {str(c): str(t) for c, t in df.dtypes.items()},
        "n": int(len(df)),
        "rows": rows,
    }


def _tick(name: str, t0: float) -> None:
    _TIMINGS[name] = round(time.perf_counter() - t0, 2)


# --------------------------------------------------------------------------- sections


def _samples() -> dict[str, list[Any]]:
    from carb.families import space

    out = {}
    for name in space.builtin_names():
        out[name] = space.load(name).sample(FEATURE_SAMPLE, seed=SEED, method="uniform")
    return out


def _features(samples: dict[str, list[Any]]) -> dict[str, Any]:
    from carb.families import features, space

    out = {}
    for name, cfgs in samples.items():
        sp = space.load(name)
        df = sp.to_frame(cfgs)
        out[name] = {"space_size_text": sp.size_text(), **_frame(features.compute(df))}
    return out


def _prediction(p: Any) -> dict[str, Any]:
    """Every public field of a carb.netmodel.Prediction, and its per-layer breakdown."""
    d = {f.name: _v(getattr(p, f.name)) for f in dataclasses.fields(p) if not f.name.startswith("_")}
    L = p.layers
    d["n_layers"] = int(len(L))
    # per layer, most expensive first (stable order): name, op, predicted ms, known
    d["layers"] = [[_v(n), _v(o), _v(t), _v(k)] for n, o, t, k in zip(L["name"], L["op"], L["latency_ms"], L["known"])]
    return d


def _input_of(row: dict[str, Any]) -> tuple[int, ...]:
    if row.get("family") == "layers":  # the layer family holds its inputs as buffers; shape for the record
        return (int(row["batch"]), int(row["cin"]), int(row["input_size"]), int(row["input_size"]))
    return (int(row["batch"]), 3, int(row["input_size"]), int(row["input_size"]))


def _own(nm: Any) -> Any:
    """The model's own machine: the snapshot is the same on whichever machine kind records it."""
    from carb.measure.fingerprint import Fingerprint
    from carb.netmodel.domain import fingerprint_of

    return fingerprint_of(nm) or Fingerprint()


def _predict_grouped(builders: list[Any], inputs: list[tuple], precisions: list[str], nm: Any) -> list[Any]:
    """carb.predict_modules once per precision (its precision argument is one for all)."""
    import carb

    out: list[Any] = [None] * len(builders)
    for prec in sorted(set(precisions)):
        idx = [i for i, p in enumerate(precisions) if p == prec]
        preds = carb.predict_modules(
            [builders[i] for i in idx], [inputs[i] for i in idx], nm, precision=prec, workers=1, machine=_own(nm)
        )
        for i, p in zip(idx, preds):
            out[i] = p
    return out


def _models() -> dict[str, Any]:
    from carb import netmodel

    return {name: netmodel.load(netmodel.resolve(name)) for name in sorted(netmodel.SHIPPED)}


def _model_info(nm: Any) -> dict[str, Any]:
    return {
        "device": nm.device,
        "coverage": _v(nm.coverage),
        "q": _v(nm.q),
        "lat_coef": _v(nm.lat_coef),
        "mem_coef": _v(nm.mem_coef),
    }


def _netmodels(samples: dict[str, list[Any]], models: dict[str, Any]) -> dict[str, Any]:
    from carb.families import arch, space

    out: dict[str, Any] = {"models": {n: _model_info(nm) for n, nm in models.items()}, "spaces": {}}
    for name, cfgs in samples.items():
        cfgs = cfgs[:NETMODEL_SAMPLE]
        df = space.load(name).to_frame(cfgs)
        rows = df.to_dict("records")
        ids = [str(r["config_id"]) for r in rows]
        builders = [functools.partial(arch.build, c) for c in cfgs]
        inputs = [_input_of(r) for r in rows]
        precs = [str(r["precision"]) for r in rows]
        per = {}
        for mname, nm in models.items():
            preds = _predict_grouped(builders, inputs, precs, nm)
            per[mname] = {i: _prediction(p) for i, p in zip(ids, preds)}
        out["spaces"][name] = per
    return out


def _zoo(models: dict[str, Any]) -> dict[str, Any]:
    import torch

    import carb
    from carb.families import zoo

    cfgs = zoo.sample_configs(per_family=ZOO_PER_FAMILY, seed=SEED)
    ids = [c.config_id for c in cfgs]
    if len(set(ids)) != len(ids):
        raise ValueError("zoo: duplicate config ids")
    builders = [functools.partial(zoo.build, c) for c in cfgs]
    inputs = [(c.batch, 3, c.input_size, c.input_size) for c in cfgs]
    precs = [c.precision for c in cfgs]
    out: dict[str, Any] = {
        "configs": {c.config_id: {**_v(c.to_dict()), "label": c.label()} for c in cfgs},
        "predict_modules": {},
        "predict_module": {},
    }
    for mname, nm in models.items():
        preds = _predict_grouped(builders, inputs, precs, nm)
        out["predict_modules"][mname] = {i: _prediction(p) for i, p in zip(ids, preds)}
    for c in cfgs[:PREDICT_MODULE_N]:
        with torch.device("meta"):
            module = zoo.build(c)
        for mname, nm in models.items():
            p = carb.predict_module(
                module, (c.batch, 3, c.input_size, c.input_size), nm, precision=c.precision, machine=_own(nm)
            )
            out["predict_module"].setdefault(mname, {})[c.config_id] = _prediction(p)
    return out


_PRED_COLS = (
    "latency_ms",
    "latency_ms_lo",
    "latency_ms_hi",
    "memory_mb",
    "memory_mb_lo",
    "memory_mb_hi",
    "energy_j",
    "energy_j_lo",
    "energy_j_hi",
)


def _screen_record(cands: pd.DataFrame, model: Any, source: Any, seed: int) -> tuple[dict[str, Any], Any, dict]:
    from carb.decide.screen import screen

    pred = model.predict(cands)
    budgets = {t: float(np.round(np.median(pred[t]), 3)) for t in ("latency_ms", "memory_mb") if t in model.targets_}
    res = screen(cands, model, budgets, source=source, seed=seed)
    src_pred = source.predict(cands)
    dec = res.decisions.set_index("config_id") if not res.decisions.empty else pd.DataFrame()
    short_rank = dict(zip(res.shortlist.config_id, res.shortlist["rank"])) if "rank" in res.shortlist else {}
    feasible = set(res.feasible.config_id)
    measure = list(res.measure.config_id) if "config_id" in res.measure else []
    per: dict[str, Any] = {}
    for i, cid in enumerate(cands.config_id):
        cid = str(cid)
        rec: dict[str, Any] = {
            "calibrated": {c: _v(pred[c].iloc[i]) for c in pred.columns},
            "source": {c: _v(src_pred[c].iloc[i]) for c in src_pred.columns},
        }
        if cid in dec.index:
            rec["stage"] = "stage2"
            rec["decision"] = str(dec.at[cid, "decision"])
            rec["stage2"] = {c: _v(dec.at[cid, c]) for c in dec.columns if c != "decision"}
        else:
            rec["stage"] = "stage1"  # pruned by Stage 1: a reject, not listed in decisions
            rec["decision"] = "reject"
        rec["feasible"] = cid in feasible
        rec["shortlist_rank"] = _v(short_rank.get(cid))
        per[cid] = rec
    summary = {k: v for k, v in res.summary.items() if k != "timings"}
    rec = {
        "budgets": _v(budgets),
        "summary": _v(summary),
        "configs": per,
        "shortlist_order": [str(c) for c in res.shortlist.config_id],
        "shortlist_columns": [str(c) for c in res.shortlist.columns],
        "feasible_order": [str(c) for c in res.feasible.config_id],
        "measure_order": [str(c) for c in measure],
        "decisions_columns": [str(c) for c in res.decisions.columns],
    }
    return rec, res, budgets


def _demo() -> dict[str, Any]:
    import carb.transfer.calibrate as C
    from carb import datasets
    from carb.families import space
    from carb.model import CARB

    t0 = time.perf_counter()
    src_rows = datasets.load("cpu-1t")
    truth = datasets.load("cpu-2t")
    truth = truth[truth.status == "ok"].set_index("config_id")
    full = space.load("cpu").to_frame()
    cands = full[full.config_id.isin(truth.index)].reset_index(drop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = CARB(preset="fast").fit(src_rows)  # as carb demo trains it
    _tick("demo_train_s", t0)
    t0 = time.perf_counter()
    pick = C.choose_samples(cands, source, DEMO_K, seed=SEED)
    measured = truth.loc[pick.config_id].reset_index()
    model = C.fit_calibrated(source, measured)
    maps = {t: (m.to_dict() if hasattr(m, "to_dict") else m) for t, m in model.maps_.items()}
    on_cpu2t, res, _ = _screen_record(cands, model, source, SEED)
    # validation as the demo picks it: the 8 best-ranked shortlisted and 8 at random
    top = res.shortlist.head(8)
    rest = cands[~cands.config_id.isin(set(top.config_id))]
    ctrl = rest.sample(min(8, len(rest)), random_state=SEED)
    val = truth.loc[pd.concat([top.config_id, ctrl.config_id])].reset_index()
    vp = model.predict(val)
    err = np.abs(vp["latency_ms"].to_numpy() / val["latency_ms"].to_numpy() - 1)
    on_full, _, _ = _screen_record(full, model, source, SEED)
    _tick("demo_calibrate_screen_s", t0)
    return {
        "source": {
            "preset": "fast",
            "dataset": "cpu-1t",
            "n_train_rows": int(source.n_train_rows_),
            "targets": list(source.targets_),
        },
        "n_candidates_cpu2t": int(len(cands)),
        "n_space": int(len(full)),
        "chosen_k": [str(c) for c in pick.config_id],
        "calibration_maps": _v(maps),
        "calibrated_targets": list(model.targets_),
        "validation": {
            "config_ids": [str(c) for c in val.config_id],
            "latency_rel_err": _v(err),
            "median": _v(np.median(err)),
        },
        "screen_cpu2t_candidates": on_cpu2t,
        "screen_cpu_space": on_full,
    }


# --------------------------------------------------------------------------- entry points


def compute() -> dict[str, Any]:
    """The snapshot (deterministic; see the module docstring)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _compute()


def _compute() -> dict[str, Any]:
    _TIMINGS.clear()
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    samples = _samples()
    _tick("sample_spaces_s", t0)
    t0 = time.perf_counter()
    feats = _features(samples)
    _tick("features_s", t0)
    t0 = time.perf_counter()
    models = _models()
    nets = _netmodels(samples, models)
    _tick("netmodels_s", t0)
    t0 = time.perf_counter()
    zoo = _zoo(models)
    _tick("zoo_s", t0)
    demo = _demo()
    _tick("total_s", t_all)
    return {"format": "carb-golden/1", "features": feats, "netmodels": nets, "zoo": zoo, "demo": demo}


def dumps(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, indent=1, allow_nan=False) + "\n"


def main(argv: list[str]) -> None:
    out = argv[1]
    d = compute()
    with open(out, "w") as f:
        f.write(dumps(d))
    print(f"wrote {out}; timings {_TIMINGS}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
