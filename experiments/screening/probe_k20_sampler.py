"""The in-domain calibrated K = 20 decisions of ``bench_decisions`` (cpu-1t -> cpu-2t) over
seeds, for the calibration sampler's variants side by side, on one source model.

- ``current``: ``choose_samples`` (corner picks in place of their bins' picks, then quantile bins);
- ``bins only``: one config per quantile bin, maximin in the bin (no corner picks);
- ``bins only, no reach``: the same without the widening beyond the K's range;
- ``K + corners``: the bins-only K plus the corner picks on top (K + 3 measurements).

Per variant, seed and budget quantile: decided share, accuracy on the decided configs,
false accepts (count and both shares), measure share. Data only.

    python experiments/screening/probe_k20_sampler.py --seeds 10 --json OUT.json
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_decisions as D  # noqa: E402
import bench_demo_offline as O  # noqa: E402
import pandas as pd  # noqa: E402
from _common import cpu_pair_data  # noqa: E402

import carb.transfer.calibrate as C  # noqa: E402


def k_plus_corners(tgt, source, k, seed):
    base = O._bins_only(tgt, source, k, seed=seed)
    corners = C._corner_picks(tgt, source.predict(tgt), "latency_ms", 3)
    ids = set(base.config_id) | set(tgt.iloc[corners].config_id)
    return tgt[tgt.config_id.isin(ids)].copy()


VARIANTS = {
    "current": (lambda t, s, k, seed: C.choose_samples(t, s, k, seed=seed), True),
    "bins only": (lambda t, s, k, seed: O._bins_only(t, s, k, seed=seed), True),
    "bins only, no reach": (lambda t, s, k, seed: O._bins_only(t, s, k, seed=seed), False),
    "K + corners": (k_plus_corners, True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    from carb.model import CARB

    src, tgt = cpu_pair_data("cpu-2t")
    t0 = time.perf_counter()
    source = CARB(preset=a.preset, random_state=0).fit(src)
    print(f"source fitted in {time.perf_counter() - t0:.0f} s", flush=True)
    targets = ["latency_ms", "memory_mb"]
    rows = []
    for seed in range(a.seeds):
        for v in a.variants:
            choose, reach = VARIANTS[v]
            chosen = choose(tgt, source, a.k, seed)
            model = C.fit_calibrated(source, chosen)
            if not reach:
                model.reach_ = {}
            rest = tgt[~tgt.config_id.isin(chosen.config_id)].reset_index(drop=True)
            got, _, _ = D._rows_for("cpu-1t->cpu-2t", v, model, source, rest, targets, 0.9, [], [], ("decide",))
            for r in got:
                r.update(seed=seed, variant=v, k_measured=len(chosen))
                rows.append(
                    {
                        k: r[k]
                        for k in (
                            "variant",
                            "seed",
                            "q",
                            "k_measured",
                            "decided",
                            "accuracy",
                            "false_accepts",
                            "accepted",
                            "over_budget",
                            "false_accept",
                            "false_discovery",
                            "measure_share",
                            "front_recall",
                            "pruning",
                        )
                    }
                )
        Path(a.json).write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    df = pd.DataFrame(rows)
    print(df.groupby(["variant", "q"])[["decided", "accuracy", "false_accepts", "front_recall"]].mean().round(4))
    print(df.groupby("variant")[["decided", "accuracy", "false_accepts", "k_measured"]].mean().round(4))


if __name__ == "__main__":
    main()
