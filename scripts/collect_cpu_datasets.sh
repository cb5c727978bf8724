#!/usr/bin/env bash
# Collect the shipped CPU datasets (issue 3) on this machine, in resumable parts:
#   cpu-1t: 2,500+ configs of the `cpu` space, 1 thread, pinned to one core;
#   cpu-2t: 1,200+ configs, 2 threads;
#   cpu-avx2-1t (only when named): the 592 fp32 configs of the shipped cpu-2t, shuffled, 1 thread,
#     one part; for a CPU without native bf16 kernels (shipped: an AVX2-only EPYC).
#   cpu-2t-v2 (only when named): the 1,200 configs of the shipped cpu-2t again, 2 threads, one part,
#     with the paired sentinel and `carb characterize`'s retakes of visits timed in another state of
#     the machine (on by default at 2 threads); for the AVX-512 EPYC with native bf16 that cpu-2t
#     was measured on.
#   cpu-avx2-2t (only when named): the same 592 shuffled fp32 configs (and drift sample) as
#     cpu-avx2-1t, 2 threads on both cores, one part, with the retakes; for the AVX2-only EPYC.
# Both include every imagenet ResNet-18/34/50 point of the space. After each part the
# store is exported (so the data can be read while the campaign goes on: DuckDB keeps
# the store locked while a campaign writes), and at the end of each campaign a fixed
# sample of 50 configs is measured again (drift check).
# Every part reads the speed sentinel (carb.measure.sentinel, issue 16) at its start, every
# 60 s and at its end, and spreads each config's rounds over the whole part; the drift
# check shares the platform's speed index, so it is reported raw and drift-corrected.
# Ship each platform afterwards (the card then shows the index over time and a PNG):
#   python scripts/ship.py dataset --store campaigns/cpu-1t.duckdb --name cpu-1t
# Re-running the script resumes where it stopped. Name platforms to collect only those:
#   scripts/collect_cpu_datasets.sh cpu-2t
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
work=${WORK:-campaigns}
mkdir -p "$work"
python - "$work" <<'PY'
import sys
import pandas as pd
from carb.families import space
work = sys.argv[1]
s = space.load("cpu")
imagenet = [c for c in s if c.family == "imagenet"]
def plan(n, seed):
    cfgs = list(dict.fromkeys(imagenet + s.sample(n, seed=seed, method="stratified")))
    return s.to_frame(cfgs[:max(n, len(imagenet))] if len(cfgs) > n else cfgs)
for name, n, seed in (("cpu-1t", 2500, 0), ("cpu-2t", 1200, 1)):
    df = plan(n, seed)
    parts = 10 if name == "cpu-1t" else 5
    for i in range(parts):
        df.iloc[i::parts].to_parquet(f"{work}/{name}-part{i}.parquet", index=False)
    df.sample(50, random_state=seed).to_parquet(f"{work}/{name}-drift.parquet", index=False)
    print(name, len(df), "configs,", (df.family == "imagenet").sum(), "imagenet")
from carb import datasets
cols = ["config_id", *space.PARAMETERS]
t = datasets.load("cpu-2t", features=False)
fp32 = t.loc[t.precision == "fp32", cols].sample(frac=1, random_state=7)  # shuffled: sizes interleave
fp32.to_parquet(f"{work}/cpu-avx2-1t-part0.parquet", index=False)
fp32.sample(50, random_state=7).to_parquet(f"{work}/cpu-avx2-1t-drift.parquet", index=False)
print("cpu-avx2-1t", len(fp32), "configs (the fp32 ones of cpu-2t)")
fp32.to_parquet(f"{work}/cpu-avx2-2t-part0.parquet", index=False)  # the same list, the same drift sample
fp32.sample(50, random_state=7).to_parquet(f"{work}/cpu-avx2-2t-drift.parquet", index=False)
again = t[cols]
again.to_parquet(f"{work}/cpu-2t-v2-part0.parquet", index=False)
again.sample(50, random_state=1).to_parquet(f"{work}/cpu-2t-v2-drift.parquet", index=False)
print("cpu-2t-v2", len(again), "configs (those of cpu-2t)")
PY
run() {  # name threads cpus
  local name=$1 threads=$2 cpus=$3 store="$work/$1.duckdb"
  for part in "$work/$name"-part*.parquet; do
    taskset -c "$cpus" carb characterize --configs "$part" --threads "$threads" --platform "$name" \
      --rounds 2 --max-time 1.0 --timeout 120 --store "$store"
    carb dataset export --store "$store" --out "$work/$name-snapshot.parquet"
  done
  if [ ! -f "$work/$name-drift.done" ]; then
    taskset -c "$cpus" carb characterize --configs "$work/$name-drift.parquet" --threads "$threads" \
      --platform "$name" --rounds 2 --max-time 1.0 --timeout 120 --remeasure --store "$store"
    touch "$work/$name-drift.done"
  fi
}
wanted=${*:-cpu-1t cpu-2t}
for p in $wanted; do
  case $p in
    cpu-1t) run cpu-1t 1 1 ;;
    cpu-2t) run cpu-2t 2 0,1 ;;
    cpu-avx2-1t) run cpu-avx2-1t 1 1 ;;
    cpu-2t-v2) run cpu-2t-v2 2 0,1 ;;
    cpu-avx2-2t) run cpu-avx2-2t 2 0,1 ;;
    *) echo "error: unknown platform '$p' (known: cpu-1t, cpu-2t, cpu-avx2-1t, cpu-2t-v2, cpu-avx2-2t)" >&2; exit 2 ;;
  esac
done
