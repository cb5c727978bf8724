"""Does a device model gain from reading the source model? (issue 18: ``CARB(prior=)``)

Target ``cpu-2t`` (or ``--target``), source ``cpu-1t``: the source is CARB ``--preset``
on every ``cpu-1t`` row, as Stage 1 of ``bench_decisions.py``. The device model is CARB
on the target, each config predicted by the fold model that never saw its architecture (5
folds by architecture), once alone and once reading the source's predictions
(``prior=source``), side by side on the same folds, for several seeds (each seed draws
other folds and seeds the learners). Per seed and model: MAPE and 90% coverage of memory
and latency, the median log half-width of the 90% intervals, and the share of the
target's configs the ``interval`` rule sends to measure at budgets on both targets at the
25/50/75% quantiles (accept: both 90% intervals within budget; reject: one target over
with chance >= 0.9, the lower end of its 80% interval; otherwise measure). No Stage 1
pruning here, so the shares differ a little from ``bench_decisions.py``'s.

    python benchmarks/bench_prior.py [--target cpu-2t] [--seeds 5] [--json OUT]

Data only (no timing): one thread per library, seeds fixed.
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

TARGETS = ("latency_ms", "memory_mb")
QS = (0.25, 0.5, 0.75)


def out_of_fold(tgt: pd.DataFrame, preset: str, seed: int, prior) -> dict[str, pd.DataFrame]:
    """Out-of-fold predictions by architecture (``_common.OutOfFold``, as ``bench_decisions.py``:
    the same folds and fold models) at 90% and 80% coverage."""
    oof = OutOfFold(tgt, preset, seed=seed, prior=prior)
    return {"90": oof.predict(tgt, coverage=0.9), "80": oof.predict(tgt, coverage=0.8)}


def score(tgt: pd.DataFrame, p: dict[str, pd.DataFrame]) -> dict[str, float]:
    out: dict[str, float] = {}
    y = {t: tgt[t].to_numpy(float) for t in TARGETS}
    for t in TARGETS:
        pr, lo, hi = (p["90"][c].to_numpy(float) for c in (t, f"{t}_lo", f"{t}_hi"))
        out[f"{t}_mape"] = float(np.mean(np.abs(pr / y[t] - 1)))
        out[f"{t}_coverage"] = float(np.mean((y[t] >= lo) & (y[t] <= hi)))
        out[f"{t}_halfwidth_log"] = float(np.median(np.log(hi / pr)))
    for q in QS:
        b = {t: float(np.quantile(y[t], q)) for t in TARGETS}
        accept = np.all([p["90"][f"{t}_hi"].to_numpy(float) <= b[t] for t in TARGETS], axis=0)
        reject = np.any([p["80"][f"{t}_lo"].to_numpy(float) > b[t] for t in TARGETS], axis=0) & ~accept
        feasible = np.all([y[t] <= b[t] for t in TARGETS], axis=0)
        decided = accept | reject
        out[f"measure_q{q}"] = float(np.mean(~decided))
        out[f"false_accept_q{q}"] = float(np.sum(accept & ~feasible) / max(1, np.sum(decided & ~feasible)))
        out[f"accuracy_q{q}"] = float(np.mean((accept == feasible)[decided]))
    return out


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu-2t")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from carb.model import CARB

    src, tgt = cpu_pair_data(a.target)
    t0 = time.perf_counter()
    source = CARB(preset=a.preset, random_state=0).fit(src)
    rows = []
    for seed in range(a.seeds):
        for name, prior in (("alone", None), ("source prior", source)):
            r = {"seed": seed, "model": name, **score(tgt, out_of_fold(tgt, a.preset, seed, prior))}
            rows.append(r)
            print(
                f"seed {seed} {name:12s} memory MAPE {100 * r['memory_mb_mape']:.2f}% "
                f"(hw {r['memory_mb_halfwidth_log']:.4f}, cover {r['memory_mb_coverage']:.3f})  "
                f"latency MAPE {100 * r['latency_ms_mape']:.2f}% (cover {r['latency_ms_coverage']:.3f})  "
                "to measure "
                + " / ".join(f"{100 * r[f'measure_q{q}']:.1f}%" for q in QS)
                + "  false accepts "
                + " / ".join(f"{100 * r[f'false_accept_q{q}']:.2f}%" for q in QS),
                flush=True,
            )
    df = pd.DataFrame(rows)
    mean = df.drop(columns="seed").groupby("model", sort=False).mean()
    print("\nmean over seeds:")
    for name, r in mean.iterrows():
        print(
            f"  {name:12s} memory MAPE {100 * r['memory_mb_mape']:.2f}% hw {r['memory_mb_halfwidth_log']:.4f} "
            f"latency MAPE {100 * r['latency_ms_mape']:.2f}% to measure "
            + " / ".join(f"{100 * r[f'measure_q{q}']:.2f}%" for q in QS)
            + " false accepts "
            + " / ".join(f"{100 * r[f'false_accept_q{q}']:.2f}%" for q in QS)
        )
    if a.json:
        _common.write_json(
            a.json,
            {
                "command": _common.command_line(),
                "target": a.target,
                "preset": a.preset,
                "seconds": round(time.perf_counter() - t0, 1),
                "rows": rows,
                "mean": {k: v for k, v in mean.T.to_dict().items()},
                "versions": _common.versions(),
            },
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
