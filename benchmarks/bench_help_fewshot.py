"""Few-shot latency transfer on HELP's public FBNet data (HELP, NeurIPS 2021, Table 2).

HELP's protocol: on each unseen target device (fpga, raspi4, eyeriss) the predictor sees
the latencies of the 10 reference architectures plus 10 drawn at random from the pool
(arch_id 0..3999); it is tested on the test set (arch_id 4000..4999) by Spearman rank
correlation; mean over seeds 0..4. Source devices are HELP's meta-training devices (the
faithful setting) or, for comparison, all 24 devices that are not targets.

Two protocols, side by side, named:

* ``all``: every architecture of the pool and of the test set (1,000 test archs), as the
  paper describes the protocol.
* ``trimmed``: as HELP's code runs it (``loader.py``, ``remove_outlier=True``, the default
  of all its runs): per device, pool and test set are each cut to the middle 80% by that
  device's latency (``carb.transfer.trim_middle``: sorted positions 400..3599 of the pool,
  100..899 of the test set). The target's 10 random archs come from its trimmed pool and it
  is scored on its 800 trimmed test archs; each source model learns from its own device's
  trimmed pool; the 10 reference archs are used whatever their latency (HELP's hardware
  embedding reads them untrimmed). HELP's published figures are of this protocol.

Side by side, in one run: HELP's published figures, the README's plain baseline
(LightGBM per source on one-hot layer ops, ridge map on the K points), and
carb.transfer. Then K = 5, 10, 20, 50 random measurements alone; the method choices on
HELP's validation devices (never the targets); and a cross-GPU table: a latency model
trained on one GPU/batch setting, used unchanged on another.

    python benchmarks/bench_help_fewshot.py [--seeds N] [--jobs N] [--json OUT.json]

Deterministic: fixed seeds, LightGBM with ``deterministic`` and row-wise histograms, BLAS
pinned to one thread; the library versions are printed with the figures.
"""

from __future__ import annotations

import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads BLAS
    os.environ.setdefault(_v, "1")

import _common
import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from carb.datasets import help_fbnet as hf
from carb.studies.help_fbnet import HELP_PASSTHROUGH, Baseline, protocol, score
from carb.transfer import FewShotModel, SourceModels

PASSTHROUGH = list(HELP_PASSTHROUGH)  # the map's cost features, shared with carb.transfer.fewshot_help_fbnet
TRAIN = np.arange(hf.TRAIN_ARCH_IDS.start, hf.TRAIN_ARCH_IDS.stop)
TEST = np.arange(hf.TEST_ARCH_IDS.start, hf.TEST_ARCH_IDS.stop)
GPUS = ("1080ti", "2080ti", "titanx", "titanxp", "titan_rtx")


def versions() -> str:
    """The versions the figures depend on, printed with them."""
    import importlib

    libs = ("numpy", "scipy", "pandas", "sklearn", "lightgbm")
    return (
        "python "
        + sys.version.split()[0]
        + ", "
        + ", ".join(f"{n} {importlib.import_module(n).__version__}" for n in libs)
    )


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


def short(device: str) -> str:
    gpu, batch = device.rsplit("_", 1)
    return {"1080ti": "1080", "2080ti": "2080", "titanx": "TX", "titanxp": "TXp", "titan_rtx": "RTX"}[gpu] + "/" + batch


