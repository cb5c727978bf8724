"""Choose the speed sentinel by measurement (issue 16).

In one run, on one pinned core, it visits 16 real configs of the `cpu` space and the
candidate sentinels round after round for ``--minutes``, each visit a fresh worker of the
CPU backend with the campaign's settings (the sentinel is measured exactly like a config).
Then, for each candidate, every real visit is corrected by the candidate's speed at that
moment (its readings interpolated in time) and the spread of the real configs' log-latency
around their own medians is compared, raw against corrected: the best sentinel is the one
whose correction removes the most of the real configs' speed changes.

    taskset -c 1 python benchmarks/choose_sentinel.py --minutes 5 --out choose_sentinel.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

# candidate sentinels: CIFAR-style ResNets of the cpu space, and how long one timed sample
# lasts (min_sample_s: 0 = one forward). --set 1 (first run): small, mid (fp32, bf16), large,
# one forward a sample; --set 2: the small one with one forward and with 20 ms samples, mid.
SMALL = dict(block="basic", depth=8, width=0.5, input_size=32, batch=1, precision="fp32")
MID = dict(block="basic", depth=20, width=1.0, input_size=32, batch=8, precision="fp32")
SETS = {
    1: {
        "small-fp32": (SMALL, 0.0),
        "mid-fp32": (MID, 0.0),
        "mid-bf16": ({**MID, "precision": "bf16"}, 0.0),
        "large-fp32": (dict(block="basic", depth=32, width=1.0, input_size=64, batch=8, precision="fp32"), 0.0),
    },
    2: {
        "small-fp32": (SMALL, 0.0),
        "small-fp32-20ms": (SMALL, 0.02),
        "small-fp32-5ms": (SMALL, 0.005),
        "mid-fp32": (MID, 0.0),
    },
}


def analyse(log: list[dict], names: list[str]) -> dict:
    """Residual spread of the real configs' log latency after correction by each candidate
    (and by the geometric mean of pairs of them)."""
    real = [r for r in log if r["kind"] == "real" and r["ok"]]
    cand = {n: [(r["t"], r["lat"]) for r in log if r["kind"] == n and r["ok"]] for n in names}
    mixes = {f"{a}+{b}": (a, b) for i, a in enumerate(names) for b in names[i + 1 :]}

    def speed_at(n: str, t: np.ndarray) -> np.ndarray:
        ts, v = np.array(cand[n]).T
        return np.interp(t, ts, np.log(v))  # log latency of the sentinel at time t

    t = np.array([r["t"] for r in real])
    cfg = np.array([r["config"] for r in real])
    y = np.log([r["lat"] for r in real])
    out: dict = {}

    def resid(corr: np.ndarray | None) -> dict:
        z = y - corr if corr is not None else y.copy()
        dev = np.empty_like(z)
        for c in set(cfg):
            m = cfg == c
            dev[m] = z[m] - np.median(z[m])
        return {
            "std_log": float(np.std(dev)),
            "mean_abs_pct": float(100 * np.mean(np.abs(np.expm1(dev)))),
            "within_5pct": float(np.mean(np.abs(np.expm1(dev)) <= 0.05)),
        }

    out["raw"] = resid(None)
    for n in names:
        out[n] = resid(speed_at(n, t))
    for k, (a, b) in mixes.items():
        out[k] = resid(0.5 * (speed_at(a, t) + speed_at(b, t)))
    # pass-level speed: median change over real configs per pass vs the candidate's change
    passes = sorted(set(r["pass"] for r in real))
    med = {c: np.median(y[cfg == c]) for c in set(cfg)}
    pass_speed = np.array(
        [np.median([y[i] - med[cfg[i]] for i in range(len(y)) if real[i]["pass"] == p]) for p in passes]
    )
    out["pass_real_speed_std_log"] = float(np.std(pass_speed))
    for n in names:
        v = {r["pass"]: np.log(r["lat"]) for r in log if r["kind"] == n and r["ok"]}
        s = np.array([v.get(p, np.nan) for p in passes])
        s = s - np.nanmedian(s)
        ok = np.isfinite(s)
        out[n]["pass_corr"] = float(np.corrcoef(pass_speed[ok], s[ok])[0, 1]) if ok.sum() > 2 else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--max-time", type=float, default=0.3, help="sampling seconds per visit")
    ap.add_argument("--out", default="choose_sentinel.json")
    ap.add_argument("--analyse", help="only analyse a saved log (JSON)")
    ap.add_argument("--set", type=int, default=2, choices=sorted(SETS))
    a = ap.parse_args()
    CANDIDATES = SETS[a.set]
    names = list(CANDIDATES)
    if a.analyse:
        doc = json.load(open(a.analyse))
        print(json.dumps(analyse(doc["log"], names), indent=1))
        return

    from carb.families import space
    from carb.families.space import Config
    from carb.measure.base import Protocol
    from carb.measure.cpu import CpuBackend

    sp = space.load("cpu")
    reals = [c for c in sp.sample(200, seed=a.seed, method="stratified") if c.family == "cifar"][: a.n]
    from dataclasses import replace

    cands = {n: Config(family="cifar", early_downsample=False, classes=10, **kw) for n, (kw, _) in CANDIDATES.items()}
    prot_real = Protocol(ci_target=0.02, max_time_s=a.max_time, timeout_s=120)
    prot_sent = Protocol(ci_target=0.005, max_time_s=a.max_time, timeout_s=120)
    prot_of = {n: replace(prot_sent, min_sample_s=ms) for n, (_, ms) in CANDIDATES.items()}
    log: list[dict] = []
    t0 = time.time()
    print(f"command: python {' '.join(sys.argv)}", flush=True)
    with CpuBackend(threads=1, protocol=prot_real) as b:
        p = 0
        while time.time() - t0 < 60 * a.minutes:
            # candidates spread through the pass: one after every n/len(cands) real configs
            step = max(1, len(reals) // len(cands))
            order: list[tuple[str, Config]] = []
            for i, c in enumerate(reals):
                if i % step == 0 and i // step < len(names):
                    n = names[(i // step + p) % len(names)]
                    order.append((n, cands[n]))
                order.append(("real", c))
            for kind, c in order:
                m = b.measure(c, protocol=prot_of[kind] if kind != "real" else prot_real)
                log.append(
                    {
                        "pass": p,
                        "kind": kind,
                        "config": c.config_id,
                        "t": time.time() - t0,
                        "ok": m.status == "ok",
                        "lat": m.latency_ms.median if m.latency_ms else None,
                        "wall_s": m.wall_s,
                    }
                )
            p += 1
            print(f"pass {p} at {time.time() - t0:.0f} s", flush=True)
    res = analyse(log, names)
    walls = {n: float(np.median([r["wall_s"] for r in log if r["kind"] == n])) for n in names}
    walls["real"] = float(np.median([r["wall_s"] for r in log if r["kind"] == "real"]))
    json.dump({"log": log, "result": res, "wall_s_median": walls, "argv": sys.argv}, open(a.out, "w"), indent=1)
    print(json.dumps({"result": res, "wall_s_median": walls}, indent=1))


if __name__ == "__main__":
    main()
