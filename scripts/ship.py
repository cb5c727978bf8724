"""Ship what CARB learns from: a campaign store as a dataset, or a network model fitted on measured layers.

``dataset``: ``carb/data/<name>.parquet`` (slim: features are recomputed on load, raw samples
dropped) plus its dataset card ``<name>.md``, and the campaign's throughput, noise and drift
figures printed as JSON. The card is generated from the store itself (provenance of every run,
counts, noise, drift, the speed sentinel's index over time with a small PNG ``<name>-speed.png``),
so every number in it is the campaign's own. A store measured before the sentinel existed gets
"no speed index" and the reason. With ``--layers``, the store's single layers (the ``layers``
family that network models learn from; several stores: a layer in two is kept from the first)
with a layer card.

``netmodel``: a network model (``carb.netmodel``) fitted on every measured layer of the layer
store(s) and every ``carb.families.zoo`` network of the zoo store, saved with its checksums into
``<out>/<name>.netmodel`` and loaded back. Its machine fingerprint and measured domain steps are
recorded afterwards (``steps``).

``steps``: the measured steps beyond a model's domain, from the JSON ``benchmarks/bench_machine_kind.py``
writes, put where predictions read them: ``--network`` (``step``'s JSON) into a network model's
``meta`` (``domain_steps``, ``range``; the model is sealed again), ``--config``
(``config-steps``' JSON) into ``carb/data/domain_steps.json``, ``--memory-definition``
(``experiments/memory/definition_step.py``'s JSON: the models' memory definition against the
worker's now) into a network model's ``meta``.

``memory``: a memory pass (``experiments/memory_pass/measure_memory.py``: the dataset's configs
measured again by today's CPU worker into a campaign store) written into a shipped CPU dataset:
``memory_mb`` becomes the pass's measurement (a config the pass did not reach gets none, never a
filled value), the first measurement stays in ``memory_mb_older``, each row's worker facts go into
``extra.memory_pass``, the machine, definition, dates and commit into the dataset's
``fingerprints.json`` entry (``memory``) and a section of its card. ``--older`` instead says, in
the card and the fingerprint, that a dataset's memory is of the older definition.

    python scripts/ship.py dataset --store campaigns/cpu-1t.duckdb --name cpu-1t
    python scripts/ship.py dataset --store RUN/h200.duckdb --name h200 --validation RUN/validate.json \
        --code-commit 6cba329      # a GPU store: a GPU card (energy, clocks, batch scaling)
    python scripts/ship.py dataset --layers --store campaigns/layers-cpu-1t.duckdb --platform cpu-1t \
        --name layers-cpu-1t
    python scripts/ship.py netmodel --layers campaigns/layers-cpu-1t.duckdb --zoo campaigns/zoo-cpu-1t.duckdb \
        --name layers-cpu-1t --conditions "core 1 reserved (taskset -c 1), 1 thread"
    python scripts/ship.py steps --network benchmarks/results/machine_kind_step_xeon.json \
        --network benchmarks/results/machine_kind_step.json --model carb/data/layers-cpu-avx2-1t.netmodel
    python scripts/ship.py steps --config benchmarks/results/config_steps.json
    python scripts/ship.py steps --memory-definition experiments/memory/results/memory_definition_step.json \
        --model carb/data/layers-cpu-avx2-1t.netmodel
    python scripts/ship.py memory --name cpu-1t --store experiments/memory_pass/cpu-1t-memory.duckdb \
        --code-commit 13ac038 --pinning "core 1 (taskset -c 1)"
    python scripts/ship.py memory --name cpu-avx2-1t --older "an AVX2-only EPYC; the pass ran on an AVX-512 Xeon"

Bad input (a missing store, a store without the rows asked for): one ``error:`` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from carb import datasets
from carb.campaign import rounds as states
from carb.campaign import speed as drift
from carb.campaign.store import Store
from carb.report.figures import speed_plot


def _window_s(p: dict) -> float:
    """The shortest energy window (s): the minimum asked, or the counter's periods, whichever is longer."""
    return max(p.get("min_window_s") or 0, p.get("energy_periods", 10) * p.get("update_period_s", 0))


def _isa_text(p: dict) -> str:
    """The CPU's instruction-set facts as the store recorded them (carb.measure._common.cpu_isa)."""
    isa = p.get("cpu_isa") or {}
    if not isa.get("flags"):
        return "the store did not record the CPU's flags"
    return f"flags {', '.join(isa['flags'])}; torch kernels {isa.get('torch_capability')}"


def figures(store: Store, platform: str) -> dict:
    m = store.measurements(platform)
    runs = store.runs()
    runs = runs[runs.platform == platform]
    rem = store.measurements(platform, table="remeasurements")
    ok = m[m.status == "ok"]
    first = m.measured_at.min()
    last = m.measured_at.max()
    # throughput from the store's own timestamps: configs per hour of campaign wall time,
    # summed over runs (gaps between resumed parts excluded)
    wall_s = float(m.wall_s.sum())
    out = {
        "rows": int(len(m)),
        "by_status": m.status.value_counts().to_dict(),
        "first_measured": str(first),
        "last_measured": str(last),
        "configs_per_hour": 3600.0 * len(m) / wall_s if wall_s else float("nan"),
        "wall_s_per_config_median": float(m.wall_s.median()),
        "latency_cov_median": float(ok.latency_ms_cov.median()),
        "latency_cov_p95": float(ok.latency_ms_cov.quantile(0.95)),
        "latency_ci_rel_median": float(ok.latency_ms_ci_rel.median()),
        "latency_ci_rel_p95": float(ok.latency_ms_ci_rel.quantile(0.95)),
        "latency_n_median": float(ok.latency_ms_n.median()),
        "runs": int(len(runs)),
    }
    # memory noise: spread of the per-round peaks (each round is a fresh process)
    extra = ok.extra.map(json.loads)
    rm = extra.map(lambda d: d.get("round_memory_mb") or [])
    rel = [np.std(v, ddof=1) / np.mean(v) for v in rm if len(v) >= 2 and np.mean(v) > 0]
    out["memory_round_cov_median"] = float(np.median(rel)) if rel else float("nan")
    out["memory_round_cov_p95"] = float(np.quantile(rel, 0.95)) if rel else float("nan")
    if len(rem):
        rep = drift.remeasure_figures(m, rem)
        if rep["configs"]:
            out["drift"] = rep
    readings = store.speed_readings(platform)
    out["speed"] = drift.speed_summary(readings)
    out["speed_lines"] = drift.speed_lines(out["speed"], readings)
    out["_readings"] = readings
    prov = json.loads(runs.provenance.iloc[0]) if len(runs) else {}
    out["provenance"] = prov
    out["protocol"] = json.loads(runs.protocol.iloc[0]) if len(runs) else {}
    out["commands"] = list(runs.command)
    # retakes of visits timed in another state of the machine (carb.campaign.runner): from
    # the runs that took them; every visit, first and retaken, is in the store's rounds table
    took = [json.loads(p_) for p_ in runs.protocol]
    took = [p_ for p_ in took if p_.get("retakes")]
    if took:
        from carb.campaign.runner import retake_summary

        out["retakes"] = {
            **retake_summary(
                store,
                platform,
                None,
                int(took[-1]["rounds"]),
                float(took[-1].get("state_factor") or states.STATE_FACTOR),
            ),
            "tries": int(took[-1]["retakes"]),
        }
    return out


