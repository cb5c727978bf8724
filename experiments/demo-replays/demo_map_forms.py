"""Which form of the calibration map would have served `carb demo` sittings best? (issue 16)

Data only: for each demo folder, the K calibration rows (``characterized.csv``, put at their
median sentinel speed as the demo does) fit four maps of the source model's latency
prediction ``s`` in log, by least squares: a factor (``log y = a + log s``), a line
(``a + b log s``), a line plus ``c log batch``, a factor plus ``c log batch``; and carb's own
choice among them (``carb.transfer.calibrate.fit_calibrated``: leave-one-out). Each is scored on the
sitting's validated rows at the calibration's speed: the median relative latency error.

    python benchmarks/demo_map_forms.py DIR [DIR ...] [--json OUT]

The source model is refitted as the demo fits it (``demo_floor.demo_source``; deterministic).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd

FORMS = ("factor", "line", "line+batch", "factor+batch")


def _design(s: np.ndarray, batch: np.ndarray, form: str) -> np.ndarray:
    one, ls, lb = np.ones_like(s), np.log(s), np.log(batch)
    return {
        "factor": one[:, None],
        "line": np.column_stack([one, ls]),
        "line+batch": np.column_stack([one, ls, lb]),
        "factor+batch": np.column_stack([one, lb]),
    }[form]


def main() -> None:
    from demo_floor import folders_args, sittings

    a = folders_args(__doc__)
    warnings.filterwarnings("ignore")

    from carb.campaign import speed as drift
    from carb.transfer.calibrate import fit_calibrated

    rows = []
    for d, src in sittings(a.folders):
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
        row["carb (leave-one-out choice)"] = float(
            np.median(np.abs(m.predict(v)["latency_ms"].to_numpy(float) / truth - 1))
        )
        rows.append(row)
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    cols = [c for c in df.columns if c != "folder"]
    print("\nmean: " + ", ".join(f"{c} {100 * df[c].mean():.1f}%" for c in cols))
    print("at or under 10%: " + ", ".join(f"{c} {(df[c] <= 0.10).sum()} of {len(df)}" for c in cols))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
