"""Which form of the calibration map would have served `carb demo` sittings best? (issue 16)

Data only: for each demo folder, the K calibration rows (``characterized.csv``, put at their
median sentinel speed as the demo does) fit four maps of the source model's latency
prediction ``s`` in log, by least squares: a factor (``log y = a + log s``), a line
(``a + b log s``), a line plus ``c log batch``, a factor plus ``c log batch``; and carb's own
choice among them (``carb.calibrate.fit_calibrated``: leave-one-out). Each is scored on the
sitting's validated rows at the calibration's speed: the median relative latency error.

    python benchmarks/demo_map_forms.py DIR [DIR ...]

The source model is refitted as the demo fits it (CARB `fast` on cpu-1t; deterministic).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

FORMS = ("factor", "line", "line+batch", "factor+batch")


def _design(s: np.ndarray, batch: np.ndarray, form: str) -> np.ndarray:
    one, ls, lb = np.ones_like(s), np.log(s), np.log(batch)
    return {"factor": one[:, None], "line": np.column_stack([one, ls]), "line+batch": np.column_stack([one, ls, lb]),
            "factor+batch": np.column_stack([one, lb])}[form]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from carb import datasets, drift
    from carb.calibrate import fit_calibrated
    from carb.model import CARB

    src = CARB(preset="fast").fit(drift.corrected(datasets.load("cpu-1t"), paired_only=True))
    rows = []
    for d in a.folders:
        k = pd.read_csv(d / "characterized.csv")
        v = pd.read_csv(d / "validation.csv")
        k, v = k[k.status == "ok"].reset_index(drop=True), v[v.status == "ok"].reset_index(drop=True)
        fit_rows, ref = drift.at_median_speed(k)
        truth = drift.normalize(v, ref_ms=ref).to_numpy(float)
        sk, sv = src.predict(k)["latency_ms"].to_numpy(float), src.predict(v)["latency_ms"].to_numpy(float)
        y = np.log(fit_rows.latency_ms.to_numpy(float))
        row = {"folder": str(d)}
        for form in FORMS:
            xk, xv = _design(sk, k.batch.to_numpy(float), form), _design(sv, v.batch.to_numpy(float), form)
            slope_one = form.startswith("factor")  # the source's log prediction enters with slope 1
            coef = np.linalg.lstsq(xk, y - np.log(sk) if slope_one else y, rcond=None)[0]
            p = np.exp(xv @ coef + (np.log(sv) if slope_one else 0.0))
            row[form] = float(np.median(np.abs(p / truth - 1)))
        m = fit_calibrated(src, fit_rows, meta={"device": "cpu"})
        row["carb (leave-one-out choice)"] = float(np.median(np.abs(m.predict(v)["latency_ms"].to_numpy(float) / truth - 1)))
        rows.append(row)
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    cols = [c for c in df.columns if c != "folder"]
    print("\nmean: " + ", ".join(f"{c} {100 * df[c].mean():.1f}%" for c in cols))
    print("at or under 10%: " + ", ".join(f"{c} {(df[c] <= 0.10).sum()} of {len(df)}" for c in cols))


if __name__ == "__main__":
    main()