def card(name: str, f: dict, rows: int, conditions: str, about: str | None = None, pinning: str | None = None) -> str:
    p, pr = f["provenance"], f["protocol"]
    st = ", ".join(f"{k}: {v}" for k, v in f["by_status"].items())
    drift = f.get("drift")
    lines = [
        f"# {name}: CARB measurements of the `cpu` space on one of our 2-core CPU machines, "
        f"{p.get('threads')} thread(s)",
        "",
        about
        or (
            f"Real measurements of {rows:,} configs of the `cpu` space (CIFAR-style ResNets and the ImageNet "
            f"ResNet-18/34/50 at 224 px), made with CARB's own pipeline (`carb characterize`, see "
            "`scripts/collect_cpu_datasets.sh`). One row per config."
        ),
        "",
        "## Machine and software",
        f"- CPU: {p.get('cpu_model')} ({p.get('logical_cpus')} logical CPUs; {_isa_text(p)}), "
        f"frequency seen {p.get('cpu_freq_mhz')} MHz ({p.get('cpu_freq_source')}), "
        f"governor {p.get('cpu_governor') or 'not exposed'}",
        f"- host: a shared 2-core VM, 24 GiB; {p.get('platform')}",
        f"- python {p.get('python')}, torch {p.get('torch')}, carb {p.get('carb')}; "
        f"{'; '.join(p.get('torch_parallel', [])[1:3])}",
        f"- threads: {p.get('threads')} intra-op and inter-op, campaign pinned with `taskset` "
        f"({pinning or 'cpu-1t: core 1; cpu-2t: cores 0-1'})",
        "",
        "## Protocol",
        f"- each config visited in {pr.get('rounds')} rounds at different moments ("
        + (
            f"round-robin over chunks of {pr.get('chunk')} configs"
            if (pr.get("chunk") or rows) < rows
            else "spread over the whole campaign, every other round in reverse order"
        )
        + f"), each visit a fresh worker process; warm-up {pr.get('warmup')} iterations "
        f"and >= {pr.get('warmup_s')} s, then timed forwards until the 95% CI of the median is within "
        f"{100 * pr.get('ci_target', 0):g}% (distribution-free, binomial order statistics) or "
        f"{pr.get('max_time_s', 0) / max(pr.get('rounds', 1), 1):g} s per visit; samples of all visits pooled",
        "- latency_ms: median per-forward time of the whole batch under `torch.inference_mode()`",
        f"- memory_mb: {p.get('memory_definition')}; median over the visits",
        f"- energy_j: **missing**: {p.get('energy_sensor', {}).get('reason')}. Nothing is estimated.",
        f"- measured {f['first_measured'][:16]} to {f['last_measured'][:16]} UTC in {f['runs']} resumed run(s)",
        *_retake_lines(f.get("retakes")),
        "",
        "## Counts and noise",
        f"- rows by status: {st}",
        f"- latency: median CoV of the pooled samples {f['latency_cov_median']:.3f} (p95 {f['latency_cov_p95']:.3f}); "
        f"median relative 95% CI of the median {100 * f['latency_ci_rel_median']:.1f}% "
        f"(p95 {100 * f['latency_ci_rel_p95']:.1f}%); median samples per config {f['latency_n_median']:.0f}",
        f"- memory: median CoV of the per-visit peaks {f['memory_round_cov_median']:.3f} "
        f"(p95 {f['memory_round_cov_p95']:.3f})",
        f"- throughput: {f['configs_per_hour']:.0f} configs/hour ({f['wall_s_per_config_median']:.2f} s median wall "
        f"per config)",
    ]
    if drift:
        raw = drift["latency"]["raw"]
        lines.append(
            f"- drift: {drift['configs']} configs measured again at the end of the campaign "
            f"(median {drift['hours_between']:.2f} h later): median latency ratio {raw['ratio_median']:.3f} "
            f"(p5 {raw['ratio_p5']:.3f}, p95 {raw['ratio_p95']:.3f}), "
            f"{100 * raw['within_10pct']:.0f}% within ±10%; median memory ratio {drift['memory_ratio_median']:.3f}"
        )
        for key, what in (
            ("corrected", "corrected by the speed sentinel (`latency_ms_norm`)"),
            ("fastest", "of the fastest sample (`latency_ms_min`)"),
        ):
            v = drift["latency"].get(key)
            if v:
                lines.append(
                    f"- drift, {what}: median ratio {v['ratio_median']:.3f}, mean |difference| "
                    f"{100 * v['abs_diff_mean']:.1f}% (raw {100 * raw['abs_diff_mean']:.1f}%), "
                    f"{100 * v['within_10pct']:.0f}% within ±10%"
                )
    lines += ["", "## Speed index (machine speed while measuring)"]
    if f["speed"].get("readings"):
        lines += [
            "The speed sentinel (`carb.measure.sentinel`: a fixed small config measured like every config) was "
            "read at the start, every 60 s and at the end of every run; `speed_index` is the median reading over "
            "each one (1 = the campaign's median speed, > 1 faster). Every row carries `sentinel_ms`, "
            "`speed_index` and `latency_ms_norm` (its latency at the median speed); `latency_ms` stays the raw median.",
            "",
            *[f"- {ln}" for ln in f["speed_lines"]],
            "",
            f"![speed index over time]({name}-speed.png)",
        ]
    else:
        lines.append(f"- {f.get('speed_why') or 'no speed index: the store has no speed sentinel readings'}")
    lines += [
        "",
        "## Known limits",
        "- no CPU energy (no RAPL on this VM): `energy_j` is NaN with `energy_missing_reason`",
        f"- a shared VM: {conditions}; "
        "rounds at different moments and medians are the defence, the noise figures above the measure of it",
        "- the slowest configs (ImageNet ResNet-50 at batch 8) get only a few timed samples per visit, "
        "so their CI may be undefined (n < 6)",
        "- peak memory includes one-off library pages of a fresh process (about 20 MB for the smallest nets)",
        "",
        f"Generated by `python scripts/ship.py dataset` on {datetime.now(timezone.utc):%Y-%m-%d} from the campaign "
        f"store.",
    ]
    return "\n".join(lines) + "\n"


