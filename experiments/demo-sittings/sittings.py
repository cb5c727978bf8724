"""Aggregate the summary.json of several `carb demo` sittings: interval coverage and budget calls.

for i in 1 2 3 4 5; do carb demo --out sit$i; done
python experiments/demo-sittings/sittings.py sit1 sit2 sit3 sit4 sit5 --json experiments/demo-sittings/results/sittings.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outs", nargs="+", help="the demo's --out folders")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    rows = []
    for out in a.outs:
        s = json.loads((Path(out) / "summary.json").read_text())
        v, cov = s["validation"], s["validation_interval_coverage"]
        rows.append(
            {
                "out": out,
                "decided": v["n"],
                "measure": v["measure"],
                "right": round(v["accuracy"] * v["n"]),
                "false_accepts": v["false_accepts"],
                "false_accepts_line": v.get("false_accepts_line"),
                "coverage": cov,
                "median_abs_error": s["validation_median_abs_error"],
                "wall_s": s.get("timings", {}).get("total_s"),
            }
        )
    decided = sum(r["decided"] for r in rows)
    doc = {
        "sittings": rows,
        "budget_accuracy": sum(r["right"] for r in rows) / decided if decided else None,
        "decided": decided,
        "mean_coverage": {t: sum(r["coverage"][t] for r in rows) / len(rows) for t in rows[0]["coverage"]},
    }
    Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "sittings"}))


if __name__ == "__main__":
    main()
