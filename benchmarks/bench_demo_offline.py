"""``carb demo`` replayed offline on shipped measurements: where do its K, its intervals and its calls land?

The demo trains CARB (``fast``) on ``cpu-1t``, measures K = 12 configs of the ``cpu`` space
chosen by :func:`carb.transfer.calibrate.choose_samples`, calibrates
(:func:`carb.transfer.calibrate.fit_calibrated`), screens under the calibrated medians of
latency and memory, then measures 16 validation configs (the 8 best-ranked shortlisted and 8
at random) and scores them. Here every "measurement" is a shipped row of the config on
another machine (``--truth``): ``cpu-2t`` (the source's kind of CPU at 2 threads, fp32 and
bf16) or ``cpu-avx2-2t`` (another kind of CPU, AVX2-only, 2 threads; fp32 only, as the demo
screens on a CPU without native bf16). So the figures hold no drift or noise of today's
machine: they are the method's. The candidates are the ``cpu`` space's configs the truth
holds. Seeds vary the sampler's and the control sample's draws (the demo uses seed 0).

Per seed: the validated configs' 90% interval coverage of memory and latency, how many were
extrapolated (beyond the K's range, or the source's domain), the budget calls (decided,
``measure``, accuracy on the decided; an extrapolated config is never accepted, as ``carb
screen`` calls it), the median latency error, and the coverage over every unmeasured candidate
(in the K's range and beyond it).

Variants side by side in one run, each on the same source model, candidates and seeds (the
screen follows the calibrated model, so each variant gets its own shortlist):

- ``current``: the library as it is (corner picks, then quantile bins; reach widening);
- ``no reach``: the same K and maps without the widening and flag beyond the K's range;
- ``bins only``: the sampler without its corner picks (one config per quantile bin of
  predicted latency, maximin in the bin: the sampler before), with the reach;
- ``bins only, no reach``: the method before both;
- ``K = n``: more calibration measurements.

Data only: no timing, machine load does not change the figures.

    python benchmarks/bench_demo_offline.py [--seeds 20] [--truth cpu-2t] [--variants current ...] [--json F]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads BLAS
    os.environ.setdefault(_v, "1")

import warnings

import _common
import numpy as np
import pandas as pd

import carb.transfer.calibrate as C


def _bins_only(candidates, source, k, seed=0, target="latency_ms"):
    """The sampler without its corner picks: one config per quantile bin of predicted ``target``, maximin in the bin."""
    if k >= len(candidates):
        return candidates.copy()
    pred = np.log(source.predict(candidates)[target].to_numpy(float))
    rng = np.random.default_rng(seed)
    levels = C._level_ranks(candidates)
    order = np.argsort(pred + rng.uniform(0, 1e-9, len(pred)))
    chosen: list[int] = []
    for b in np.array_split(order, k):
        if not chosen:
            chosen.append(int(rng.choice(b)))
            continue
        d = np.min(((levels[b][:, None, :] - levels[chosen][None, :, :]) ** 2).sum(-1), axis=1)
        chosen.append(int(b[np.argmax(d + rng.uniform(0, 1e-9, len(d)))]))
    return candidates.iloc[sorted(chosen)].copy()


#: variant -> (sampler, K, reach kept)
VARIANTS = {
    "current": (C.choose_samples, 12, True),
    "no reach": (C.choose_samples, 12, False),
    "bins only": (_bins_only, 12, True),
    "bins only, no reach": (_bins_only, 12, False),
    "K = 16": (C.choose_samples, 16, True),
    "K = 24": (C.choose_samples, 24, True),
}


def _covered(pred: pd.DataFrame, truth: pd.DataFrame, t: str) -> np.ndarray:
    """Whether each measured value lies in its predicted interval."""
    v = truth[t].to_numpy(float)
    return (v >= pred[f"{t}_lo"].to_numpy(float)) & (v <= pred[f"{t}_hi"].to_numpy(float))


def simulate(source, cands: pd.DataFrame, truth: pd.DataFrame, seed: int, variant: str, validate=8, control=8) -> dict:
    """One offline demo sitting, as :func:`carb.demo.run_demo` runs it; ``truth`` (by config_id) stands in for every
    measurement."""
    from carb.decide.screen import screen
    from carb.decide.validate import decision_metrics, truly_feasible

    choose, k, reach = VARIANTS[variant]
    pick = choose(cands, source, k, seed=seed)
    model = C.fit_calibrated(source, truth.loc[pick.config_id].reset_index())
    if not reach:
        model.reach_ = {}
    pred = model.predict(cands)
    budgets = {t: float(np.round(np.median(pred[t]), 3)) for t in ("latency_ms", "memory_mb")}
    res = screen(cands, model, budgets, source=source, seed=seed)
    top = res.shortlist.head(validate)
    rest = cands[~cands.config_id.isin(set(top.config_id))]
    ctrl = rest.sample(min(control, len(rest)), random_state=seed)
    val = truth.loc[pd.concat([top.config_id, ctrl.config_id])].reset_index()
    vp = model.predict(val)
    ext = vp["extrapolated"].to_numpy(bool) if "extrapolated" in vp.columns else np.zeros(len(val), bool)
    call_of = dict(zip(res.decisions.config_id, res.decisions.decision)) if not res.decisions.empty else {}
    calls = np.array([call_of.get(i, "reject") for i in val.config_id])
    calls = np.where((calls == "accept") & ext, "measure", calls)  # a decision never rests on extrapolation
    m = decision_metrics(calls, truly_feasible(val, budgets))
    unmeasured = ~cands.config_id.isin(set(pick.config_id)).to_numpy()
    whole = truth.loc[cands.config_id[unmeasured]]
    wp = pred[unmeasured]
    wext = wp["extrapolated"].to_numpy(bool) if "extrapolated" in wp.columns else np.zeros(len(wp), bool)
    out = {
        "seed": seed,
        "val_median": float(np.median(np.abs(vp["latency_ms"].to_numpy() / val["latency_ms"].to_numpy() - 1))),
        "extrapolated": int(ext.sum()),
        "decided": int(m["n"]),
        "measure": int(m["measure"]),
        "correct": int(round(m["accuracy"] * m["n"])) if m["n"] else 0,
        "false_accepts": int(m["false_accepts"]),
        "k_precisions": sorted(set(pick.precision)),
        "k_batches": sorted(int(b) for b in set(pick.batch)),
    }
    for t in ("memory_mb", "latency_ms"):
        cov = _covered(vp, val, t)
        wc = _covered(wp, whole, t)
        out[f"cover_{t}"] = float(cov.mean())
        out[f"cover_in_{t}"] = float(wc[~wext].mean()) if (~wext).any() else float("nan")
        out[f"cover_out_{t}"] = float(wc[wext].mean()) if wext.any() else float("nan")
        out[f"width_{t}"] = float(np.median(np.log(wp[f"{t}_hi"] / wp[f"{t}_lo"]) / 2))
    out["share_out"] = float(wext.mean())
    return out


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--truth", default="cpu-2t", help="the shipped dataset standing in for the demo's measurements")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    from carb import datasets
    from carb.campaign.speed import corrected
    from carb.families import space
    from carb.model import CARB

    src_rows = corrected(datasets.load("cpu-1t"), paired_only=True)  # as carb demo trains it
    truth = corrected(datasets.load(a.truth), paired_only=True)
    truth = truth[truth.status == "ok"].set_index("config_id")
    cands = space.load("cpu").to_frame()
    cands = cands[cands.config_id.isin(truth.index)].reset_index(drop=True)
    source = CARB(preset="fast").fit(src_rows)
    print(
        f"offline demo: source CARB fast on cpu-1t ({len(src_rows)} rows); truth {a.truth}; {len(cands)} candidates "
        f"({', '.join(sorted(set(cands.precision)))}); 8 top + 8 random validated; seeds 0..{a.seeds - 1}"
    )
    print(
        "validated (16 per seed, means over seeds): memory / latency 90% interval coverage, extrapolated; calls: "
        "decided, measure, accuracy on decided (pooled), false accepts; median latency error | unmeasured "
        "candidates: share beyond the K, coverage in / beyond, median half-width (log)"
    )
    out = {}
    for name in a.variants:
        df = pd.DataFrame([simulate(source, cands, truth, s, name) for s in range(a.seeds)])
        out[name] = df.to_dict("records")
        acc = df.correct.sum() / max(df.decided.sum(), 1)
        print(
            f"{name:20s} cover mem {100 * df.cover_memory_mb.mean():5.1f}% lat {100 * df.cover_latency_ms.mean():5.1f}%"
            f" (seeds >= 85%: {100 * (df.cover_memory_mb >= 0.85).mean():3.0f}% / "
            f"{100 * (df.cover_latency_ms >= 0.85).mean():3.0f}%), extrap {df.extrapolated.mean():4.1f} | decided "
            f"{df.decided.mean():4.1f} measure {df.measure.mean():4.1f} acc {acc:.3f} FA {df.false_accepts.sum()} | "
            f"err {100 * df.val_median.median():4.1f}% || beyond {100 * df.share_out.mean():4.1f}%, mem in/out "
            f"{100 * df.cover_in_memory_mb.mean():4.1f}/{100 * df.cover_out_memory_mb.mean():4.1f}% lat in/out "
            f"{100 * df.cover_in_latency_ms.mean():4.1f}/{100 * df.cover_out_latency_ms.mean():4.1f}%, hw mem "
            f"{df.width_memory_mb.mean():.3f} lat {df.width_latency_ms.mean():.3f}",
            flush=True,
        )
    if a.json:
        _common.write_json(a.json, out)


if __name__ == "__main__":
    main()
