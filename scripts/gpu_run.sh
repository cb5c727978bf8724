#!/usr/bin/env bash
# One-shot, time-boxed GPU run (issue 17, part 4): validate the GPU backend on the hardware,
# then measure as many configs of a stratified sample as fit, with energy, into a store
# and its Parquet export. Built for one lent H200 (bare machine, no network, root).
#
#   scripts/gpu_run.sh                                   # on the GPU machine, writes under $OUT
#   scripts/gpu_run.sh --device cpu --space tiny --budget-s 120 --out /tmp/rehearsal
#                                                        # CPU rehearsal of the same steps
#   scripts/gpu_run.sh --dry-run                         # print the plan and exit
#
# Steps, all inside --budget-s seconds of wall time (default 480 = 8 minutes):
#  0. environment: Python packages missing on the machine (zeus, amdsmi, duckdb; and
#     nvidia-ml-py, the version Zeus was tested with here) are
#     installed from wheels carried in .whl/ (pip --no-index --target, no network), the
#     repo itself goes on PYTHONPATH (no pip install -e: nothing to build, nothing to
#     fetch); versions and nvidia-smi facts go to env.json / run.log.
#  1. scripts/validate_gpu.py --device <dev>: energy non-zero and within 10% of mean
#     power x time, busy power vs mean power, peak memory sane, oom handling, clocks
#     untouched with lock_clocks=False. On cpu: its synthetic rehearsal.
#  2. configs: a stratified sample (seed 0) of the architectures of --space (default
#     screening: fp32 and fp16; an architecture is a config without its batch), each
#     measured at every batch of --batches (default on a GPU 1,8,32,128,256: the study's
#     batch range, 256 included, so energy and latency scale over the same linked
#     architectures), --samples configs in all. Architectures are shuffled (seed 1), and
#     the batches of one architecture run one after another in a shuffled order (seed
#     2), so any prefix of the list is a random subset of whole architectures: the run
#     stops when time is up, wherever it is. --batches none (the CPU default): a plain
#     stratified sample of --samples configs of the space, shuffled (seed 1).
#  3. carb characterize --configs ... --no-lock-clocks (clocks, power limits and MIG are
#     left as they are) with a per-config sampling cap (--max-time) sized from the energy
#     counter's update period P that step 1 observed: six and a half windows of
#     max(0.1 s, --energy-periods x P) (six are the fewest that give a median CI), at
#     most 10 s; --timeout 60 s per config. --energy-periods (default 4 on a GPU, the
#     backend's own default 10 elsewhere): an H200's counter updates every 100 ms, so 10
#     periods would take 6.5 s a config, 4 take 2.6 s. It runs under
#     `timeout -s INT` (the campaign stops after the config in flight and keeps every
#     committed config), leaving --reserve-s seconds for the export. --max-time S
#     overrides the cap (fewer windows: more configs, wider CIs).
#  4. carb dataset export -> <name>.parquet; a summary.json (counts, energy coverage, CI
#     medians, cap used, timings, batch scaling of energy/latency/memory, and per config
#     the busy power of its energy windows against its sampled power: within 10%?).
#
# Files under --out (default $OUT, else ./gpu_run_out), at most 7, one folder deep:
#   run.log, env.json, validate.json, <name>.duckdb (+ <name>.duckdb.wal only after a hard
#   kill), <name>.parquet, summary.json. <name> is --platform (default h200, or
#   cpu-rehearsal on --device cpu).
#
# Exit status: 0 when the campaign stored at least --min-configs configs with energy and
# validation passed; 1 when either fell short (the files are still written); 2 for bad
# arguments.

set -u -o pipefail

