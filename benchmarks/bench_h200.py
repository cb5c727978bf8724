"""The first GPU dataset with measured energy (``h200``, issue 17): how well CARB learns it,
and how energy and latency scale with the batch there.

Parts (each prints its table; ``--json`` writes them all):

``accuracy``
    ``carb.model.evaluation`` on the grouped split (whole architectures held out, a fifth of the
    rows) for seeds 0..4 (``--seeds``), presets ``default``, ``flops-linear``, ``lgbm`` and
    ``power-latency``; mean and range over the seeds. Energy twice: ``energy_j`` as
    shipped (net of idle power) and the gross energy (``energy_gross_j`` put in its place:
    what the GPU drew, idle included, the comparable figure at batch 1 where net energy is
    a few watts times the latency).
``scaling``
    ``carb.studies.analyses.scaling`` over the linked architectures, all rows and per precision:
    the factor from the smallest to the largest batch of gross and net energy, latency and
    memory (the study: energy x35.4, latency x11.2), with the busy power per batch.
``transfer``
    The study's finding that memory transfers across devices while latency needs a
    device model, on our two kinds of device: CARB fitted on ``cpu-1t`` (``--source``; a
    CPU, peak memory of the process) ranks the H200's fp32 rows (``precision`` the source
    knows; batch and input size beyond its range included, and within it alone): Spearman
    of its predicted memory and latency against the H200's measured ones.

    python benchmarks/bench_h200.py --json benchmarks/results/h200.json

Deterministic: seeds fixed, one thread per library.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads BLAS
    os.environ.setdefault(_v, "1")

import time
import warnings

import _common
import numpy as np
import pandas as pd

from carb import datasets
from carb.model import evaluation as evaluate
from carb.studies import analyses as analysis

PRESETS = ("default", "flops-linear", "lgbm", "power-latency")
METRICS = ("r2", "mape", "within_10pct", "spearman")


def accuracy(df: pd.DataFrame, seeds: list[int]) -> dict:
    """Grouped-split figures per energy definition, preset and target, over the seeds."""
    out: dict = {}
    for energy in ("net", "gross"):
        data = df if energy == "net" else df.assign(energy_j=df["energy_gross_j"])
        runs = []
        for seed in seeds:
            with warnings.catch_warnings():  # the extrapolation warnings of held-out extremes
                warnings.simplefilter("ignore")
                runs.append(evaluate.evaluate(data, "grouped", presets=PRESETS, seed=seed))
        table: dict = {}
        for preset in PRESETS:
            for target in runs[0]["targets"]:
                if energy == "gross" and target != "energy_j":
                    continue  # latency and memory do not change with the energy definition
                vals = {m: [r["results"].get(preset, {}).get(target, {}).get(m) for r in runs] for m in METRICS}
                vals = {m: [v for v in vs if v is not None and np.isfinite(v)] for m, vs in vals.items()}
                table[f"{preset}/{target}"] = {
                    m: {"mean": float(np.mean(vs)), "min": float(np.min(vs)), "max": float(np.max(vs))}
                    for m, vs in vals.items()
                    if vs
                }
        out[energy] = {"seeds": seeds, "test_rows": [r["rows"]["test"] for r in runs], "table": table}
    return out


def scaling(df: pd.DataFrame) -> dict:
    targets = ["energy_gross_j", "energy_j", "latency_ms", "memory_mb"]
    cols = ["target", "batch_min", "batch_max", "n_archs", "factor", "per_image_gain"]
    res = {"all": analysis.scaling(df, targets=targets).summary[cols].to_dict("records")}
    by = analysis.scaling(df, targets=targets, by="precision").summary
    res["by_precision"] = by[["precision", *cols]].to_dict("records")
    busy = df.energy_gross_j / (df.latency_ms / 1e3)
    res["busy_power_w_by_batch"] = {int(b): float(v) for b, v in busy.groupby(df.batch).median().items()}
    keys = ["block", "depth", "width", "early_downsample", "input_size", "precision"]
    piv = df.pivot_table(index=keys, columns="batch", values="latency_ms")
    lo, hi = df.batch.min(), df.batch.max()
    ratio = (piv[hi] / piv[lo]).dropna()
    res["latency_hi_over_lo_per_arch"] = {
        "median": float(ratio.median()),
        "under_1_5": int((ratio < 1.5).sum()),
        "archs": int(len(ratio)),
    }
    return res


def transfer(df: pd.DataFrame, source: str) -> dict:
    from scipy.stats import spearmanr

    from carb.model import CARB

    src = datasets.load(source)
    src = src[src.status == "ok"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CARB(random_state=0).fit(src)
    known = set(src.precision)
    rows = df[df.precision.isin(known)]
    inside = rows[(rows.batch <= src.batch.max()) & (rows.input_size <= src[src.family == "cifar"].input_size.max())]
    out: dict = {"source": source, "precisions": sorted(known & set(df.precision))}
    for name, part in (("all", rows), ("within_source_range", inside)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = model.predict(part)
        out[name] = {
            "rows": int(len(part)),
            **{t: float(spearmanr(pred[t], part[t]).statistic) for t in ("memory_mb", "latency_ms")},
        }
    return out


def main() -> None:
    ap = _common.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="h200", help="dataset name or file (default: the shipped h200)")
    ap.add_argument("--seeds", type=int, default=5, help="grouped splits to average over")
    ap.add_argument("--source", default="cpu-1t", help="the transfer part's source dataset")
    a = ap.parse_args()
    t0 = time.perf_counter()
    df = datasets.load(a.data)
    df = df[df.status == "ok"].reset_index(drop=True)
    res = {
        "data": a.data,
        "rows": len(df),
        "accuracy": accuracy(df, list(range(a.seeds))),
        "scaling": scaling(df),
        "transfer": transfer(df, a.source),
    }
    res["seconds"] = time.perf_counter() - t0
    for energy, part in res["accuracy"].items():
        print(f"\naccuracy, grouped split, seeds {part['seeds']} (test rows {part['test_rows']}), energy = {energy}")
        print(f"{'preset/target':34s} {'R2':>16s} {'MAPE':>18s} {'within 10%':>18s} {'Spearman':>8s}")
        for name, m in part["table"].items():
            f = lambda k, pct=False: (
                f"{100 * m[k]['mean']:.1f}% [{100 * m[k]['min']:.1f}-{100 * m[k]['max']:.1f}]"  # noqa: E731
                if pct
                else f"{m[k]['mean']:.3f} [{m[k]['min']:.2f}-{m[k]['max']:.2f}]"
            )
            print(
                f"{name:34s} {f('r2'):>16s} {f('mape', True):>18s} {f('within_10pct', True):>18s} "
                f"{m['spearman']['mean']:8.3f}"
            )
    print("\nscaling, smallest to largest batch (factor of the cost per forward of the whole batch)")
    for r in res["scaling"]["all"]:
        print(f"  all  {r['target']:15s} x{r['factor']:.2f} over {r['n_archs']} archs")
    for r in res["scaling"]["by_precision"]:
        print(f"  {r['precision']} {r['target']:15s} x{r['factor']:.2f} over {r['n_archs']} archs")
    print("  busy power by batch (W):", {b: round(v) for b, v in res["scaling"]["busy_power_w_by_batch"].items()})
    print("  latency at the largest over the smallest batch, per arch:", res["scaling"]["latency_hi_over_lo_per_arch"])
    tr = res["transfer"]
    print(f"\ntransfer: CARB fitted on {tr['source']} ranks the H200's {'/'.join(tr['precisions'])} rows (Spearman)")
    for name in ("all", "within_source_range"):
        print(
            f"  {name:20s} rows {tr[name]['rows']:3d}  memory {tr[name]['memory_mb']:.3f}  "
            f"latency {tr[name]['latency_ms']:.3f}"
        )
    print(f"\n{res['seconds']:.0f} s")
    if a.json:
        _common.write_json(a.json, res)


if __name__ == "__main__":
    main()
