"""Choose the op classes a shipped network model prices by their own ops' rooflines, and write the choice into it.

    python scripts/own_ops.py layers-cpu-avx2-1t layers-cpu-1t     # then: python scripts/seal_netmodels.py

A model fitted by :meth:`carb.netmodel.LayerModel.fit` makes this choice itself
(:func:`carb.netmodel.layers.choose_own_ops`): a measured class whose layers' median held-out
error under rooflines of its own ops is clearly below that of the class roofline times the
forest leaves the forest. A shipped model fitted before that choice existed gets it here:
the layer model is fitted again, as the shipped one was (its dataset ``carb/data/<name>.parquet``,
its latency column ``meta["layer_target"]``, its feature version and threads, 200 trees, seed 0),
only to read the choice and the errors it rests on; the shipped forest, rooflines and network
terms stay as they are. The ops' rooflines themselves are fitted on the dataset at load
(:func:`carb.netmodel.layers.dataset_fallback`). Data only: the same choice on any machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from carb import netmodel
from carb.families.layers import layer_frame
from carb.netmodel.io import MODEL_FILE, resolve, seal

ROOT = Path(__file__).resolve().parents[1]


def choice(name: str) -> dict[str, dict[str, float]]:
    """The own-op classes of the shipped model ``name``, from a refit of its layer model on its dataset."""
    nm = netmodel.load(name)
    target = str(nm.meta.get("layer_target", "latency_ms_p5"))
    df = pd.read_parquet(ROOT / "carb" / "data" / f"{name}.parquet")
    df = df[df.get("status", pd.Series("ok", index=df.index)).fillna("ok") == "ok"]
    df = df[(df["op"] != "se") & (df[target] > 0)].reset_index(drop=True)
    lm = netmodel.LayerModel.fit(
        layer_frame(df).reset_index(drop=True),
        df[target].to_numpy(np.float64),
        trees=200,
        seed=0,
        threads=nm.layer.threads,
        features=nm.layer.features,
    )
    return lm.own_ops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="shipped network models (their datasets share their names)")
    a = ap.parse_args(argv)
    for name in a.models:
        own = choice(name)
        d = resolve(name)
        doc = json.loads((d / MODEL_FILE).read_text())
        doc["layer"]["own_ops"] = own
        (d / MODEL_FILE).write_text(json.dumps(doc, indent=1) + "\n")
        seal(d)
        for c, v in own.items():
            print(
                f"{name}: {c:12s} n {v['n']:4d}  own rooflines x{np.exp(v['roofline']):.3f}  "
                f"roofline and forest x{np.exp(v['forest']):.3f} (median held-out error)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
