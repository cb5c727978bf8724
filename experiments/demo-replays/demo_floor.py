"""Re-score `carb demo` output folders: the validated median latency error raw and
drift-corrected, and the sitting's floor (`carb.demo.sitting_floor`: a map of the source's
own kind fitted on the validated configs themselves).

    python benchmarks/demo_floor.py /tmp/demo1 /tmp/demo2 /tmp/demo3 [--json OUT]

Data only: reads each folder's validation.csv and summary.json and refits the demo's source
model (CARB `fast` on the folder's source dataset, `source_dataset` in its summary, cpu-1t
where absent; deterministic), so it can run on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def folders_args(doc: str) -> argparse.Namespace:
    """The command line of the scripts that read `carb demo` folders: ``DIR [DIR ...] [--json OUT]``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def demo_source(folder: Path, cache: dict):
    """The source model of a `carb demo` folder, fitted as the demo fits it (CARB `fast` on
    the folder's ``source_dataset``, cpu-1t where its summary has none), once per dataset
    (``cache``: dataset name -> model)."""
    from carb import datasets
    from carb.campaign import speed as drift
    from carb.model import CARB

    name = json.loads((folder / "summary.json").read_text()).get("source_dataset") or "cpu-1t"
    if name not in cache:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache[name] = CARB(preset="fast").fit(drift.corrected(datasets.load(name), paired_only=True))
    return cache[name]


def sittings(folders):
    """Each `carb demo` folder with its source model (:func:`demo_source`, fitted once per
    source dataset): ``(folder, model)`` pairs."""
    cache: dict = {}
    for d in folders:
        yield d, demo_source(d, cache)


def main() -> None:
    a = folders_args(__doc__)

    from carb.demo import sitting_floor

    rows = []
    for d, source in sittings(a.folders):
        v = pd.read_csv(d / "validation.csv")
        sm = json.loads((d / "summary.json").read_text())
        corr = v.assign(latency_ms=v["latency_ms_corrected"]) if "latency_ms_corrected" in v else v
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fc = sitting_floor(source, v, corr, ["latency_ms"]).get("latency_ms", np.nan)
            fr = sitting_floor(source, v, v, ["latency_ms"]).get("latency_ms", np.nan)
        rows.append(
            {
                "folder": str(d),
                "source": sm.get("source_dataset") or "cpu-1t",
                "n": len(v),
                "raw": float(np.median(np.abs(v.pred_latency_ms / v.latency_ms - 1))),
                "corrected": float(np.nanmedian(np.abs(v.pred_latency_ms / corr.latency_ms - 1))),
                "floor_corrected": fc,
                "floor_raw": fr,
                "speed_change": (sm.get("drift") or {}).get("speed_change"),
            }
        )
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    print(
        f"floor (corrected) above 10% in {(df.floor_corrected > 0.10).sum()} of {len(df)} sittings; "
        f"error above its floor in {(df.corrected > df.floor_corrected).sum()}"
    )
    if a.json:
        a.json.write_text(json.dumps({"rows": rows}, indent=2, default=float))


if __name__ == "__main__":
    main()
