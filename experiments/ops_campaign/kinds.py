"""How the ops' relative costs move between machine kinds: the same op-campaign layers timed on two kinds.

    python experiments/ops_campaign/kinds.py campaigns/layers-ops-xeon.duckdb      # against layers-ops-cpu-avx2-1t

The op campaign's configs (``make_configs.py --per-op 6 --min-per-op 6 --bridge 10``, seed 0) measured on
another machine kind, in a store, against the shipped ``layers-ops-cpu-avx2-1t`` (the AVX2 kind): per op,
the median ratio of ``latency_ms_min`` (the store's over the shipped), and the spread of those medians. One
calibration factor maps every op by the same ratio; the spread says how far apart the ops' own ratios lie.
Writes ``results/kinds.json`` (a key per store). Data only once measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.campaign.store import Store  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "kinds.json"
COL = "latency_ms_min"


def ratios(store: str, platform: str) -> dict:
    with Store(store, read_only=True) as st:
        x, runs = st.measurements(platform), st.runs()
    x = x[x["status"] == "ok"].drop_duplicates("config_id").set_index("config_id")
    a = pd.read_parquet(ROOT / "carb" / "data" / "layers-ops-cpu-avx2-1t.parquet").drop_duplicates("config_id")
    a = a.set_index("config_id")
    common = x.index.intersection(a.index)
    df = pd.DataFrame({"op": a.loc[common, "op"].astype(str), "ratio": x.loc[common, COL] / a.loc[common, COL]})
    by = df.groupby("op")["ratio"].agg(["median", "count"])
    med = by["median"].to_numpy()
    prov = [json.loads(p) for p in runs["provenance"] if isinstance(p, str)]
    return {
        "store": store,
        "layers": int(len(common)),
        "per_op": {op: {"median_ratio": float(r["median"]), "layers": int(r["count"])} for op, r in by.iterrows()},
        "all_median_ratio": float(df["ratio"].median()),
        "op_medians_max_over_min": float(med.max() / med.min()),
        "machine": {k: prov[-1].get(k) for k in ("cpu_model", "cpu_isa", "logical_cpus", "torch", "allocator")}
        if prov
        else None,
        "computed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", help="the op campaign measured on another kind (a campaign store)")
    ap.add_argument("--platform", default="cpu-1t")
    a = ap.parse_args(argv)
    doc = json.loads(OUT.read_text()) if OUT.is_file() else {}
    doc[Path(a.store).stem] = got = ratios(a.store, a.platform)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    for op, v in sorted(got["per_op"].items(), key=lambda kv: kv[1]["median_ratio"]):
        print(f"{op:18s} {v['layers']:3d} layers  x{v['median_ratio']:.3f}")
    print(f"all x{got['all_median_ratio']:.3f}; op medians {got['op_medians_max_over_min']:.2f}x apart; wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
