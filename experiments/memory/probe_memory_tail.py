"""Memory intervals with a quantile scale (``carb.model._conformal.TARGET_TAIL``) against the
least-squares scale of the default, on cpu-1t -> cpu-2t: coverage per batch regime, near the
budgets and on the true fronts, and the interval rule's calls, for the device model out of
fold (alone and reading the source model, ``CARB(prior=)``) and the K = 20 calibrated model.

The same pair, folds, seeds and rows as ``benchmarks/bench_decisions.py`` (its ``OutOfFold``,
``_coverage_table`` and ``_rows_for``), only the ``decide, interval rule`` calls. Data only.

    taskset -c 1 python benchmarks/probe_memory_tail.py --json OUT.json
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_decisions as bd  # noqa: E402
import carb.model._conformal as cf  # noqa: E402

from carb.families.features import compute  # noqa: E402
from carb.model import CARB  # noqa: E402
from carb.transfer.calibrate import choose_samples, fit_calibrated  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--tail", type=float, default=0.9, help="quantile of log |r| for the memory scale")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    src, tgt = bd.cpu_pair_data("cpu-2t")
    targets = ["latency_ms", "memory_mb"]
    objs = [("latency_ms", "min"), ("memory_mb", "min"), ("flops_per_image", "max")]
    res: dict = {"argv": sys.argv, "versions": bd._versions(), "coverage": [], "rows": []}
    keep = dict(cf.TARGET_TAIL)
    try:
        for tail in (None, a.tail):
            cf.TARGET_TAIL = {"memory_mb": tail}
            t0 = time.time()
            source = CARB(preset="default", random_state=0).fit(src)
            models = {
                "device model (OOF)": (bd.OutOfFold(tgt, "default"), tgt),
                "device model (OOF), source prior": (bd.OutOfFold(tgt, "default", prior=source), tgt),
            }
            chosen = choose_samples(tgt, source, 20, seed=0)
            rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
            models["calibrated K=20"] = (fit_calibrated(source, chosen), rest)
            print(f"memory tail {tail}: models fitted in {time.time() - t0:.0f} s", flush=True)
            for name, (m, cands) in models.items():
                cfr = cands if "flops_per_image" in cands.columns else cands.join(compute(cands)[["flops_per_image"]])
                budgets_by_q = {q: {t: float(cands[t].quantile(q)) for t in targets} for q in bd.QS}
                fronts = bd._true_fronts(cfr, targets, objs)
                for r in bd._coverage_table(m, cands, targets, budgets_by_q, fronts):
                    res["coverage"].append({"memory_tail": tail, "model": name, **r})
                rows, _, _ = bd._rows_for(
                    "cpu-1t->cpu-2t", name, m, source, cands, targets, 0.9, [], [], methods=("decide, interval rule",)
                )
                res["rows"] += [{"memory_tail": tail, **r} for r in rows]
    finally:
        cf.TARGET_TAIL = keep
    Path(a.json).write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