def main() -> None:
    ap = _common.parser(__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (HELP: 5)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="LightGBM threads (1: OpenMP threads spin-wait on a shared, loaded machine: 2 ran 25x slower)",
    )
    args = ap.parse_args()
    seeds = range(args.seeds)

    print("$ " + _common.command_line())
    print(versions())
    res: dict = {"seeds": args.seeds, "table2": [], "means": {}, "k_random": [], "method_choice": [], "cross_gpu": {}}
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
    print(
        f"help-fbnet: {len(wide)} archs x {len(devices)} devices; train arch 0..3999, "
        f"test 4000..4999; seeds {seeds.start}..{seeds.stop - 1}; {os.cpu_count()} cpus"
    )

    # Source models once per protocol, shared by every target, seed and K.
    def build(prot: dict) -> dict:
        pool = prot["pool"]
        rows = {d: pool[d] for d in devices}  # arch ids are row positions (0..4999)
        t = time.perf_counter()
        src_y = {d: y[d] for d in devices}
        ridge = CachedSources(SourceModels("ridge", columns=list(counts.columns)).fit(X, src_y, rows=rows), X)
        t_ridge = time.perf_counter() - t
        t = time.perf_counter()
        lgbm = CachedSources(
            SourceModels("lgbm", columns=list(counts.columns), log_target=True, n_jobs=args.jobs).fit(
                X, {d: src_y[d] for d in pub}, rows=rows
            ),
            X,
        )
        baseline = Baseline(onehot, y, pub, args.jobs, pools=pool)
        t_lgbm = time.perf_counter() - t
        print(
            f"  source models: ridge x {len(devices)} in {t_ridge:.1f} s; "
            f"LightGBM x {2 * len(pub)} (ours-lgbm, baseline) in {t_lgbm:.1f} s"
        )
        return {
            "ridge": ridge,
            "lgbm": lgbm,
            "columns": {
                "baseline (README)": baseline.predict,
                "ours, HELP sources": ours(X, ridge, pub),
                "ours, 24 sources": ours(X, ridge, non_target),
                "ours, LightGBM sources": ours(X, lgbm, pub),
            },
        }

    protocols = {"all": protocol(y, devices, trimmed=False), "trimmed": protocol(y, devices, trimmed=True)}
    built = {}
    for name, prot in protocols.items():
        print(
            f"protocol {name!r}: pool {len(prot['pool'][targets[0]])} archs, test {len(prot['test'][targets[0]])} "
            "archs per device"
        )
        built[name] = build(prot)
    ridge_all, lgbm_pub = built["all"]["ridge"], built["all"]["lgbm"]
    columns = list(built["all"]["columns"])

    # --- Table 2 -------------------------------------------------------------------
    t = time.perf_counter()
    print(
        "\n## HELP Table 2 protocol: 10 reference + 10 random archs, Spearman on the test set"
        f" (mean over {len(seeds)} seeds, std in brackets); protocols 'all' and 'trimmed' side by side"
    )
    means: dict[tuple[str, str], list[float]] = {}
    for pname, prot in protocols.items():
        print(f"\n### protocol {pname!r}")
        print(f"{'target':9s} {'HELP':>6s}" + "".join(f" {c:>22s}" for c in columns))
        for target in targets:
            row = f"{target:9s} {hf.HELP_RESULTS[target]:6.3f}"
            for name, fn in built[pname]["columns"].items():
                m, s = score(fn, target, y, 10, True, seeds, reference, prot)
                means.setdefault((pname, name), []).append(m)
                res["table2"].append(
                    {"protocol": pname, "target": target, "method": name, "spearman_mean": m, "spearman_std": s}
                )
                row += f" {m:15.3f} ({s:.3f})"
            print(row)
        help_mean = float(np.mean([hf.HELP_RESULTS[t] for t in targets]))
        print(
            f"{'mean':9s} {help_mean:6.3f}" + "".join(f" {np.mean(means[(pname, c)]):15.3f}        " for c in columns)
        )
    print("\n### means side by side (HELP published: " + f"{help_mean:.3f}, its code's trimmed protocol)")
    print(f"{'':24s}" + "".join(f" {p:>9s}" for p in protocols))
    for c in columns:
        print(f"{c:24s}" + "".join(f" {np.mean(means[(p, c)]):9.3f}" for p in protocols))
    res["means"] = {
        "help_published": help_mean,
        **{p: {c: float(np.mean(means[(p, c)])) for c in columns} for p in protocols},
    }
    print(f"({time.perf_counter() - t:.1f} s)")

    # --- K random alone ------------------------------------------------------------
    t = time.perf_counter()
    picks = ("baseline (README)", "ours, HELP sources", "ours, 24 sources")
    print("\n## K random archs from the pool alone (no reference archs): Spearman, mean over seeds")
    print(f"{'K':>3s} {'target':9s}" + "".join(f" {c + ' / ' + p:>30s}" for c in picks for p in protocols))
    for k in (5, 10, 20, 50):
        per: dict[tuple[str, str], list[float]] = {(c, p): [] for c in picks for p in protocols}
        for target in targets:
            row = f"{k:3d} {target:9s}"
            for c in picks:
                for pname, prot in protocols.items():
                    m, _ = score(built[pname]["columns"][c], target, y, k, False, seeds, reference, prot)
                    per[(c, pname)].append(m)
                    res["k_random"].append({"k": k, "target": target, "method": c, "protocol": pname, "spearman": m})
                    row += f" {m:30.3f}"
            print(row)
        print(f"{k:3d} {'mean':9s}" + "".join(f" {np.mean(v):30.3f}" for v in per.values()))
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
    print(
        f"\n## Method choice on HELP's validation devices ({', '.join(val)}), HELP sources, protocol 'all':"
        " mean Spearman over devices and seeds"
    )
    print(f"{'setting':14s}" + "".join(f" {c:>22s}" for c in methods))
    for label, k, with_ref in (("ref10 + 10", 10, True), ("K=5", 5, False), ("K=10", 10, False), ("K=20", 20, False)):
        row = f"{label:14s}"
        for mname, fn in methods.items():
            v = float(np.mean([score(fn, d, y, k, with_ref, seeds, reference)[0] for d in val]))
            row += f" {v:22.3f}"
            res["method_choice"].append({"setting": label, "method": mname, "spearman": v})
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
    print(
        "\n## Cross-GPU latency transfer: ridge model trained on A (row, arch 0..3999), used"
        " unchanged to predict B (column) on arch 4000..4999"
    )
    print(
        "   R2 and MAPE of A's predictions against B's latency; Spearman of them; slope of"
        " B's measured latency against A's (least squares)"
    )
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
    res["cross_gpu"] = {"settings": gpus, **{name: mat for name, mat in mats.items()}}
    res["total_s"] = time.perf_counter() - t_all
    if args.json:
        _common.write_json(args.json, res)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