def _retake_lines(r: dict | None) -> list[str]:
    """The card's line on retakes (none when the campaign took none)."""
    if not r or not r.get("ref_ms"):
        return []
    return [
        f"- retakes (`carb characterize --retakes {r['tries']}`): a visit whose paired speed sentinel lay beyond "
        f"x{r['factor']:.2f} of the campaign's state ({r['ref_ms']:.3f} ms: the fastest state holding at least a "
        f"quarter of the first visits) was timed in another state of the machine, where no one ratio corrects every "
        f"config (a 2-thread worker on our VMs switches between two), and was measured again, up to "
        f"{r['tries']} times: {r['off']} of {r['n']} first visits (median sentinel "
        f"{r['off_sentinel_ms'] or float('nan'):.3f} ms), {r['visits']} retakes, {r['back']} back in the state, "
        f"{r['left']} left as measured. Each row pools, per round, the visit nearest the state "
        "(`extra.pooled_visits`) for its latency, and keeps its first visits' memory (`extra.memory_visits`: the "
        "states are speed states); every visit stays in the store's `rounds` table"
    ]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def gpu_figures(df: Any) -> dict:
    """The GPU card's figures, all from the store's rows: noise by batch regime, power,
    clocks and temperature each config ran at, each config's own energy check, and batch
    scaling over the linked architectures."""
    import pandas as pd

    from carb.studies import analyses as analysis

    ok = df[df.status == "ok"].copy()
    ex = ok.extra.map(json.loads)
    ok["busy_w"] = ok.energy_gross_j / (ok.latency_ms / 1e3)
    ok["power_w"] = ex.map(lambda d: d.get("power_w"))
    # each config's own check (scripts/gpu_run.sh): the counter's busy power against the
    # median of the instant-power readings sampled while it ran
    dev = ((ok.busy_w - ok.power_w).abs() / ok.power_w).dropna()
    keys = ["block", "depth", "width", "early_downsample", "input_size", "precision"]
    per_arch = ok.groupby(keys).batch.nunique()
    noise = ok.groupby("batch")[["latency_ms_ci_rel", "energy_gross_j_ci_rel", "energy_j_ci_rel"]].median()
    sc = analysis.scaling(ok, targets=["energy_gross_j", "energy_j", "latency_ms", "memory_mb"]).summary
    sc_p = analysis.scaling(ok, targets=["energy_gross_j", "latency_ms"], by="precision").summary
    piv = ok.pivot_table(index=keys, columns="batch", values="latency_ms")
    lo, hi = min(ok.batch), max(ok.batch)
    # how far one config's windows lay apart (max / min window latency), launch-bound or not
    spread = ex.map(
        lambda d: (
            max(d["latency_samples_ms"]) / min(d["latency_samples_ms"]) if d.get("latency_samples_ms") else float("nan")
        )
    )
    lat_ratio = (piv[hi] / piv[lo]).dropna() if lo in piv and hi in piv else pd.Series(dtype=float)
    return {
        "configs": int(len(ok)),
        "archs": int(len(per_arch)),
        "archs_all_batches": int((per_arch == per_arch.max()).sum()),
        "batches": sorted(int(b) for b in ok.batch.unique()),
        "by_precision": ok.precision.value_counts().to_dict(),
        "energy_rows": int(ok.energy_gross_j.notna().sum()),
        "noise_by_batch": noise,
        "ci_median": ok[["latency_ms_ci_rel", "energy_gross_j_ci_rel", "energy_j_ci_rel"]].median(),
        "windows": ex.map(lambda d: d.get("energy_windows")).describe(),
        "windows_missed": int(ex.map(lambda d: d.get("energy_windows_missed") or 0).sum()),
        "busy_by_batch": ok.groupby("batch").busy_w.median(),
        "power_check": {
            "n": int(len(dev)),
            "within_10": int((dev <= 0.10).sum()),
            "median": float(dev.median()),
            "max": float(dev.max()),
        },
        "sm": (ex.map(lambda d: d.get("sm_clock_mhz_min")).min(), ex.map(lambda d: d.get("sm_clock_mhz_max")).max()),
        "mem": (ex.map(lambda d: d.get("mem_clock_mhz_min")).min(), ex.map(lambda d: d.get("mem_clock_mhz_max")).max()),
        "temp": (
            ex.map(lambda d: d.get("temperature_c_min")).min(),
            ex.map(lambda d: d.get("temperature_c_max")).max(),
        ),
        "throttled": int(ex.map(lambda d: bool(d.get("throttle_reasons"))).sum()),
        "scaling": sc,
        "scaling_precision": sc_p,
        "launch_bound": (int((lat_ratio < 1.5).sum()), int(len(lat_ratio))),
        "lo": int(lo),
        "hi": int(hi),
        "window_spread": {
            "median": float(spread.median()),
            "max": float(spread.max()),
            "over_1_2": int((spread > 1.2).sum()),
            "n": int(spread.notna().sum()),
        },
    }