DEVICE=cuda
SPACE=screening
OUT_DIR=${OUT:-$PWD/gpu_run_out}
BUDGET_S=480
RESERVE_S=45
SAMPLES=1200
MIN_CONFIGS=300
PLATFORM=""
PY=${PYTHON:-python3}
DRY_RUN=0
VALIDATE_S=""
MAX_TIME_OVERRIDE=""
BATCHES=""
PERIODS=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }  # the header comment
die() { echo "error: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:-}; shift 2 || die "--device needs a value" ;;
    --space) SPACE=${2:-}; shift 2 || die "--space needs a value" ;;
    --out) OUT_DIR=${2:-}; shift 2 || die "--out needs a value" ;;
    --budget-s) BUDGET_S=${2:-}; shift 2 || die "--budget-s needs a value" ;;
    --reserve-s) RESERVE_S=${2:-}; shift 2 || die "--reserve-s needs a value" ;;
    --samples) SAMPLES=${2:-}; shift 2 || die "--samples needs a value" ;;
    --min-configs) MIN_CONFIGS=${2:-}; shift 2 || die "--min-configs needs a value" ;;
    --platform) PLATFORM=${2:-}; shift 2 || die "--platform needs a value" ;;
    --python) PY=${2:-}; shift 2 || die "--python needs a value" ;;
    --validate-s) VALIDATE_S=${2:-}; shift 2 || die "--validate-s needs a value" ;;
    --max-time) MAX_TIME_OVERRIDE=${2:-}; shift 2 || die "--max-time needs a value" ;;
    --batches) BATCHES=${2:-}; shift 2 || die "--batches needs a value" ;;
    --energy-periods) PERIODS=${2:-}; shift 2 || die "--energy-periods needs a value" ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

case "$DEVICE" in
  cpu|cuda|cuda:[0-9]*) ;;
  *) die "--device '$DEVICE': expected cuda, cuda:<i> or cpu" ;;
esac
for v in BUDGET_S RESERVE_S SAMPLES MIN_CONFIGS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "--$(echo "$v" | tr 'A-Z_' 'a-z-'): '${!v}' is not a whole number"
done
[ -n "$SPACE" ] || die "--space needs a value"
[ -n "$OUT_DIR" ] || die "--out needs a value"
[ "$BUDGET_S" -gt "$RESERVE_S" ] || die "--budget-s ($BUDGET_S) must exceed --reserve-s ($RESERVE_S)"
[ "$SAMPLES" -ge 1 ] || die "--samples must be at least 1"
if [ -z "$PLATFORM" ]; then
  if [ "$DEVICE" = cpu ]; then PLATFORM=cpu-rehearsal; else PLATFORM=h200; fi
fi
[[ "$PLATFORM" =~ ^[A-Za-z0-9._-]+$ ]] || die "--platform '$PLATFORM': letters, digits, '.', '_' and '-' only"
if [ -z "$BATCHES" ]; then
  if [ "$DEVICE" = cpu ]; then BATCHES=none; else BATCHES=1,8,32,128,256; fi
