"""Ship a campaign store as a CARB dataset: ``carb/data/<name>.parquet`` (slim: features
are recomputed on load, raw samples dropped) plus its dataset card ``<name>.md``, and print
the campaign's throughput, noise and drift figures for benchmarks/RESULTS.md.

    python scripts/ship_dataset.py --store campaigns/cpu-1t.duckdb --name cpu-1t

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

import numpy as np

from carb import datasets, drift
from carb.store import Store


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
        "rows": int(len(m)), "by_status": m.status.value_counts().to_dict(),
        "first_measured": str(first), "last_measured": str(last),
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
        j = rem[rem.status == "ok"].merge(ok, on="config_id", suffixes=("_re", ""))
        lat = j.latency_ms_re / j.latency_ms
        mem = j.memory_mb_re / j.memory_mb
        out["drift"] = {"configs": int(len(j)), "latency_ratio_median": float(lat.median()),
                        "latency_ratio_p5": float(lat.quantile(0.05)), "latency_ratio_p95": float(lat.quantile(0.95)),
                        "latency_abs_diff_median": float((lat - 1).abs().median()),
                        "within_10pct": float(((lat - 1).abs() <= 0.1).mean()),
                        "memory_ratio_median": float(mem.median()),
                        "hours_between": float((j.measured_at_re - j.measured_at).dt.total_seconds().median() / 3600)}
        if "latency_ms_norm_re" in j.columns and j.latency_ms_norm_re.notna().any():
            # the same drift check on drift-corrected values (both normalized to one median reading)
            cor = (j.latency_ms_norm_re / j.latency_ms_norm).dropna()
            out["drift"].update(corrected_ratio_median=float(cor.median()),
                                corrected_abs_diff_mean=float((cor - 1).abs().mean()),
                                raw_abs_diff_mean=float((lat - 1).abs().mean()),
                                corrected_within_10pct=float(((cor - 1).abs() <= 0.1).mean()))
    readings = store.speed_readings(platform)
    out["speed"] = drift.speed_summary(readings)
    out["speed_lines"] = drift.speed_lines(out["speed"], readings)
    out["_readings"] = readings
    prov = json.loads(runs.provenance.iloc[0]) if len(runs) else {}
    out["provenance"] = prov
    out["protocol"] = json.loads(runs.protocol.iloc[0]) if len(runs) else {}
    out["commands"] = list(runs.command)
    return out


def card(name: str, f: dict, rows: int, conditions: str, about: str | None = None, pinning: str | None = None) -> str:
    p, pr = f["provenance"], f["protocol"]
    st = ", ".join(f"{k}: {v}" for k, v in f["by_status"].items())
    drift = f.get("drift")
    lines = [
        f"# {name}: CARB measurements of the `cpu` space on one of our 2-core CPU machines, "
        f"{p.get('threads')} thread(s)",
        "",
        about or (f"Real measurements of {rows:,} configs of the `cpu` space (CIFAR-style ResNets and the ImageNet "
                  f"ResNet-18/34/50 at 224 px), made with CARB's own pipeline (`carb characterize`, see "
                  "`scripts/collect_cpu_datasets.sh`). One row per config."),
        "",
        "## Machine and software",
        f"- CPU: {p.get('cpu_model')} ({p.get('logical_cpus')} logical CPUs; {_isa_text(p)}), "
        f"frequency seen {p.get('cpu_freq_mhz')} MHz ({p.get('cpu_freq_source')}), governor {p.get('cpu_governor') or 'not exposed'}",
        f"- host: a shared 2-core VM, 24 GiB; {p.get('platform')}",
        f"- python {p.get('python')}, torch {p.get('torch')}, carb {p.get('carb')}; "
        f"{'; '.join(p.get('torch_parallel', [])[1:3])}",
        f"- threads: {p.get('threads')} intra-op and inter-op, campaign pinned with `taskset` "
        f"({pinning or 'cpu-1t: core 1; cpu-2t: cores 0-1'})",
        "",
        "## Protocol",
        f"- each config visited in {pr.get('rounds')} rounds at different moments ("
        + (f"round-robin over chunks of {pr.get('chunk')} configs" if (pr.get("chunk") or rows) < rows else
           "spread over the whole campaign, every other round in reverse order")
        + f"), each visit a fresh worker process; warm-up {pr.get('warmup')} iterations "
        f"and >= {pr.get('warmup_s')} s, then timed forwards until the 95% CI of the median is within "
        f"{100 * pr.get('ci_target', 0):g}% (distribution-free, binomial order statistics) or "
        f"{pr.get('max_time_s', 0) / max(pr.get('rounds', 1), 1):g} s per visit; samples of all visits pooled",
        "- latency_ms: median per-forward time of the whole batch under `torch.inference_mode()`",
        f"- memory_mb: {p.get('memory_definition')}; median over the visits",
        f"- energy_j: **missing**: {p.get('energy_sensor', {}).get('reason')}. Nothing is estimated.",
        f"- measured {f['first_measured'][:16]} to {f['last_measured'][:16]} UTC in {f['runs']} resumed run(s)",
        "",
        "## Counts and noise",
        f"- rows by status: {st}",
        f"- latency: median CoV of the pooled samples {f['latency_cov_median']:.3f} (p95 {f['latency_cov_p95']:.3f}); "
        f"median relative 95% CI of the median {100 * f['latency_ci_rel_median']:.1f}% "
        f"(p95 {100 * f['latency_ci_rel_p95']:.1f}%); median samples per config {f['latency_n_median']:.0f}",
        f"- memory: median CoV of the per-visit peaks {f['memory_round_cov_median']:.3f} "
        f"(p95 {f['memory_round_cov_p95']:.3f})",
        f"- throughput: {f['configs_per_hour']:.0f} configs/hour ({f['wall_s_per_config_median']:.2f} s median wall per config)",
    ]
    if drift:
        lines.append(
            f"- drift: {drift['configs']} configs measured again at the end of the campaign "
            f"(median {drift['hours_between']:.2f} h later): median latency ratio {drift['latency_ratio_median']:.3f} "
            f"(p5 {drift['latency_ratio_p5']:.3f}, p95 {drift['latency_ratio_p95']:.3f}), "
            f"{100 * drift['within_10pct']:.0f}% within ±10%; median memory ratio {drift['memory_ratio_median']:.3f}")
    if drift and "corrected_ratio_median" in drift:
        lines.append(
            f"- drift, corrected by the speed sentinel: median ratio {drift['corrected_ratio_median']:.3f}, mean "
            f"|difference| {100 * drift['corrected_abs_diff_mean']:.1f}% (raw {100 * drift['raw_abs_diff_mean']:.1f}%), "
            f"{100 * drift['corrected_within_10pct']:.0f}% within ±10%")
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
        f"Generated by `python scripts/ship_dataset.py` on {datetime.now(timezone.utc):%Y-%m-%d} from the campaign store.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--conditions", default="other tenants of the host add noise we cannot see",
                    help="what else ran on the machine during the campaign (goes into the card)")
    ap.add_argument("--about", help="the card's first paragraph: what was measured (default: the cpu space's)")
    ap.add_argument("--pinning", help="which cores the campaign was pinned to (default: cpu-1t's and cpu-2t's)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "carb" / "data"))
    a = ap.parse_args()
    with Store(a.store, read_only=True) as s:
        df = datasets.from_store(s, a.name, with_features=False)
        f = figures(s, a.name)
    out = Path(a.out)
    datasets.write(datasets.slim(df), out / f"{a.name}.parquet")
    if not f["speed"].get("readings"):
        f["speed_why"] = ("no speed index: measured before CARB had a speed sentinel (issue 16); "
                          "`latency_ms` is the raw median, with no record of the machine's speed while it was taken")
    drift.speed_plot(f.pop("_readings"), out / f"{a.name}-speed.png", title=f"{a.name}: speed index")
    (out / f"{a.name}.md").write_text(card(a.name, f, len(df), a.conditions, a.about, a.pinning))
    datasets.read(out / f"{a.name}.parquet")  # what we ship must pass the loader's checks
    f.pop("provenance")
    print(json.dumps(f, indent=2, default=str))


if __name__ == "__main__":
    main()