def gpu_card(name: str, f: dict, g: dict, validation: dict | None, code_commit: str | None) -> str:
    """A dataset card for a GPU campaign store (energy measured; clocks as found or locked)."""
    p, pr = f["provenance"], f["protocol"]
    lock = p.get("clock_lock") or {}
    idle = p.get("idle_telemetry") or {}
    sc = g["scaling"].set_index("target")
    factor = lambda t: sc.loc[t, "factor"] if t in sc.index else float("nan")  # noqa: E731
    lines = [
        f"# {name}: CARB measurements on an {p.get('gpu_name')}, with measured energy",
        "",
        f"Real measurements of {g['configs']} configs: {g['archs']} architectures of the `screening` space "
        f"(a stratified sample; an architecture is a config without its batch), each at batch "
        f"{', '.join(map(str, g['batches']))} ({g['archs_all_batches']} at all of them; the run's time box cut the "
        f"rest), fp16 {g['by_precision'].get('fp16', 0)} and fp32 {g['by_precision'].get('fp32', 0)} rows. "
        "Measured by `scripts/gpu_run.sh` on a lent machine in one time-boxed run; every row has latency, "
        "peak memory and energy from the GPU's own energy counter. One row per config.",
        "",
        "## Machine and software",
        f"- GPU: {p.get('gpu_name')} (compute capability {p.get('compute_capability')}, "
        f"{p.get('total_memory_mb', 0) / 1e3:.0f} GB), driver {p.get('driver')}, NVML {p.get('nvml')}; "
        f"power limit {p.get('power_limit_w')} W (range {p.get('power_limit_range_w')}), persistence mode "
        f"{p.get('persistence_mode')}, MIG off",
        f"- host: {p.get('cpu_model')}, {p.get('logical_cpus')} logical CPUs, a VM; {p.get('platform')}",
        f"- python {p.get('python')}, torch {p.get('torch')} (CUDA {p.get('cuda_torch')}, cuDNN {p.get('cudnn')}), "
        f"zeus {p.get('zeus')}; cuDNN benchmark {p.get('cudnn_benchmark')}, TF32 convolutions "
        f"{p.get('allow_tf32_cudnn')}, TF32 matmul {p.get('allow_tf32_matmul')} (torch's defaults)",
        f"- CARB: {('commit ' + code_commit) if code_commit else p.get('carb')} "
        "(the run's code; it ran from a checkout, so the store says `0+unknown`)",
        "",
        "## Clocks",
        f"- **not locked**: {lock.get('reason')}. The machine was lent: its clocks, power limit and MIG are "
        "left as they were found (no DVFS lockdown, unlike the study), and each config records the clocks it ran at.",
        f"- seen while measuring: SM {g['sm'][0]:g}-{g['sm'][1]:g} MHz, memory {g['mem'][0]:g}-{g['mem'][1]:g} MHz, "
        f"temperature {g['temp'][0]:g}-{g['temp'][1]:g} C; throttle reasons on {g['throttled']} of "
        f"{g['configs']} configs",
        "",
        "## Protocol",
        f"- energy: the total-energy counter through Zeus ({p.get('energy_sensor', {}).get('kind')}); it updated "
        f"every {1e3 * p.get('update_period_s', float('nan')):.1f} ms. Each timed window lasts at least "
        f"{p.get('energy_periods', 10):g} updates ({1e3 * _window_s(p):.0f} ms); "
        "its busy power is the counter's increase between the first and the last update inside it, over the "
        "time between them. `energy_gross_j` = busy power x latency, per forward of the whole batch. "
        f"`energy_j` = gross - idle power x latency, idle power {p.get('idle_power_w'):.1f} W measured the same "
        f"way on the idle GPU at the start (SM {idle.get('sm_clock_mhz')} MHz then)",
        f"- latency_ms: CUDA events around each window of forwards, per forward, under `torch.inference_mode()`; "
        f"warm-up {pr.get('warmup')} forwards and >= {pr.get('warmup_s')} s; windows until the 95% CI of the "
        f"median is within {100 * pr.get('ci_target', 0):g}% (distribution-free, so it needs >= 6 windows) or "
        f"{pr.get('max_time_s')} s; one visit per config ({pr.get('rounds')} round)",
        f"- memory_mb: {p.get('memory_definition')}",
        f"- measured {f['first_measured'][:16]} to {f['last_measured'][:16]} UTC; command: `{f['commands'][0]}`",
        "",
        "## Checks and noise",
    ]
    if validation:
        checks = validation.get("checks", [])
        passed = sum(c["ok"] for c in checks)
        lines.append(
            f"- `scripts/validate_gpu.py` just before the campaign, on the same GPU: {passed} of "
            f"{len(checks)} checks passed:"
        )
        for c in checks:
            if any(
                w in c["check"] for w in ("energy vs mean power", "busy power", "sampler overhead", "clock settings")
            ):
                lines.append(
                    f"  - {c['check']}: {c['value']} (expected {c['expected']}): {'PASS' if c['ok'] else 'FAIL'}"
                )
        if any(not c["ok"] for c in checks):
            lines.append(
                "  - a FAIL above is reported as it was; the results page (benchmarks/) says what it "
                "means and what changed in the check since"
            )
    pc = g["power_check"]
    lines += [
        f"- every config's own energy check: the counter's busy power against the median of the instant-power "
        f"readings (every 100 ms) while it ran: {pc['within_10']} of {pc['n']} within 10% (median difference "
        f"{_pct(pc['median'])}, largest {_pct(pc['max'])})",
        f"- rows with energy: {g['energy_rows']} of {g['configs']}; energy windows per config: median "
        f"{g['windows']['50%']:.0f} (min {g['windows']['min']:.0f}, max {g['windows']['max']:.0f}); windows "
        f"without two counter updates: {g['windows_missed']}",
        f"- median relative 95% CI of the median, all configs: latency {_pct(g['ci_median']['latency_ms_ci_rel'])}, "
        f"gross energy {_pct(g['ci_median']['energy_gross_j_ci_rel'])}, net energy "
        f"{_pct(g['ci_median']['energy_j_ci_rel'])}. By batch:",
        "",
        "| batch | latency CI | gross energy CI | net energy CI | busy power (W) |",
        "|---:|---:|---:|---:|---:|",
        *[
            f"| {b} | {_pct(r.latency_ms_ci_rel)} | {_pct(r.energy_gross_j_ci_rel)} | {_pct(r.energy_j_ci_rel)} | "
            f"{g['busy_by_batch'][b]:.0f} |"
            for b, r in g["noise_by_batch"].iterrows()
        ],
        "",
        "## Energy and latency against the batch",
        f"Fitted over the {g['archs']} linked architectures (`carb.studies.analyses.scaling`: per-architecture "
        f"profiles in "
        f"log space), batch {g['lo']} to {g['hi']}, cost per forward of the whole batch:",
        "",
        f"- gross energy x{factor('energy_gross_j'):.2f}, latency x{factor('latency_ms'):.2f}, peak memory "
        f"x{factor('memory_mb'):.2f}; net energy x{factor('energy_j'):.1f}",
        *[
            f"- {r.precision}: gross energy x{r.factor:.2f} against latency x{sc2.factor:.2f}"
            for (_, r), (_, sc2) in zip(
                g["scaling_precision"][g["scaling_precision"].target == "energy_gross_j"].iterrows(),
                g["scaling_precision"][g["scaling_precision"].target == "latency_ms"].iterrows(),
            )
        ],
        f"- the study (RTX 5090 / 3080, locked clocks, the `paper` grid) reported energy x35.4 against latency "
        f"x11.2 across its batch regimes. Here too energy grows faster than latency, because power rises with "
        f"the load (busy power {g['busy_by_batch'].iloc[0]:.0f} W at batch {g['lo']}, "
        f"{g['busy_by_batch'].iloc[-1]:.0f} W at batch {g['hi']}). Both factors are smaller than the study's: "
        f"{g['launch_bound'][0]} of {g['launch_bound'][1]} architectures take less than 1.5x longer at batch "
        f"{g['hi']} than at batch {g['lo']}, so their time is the host launching kernels, not the GPU computing",
        "- net energy at batch 1 is a few watts above idle times the latency, so its CI is wide and its factor "
        "says little; gross energy is the comparable figure",
        "",
        "## Known limits",
        "- clocks as found, not locked (see Clocks); they did not move during the run",
        "- small CIFAR networks on an H200 are launch-bound: their latency is mostly the host CPU's speed at "
        "issuing kernels, and that moved between the windows of one config on this VM: the slowest window over "
        f"the fastest was {g['window_spread']['median']:.2f}x for the median config, over 1.2x for "
        f"{g['window_spread']['over_1_2']} of {g['window_spread']['n']} and up to "
        f"{g['window_spread']['max']:.2f}x. That is the wide latency CI of batch 1-32",
        f"- {g['configs']} configs from one run of 15 device-minutes in all: too few to train a model of the "
        "whole space with the study's accuracy; one visit each, no remeasurement, so no drift figure",
        "- no speed sentinel: GPU campaigns do not run it (the sentinel tracks CPU drift)",
        "",
        f"Generated by `python scripts/ship.py dataset` on {datetime.now(timezone.utc):%Y-%m-%d} from the campaign "
        f"store.",
    ]
    return "\n".join(lines) + "\n"