fi
[ "$BATCHES" = none ] || [[ "$BATCHES" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] \
  || die "--batches: '$BATCHES' is not a comma-separated list of batch sizes (or none)"
if [ -z "$PERIODS" ]; then
  if [ "$DEVICE" = cpu ]; then PERIODS=10; else PERIODS=4; fi
fi
[[ "$PERIODS" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk "BEGIN{exit !($PERIODS >= 3)}" \
  || die "--energy-periods: '$PERIODS' is not a number of counter updates >= 3"
if [ -z "$VALIDATE_S" ]; then
  if [ "$DEVICE" = cpu ]; then VALIDATE_S=120; else VALIDATE_S=150; fi
fi
[[ "$VALIDATE_S" =~ ^[0-9]+$ ]] || die "--validate-s: '$VALIDATE_S' is not a whole number"
[ -z "$MAX_TIME_OVERRIDE" ] || [[ "$MAX_TIME_OVERRIDE" =~ ^[0-9]+(\.[0-9]+)?$ ]] \
  || die "--max-time: '$MAX_TIME_OVERRIDE' is not a number of seconds"

REPO=$(cd "$(dirname "$0")/.." && pwd)
STORE="$OUT_DIR/$PLATFORM.duckdb"
EXPORT="$OUT_DIR/$PLATFORM.parquet"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/carb_gpu_run.XXXXXX")
SITE="$WORK/site"

if [ "$DRY_RUN" = 1 ]; then
  cat <<EOF
plan: device=$DEVICE space=$SPACE batches=$BATCHES energy_periods=$PERIODS samples=$SAMPLES budget_s=$BUDGET_S reserve_s=$RESERVE_S validate_s=$VALIDATE_S
      min_configs=$MIN_CONFIGS platform=$PLATFORM python=$PY max_time=${MAX_TIME_OVERRIDE:-auto}
      out=$OUT_DIR store=$STORE export=$EXPORT wheels=$(ls "$REPO"/.whl/*.whl 2>/dev/null | wc -l)
EOF
  rm -rf "$WORK"
  exit 0
fi

T0=$(date +%s)
left() { echo $(( T0 + BUDGET_S - $(date +%s) )); }
mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
exec > >(tee -a "$OUT_DIR/run.log") 2>&1
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1
cd "$REPO"
echo "== gpu_run: $(date -u +%FT%TZ) device=$DEVICE space=$SPACE platform=$PLATFORM budget=${BUDGET_S}s"

# -- 0. environment ------------------------------------------------------------------------
if ! "$PY" -c "import zeus.device, duckdb" 2>/dev/null; then
  if ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    echo "== installing carried wheels: $(cd "$REPO/.whl" && ls *.whl | tr '\n' ' ')"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$REPO"/.whl/*.whl \
      || echo "warning: wheel install failed"
  else
    echo "warning: zeus or duckdb missing and no wheels in $REPO/.whl"
  fi
fi
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.applications.graphics,power.limit,persistence_mode,mig.mode.current --format=csv || true
fi
"$PY" - "$OUT_DIR/env.json" "$DEVICE" <<'EOF' || echo "warning: environment facts incomplete"
import json, sys, platform
out, device = sys.argv[1], sys.argv[2]
facts = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform()}
for mod in ("torch", "zeus", "duckdb", "pandas", "pyarrow", "numpy", "pynvml", "typer", "rich", "click"):
    try:
        m = __import__(mod)
        facts[mod] = getattr(m, "__version__", "present")
    except Exception as e:  # reported, not fatal: the steps below say what breaks
        facts[mod] = f"missing ({type(e).__name__}: {e})"
try:
    import torch
    facts["cuda_available"] = torch.cuda.is_available()
    facts["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
except Exception as e:
    facts["torch_error"] = str(e)
import carb
facts["carb"] = carb.__file__
try:  # the commands the run needs import here (typer and rich are the image's own)
    import carb.cli, carb.campaign.runner, carb.campaign.store, carb.measure.cuda  # noqa: F401
    facts["carb_cli"] = "ok"
except Exception as e:
    facts["carb_cli"] = f"import failed: {type(e).__name__}: {e}"
json.dump(facts, open(out, "w"), indent=2)
print(json.dumps(facts))
EOF

# preflight: the CLI parses an option (typer imports its option machinery, pydantic for
# typer 0.29, only then) and answers a missing store with its one-line error; anything
# else (a missing package) stops the run here, before the validation spends device time
# (the first H200 try lost its campaign to a missing pydantic after validating)
PRE=$("$PY" -m carb.cli dataset export --store "$WORK/none.duckdb" --out "$WORK/none.parquet" 2>&1)
if [ $? -ne 2 ] || ! grep -q "no such store" <<<"$PRE"; then
  echo "$PRE" | tail -5
  echo "error: the carb CLI does not run here (see above): carry the missing wheels in .whl (README, GPUs)"
  exit 1
fi

# -- 1. validate ---------------------------------------------------------------------------
VDEV=$DEVICE
if [ "$DEVICE" = cuda ]; then VDEV=cuda:0; fi
VARGS=(--energy-periods "$PERIODS")
if [ "$DEVICE" = cpu ]; then VARGS+=(--max-time-s 1 --reference-s 2 --calibration-s 0.5); fi
VT=$(( $(left) - RESERVE_S - 60 ))
[ "$VT" -gt "$VALIDATE_S" ] && VT=$VALIDATE_S
if [ "$VT" -ge 20 ]; then
  echo "== validate (<= ${VT}s)"
  timeout -s INT -k 15 "$VT" "$PY" scripts/validate_gpu.py --device "$VDEV" --out "$OUT_DIR/validate.json" "${VARGS[@]}"
  VRC=$?
else
  echo "== validate skipped: too little time left"; VRC=3
fi
echo "== validate exit status: $VRC"

# -- 2. configs ----------------------------------------------------------------------------
MAX_TIME=$("$PY" - "$OUT_DIR/validate.json" "$PERIODS" <<'EOF'
import json, sys
try:
    prov = json.load(open(sys.argv[1]))["facts"]["provenance"]
    period, floor = prov.get("update_period_s"), prov.get("min_window_s") or 0.1
    window = max(floor, float(sys.argv[2]) * period) if period else 0.4
except Exception:  # no validation report: a cap that fits six 0.4 s windows
    window = 0.4
print(f"{min(10.0, max(0.8, 6.5 * window)):.2f}")
EOF
)
[ -n "$MAX_TIME" ] || MAX_TIME=2.6
[ -z "$MAX_TIME_OVERRIDE" ] || MAX_TIME=$MAX_TIME_OVERRIDE
"$PY" - "$SPACE" "$SAMPLES" "$WORK/configs.csv" "$BATCHES" <<'EOF' || { echo "error: could not sample the space"; exit 1; }
import random, sys
import pandas as pd
from carb import families
from carb.families import space
name, n, out, batches = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
sp = space.load(name)
if batches == "none":
    configs = sp.sample(min(n, len(sp)), seed=0, method="stratified")
    random.Random(1).shuffle(configs)  # any prefix: a random subset of the stratified sample
    rows = [families.to_row(c) for c in configs]
    print(f"sampled {len(rows)} of {len(sp)} configs of space {name!r} (stratified, seed 0; shuffled, seed 1)")
else:
    bs = [int(b) for b in batches.split(",")]
    # the space with its batch axis replaced; its configs at the first batch are the
    # architectures, and a config a constraint excludes at some batch is left out there
    full = space.Space(sp.name, [{**g, "batch": bs} for g in sp.grids], sp.constraints, source=sp.source)
    first = space.Space(sp.name, [{**g, "batch": bs[:1]} for g in sp.grids], sp.constraints, source=sp.source)
    admitted = {tuple(sorted(families.to_row(c).items())) for c in full}
    archs = first.sample(min(-(-n // len(bs)), len(first)), seed=0, method="stratified")
    random.Random(1).shuffle(archs)
    order = random.Random(2)
    rows = []
    for a in archs:
        for b in order.sample(bs, len(bs)):
            row = {**families.to_row(a), "batch": b}
            if tuple(sorted(row.items())) in admitted:
                rows.append(row)
    print(f"sampled {len(archs)} of {len(first)} architectures of space {name!r} (stratified, seed 0; "
          f"shuffled, seed 1) x batches {bs} (shuffled per architecture, seed 2): {len(rows)} configs")
pd.DataFrame(rows).to_csv(out, index=False)
EOF

# -- 3. campaign ---------------------------------------------------------------------------
CT=$(( $(left) - RESERVE_S ))
CARGS=(--configs "$WORK/configs.csv" --device "$DEVICE" --store "$STORE" --platform "$PLATFORM"
       --max-time "$MAX_TIME" --timeout 60 --ci-target 0.02 --rounds 1)
if [ "$DEVICE" != cpu ]; then CARGS+=(--no-lock-clocks --energy-periods "$PERIODS"); fi
T_CAMPAIGN=$(date +%s)
if [ "$CT" -ge 20 ]; then
  echo "== characterize (<= ${CT}s, --max-time $MAX_TIME s per config)"
  timeout -s INT -k 20 "$CT" "$PY" -m carb.cli characterize "${CARGS[@]}"
  CRC=$?
else
  echo "== characterize skipped: too little time left"; CRC=3
fi
CAMPAIGN_S=$(( $(date +%s) - T_CAMPAIGN ))
echo "== characterize exit status: $CRC (124/130: stopped at the time box, committed configs kept)"

# -- 4. export and summary -----------------------------------------------------------------
if [ -f "$STORE" ]; then
  timeout -k 5 $(( RESERVE_S > 25 ? RESERVE_S - 15 : 10 )) "$PY" -m carb.cli dataset export --store "$STORE" --out "$EXPORT" \
    || echo "warning: export failed"
fi
"$PY" - "$STORE" "$OUT_DIR/summary.json" "$OUT_DIR/validate.json" "$MAX_TIME" "$CAMPAIGN_S" "$CRC" "$VRC" "$MIN_CONFIGS" "$EXPORT" "$PERIODS" <<'EOF'
import json, os, sys
store, out, vpath, max_time, campaign_s, crc, vrc, min_configs, export, periods = sys.argv[1:11]
s = {"store": os.path.basename(store), "max_time_s": float(max_time), "energy_periods": float(periods),
     "campaign_wall_s": int(campaign_s),
     "characterize_exit": int(crc), "validate_exit": int(vrc)}
try:
    v = json.load(open(vpath))
    s["validate_passed"] = v.get("passed")
    s["validate_synthetic"] = v.get("synthetic")
    s["validate_failed_checks"] = [c["check"] for c in v.get("checks", []) if not c["ok"]]
except Exception as e:
    s["validate_passed"] = False
    s["validate_error"] = f"{type(e).__name__}: {e}"
try:
    import duckdb
    con = duckdb.connect(store, read_only=True)
    q = lambda sql: con.execute(sql).fetchall()
    s["configs_by_status"] = dict(q("SELECT status, count(*) FROM measurements GROUP BY 1"))
    s["configs_with_energy"] = q("SELECT count(*) FROM measurements WHERE status = 'ok' AND energy_gross_j IS NOT NULL")[0][0]
    s["median_energy_gross_ci_rel"], s["median_energy_ci_rel"], s["median_latency_ci_rel"] = q(
        "SELECT median(energy_gross_j_ci_rel), median(energy_j_ci_rel), median(latency_ms_ci_rel) "
        "FROM measurements WHERE status = 'ok'")[0]
    s["configs_by_precision_batch"] = {f"{p}/b{b}": n for p, b, n in q(
        "SELECT precision, batch, count(*) FROM measurements WHERE status = 'ok' GROUP BY 1, 2 ORDER BY 1, 2")}
    s["timed_s"], s["wall_s"] = q("SELECT sum(timed_s), sum(wall_s) FROM measurements")[0]
    # every config's own check: busy power from the counter windows (gross energy / latency)
    # against the median of the power readings sampled every 0.1 s while it ran
    rows = q("SELECT energy_gross_j / (latency_ms / 1e3), TRY_CAST(json_extract(extra, '$.power_w') AS DOUBLE) "
             "FROM measurements WHERE status = 'ok' AND energy_gross_j IS NOT NULL")
    devs = sorted(abs(b - p) / p for b, p in rows if b is not None and p)
    if devs:
        s["busy_vs_sampled_power"] = {"configs": len(devs), "within_10pct": sum(d <= 0.10 for d in devs),
                                      "median_rel_diff": devs[len(devs) // 2], "max_rel_diff": devs[-1]}
    con.close()
except Exception as e:
    s["store_error"] = f"{type(e).__name__}: {e}"
try:  # batch scaling of energy, latency and memory (carb.studies.analyses.scaling; the study: 35.4x vs 11.2x)
    import pandas as pd
    from carb.studies import analyses as analysis
    res = analysis.scaling(pd.read_parquet(export))
    cols = ["target", "batch_min", "batch_max", "n_rows", "n_archs", "factor", "per_image_gain", "note"]
    s["batch_scaling"] = json.loads(res.summary[[c for c in cols if c in res.summary.columns]].to_json(orient="records"))
except Exception as e:
    s["batch_scaling_error"] = f"{type(e).__name__}: {e}"
s["ok"] = bool(s.get("validate_passed")) and s.get("configs_with_energy", 0) >= int(min_configs)
json.dump(s, open(out, "w"), indent=2, default=str)
print(json.dumps(s, indent=2, default=str))
sys.exit(0 if s["ok"] else 1)
EOF
RC=$?
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.applications.graphics,power.limit,mig.mode.current --format=csv || true
fi
echo "== gpu_run done in $(( $(date +%s) - T0 ))s, status $RC; files:"
ls -la "$OUT_DIR"
exit $RC
