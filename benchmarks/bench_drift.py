"""Drift between two campaigns of the same configs minutes apart: raw, drift-corrected
(speed sentinel) and a plain steady-state loop, side by side in one run (issue 16).

Order, in one process pinned to one core (run it under ``taskset``):

1. plain loop, pass 1: every config built in this process, warmed up, then timed for
   ``--plain-s`` seconds of forwards; the median per-forward time;
2. campaign A: ``run_campaign`` with ``--rounds`` campaign-wide rounds and the speed sentinel;
3. wait until ``--gap-min`` minutes after campaign A started;
4. plain loop, pass 2;
5. campaign B: the same configs again (``remeasure``: the store's ``remeasurements`` table,
   same platform, so both campaigns are normalized to one median sentinel reading).

Since the paired sentinel (``carb.measure.sentinel.Pairing``), every CPU visit times the
sentinel in alternation with the config, and ``latency_ms_norm`` is corrected by the
visit's own paired sentinel; "raw x campaign-median reading ratio" is the between-visit
readings' correction (one factor per campaign), for comparison in the same run.

Printed per method: median ratio B/A, mean and max |B/A - 1|, share within ±5%; and the
sentinel's overhead (its wall time over the campaigns' wall time), the speed index
between and within the campaigns.

    taskset -c 1 python benchmarks/bench_drift.py [--n 16] [--gap-min 5] [--rounds 2] [--max-time 1.0]
        [--precision fp32] [--json figures.json] [--keep store.duckdb]
    taskset -c 1 python benchmarks/bench_drift.py ... --stress-b memory   # B under a neighbour we make
    python benchmarks/bench_drift.py --rescore store.duckdb [--plain-from figures.json] [--json rescored.json]

"size-elastic correction (not adopted)": each config scaled by the sentinel ratio to the power
of an elasticity that falls with its size (``_common.at_speed``), for comparison.

"fastest sample" / "10th percentile": that statistic of each config's pooled samples instead of
their median (contention only ever adds time), raw and scaled by the same statistic of its
paired sentinel samples; "plain loop, fastest forward" likewise. "carb's own report" is what
``carb dataset info`` says of the pair (``carb.campaign.speed.remeasure_figures``): the stored
``latency_ms_min`` is the fastest sample.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import _common
import numpy as np


def plain_loop(configs, seconds: float) -> dict[str, tuple[float, float]]:
    """Median and fastest per-forward latency (ms) of each config in this process: build,
    0.2 s warm-up, then single forwards for ``seconds``."""
    import torch

    from carb.families import arch

    torch.set_num_threads(1)
    out = {}
    for c in configs:
        model = arch.build(c).to(arch.dtype_of(c.precision)).eval()
        x = torch.randn(c.batch, 3, c.input_size, c.input_size, dtype=arch.dtype_of(c.precision))
        times = []
        with torch.inference_mode():
            t_end = time.perf_counter() + 0.2
            while time.perf_counter() < t_end:
                model(x)
            t_end = time.perf_counter() + seconds
            while time.perf_counter() < t_end or len(times) < 5:
                t0 = time.perf_counter_ns()
                model(x)
                times.append((time.perf_counter_ns() - t0) / 1e6)
        out[c.config_id] = (float(np.median(times)), float(np.min(times)))
    return out


def stats(ratio: np.ndarray) -> dict[str, float]:
    ratio = ratio[np.isfinite(ratio)]  # a row without a usable sentinel reading has no corrected value
    if ratio.size == 0:
        return {
            "median_ratio": float("nan"),
            "mean_abs_diff": float("nan"),
            "max_abs_diff": float("nan"),
            "within_5pct": float("nan"),
            "n": 0,
        }
    d = np.abs(ratio - 1)
    return {
        "median_ratio": float(np.median(ratio)),
        "mean_abs_diff": float(d.mean()),
        "max_abs_diff": float(d.max()),
        "within_5pct": float((d <= 0.05).mean()),
        "n": int(len(ratio)),
    }


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--gap-min", type=float, default=5.0, help="minutes from campaign A's start to campaign B's")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-time", type=float, default=1.0, help="sampling seconds per config (shared by its rounds)")
    ap.add_argument("--precision", help="only configs of this precision (e.g. fp32 on a CPU without native bf16)")
    ap.add_argument("--plain-s", type=float, default=1.0, help="seconds of forwards per config in the plain loop")
    ap.add_argument("--keep", help="keep the campaign store at this path (default: a throw-away one)")
    ap.add_argument(
        "--stress-b",
        choices=("memory", "cache"),
        help="slow the machine down ourselves during pass 2 and campaign B: a second process on the "
        "other core streams 256 MB through memory (or rewrites a 32 MB buffer), as a neighbour would",
    )
    ap.add_argument(
        "--rescore",
        help="measure nothing: score the two campaigns of a store kept with --keep "
        "(the plain loop's ratios from that run's --json, if given as --plain-from)",
    )
    ap.add_argument("--plain-from", help="with --rescore: the run's own --json, for the plain loop's ratios")
    a = ap.parse_args()
    if a.rescore:
        rescore(a)
        return

    from dataclasses import replace

    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure.base import Protocol
    from carb.measure.cpu import CpuBackend

    configs = [
        c
        for c in space.load("cpu").sample(200, seed=a.seed, method="stratified")
        if c.family == "cifar" and (a.precision is None or c.precision == a.precision)
    ][: a.n]
    protocol = replace(Protocol.default_for("cpu"), max_time_s=a.max_time, timeout_s=120)
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"{len(configs)} CIFAR configs of `cpu` (stratified, seed {a.seed}); campaigns: {a.rounds} campaign-wide "
        f"rounds, max_time_s={a.max_time}, 1 thread; plain loop {a.plain_s} s per config; gap {a.gap_min} min",
        flush=True,
    )
    res: dict = {"argv": sys.argv}
    with (
        tempfile.TemporaryDirectory() as tmp,
        CpuBackend(threads=1, protocol=protocol) as backend,
        Store(Path(a.keep) if a.keep else Path(tmp) / "drift.duckdb") as store,
    ):
        t_plain1 = time.time()
        plain1 = plain_loop(configs, a.plain_s)
        t_a = time.monotonic()
        ra = run_campaign(configs, backend, store, platform="bench", rounds=a.rounds)
        print(f"campaign A: {ra.wall_s:.1f} s, {ra.readings} sentinel readings ({ra.sentinel_s:.1f} s)", flush=True)
        wait = t_a + 60 * a.gap_min - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        stressor = _start_stress(a.stress_b) if a.stress_b else None
        try:
            t_plain2 = time.time()
            plain2 = plain_loop(configs, a.plain_s)
            rb = run_campaign(configs, backend, store, platform="bench", rounds=a.rounds, remeasure=True)
        finally:
            if stressor is not None:
                stressor[0].set()
                stressor[1].join(10)
        print(
            f"campaign B: {rb.wall_s:.1f} s, {rb.readings} sentinel readings ({rb.sentinel_s:.1f} s), "
            f"{(t_plain2 - t_plain1) / 60:.1f} min after pass 1",
            flush=True,
        )
        m = store.measurements("bench").set_index("config_id")
        r = store.measurements("bench", table="remeasurements").set_index("config_id").loc[m.index]
        readings = store.speed_readings("bench")
        runs = {ra.run_id: "A", rb.run_id: "B"}
    plain = {i: plain2[i][0] / plain1[i][0] for i in plain1}
    plain_min = {i: plain2[i][1] / plain1[i][1] for i in plain1}
    res["plain_min"] = plain_min
    score(m, r, readings, runs, res, plain, ra.wall_s + rb.wall_s, ra.sentinel_s + rb.sentinel_s, a.json)


def _start_stress(kind: str):
    """A process streaming memory (or thrashing a cache-sized buffer) on a core this one does
    not run on (``_common.stress``); ``(stop event, process)``."""
    import multiprocessing as mp
    import os

    mine = os.sched_getaffinity(0)
    other = next((c for c in range(os.cpu_count() or 1) if c not in mine), None)
    if other is None:
        sys.exit("bench_drift: --stress-b needs a core outside this process's affinity (run it under taskset -c 1)")
    stop = mp.Event()
    proc = mp.Process(target=_common.stress, args=(kind, other, stop), daemon=True)
    proc.start()
    print(f"stressor ({kind}) on core {other} for pass 2 and campaign B", flush=True)
    return stop, proc


def rescore(a) -> None:
    """The figures of a kept store's two campaigns (A: the first run, B: the remeasurement)."""
    from carb.campaign.store import Store

    with Store(Path(a.rescore), read_only=True) as store:
        m = store.measurements("bench").set_index("config_id")
        r = store.measurements("bench", table="remeasurements").set_index("config_id").loc[m.index]
        readings = store.speed_readings("bench")
    runs = {m.run_id.iloc[0]: "A", r.run_id.iloc[0]: "B"}
    plain = None
    res: dict = {"argv": sys.argv}
    if a.plain_from:
        run = json.loads(Path(a.plain_from).read_text())
        plain = {i: v["plain"] for i, v in run["per_config"].items()}
        if run.get("plain_min"):  # runs before the fastest forward was kept have none
            res["plain_min"] = run["plain_min"]
    print(f"command: python {' '.join(sys.argv)}")
    # the campaigns' wall time is not in the store: the readings' share is left out (see the run's own output)
    score(m, r, readings, runs, res, plain, None, float(readings.wall_s.sum()), a.json)