def layer_card(name: str, df: Any, figs: list[dict], kept: list[int], a: argparse.Namespace) -> str:
    """The card of a layer dataset: what was measured, the machine, the protocol, counts and noise."""
    f = figs[0]
    p, pr = f["provenance"], f["protocol"]
    ops = df["op"].value_counts()
    lines = [
        f"# {name}: single CNN layers measured on one of our 2-core CPU machines, 1 thread",
        "",
        (
            a.about
            or f"Real measurements of {len(df):,} single layers of the built-in `layers` space "
            "(`carb.families.layers`: convolutions dense/pointwise/grouped/depthwise, stems, SE fully connected "
            "layers, linear, attention-style matmul, BN, activations, pooling, add, broadcast multiply, concat, "
            "channel shuffle copy, whole SE blocks), a per-operator balanced, space-filling sample "
            "(`carb.families.layers.balanced_sample`)"
        )
        + f", measured with CARB's own pipeline (`{a.how}`). "
        "One row per layer; the layer's parameters are columns (`op`, `cin`, `cout`, `input_size`, `kernel`, "
        "`stride`, `groups`, `batch`, `precision`), the per-layer columns of `carb.families.layers.layer_frame` "
        "are recomputed on load. Used by `carb.netmodel` (per-operator cost models).",
        "",
        f"Operators: {', '.join(f'{k} {v}' for k, v in ops.items())}.",
        "",
        "## Machine and software",
        f"- CPU: {p.get('cpu_model')} ({p.get('logical_cpus')} logical CPUs), "
        f"frequency seen {p.get('cpu_freq_mhz')} MHz",
        f"- python {p.get('python')}, torch {p.get('torch')}, carb {p.get('carb')}",
        f"- threads: 1 intra-op and inter-op (`torch.set_num_threads`); {a.pinning or 'not pinned to a core'}",
        f"- the workers' C allocator: {p.get('allocator', 'default')} (`carb.measure.cpu.ALLOCATORS`"
        + ("; not recorded by this store: glibc's default rules)" if "allocator" not in p else ")"),
        "",
        "## Protocol",
        f"- each layer visited in {pr.get('rounds')} rounds at different moments (round-robin over chunks), "
        "each visit a fresh worker process; timed forwards until the 95% CI of the median is within "
        f"{100 * pr.get('ci_target', 0):g}% or {pr.get('max_time_s', 0) / max(pr.get('rounds', 1), 1):g} s per visit",
        "- latency_ms: median per-forward time (one module call: the operator on inputs held as buffers); "
        f"latency_ms_p5: the 5th percentile of the pooled samples; carb.netmodel learns from `{a.layer_target}` "
        "(see below)",
        *[
            f"- measured {g['first_measured'][:16]} to {g['last_measured'][:16]} UTC in {g['runs']} resumed run(s)"
            + (f" ({Path(st_).name}, {n:,} layers kept from it)" if len(a.store) > 1 else "")
            for st_, g, n in zip(a.store, figs, kept)
        ],
        "",
        "## Counts and noise",
        f"- rows by status: {', '.join(f'{k}: {v}' for k, v in df['status'].value_counts().items())}",
        f"- latency: median CoV of the pooled samples {df['latency_ms_cov'].median():.3f} "
        f"(p95 {df['latency_ms_cov'].quantile(0.95):.3f}); median samples per layer "
        f"{df['latency_ms_n'].median():.0f}",
        *[f"- {ln}" for g in figs for ln in g.get("speed_lines", [])],
        "",
        "## Conditions and known limits",
        f"- {a.conditions}",
        *[f"- {n}" for n in a.note],
        "- no CPU energy (no RAPL on this VM); peak memory of a single layer is mostly the process's own pages",
        "- fp32 only: a fp16/bf16 network is priced by this fp32 data (its bytes halve, nothing else changes); "
        "no reduced-precision layer was measured",
        "",
        f"Generated by `python scripts/ship.py dataset --layers` on {datetime.now(timezone.utc):%Y-%m-%d} "
        "from the campaign store.",
    ]
    return "\n".join(lines) + "\n"


def _kept_counts(frames: list) -> list[int]:
    """How many layers of each store a multi-store dataset keeps (the first store's copy of a layer measured twice)."""
    seen: set = set()
    out = []
    for d in frames:
        ids = set(d.loc[d["family"] == "layers", "config_id"]) - seen
        out.append(len(ids))
        seen |= ids
    return out


def ship_layers(a: argparse.Namespace) -> None:
    """The ``layers`` rows of one or more stores as a dataset with its layer card."""
    import pandas as pd

    out = Path(a.out)
    platform = a.platform or a.name
    frames, figs = [], []
    for store in a.store:
        with Store(store, read_only=True) as st:
            frames.append(datasets.from_store(st, platform, with_features=False))
            figs.append(figures(st, platform))
    # several stores: a layer measured in two is kept from the first (raw values, not rescaled)
    df = pd.concat(frames, ignore_index=True)
    df = df[df["family"] == "layers"].drop_duplicates("config_id").reset_index(drop=True)
    if not len(df):
        raise ValueError(f"no `layers` rows of platform {platform!r} in {', '.join(a.store)}")
    df["device"] = a.name
    datasets.write(datasets.slim(df), out / f"{a.name}.parquet")
    (out / f"{a.name}.md").write_text(layer_card(a.name, df, figs, _kept_counts(frames), a))
    datasets.read(out / f"{a.name}.parquet")  # what we ship must pass the loader's checks
    print(f"wrote {out / a.name}.parquet ({len(df)} rows) and .md")


def ship_dataset(a: argparse.Namespace) -> None:
    """A store's rows of one platform as a dataset with its card (a GPU card for a GPU store)."""
    if len(a.store) > 1:
        raise ValueError("--store: one store per dataset (several only with --layers)")
    with Store(a.store[0], read_only=True) as s:
        df = datasets.from_store(s, a.platform or a.name, with_features=False)
        if not len(df):
            raise ValueError(f"{a.store[0]}: no rows of platform {a.platform or a.name!r} (--platform)")
        f = figures(s, a.platform or a.name)
        gpu = str(f["provenance"].get("device", "")).startswith("cuda")
        g = gpu_figures(df) if gpu else None
    out = Path(a.out)
    datasets.write(datasets.slim(df), out / f"{a.name}.parquet")
    if gpu:
        validation = json.loads(Path(a.validation).read_text()) if a.validation else None
        (out / f"{a.name}.md").write_text(gpu_card(a.name, f, g, validation, a.code_commit))
        datasets.read(out / f"{a.name}.parquet")
        f.pop("provenance"), f.pop("_readings")
        print(
            json.dumps({**f, "gpu": {k: v for k, v in g.items() if not hasattr(v, "to_dict")}}, indent=2, default=str)
        )
        return
    if not f["speed"].get("readings"):
        f["speed_why"] = (
            "no speed index: measured before CARB had a speed sentinel; "
            "`latency_ms` is the raw median, with no record of the machine's speed while it was taken"
        )
    speed_plot(f.pop("_readings"), out / f"{a.name}-speed.png", title=f"{a.name}: speed index")
    (out / f"{a.name}.md").write_text(card(a.name, f, len(df), a.conditions, a.about, a.pinning))
    datasets.read(out / f"{a.name}.parquet")  # what we ship must pass the loader's checks
    f.pop("provenance")
    print(json.dumps(f, indent=2, default=str))


# -- network models ------------------------------------------------------------------------------


def _store_rows(path: str, family: str) -> tuple[Any, list[str]]:
    """The ok rows of one family in a campaign store, and the allocators its runs' workers used."""
    with Store(path, read_only=True) as st:
        df = st.measurements()
        runs = st.runs()
    provs = [json.loads(p) for p in runs["provenance"] if isinstance(p, str)] if len(runs) else []
    allocators = sorted({p.get("allocator", "default") for p in provs}) or ["default"]
    df = df[(df["status"] == "ok") & (df["family"] == family)].reset_index(drop=True)
    if not len(df):
        raise ValueError(f"{path}: no ok `{family}` rows")
    return df, allocators


def _memory_baseline(paths: list[str]) -> dict:
    """``{"memory_baseline": ...}`` where every run of the stores measured memory as the worker now does, else ``{}``.

    A network model without it widens its memory answers by the measured definition step
    (:func:`carb.netmodel.domain.older_memory`).
    """
    from carb.measure.cpu import MEMORY_BASELINE, MEMORY_DEFINITION

    defs = set()
    for path in paths:
        with Store(path, read_only=True) as st:
            runs = st.runs()
        defs |= {json.loads(p).get("memory_definition") for p in runs["provenance"] if isinstance(p, str)}
    return {"memory_baseline": MEMORY_BASELINE} if defs == {MEMORY_DEFINITION} else {}


def _layer_rows(paths: list[str], target: str, bridge: bool) -> tuple[Any, list[str]]:
    """The measured layers of one or more stores (a layer in two kept from the first).

    ``bridge``: each later store's ``target`` is scaled to the first store's speed by the median
    ratio over the layers both measured (at least 10).
    """
    import pandas as pd

    parts = [_store_rows(p, "layers") for p in paths]
    frames = [d for d, _ in parts]
    if bridge and len(frames) > 1:
        first = frames[0].set_index("config_id")[target]
        for i, d in enumerate(frames[1:], 1):
            common = d[d["config_id"].isin(first.index)]
            if len(common) < 10:
                raise ValueError(f"--bridge: {paths[i]} shares {len(common)} layers with {paths[0]}; need 10")
            ratio = float(np.median(first.loc[common["config_id"]].to_numpy() / common[target].to_numpy()))
            frames[i] = d.assign(**{target: d[target] * ratio})
            print(f"bridge: {paths[i]} x {ratio:.3f} ({len(common)} layers in common)", flush=True)
    df = pd.concat(frames, ignore_index=True).drop_duplicates("config_id").reset_index(drop=True)
    return df, sorted({x for _, al in parts for x in al})


