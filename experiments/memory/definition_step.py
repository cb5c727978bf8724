"""The step between the network models' memory definition and the one CARB's worker measures now.

The shipped network models were fitted on worker measurements that counted the library pages
a forked worker maps again (``probe_harness_vs_worker_forked.json``, the worker before it
mapped its parent's pages); a fresh process measures what the network adds to a process
that imported torch (the harness of the same run). Per target ``memory_mb``: the 90%
quantile of |log(fresh / forked)| and the median log error, over the carb.zoo networks of that run (``--kind``: the torchvision networks of the same
run judge the widened answers, so they stay out).

    python experiments/memory/definition_step.py --json experiments/memory/results/memory_definition_step.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default=str(HERE / "results" / "probe_harness_vs_worker_forked.json"))
    ap.add_argument("--json", required=True)
    ap.add_argument(
        "--kind",
        default="zoo",
        help="the networks the step is measured on (zoo: the torchvision networks stay out, to judge it on)",
    )
    a = ap.parse_args()
    rows = [r for r in json.loads(Path(a.runs).read_text())["rows"] if a.kind == "all" or r["kind"] == a.kind]
    logs = sorted(math.log(r["worker_memory_mb"] / r["harness_memory_mb"]) for r in rows)
    absl = sorted(abs(x) for x in logs)
    q90 = absl[min(len(absl) - 1, math.ceil(0.9 * len(absl)) - 1)]
    out = {
        "memory_mb": {"q90_abs_log": q90, "median_log_error": statistics.median(logs), "n": len(rows)},
        "from": (
            f"{len(rows)} networks ({sum(r['kind'] == 'zoo' for r in rows)} carb.zoo, "
            f"{sum(r['kind'] == 'tv' for r in rows)} torchvision) measured in one run by CARB's forked worker "
            "(library pages counted again) and by a fresh process (experiments/memory)"
        ),
        "runs": str(Path(a.runs).resolve().relative_to(ROOT)),
    }
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
