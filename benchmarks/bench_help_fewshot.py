"""Few-shot latency transfer on HELP's public FBNet data (HELP, NeurIPS 2021, Table 2).

Protocol, exactly HELP's: on each unseen target device (fpga, raspi4, eyeriss) the
predictor sees the latencies of the 10 reference architectures plus 10 drawn at random
from arch_id 0..3999; it is tested on arch_id 4000..4999 by Spearman rank correlation;
mean over seeds 0..4. Source devices are HELP's meta-training devices (the faithful
setting) or, for comparison, all 24 devices that are not targets.

Side by side, in one run: HELP's published figures, the README's plain baseline
(LightGBM per source on one-hot layer ops, ridge map on the K points), and
carb.transfer. Then K = 5, 10, 20, 50 random measurements alone; the method choices on
HELP's validation devices (never the targets); and a cross-GPU table: a latency model
trained on one GPU/batch setting, used unchanged on another.

    python benchmarks/bench_help_fewshot.py [--seeds N] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.linear_model import Ridge

from carb.datasets import help_fbnet as hf
from carb.transfer import HELP_PASSTHROUGH, FewShotModel, SourceModels

PASSTHROUGH = list(HELP_PASSTHROUGH)  # the map's cost features, shared with carb.transfer.fewshot_help_fbnet
TRAIN = np.arange(hf.TRAIN_ARCH_IDS.start, hf.TRAIN_ARCH_IDS.stop)
TEST = np.arange(hf.TEST_ARCH_IDS.start, hf.TEST_ARCH_IDS.stop)
GPUS = ("1080ti", "2080ti", "titanx", "titanxp", "titan_rtx")


def sample_ids(seed: int, k: int, with_reference: bool, reference: np.ndarray) -> np.ndarray:
    """The target's measured architectures: the reference ones (when asked) plus k drawn
    at random, without repeats, from arch_id 0..3999."""
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(TRAIN, reference) if with_reference else TRAIN
    drawn = rng.choice(pool, size=k, replace=False)
    return np.concatenate([reference, drawn]) if with_reference else drawn


class Baseline:
    """The README's plain baseline: per-source LightGBM on one-hot layer ops (log latency,
    arch 0..3999), then a ridge map (alpha 0.1, log space) from their predictions to the
    target, fitted on the K target measurements."""

    def __init__(self, onehot: np.ndarray, y: dict[str, np.ndarray], sources: list[str], jobs: int):
        import lightgbm as lgb

        self.logpred = np.column_stack([
            lgb.LGBMRegressor(n_estimators=300, learning_rate=0.05, num_leaves=31, n_jobs=jobs,
                              random_state=0, verbose=-1)
            .fit(onehot[TRAIN], np.log(y[d][TRAIN])).predict(onehot)
            for d in sources
        ])

    def predict(self, idx: np.ndarray, y_target: np.ndarray) -> np.ndarray:
        m = Ridge(alpha=0.1).fit(self.logpred[idx], np.log(y_target[idx]))
        return m.predict(self.logpred)


class CachedSources(SourceModels):
    """Fitted source models whose predictions for every row of X are computed once:
    the benchmark asks for the same 5,000 rows hundreds of times (targets x seeds x K)."""

    def __init__(self, fitted: SourceModels, X: pd.DataFrame) -> None:
        self.fitted = fitted
        self.devices_ = fitted.devices_
        self.table = pd.DataFrame(fitted.predict(X), index=X.index, columns=fitted.devices_)

    def predict(self, X: pd.DataFrame, devices: list[str] | None = None) -> np.ndarray:
        return self.table.loc[X.index, self.devices_ if devices is None else list(devices)].to_numpy()


def ours(X: pd.DataFrame, sources: SourceModels, devices: list[str], method: str = "auto"):
    def predict(idx: np.ndarray, y_target: np.ndarray) -> np.ndarray:
        model = FewShotModel(sources, passthrough=PASSTHROUGH, source_devices=devices, method=method)
        return model.fit(X.iloc[idx], y_target[idx]).predict(X)
    return predict


def score(predict, target: str, y: dict[str, np.ndarray], k: int, with_ref: bool,
          seeds: range, reference: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation over seeds of the test Spearman correlation."""
    rs = []
    for seed in seeds:
        idx = sample_ids(seed, k, with_ref, reference)
        p = predict(idx, y[target])
        rs.append(spearmanr(p[TEST], y[target][TEST])[0])
    return float(np.mean(rs)), float(np.std(rs))