def _stores_fingerprint(paths: list[str]) -> dict:
    """``{"fingerprint": ...}`` where every store's last run was on one machine kind, fully read, else ``{}``.

    A model without a fingerprint is never in its machine's domain; one with it is picked on that kind
    (:func:`carb.netmodel.default_model`).
    """
    from carb.datasets import fingerprint
    from carb.measure.fingerprint import compare

    fps = [fingerprint(p) for p in dict.fromkeys(paths)]
    if not fps or any(fp is None or not fp.known for fp in fps):
        return {}
    if not all(compare(fps[0], fp).same_kind for fp in fps[1:]):
        return {}
    return {"fingerprint": fps[0].to_dict()}


def ship_netmodel(a: argparse.Namespace) -> None:
    """Fit a network model on every measured layer and zoo network, save it with its checksums and load it back."""
    import pandas as pd

    from carb import families, netmodel
    from carb.families import layers as L
    from carb.families import zoo
    from carb.netmodel.domain import network_range

    if "zoo" not in families.names():
        families.register(zoo.ZOO)
    ldf, lalloc = _layer_rows(a.layers, a.layer_target, a.bridge)
    zdf, zalloc = _store_rows(a.zoo, "zoo")
    configs = [zoo._from_row(r) for r in zdf.to_dict("records")]
    print(f"{len(ldf)} measured layers, {len(zdf)} measured networks; capturing the networks", flush=True)
    lm = netmodel.LayerModel.fit(
        L.layer_frame(ldf).reset_index(drop=True),
        ldf[a.layer_target].to_numpy(float),
        trees=a.trees,
        features=a.layer_features,
        memory_mb=ldf["memory_mb"].to_numpy(float),
    )
    rows = pd.DataFrame([netmodel.network_row(zoo.capture(c), lm)[0] for c in configs])
    y = zdf[[a.target, "memory_mb"]].rename(columns={a.target: "latency_ms"}).reset_index(drop=True)
    meta = {
        "layers": int(len(ldf)),
        "networks": int(len(zdf)),
        "network_target": a.target,
        "data": a.data
        or f"layers of {', '.join(Path(p).name for p in a.layers)} + carb.families.zoo networks of {Path(a.zoo).name}",
        "threads": 1,
        "layer_store": ", ".join(Path(p).name for p in a.layers),
        "zoo_store": Path(a.zoo).name,
        "layer_target": a.layer_target,
        "zoo_measured": [str(zdf["measured_at"].min()), str(zdf["measured_at"].max())]
        if "measured_at" in zdf
        else None,
        "layer_features": lm.features,
        "lat_shrink_strength": netmodel.LAT_SHRINK_STRENGTH,
        "allocator": "/".join(sorted(set(lalloc) | set(zalloc))),
        **_memory_baseline([*a.layers, a.zoo]),
        **_stores_fingerprint([*a.layers, a.zoo]),
        "range": network_range(rows),
        **({"conditions": a.conditions} if a.conditions else {}),
    }
    nm = netmodel.fit_netmodel(
        lm, rows, y, groups=np.array([c.arch for c in configs]), device=a.device or a.name, meta=meta
    )
    path = nm.save(Path(a.out) / f"{a.name}.netmodel")
    netmodel.load(path)  # what we ship loads
    print(f"wrote {path}")


