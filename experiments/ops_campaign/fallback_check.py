"""How far off was the price of each new op before it was measured? The op campaign against the shipped model.

    python experiments/ops_campaign/fallback_check.py campaigns/layers-ops.duckdb
    python experiments/ops_campaign/fallback_check.py campaigns/ops25-avx2.duckdb --seen layers-ops-cpu-avx2-1t \
        --json experiments/ops_campaign/results/fallback_check_ops25.json

With ``--seen``, a later op campaign against the shipped model and its earlier op campaign's rooflines: the
layers the earlier campaign measured form groups of their own (``seen:<op>``), so every other layer is priced by
rooflines fitted without it (held out).

Each layer the op campaign measured (``status == ok``) is captured as a one-layer network and priced by the
shipped network model (``layers-cpu-avx2-1t``: the ops it never measured priced by their class's measured
fallback, :func:`carb.netmodel.fit_fallback`), for the machine the campaign ran on. Per group of
op (``conv_dilated`` apart): the layers, the median and 90th percentile of
``|log(predicted / measured)|`` as a factor, the median signed ratio, and the share of measured latencies inside
the model's 90% interval (the one-layer network's price, network terms included); and the layer model's own
price of the layer (the per-layer table's latency, fallback included) against the fastest sample it learns from
(``latency_ms_min``). The bridge layers (shipped convolutions measured again) give the ratio of this
campaign's machine state to the shipped one's. Measured latency: the median of the pooled visits
(``latency_ms``, wall time of one module call). Writes ``experiments/ops_campaign/results/fallback_check.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb import netmodel  # noqa: E402
from carb.campaign.store import Store  # noqa: E402
from carb.families import config_from_row  # noqa: E402
from carb.measure.fingerprint import here  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "fallback_check.json"


def _capture(cfg: object) -> object:
    """The one-layer network of a layer config, captured as the campaign ran it (its inputs held as buffers)."""
    import torch

    from carb import graph
    from carb.families import layers as L

    return graph.capture(L.build(cfg), torch.randn(cfg.batch, 3, cfg.input_size, cfg.input_size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--model", default="layers-cpu-avx2-1t")
    ap.add_argument(
        "--seen",
        nargs="*",
        default=[],
        help="shipped layer datasets whose layers are scored apart (group seen:<op>), not as new",
    )
    ap.add_argument("--json", default=str(OUT), help="where to write the results")
    args = ap.parse_args()
    with Store(args.store) as st:
        rows = st.measurements("cpu-1t")
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    shipped = set(pd.read_parquet(ROOT / "carb" / "data" / f"{args.model}.parquet")["config_id"])
    seen = {c for name in args.seen for c in pd.read_parquet(ROOT / "carb" / "data" / f"{name}.parquet")["config_id"]}
    machine = here()
    tables = [_capture(config_from_row(r)) for r in rows.to_dict("records")]
    from carb.netmodel import fallback as netfallback

    doc = {}
    for how, extra in (("class_fallback", {}), ("own_rooflines_in_sample", netfallback.OP_DATASETS)):
        netfallback.OP_DATASETS = extra  # the shipped model as it priced these ops before the campaign, then after
        for cached in (netfallback._fallback_of_file, netfallback._op_rooflines_of_file):
            cached.cache_clear()
        nm = netmodel.load(args.model)
        doc[how] = _evaluate(rows, tables, netmodel.predict_tables(tables, nm, machine=machine), shipped, seen)
        print(how)
        print(pd.DataFrame(doc[how]["groups"]).T.to_string(float_format=lambda v: f"{v:.2f}"))
        print("all new ops:", doc[how]["all_new"])
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "carb"], capture_output=True, text=True
    )
    out = {
        "what": "single layers of the op campaign: measured latency (median of pooled visits, wall time) against the "
        f"shipped {args.model} model's price, with the ops' class fallback (before the campaign) and with each op's "
        "own roofline fitted on these very layers (after: in-sample, its honest error is the roofline's "
        "leave-one-layer-out q in the model's fallback)"
        + (
            f"; the layers of {', '.join(args.seen)} apart (groups seen:<op>): every other layer is held out from "
            "the rooflines"
            if args.seen
            else ""
        ),
        "store": args.store,
        "seen": args.seen,
        "model": args.model,
        "machine": machine.describe(),
        "commit": commit.strip(),
        "clean": not dirty.stdout.strip(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **doc,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


def _evaluate(rows: pd.DataFrame, tables: list, preds: list, shipped: set, seen: set = frozenset()) -> dict:
    """Per op group: the network-level and layer-level errors of the predictions, and the interval's coverage.

    Layers of ``shipped`` are the bridge; layers of ``seen`` (an earlier op campaign's) form ``seen:<group>``
    groups, left out of ``all_new``.
    """
    out_rows = []
    for r, p in zip(rows.to_dict("records"), preds):
        dilated = pd.notna(r.get("dilation")) and float(r["dilation"]) > 1
        g = "bridge" if r["config_id"] in shipped else f"{r['op']}{'_dilated' if dilated else ''}"
        g = f"seen:{g}" if r["config_id"] in seen and g != "bridge" else g
        out_rows.append(
            {
                "config_id": r["config_id"],
                "group": g,
                "op": r.get("op"),
                "measured_ms": float(r["latency_ms"]),
                "measured_min_ms": float(r.get("latency_ms_min", np.nan)),
                "layer_predicted_ms": float(p.layers["latency_ms"].sum()),
                "predicted_ms": float(p.latency_ms),
                "lo_ms": float(p.latency_ms_lo),
                "hi_ms": float(p.latency_ms_hi),
                "unknown_ops": list(p.unknown_ops),
            }
        )
    df = pd.DataFrame(out_rows)
    df["ratio"] = df.predicted_ms / df.measured_ms
    df["covered"] = (df.lo_ms <= df.measured_ms) & (df.measured_ms <= df.hi_ms)
    # the layer model's own price (before the network terms) against the fastest sample it learns from
    df["layer_ratio"] = df.layer_predicted_ms / df.measured_min_ms
    summary = {}
    for g, sub in df.groupby("group"):
        err = np.abs(np.log(sub.ratio))
        summary[g] = {
            "layers": int(len(sub)),
            "priced_by_fallback": int(sum(bool(u) for u in sub.unknown_ops)),
            "median_abs_error_x": float(np.exp(np.median(err))),
            "p90_abs_error_x": float(np.exp(np.quantile(err, 0.9))),
            "median_ratio_pred_over_measured": float(np.median(sub.ratio)),
            "coverage_90": float(sub.covered.mean()),
            "layer_median_abs_error_x": float(np.exp(np.median(np.abs(np.log(sub.layer_ratio))))),
            "layer_median_ratio": float(np.median(sub.layer_ratio)),
        }
    new = df[(df.group != "bridge") & ~df.group.str.startswith("seen:")]
    return {
        "groups": summary,
        "all_new": {
            "layers": int(len(new)),
            "median_abs_error_x": float(np.exp(np.median(np.abs(np.log(new.ratio))))),
            "coverage_90": float(new.covered.mean()),
            "layer_median_abs_error_x": float(np.exp(np.median(np.abs(np.log(new.layer_ratio))))),
        },
        "rows": out_rows,
    }


if __name__ == "__main__":
    main()