def _low_stat_ratios(m, r, q: float) -> tuple[np.ndarray, np.ndarray]:
    """B/A of the ``q``-th percentile of each config's pooled latency samples (``q`` 0: the
    fastest sample), raw and scaled by the same percentile of its paired sentinel samples;
    NaN where a row lacks the samples."""
    raw, corr = [], []
    for i in m.index:
        ea, eb = (json.loads(e) if isinstance(e, str) else (e or {}) for e in (m.extra[i], r.extra[i]))
        xa, xb = ea.get("latency_samples_ms"), eb.get("latency_samples_ms")
        sa, sb = ea.get("pair_sentinel_ms"), eb.get("pair_sentinel_ms")
        ratio = np.percentile(xb, q) / np.percentile(xa, q) if xa and xb else np.nan
        raw.append(ratio)
        corr.append(ratio * np.percentile(sa, q) / np.percentile(sb, q) if sa and sb else np.nan)
    return np.asarray(raw, float), np.asarray(corr, float)


def score(m, r, readings, runs, res, plain, wall, sentinel_s, out) -> None:
    """Print (and write to the JSON file ``out``, if given) the figures of campaigns A (``m``)
    and B (``r``), their readings and, when given, the plain loop's pass 2 / pass 1 ratio per
    config (``plain``); ``wall``: the campaigns' wall time (s), ``None`` when unknown."""
    from carb.campaign import speed as drift

    ids = list(m.index)
    raw = (r.latency_ms / m.latency_ms).to_numpy(float)
    # latency_ms_norm's ratio (latency_ms * ref / sentinel_ms, one ref for both campaigns),
    # from the rows' sentinel: the same for a store carb writes, and right for one kept while
    # the elasticity below was being tried in carb itself (run 17)
    corr = raw * (m.sentinel_ms / r.sentinel_ms).to_numpy(float)
    # tried and not adopted (_common.at_speed): each config scaled by the sentinel ratio to the
    # power of its size's elasticity, for comparison in the same run
    ref = float(np.median(np.concatenate([m.sentinel_ms.to_numpy(float), r.sentinel_ms.to_numpy(float)])))
    sized = np.asarray(
        _common.at_speed(r.latency_ms, ref, r.sentinel_ms) / _common.at_speed(m.latency_ms, ref, m.sentinel_ms), float
    )
    plain_ratio = np.array([plain[i] for i in ids]) if plain else np.full(len(ids), np.nan)
    usable = readings[readings.used.fillna(True).astype(bool)]
    med = {
        c: float(np.median(usable[usable.run_id == rid].sentinel_ms)) if (usable.run_id == rid).any() else float("nan")
        for rid, c in runs.items()
    }
    # for comparison: each campaign corrected by its own median reading only (one factor per campaign)
    level = raw * med["A"] / med["B"]
    # issue 16 probe: a low order statistic of the pooled samples (contention only ever adds
    # time, so the fastest samples are the least disturbed); raw, and with the same
    # statistic of the paired sentinel's samples as the correction
    low = {q: _low_stat_ratios(m, r, q) for q in (0, 10)}
    pm = res.get("plain_min")
    rows = {
        "plain steady-state loop": stats(plain_ratio),
        "plain loop, fastest forward": stats(np.array([pm[i] for i in ids]) if pm else np.full(len(ids), np.nan)),
        "campaign, raw latency_ms": stats(raw),
        "campaign, drift-corrected latency_ms_norm": stats(corr),
        "campaign, size-elastic correction (not adopted)": stats(sized),
        "campaign, raw x campaign-median reading ratio": stats(level),
        "campaign, fastest sample, raw": stats(low[0][0]),
        "campaign, fastest sample, x sentinel's fastest": stats(low[0][1]),
        "campaign, 10th percentile, raw": stats(low[10][0]),
        "campaign, 10th percentile, x sentinel's": stats(low[10][1]),
    }
    res["methods"] = rows
    res["per_config"] = {
        i: {
            "plain": float(p),
            "raw": float(x),
            "corrected": float(y),
            "size_elastic": float(z),
            "latency_ms_A": float(m.latency_ms[i]),
            "sentinel_ms_A": float(m.sentinel_ms[i]),
            "sentinel_ms_B": float(r.sentinel_ms[i]),
            "fastest_raw": float(f0),
            "fastest_corrected": float(f1),
        }
        for i, p, x, y, z, f0, f1 in zip(ids, plain_ratio, raw, corr, sized, *low[0])
    }
    print(f"\n{'method':<52}{'median B/A':>11}{'mean |diff|':>12}{'max |diff|':>11}{'within 5%':>10}{'n':>4}")
    for k, v in rows.items():
        print(
            f"{k:<52}{v['median_ratio']:>11.3f}{100 * v['mean_abs_diff']:>11.1f}%{100 * v['max_abs_diff']:>10.1f}%"
            f"{100 * v['within_5pct']:>9.0f}%{v['n']:>4}"
        )
    # what carb itself reports for the pair (`carb dataset info`, `characterize --remeasure`)
    rep = drift.remeasure_figures(m.reset_index(), r.reset_index())
    res["carb_remeasure"] = rep
    print("\ncarb's own report:\n" + "\n".join(drift.remeasure_lines(rep)))
    idx = readings.assign(c=readings.run_id.map(runs))
    sa = idx[idx.c == "A"].sentinel_ms.to_numpy(float)
    sb = idx[idx.c == "B"].sentinel_ms.to_numpy(float)
    res["sentinel"] = {
        "readings": int(len(readings)),
        "usable": int(len(usable)),
        "sentinel_s": sentinel_s,
        "wall_s": wall,
        "share": sentinel_s / wall if wall else None,
        "speed_A_over_B": float(np.median(sb) / np.median(sa)),
        "within_A_ratio": float(sa.max() / sa.min()),
        "within_B_ratio": float(sb.max() / sb.min()),
    }
    # the paired sentinel (timed inside each visit): its share of the visits' sampling time
    shares = []
    for tbl in (m, r):
        for e in tbl.get("extra", []):
            e = json.loads(e) if isinstance(e, str) else (e or {})
            if "pair_share" in e:
                shares.append(float(e["pair_share"]))
    res["sentinel"]["paired_visits"] = len(shares)
    res["sentinel"]["paired_share_of_sampling"] = float(np.median(shares)) if shares else None
    s = res["sentinel"]
    if shares:
        print(
            f"\npaired sentinel in {len(shares)} pooled rows: median {100 * s['paired_share_of_sampling']:.1f}% of the "
            "visits' sampling time (inside max_time: no wall time added)"
        )
    print(
        f"\nsentinel: {s['readings']} readings ({s['usable']} precise enough to use), {s['sentinel_s']:.1f} s"
        + (
            f" of {wall:.1f} s campaign wall time = {100 * s['share']:.1f}% overhead"
            if wall
            else " (the campaigns' wall time is not in the store: the overhead is in the run's own output)"
        )
    )
    print(
        f"machine speed A -> B (median sentinel): x{1 / s['speed_A_over_B']:.3f}; slowest/fastest reading within "
        f"A {s['within_A_ratio']:.2f}x, within B {s['within_B_ratio']:.2f}x"
    )
    print("\n".join(drift.speed_lines(drift.speed_summary(readings), readings)))
    if out:
        _common.write_json(out, res)


if __name__ == "__main__":
    main()