def _read_json(path: str, keys: tuple[str, ...]) -> dict:
    """A result JSON holding ``keys``; a missing file or key is a ValueError naming it."""
    f = Path(path)
    if not f.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        doc = json.loads(f.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    missing_keys = [k for k in keys if not isinstance(doc, dict) or k not in doc]
    if missing_keys:
        raise ValueError(f"{path}: no {', '.join(missing_keys)} (is it bench_machine_kind's output?)")
    return doc


def ship_network_steps(model_dir: str, out: dict, others: Sequence[dict] = ()) -> None:
    """Record a network model's measured steps and fitted range in its ``meta``, then seal it again.

    ``out`` and ``others``: ``bench_machine_kind.py step``'s JSON, one per machine kind measured; the
    machine-kind step of each target is the widest of them (its 90% |log error|), so that an answer on a
    kind the model never saw is widened by the largest step measured; the range and precision steps and
    the range are ``out``'s.
    """
    from carb.netmodel.io import seal

    f = Path(model_dir) / "netmodel.json"
    if not f.is_file():
        raise ValueError(f"{model_dir}: no netmodel.json (a network model's folder?)")
    doc = json.loads(f.read_text())
    meta = doc.setdefault("meta", {})
    steps = meta.setdefault("domain_steps", {})
    kinds = [out, *others]
    widest = {
        t: max((k for k in kinds if t in k["targets"]), key=lambda k: k["targets"][t]["q90_abs_log"])
        for t in out["targets"]
    }
    steps["machine_kind"] = {
        t: {
            "q90_abs_log": k["targets"][t]["q90_abs_log"],
            "median_log_error": k["targets"][t]["median_log_error"],
            "n": k["networks"],
            "measured_on": k["measured_on"].get("name"),
        }
        for t, k in widest.items()
    } | {
        "from": "; ".join(
            f"{k['networks']} carb.zoo networks measured on {k['measured_on'].get('name')} "
            f"({k['measured_on'].get('kernels')} kernels) and predicted by this model uncalibrated, "
            f"{k['computed']}"
            for k in kinds
        )
        + " (benchmarks/bench_machine_kind.py); each target takes the widest step"
    }
    steps["range"] = out["range_step"]
    steps["precision"] = out["precision_step"]
    meta["range"] = out["range"]
    f.write_text(json.dumps(doc, indent=1))
    seal(model_dir)  # the model's checksums cover its meta
    print(f"recorded the steps and the range in {f}")


def ship_memory_definition(model_dir: str, doc: dict) -> None:
    """Record the measured step between a network model's memory definition and the worker's now; seal it again."""
    from carb.netmodel.io import seal

    f = Path(model_dir) / "netmodel.json"
    if not f.is_file():
        raise ValueError(f"{model_dir}: no netmodel.json (a network model's folder?)")
    model = json.loads(f.read_text())
    model.setdefault("meta", {}).setdefault("domain_steps", {})["memory_definition"] = {
        "memory_mb": doc["memory_mb"],
        "from": doc["from"],
    }
    f.write_text(json.dumps(model, indent=1))
    seal(model_dir)
    print(f"recorded the memory definition step in {f}")


def ship_config_steps(doc: dict, out_dir: str) -> None:
    """Write the config models' measured steps to ``<out>/domain_steps.json`` (read by ``carb.model.domain``)."""
    keep = {k: doc[k] for k in ("about", "computed", "command", "runs", "config") if k in doc}
    out = Path(out_dir) / "domain_steps.json"
    out.write_text(json.dumps(keep, indent=1) + "\n")
    print(f"wrote {out}: {json.dumps(keep['config'])}")


def ship_steps(a: argparse.Namespace) -> None:
    """The ``steps`` subcommand: either or both of ``--network`` and ``--config``."""
    if not (a.network or a.config or a.memory_definition):
        raise ValueError("steps: give --network or --memory-definition (with --model), and/or --config")
    if a.memory_definition:
        if not a.model:
            raise ValueError("steps --memory-definition: give --model, the network model's folder")
        ship_memory_definition(a.model, _read_json(a.memory_definition, ("memory_mb", "from")))
    if a.network:
        if not a.model:
            raise ValueError("steps --network: give --model, the network model's folder")
        keys = ("networks", "targets", "measured_on", "computed", "range", "range_step")
        outs = [_read_json(n, keys) for n in a.network]
        ship_network_steps(a.model, outs[0], outs[1:])
    if a.config:
        ship_config_steps(_read_json(a.config, ("config", "runs")), a.out)


# -- a memory pass -------------------------------------------------------------------------------

_MEMORY_BEGIN, _MEMORY_END = "<!-- memory: scripts/ship.py memory -->", "<!-- /memory -->"
_MEMORY_KEEP = ("memory_prefault_mb", "memory_baseline_mb", "memory_model_mb", "memory_hwm_mb", "loadavg_before")


def _pass_rows(path: str, name: str) -> tuple[Any, list[dict]]:
    """The ok rows of a memory pass store for dataset ``name``, and its runs' provenance; refuses another definition."""
    from carb.measure.cpu import MEMORY_DEFINITION

    with Store(path, read_only=True) as st:
        m, runs = st.measurements(name), st.runs()
    runs = runs[runs.platform == name]
    provs = [{**json.loads(p), "command": c} for p, c in zip(runs["provenance"], runs["command"]) if isinstance(p, str)]
    if not len(m) or not provs:
        raise ValueError(f"{path}: no rows of platform {name!r} (measure_memory.py --data {name})")
    defs = {p.get("memory_definition") for p in provs}
    if defs != {MEMORY_DEFINITION}:
        raise ValueError(f"{path}: measured under another memory definition than the worker's now: {defs}")
    return m[m.status == "ok"].set_index("config_id"), provs


def _memory_extra(extra: str, row: Any) -> str:
    """A row's ``extra`` with the pass's worker facts under ``memory_pass``."""
    d = json.loads(extra) if isinstance(extra, str) else {}
    x = json.loads(row.extra) if isinstance(row.extra, str) else {}
    d["memory_pass"] = {"run_id": row.run_id, **{k: x.get(k) for k in _MEMORY_KEEP}}
    return json.dumps(d, separators=(",", ":"))


def memory_facts(df: Any, provs: list[dict], a: argparse.Namespace) -> dict:
    """The pass's provenance and figures: the machine, definition, dates, commit, load, and new against older."""
    from carb.measure.cpu import MEMORY_BASELINE, MEMORY_DEFINITION
    from carb.measure.fingerprint import from_provenance

    got = df[df["memory_mb"].notna()]
    ratio = got["memory_mb"] / got["memory_mb_older"]
    load = [json.loads(e)["memory_pass"]["loadavg_before"] for e in got["extra"]]
    load1 = np.array([v[0] for v in load if v], dtype=float)
    return {
        "machine": from_provenance(provs[-1], source=f"the provenance of {Path(a.store).name}").to_dict(),
        "definition": MEMORY_DEFINITION,
        "memory_baseline": MEMORY_BASELINE,
        "rows": int(len(got)),
        "of": int(len(df)),
        "measured": [str(got["memory_measured_at"].min())[:16], str(got["memory_measured_at"].max())[:16]],
        "code_commit": a.code_commit,
        "command": provs[-1].get("command") or "experiments/memory_pass/measure_memory.py",
        "pinning": a.pinning,
        "protocol": provs[-1].get("protocol"),
        "kernel_env": provs[-1].get("kernel_env") or {},
        "loadavg_1min": [float(np.median(load1)), float(np.quantile(load1, 0.9))] if len(load1) else None,
        "ratio_to_older": [float(ratio.quantile(q)) for q in (0.1, 0.5, 0.9)],
        "diff_to_older_mb": float((got["memory_mb"] - got["memory_mb_older"]).median()),
        "smallest_mb": float(got["memory_mb"].min()),
    }


def memory_card_section(name: str, f: dict) -> str:
    """The card's section on a memory pass (between markers, so that a later pass replaces it)."""
    fp, pr = f["machine"], f["protocol"] or {}
    share = "every config" if f["rows"] == f["of"] else f"a random sample of {f['rows']:,} of the {f['of']:,} configs"
    lo, mid, hi = f["ratio_to_older"]
    lines = [
        _MEMORY_BEGIN,
        "## Memory: measured again by today's worker",
        f"- `memory_mb` of {share}, measured again by CARB's CPU worker as it measures today "
        f"(`experiments/memory_pass/measure_memory.py`, code of commit {f['code_commit']}): "
        f"{f['definition']}",
        f"- one visit per config in a fresh worker, the dataset's own visit (warm-up {pr.get('warmup')} forwards "
        f"and >= {pr.get('warmup_s')} s, then forwards until the 95% CI of the median is within "
        f"{100 * pr.get('ci_target', 0):g}% or {pr.get('max_time_s')} s), {fp.get('threads')} thread(s), "
        f"allocator {fp.get('allocator')}, pinned to {f['pinning']}; measured {f['measured'][0]} to "
        f"{f['measured'][1]} UTC",
        f"- machine: {fp.get('name')} (flags {', '.join(fp.get('isa') or [])}; torch kernels {fp.get('kernels')}), "
        "not the machine of the latency above: the memory columns are this machine's"
        + (
            "; torch and oneDNN capped to the dataset's kernels ("
            + " ".join(f"`{k}={v}`" for k, v in sorted(f["kernel_env"].items()))
            + "), those its latency ran on"
            if f.get("kernel_env")
            else ""
        ),
        f"- load while measuring (1-minute load average of the 2-core machine): median {f['loadavg_1min'][0]:.1f}, "
        f"p90 {f['loadavg_1min'][1]:.1f}; a peak resident set does not depend on the CPU's load",
        f"- `memory_mb_older`: the first measurement (the forked worker counted the library pages of torch it "
        f"touched, which a process that imported torch has mapped already); `memory_mb` / `memory_mb_older`: "
        f"median {mid:.3f} (p10 {lo:.3f}, p90 {hi:.3f}), median difference {f['diff_to_older_mb']:+.1f} MB",
        "- each row's worker facts (run, the parent's pages mapped ahead of the baseline, baseline, model and "
        "peak in MB, load) are in `extra.memory_pass`; the machine, definition and dates in "
        f"`carb/data/fingerprints.json` (`{name}.memory`)",
    ]
    if f["rows"] < f["of"]:
        lines.append(
            f"- the {f['of'] - f['rows']:,} configs the pass did not reach have no `memory_mb` (never filled); "
            "their first measurement stays in `memory_mb_older`"
        )
    return "\n".join([*lines, _MEMORY_END]) + "\n"


def _put_section(text: str, section: str) -> str:
    """``text`` with its memory section replaced by ``section``, or ``section`` put before ``## Known limits``."""
    if _MEMORY_BEGIN in text:
        head, rest = text.split(_MEMORY_BEGIN, 1)
        return head + section + rest.split(_MEMORY_END + "\n", 1)[1]
    head, sep, tail = text.partition("## Known limits")
    return head + section + "\n" + sep + tail if sep else text + "\n" + section


def _write_fingerprint(out: Path, name: str, memory: dict) -> None:
    """Put ``memory`` under the dataset's entry of ``fingerprints.json``."""
    f = out / "fingerprints.json"
    doc = json.loads(f.read_text())
    if name not in doc:
        raise ValueError(f"{f}: no entry {name!r}")
    doc[name]["memory"] = memory
    f.write_text(json.dumps(doc, indent=1) + "\n")


def ship_memory(a: argparse.Namespace) -> None:
    """The ``memory`` subcommand: a memory pass written into a shipped CPU dataset, or ``--older``."""
    out = Path(a.out)
    card = out / f"{a.name}.md"
    if not card.is_file():
        raise ValueError(f"{card}: no such dataset card")
    if a.older:
        section = "\n".join(
            [
                _MEMORY_BEGIN,
                "## Memory: the older definition",
                f"- `memory_mb` is as first measured: the forked worker counted the library pages of torch it "
                f"touched, which a process that imported torch has mapped already (several MB a network: a config "
                f"model trained on it predicts high until calibrated, `carb calibrate`). Not measured again: {a.older}",
                _MEMORY_END,
            ]
        )
        card.write_text(_put_section(card.read_text(), section + "\n"))
        _write_fingerprint(out, a.name, {"definition": "older (the library pages the forked worker touched counted)"})
        print(f"{card}: memory of the older definition, said")
        return
    if not a.store or not a.code_commit:
        raise ValueError("memory: give --store (the pass's campaign store) and --code-commit, or --older")
    path = out / f"{a.name}.parquet"
    df = datasets.read(path)
    got, provs = _pass_rows(a.store, a.name)
    if "memory_mb_older" not in df:
        df["memory_mb_older"] = df["memory_mb"]
    ids = df["config_id"]
    hit = ids.isin(got.index).to_numpy()
    df["memory_mb"] = ids.map(got["memory_mb"]).astype(float)  # a config the pass did not reach stays empty
    df["memory_measured_at"] = ids.map(got["measured_at"])
    df.loc[hit, "extra"] = [_memory_extra(e, got.loc[i]) for e, i in zip(df.loc[hit, "extra"], ids[hit])]
    f = memory_facts(df, provs, a)
    datasets.write(df, path)
    datasets.read(path)  # what we ship must pass the loader's checks
    _write_fingerprint(out, a.name, {k: v for k, v in f.items() if k not in ("protocol",)})
    text = card.read_text()
    if "- memory_mb: measured again" not in text:
        text = text.replace(
            "- memory_mb: ", "- memory_mb: measured again by today's worker (see Memory below); as first measured: ", 1
        )
        text = text.replace("; median over the visits\n", " (now `memory_mb_older`); median over the visits\n", 1)
    text = text.replace(
        "- peak memory includes one-off library pages of a fresh process (about 20 MB for the smallest nets)\n",
        f"- `memory_mb` is what a network adds to a process that imported torch ({f['smallest_mb']:.1f} MB "
        "for the smallest net)\n",
    )
    card.write_text(_put_section(text, memory_card_section(a.name, f)))
    print(json.dumps({k: v for k, v in f.items() if k != "protocol"}, indent=1))


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and ship; bad input is one ``error:`` line and exit status 2."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    d = sub.add_parser("dataset", help="a campaign store as a dataset + card")
    d.add_argument("--store", nargs="+", required=True, help="the campaign store (several only with --layers)")
    d.add_argument("--name", required=True, help="the dataset's name (its files: <out>/<name>.parquet and .md)")
    d.add_argument("--platform", help="the store's platform to ship (default: --name)")
    d.add_argument("--layers", action="store_true", help="ship the store's single layers (family layers)")
    d.add_argument(
        "--conditions",
        default="other tenants of the host add noise we cannot see",
        help="what else ran on the machine during the campaign (goes into the card)",
    )
    d.add_argument(
        "--about", help="the card's first sentence: what was measured (default: the cpu space's, or the layers')"
    )
    d.add_argument("--pinning", help="which cores the campaign was pinned to (default: cpu-1t's and cpu-2t's)")
    d.add_argument(
        "--validation",
        help="GPU: scripts/validate_gpu.py's JSON report of the same machine (its checks go into the card)",
    )
    d.add_argument("--code-commit", help="GPU: the commit of the code the run used, when the store says 0+unknown")
    d.add_argument(
        "--how",
        default="carb characterize --configs ... --threads 1 --max-time 1.5 --rounds 3 --chunk 48",
        help="--layers: the measuring command, for the card",
    )
    d.add_argument("--layer-target", default="latency_ms_p5", help="--layers: the column network models learn from")
    d.add_argument("--note", action="append", default=[], help="--layers: a further line of the card's limits")
    d.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    n = sub.add_parser("netmodel", help="a network model fitted on measured layers and zoo networks")
    n.add_argument("--layers", nargs="+", required=True, help="campaign store(s) of the measured layers")
    n.add_argument("--zoo", required=True, help="campaign store of the measured carb.families.zoo networks")
    n.add_argument("--name", required=True, help="the model's name (its folder: <out>/<name>.netmodel)")
    n.add_argument("--device", help="the device label the model records (default: --name)")
    n.add_argument("--target", default="latency_ms", help="the networks' latency column")
    n.add_argument("--layer-target", default="latency_ms_p5", help="the layers' latency column the layer model learns")
    n.add_argument("--bridge", action="store_true", help="scale each later layer store to the first's speed")
    n.add_argument("--trees", type=int, default=200)
    n.add_argument("--layer-features", type=int, default=None, help="feature version of the layer model")
    n.add_argument("--conditions", default=None, help="how the data were measured, for the model's meta")
    n.add_argument("--data", default=None, help="what the model was fitted on, for its meta")
    n.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    st = sub.add_parser("steps", help="measured domain steps into a network model or carb/data/domain_steps.json")
    st.add_argument(
        "--network",
        action="append",
        help="bench_machine_kind.py step's JSON (repeat: one per machine kind measured; each target takes the widest)",
    )
    st.add_argument("--model", help="with --network: the network model's folder (sealed again)")
    st.add_argument("--config", help="bench_machine_kind.py config-steps' JSON")
    st.add_argument(
        "--memory-definition", help="experiments/memory/definition_step.py's JSON (the memory definition step)"
    )
    st.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    mm = sub.add_parser("memory", help="a memory pass written into a shipped CPU dataset, its card and fingerprint")
    mm.add_argument("--name", required=True, help="the shipped dataset (carb/data/<name>.parquet and .md)")
    mm.add_argument("--store", help="the memory pass's campaign store (experiments/memory_pass/measure_memory.py)")
    mm.add_argument("--code-commit", help="the commit of the code the pass ran")
    mm.add_argument("--pinning", default="core 1 (taskset -c 1)", help="the core(s) the pass was pinned to")
    mm.add_argument("--older", help="instead: say the dataset's memory is of the older definition, and why")
    mm.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    a = ap.parse_args(argv)
    try:
        if a.kind == "steps":
            ship_steps(a)
            return 0
        if a.kind == "memory":
            ship_memory(a)
            return 0
        for p in a.store if a.kind == "dataset" else [*a.layers, a.zoo]:
            if not Path(p).is_file():
                raise ValueError(f"{p}: no such campaign store")
        if a.kind == "netmodel":
            ship_netmodel(a)
        elif a.layers:
            ship_layers(a)
        else:
            ship_dataset(a)
    except ValueError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