def short(device: str) -> str:
    gpu, batch = device.rsplit("_", 1)
    return {"1080ti": "1080", "2080ti": "2080", "titanx": "TX", "titanxp": "TXp",
            "titan_rtx": "RTX"}[gpu] + "/" + batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (HELP: 5)")
    ap.add_argument("--jobs", type=int, default=2, help="LightGBM threads")
    args = ap.parse_args()
    seeds = range(args.seeds)

    print("$ " + shlex.join(["python", os.path.relpath(sys.argv[0]), *sys.argv[1:]]))
    t_all = time.perf_counter()
    wide = hf.load(wide=True)
    devices = hf.devices()
    reference = np.array(hf.reference_arch_ids())
    y = {d: wide[f"latency_ms_{d}"].to_numpy() for d in devices}
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[PASSTHROUGH]], axis=1)
    onehot = hf.layer_onehot(wide)
    pub = list(hf.SOURCE_DEVICES)
    non_target = [d for d in devices if d not in hf.TARGET_DEVICES]
    targets = list(hf.TARGET_DEVICES)
    print(f"help-fbnet: {len(wide)} archs x {len(devices)} devices; train arch 0..3999, "
          f"test 4000..4999; seeds {seeds.start}..{seeds.stop - 1}; {os.cpu_count()} cpus")

    # Source models once, shared by every target, seed and K.
    t = time.perf_counter()
    src_train = {d: y[d][TRAIN] for d in devices}
    ridge_all = CachedSources(SourceModels("ridge", columns=list(counts.columns)).fit(X.iloc[TRAIN], src_train), X)
    t_ridge = time.perf_counter() - t
    t = time.perf_counter()
    lgbm_pub = CachedSources(SourceModels("lgbm", columns=list(counts.columns), log_target=True, n_jobs=args.jobs)
                             .fit(X.iloc[TRAIN], {d: src_train[d] for d in pub}), X)
    baseline = Baseline(onehot, y, pub, args.jobs)
    t_lgbm = time.perf_counter() - t
    print(f"source models: ridge x {len(devices)} in {t_ridge:.1f} s; "
          f"LightGBM x {2 * len(pub)} (ours-lgbm, baseline) in {t_lgbm:.1f} s")

    columns = {
        "baseline (README)": baseline.predict,
        "ours, HELP sources": ours(X, ridge_all, pub),
        "ours, 24 sources": ours(X, ridge_all, non_target),
        "ours, LightGBM sources": ours(X, lgbm_pub, pub),
    }

    # --- Table 2 -------------------------------------------------------------------
    t = time.perf_counter()
    print("\n## HELP Table 2 protocol: 10 reference + 10 random archs, Spearman on 4000..4999"
          f" (mean over {len(seeds)} seeds, std in brackets)")
    head = f"{'target':9s} {'HELP':>6s}" + "".join(f" {c:>22s}" for c in columns)
    print(head)
    means: dict[str, list[float]] = {c: [] for c in columns}
    for target in targets:
        row = f"{target:9s} {hf.HELP_RESULTS[target]:6.3f}"
        for name, fn in columns.items():
            m, s = score(fn, target, y, 10, True, seeds, reference)
            means[name].append(m)
            row += f" {m:15.3f} ({s:.3f})"
        print(row)
    help_mean = float(np.mean([hf.HELP_RESULTS[t] for t in targets]))
    print(f"{'mean':9s} {help_mean:6.3f}" + "".join(f" {np.mean(v):15.3f}        " for v in means.values()))
    print(f"({time.perf_counter() - t:.1f} s)")

    # --- K random alone ------------------------------------------------------------
    t = time.perf_counter()
    picks = {k: columns[k] for k in ("baseline (README)", "ours, HELP sources", "ours, 24 sources")}
    print("\n## K random archs from 0..3999 alone (no reference archs): Spearman, mean over seeds")
    print(f"{'K':>3s} {'target':9s}" + "".join(f" {c:>20s}" for c in picks))
    for k in (5, 10, 20, 50):
        per = {c: [] for c in picks}
        for target in targets:
            row = f"{k:3d} {target:9s}"
            for name, fn in picks.items():
                m, _ = score(fn, target, y, k, False, seeds, reference)
                per[name].append(m)
                row += f" {m:20.3f}"
            print(row)
        print(f"{k:3d} {'mean':9s}" + "".join(f" {np.mean(v):20.3f}" for v in per.values()))
    print(f"({time.perf_counter() - t:.1f} s)")

    # --- method choice on the validation devices -----------------------------------
    t = time.perf_counter()
    val = list(hf.VALIDATION_DEVICES)
    methods = {
        "nnls": ours(X, ridge_all, pub, "nnls"),
        "single": ours(X, ridge_all, pub, "single"),
        "auto": ours(X, ridge_all, pub, "auto"),
        "nnls, LightGBM sources": ours(X, lgbm_pub, pub, "nnls"),
    }
    print(f"\n## Method choice on HELP's validation devices ({', '.join(val)}), HELP sources:"
          " mean Spearman over devices and seeds")
    print(f"{'setting':14s}" + "".join(f" {c:>22s}" for c in methods))
    for label, k, with_ref in (("ref10 + 10", 10, True), ("K=5", 5, False), ("K=10", 10, False),
                               ("K=20", 20, False)):
        row = f"{label:14s}"
        for fn in methods.values():
            row += f" {np.mean([score(fn, d, y, k, with_ref, seeds, reference)[0] for d in val]):22.3f}"
        print(row)
    print(f"({time.perf_counter() - t:.1f} s)")

    # --- cross-GPU transferability -------------------------------------------------
    t = time.perf_counter()
    gpus = [d for d in devices if d.rsplit("_", 1)[0] in GPUS]
    gpus.sort(key=lambda d: (GPUS.index(d.rsplit("_", 1)[0]), int(d.rsplit("_", 1)[1])))
    pred = ridge_all.predict(X.iloc[TEST], gpus)  # model of A (ridge on op counts, arch 0..3999)
    mats = {m: np.zeros((len(gpus), len(gpus))) for m in ("R2", "MAPE %", "Spearman", "slope B/A")}
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            yb, ya, p = y[b][TEST], y[a][TEST], pred[:, i]
            mats["R2"][i, j] = 1 - np.sum((yb - p) ** 2) / np.sum((yb - yb.mean()) ** 2)
            mats["MAPE %"][i, j] = 100 * np.mean(np.abs(p - yb) / yb)
            mats["Spearman"][i, j] = spearmanr(p, yb)[0]
            mats["slope B/A"][i, j] = np.polyfit(ya, yb, 1)[0]
    print("\n## Cross-GPU latency transfer: ridge model trained on A (row, arch 0..3999), used"
          " unchanged to predict B (column) on arch 4000..4999")
    print("   R2 and MAPE of A's predictions against B's latency; Spearman of them; slope of"
          " B's measured latency against A's (least squares)")
    labels = [short(d) for d in gpus]
    for name, mat in mats.items():
        fmt = {"R2": "{:6.2f}", "MAPE %": "{:6.0f}", "Spearman": "{:6.3f}", "slope B/A": "{:6.2f}"}[name]
        print(f"\n{name}  (rows: A, columns: B)")
        print(f"{'':8s}" + "".join(f"{lab:>8s}" for lab in labels))
        for i, lab in enumerate(labels):
            cells = [fmt.format(max(v, -99.0)) if name == "R2" else fmt.format(v) for v in mat[i]]
            print(f"{lab:8s}" + "".join(f"{c:>8s}" for c in cells))
    print("(R2 clipped at -99)")
    print(f"({time.perf_counter() - t:.1f} s)")
    print(f"\ntotal {time.perf_counter() - t_all:.1f} s")


if __name__ == "__main__":
    main()
