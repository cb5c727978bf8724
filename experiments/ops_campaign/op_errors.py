"""Each op class's measured error: the layer model's cross-validated error on the shipped layer dataset.

    python experiments/ops_campaign/op_errors.py                       # layers-cpu-avx2-1t, 5 folds
    python experiments/ops_campaign/op_errors.py --model layers-cpu-1t --folds 5 --trees 200

For a shipped network model, its layer dataset (``carb/data/<model>.parquet``) is split in
``--folds`` folds (a layer in one fold only), ``--repeats`` times with another seed each; the
layer model is fitted as the shipped one was (``carb.netmodel.LayerModel.fit``, the model's own
latency column and feature version) on the other folds and prices the held-out one. Per op
class (``carb.netmodel.op_class``), the repeats pooled: the median ``|predicted / measured - 1|``,
the 90% quantile of ``|log(predicted / measured)|`` over its held-out layers, and their count.
Writes ``--json`` (``experiments/ops_campaign/results/op_errors.json``: one key per model, added to
what the file holds, with a per-model ``summary`` and the provenance of each key), which
``scripts/operators_page.py`` shows in the page's "error in" columns and the results page quotes.
Data only: no timing, the same digits on any machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402

from carb import netmodel  # noqa: E402
from carb.families import layers as L  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "op_errors.json"


def op_errors(model: str, folds: int, trees: int, seed: int, repeats: int = 1, features: int | None = None) -> dict:
    """Per op class: the held-out errors of ``repeats`` cross-validations (seeds ``seed``, ``seed + 1``, ...) pooled.

    ``features``: the layer features' version to fit with (default: the shipped model's own), to
    compare versions on the same layers.

    One split of a class of 25 layers moves its median by several points between seeds;
    pooling repeats steadies it (each layer counts once per repeat).
    """
    nm = netmodel.load(model)
    version = nm.layer.features if features is None else int(features)
    target = str(nm.meta.get("layer_target", "latency_ms_p5"))
    df = pd.read_parquet(ROOT / "carb" / "data" / f"{model}.parquet")
    df = df[(df["op"] != "se") & (df[target] > 0)].reset_index(drop=True)
    lf = L.layer_frame(df).reset_index(drop=True)
    y = df[target].to_numpy(np.float64)
    logs = []
    for r in range(repeats):
        fold = np.random.default_rng(seed + r).integers(0, folds, len(df))
        pred = np.full(len(df), np.nan)
        for k in range(folds):
            train, test = fold != k, fold == k
            lm = netmodel.LayerModel.fit(
                lf[train].reset_index(drop=True), y[train], trees=trees, seed=seed + r, features=version
            )
            pred[test] = lm.predict(lf[test].reset_index(drop=True))
        logs.append(np.log(np.maximum(pred, 1e-6) / y))
    log_err = np.concatenate(logs)
    err = np.abs(log_err)
    cls = np.tile(netmodel.op_class(lf), repeats)
    return {
        str(c): {
            "q90": float(np.quantile(err[cls == c], 0.9)),
            # the median |predicted / measured - 1| of the class's held-out layers (%)
            "median_pct": float(100 * np.median(np.abs(np.expm1(log_err[cls == c])))),
            "n": int((cls == c).sum() // repeats),
        }
        for c in sorted(set(cls))
        if (cls == c).sum() >= 3 * repeats
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="layers-cpu-avx2-1t", help="a shipped network model (its dataset shares its name)"
    )
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="cross-validations pooled, seeds seed, seed + 1, ...")
    ap.add_argument(
        "--features",
        type=int,
        help="fit with this layer-feature version instead of the model's own: prints, writes nothing",
    )
    ap.add_argument("--json", default=str(OUT), help="the results file (one key per model, added to what it holds)")
    a = ap.parse_args(argv)
    if a.features is not None:
        for c, v in op_errors(a.model, a.folds, a.trees, a.seed, a.repeats, a.features).items():
            print(f"{c:18s} n {v['n']:5d}  median {v['median_pct']:5.1f}%  q90 {v['q90']:.3f}")
        return 0
    out = Path(a.json)
    old = json.loads(out.read_text()) if out.is_file() else {}
    errors = op_errors(a.model, a.folds, a.trees, a.seed, a.repeats)
    about = {
        **old.get("about", {}),
        a.model: {
            "command": f"python experiments/ops_campaign/op_errors.py --model {a.model} --folds {a.folds} "
            f"--trees {a.trees} --seed {a.seed} --repeats {a.repeats}",
            "computed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    summary = {**old.get("summary", {}), a.model: summarize(errors)}
    _common.write_json(out, {a.model: errors, "about": about, "summary": summary}, argv, merge=True)
    for c, v in errors.items():
        print(f"{c:18s} n {v['n']:5d}  median {v['median_pct']:5.1f}%  q90 {v['q90']:.3f} (x{np.exp(v['q90']):.2f})")
    print(f"wrote {out}")
    return 0


def summarize(errors: dict) -> dict:
    """The classes, how many have a median held-out error over 20%, and the worst median."""
    worst = max(errors, key=lambda c: errors[c]["median_pct"])
    return {
        "classes": len(errors),
        "layers": sum(v["n"] for v in errors.values()),
        "over_20_pct": sorted(c for c, v in errors.items() if v["median_pct"] > 20),
        "n_over_20_pct": sum(v["median_pct"] > 20 for v in errors.values()),
        "worst_class": worst,
        "worst_median_pct": errors[worst]["median_pct"],
    }


if __name__ == "__main__":
    sys.exit(main())
