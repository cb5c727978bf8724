"""Ship a campaign store as a CARB dataset: ``carb/data/<name>.parquet`` (slim: features
are recomputed on load, raw samples dropped) plus its dataset card ``<name>.md``, and print
the campaign's throughput, noise and drift figures for benchmarks/RESULTS.md.

    python scripts/ship_dataset.py --store campaigns/cpu-1t.duckdb --name cpu-1t
    python scripts/ship_dataset.py --store RUN/h200.duckdb --name h200 --validation RUN/validate.json \
        --code-commit 6cba329      # a GPU store: a GPU card (energy, clocks, batch scaling)

The card is generated from the store itself (provenance of every run, counts, noise,
drift, the speed sentinel's index over time with a small PNG ``<name>-speed.png``), so
every number in it is the campaign's own. A store measured before the sentinel existed
gets "no speed index" and the reason.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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
        f"Generated by `python scripts/ship_dataset.py` on {datetime.now(timezone.utc):%Y-%m-%d} from the campaign "
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
        f"Generated by `python scripts/ship_dataset.py` on {datetime.now(timezone.utc):%Y-%m-%d} from the campaign "
        f"store.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument(
        "--conditions",
        default="other tenants of the host add noise we cannot see",
        help="what else ran on the machine during the campaign (goes into the card)",
    )
    ap.add_argument("--about", help="the card's first paragraph: what was measured (default: the cpu space's)")
    ap.add_argument("--pinning", help="which cores the campaign was pinned to (default: cpu-1t's and cpu-2t's)")
    ap.add_argument(
        "--validation",
        help="GPU: scripts/validate_gpu.py's JSON report of the same machine (its checks go into the card)",
    )
    ap.add_argument("--code-commit", help="GPU: the commit of the code the run used, when the store says 0+unknown")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    a = ap.parse_args()
    with Store(a.store, read_only=True) as s:
        df = datasets.from_store(s, a.name, with_features=False)
        f = figures(s, a.name)
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


if __name__ == "__main__":
    main()
