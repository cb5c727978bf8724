"""What the maintained benchmarks share: their command line, their JSON with its provenance, and helpers.

A benchmark is run alone from the repository root (``python benchmarks/bench_x.py ... --json PATH``);
Python puts the script's own folder first on the import path, so a benchmark reads this module with a plain
``import _common``. Every result file is written by :func:`write_json`, which adds the
``provenance`` of the figures: the exact command line, the UTC date and time, the machine (its
:func:`carb.measure.fingerprint.here` fingerprint, CPU model and cores, the GPU where torch sees
one), the carb version, the git commit and whether the tree was clean (``git.dirty``; a figure from a
dirty tree is not publishable), and the versions of the libraries the figures depend on.
A command that writes its JSON without them (``carb evaluate --json PATH``) runs under
:func:`stamp`, which adds them::

    python benchmarks/_common.py stamp carb evaluate --data cpu-1t ... --json benchmarks/results/eval_cpu-1t.json

Importing this module loads the standard library only (a benchmark may set thread variables
before numpy loads); the helpers import what they need when called.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

#: the repository root (this file lives in ``benchmarks/``)
ROOT = Path(__file__).resolve().parents[1]
#: where the maintained benchmarks' result files live
RESULTS = ROOT / "benchmarks" / "results"
#: the distributions whose versions every result records (those installed)
PACKAGES = (
    "carb",
    "numpy",
    "pandas",
    "scipy",
    "scikit-learn",
    "xgboost",
    "xgboost-cpu",
    "lightgbm",
    "moocore",
    "torch",
    "torchvision",
    "onnx",
    "onnxruntime",
    "duckdb",
    "pyarrow",
    "ray",
    "zeus",
    "zeus-ml",
)
#: the thread settings of the numeric libraries, recorded with every result
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# -- the command line and the result file ---------------------------------------------------


def parser(description: str | None, json_default: str | None = None, json_required: bool = False):
    """Return an argument parser with the ``--json PATH`` option every maintained benchmark has.

    Args:
        description: what the benchmark measures (its docstring's first line).
        json_default: the result file written when ``--json`` is not given (``None``: none).
        json_required: whether ``--json`` must be given.
    """
    ap = argparse.ArgumentParser(description=description)
    add_json(ap, json_default, json_required)
    return ap


def add_json(
    ap: argparse.ArgumentParser, default: str | None = None, required: bool = False, aliases: tuple[str, ...] = ()
) -> None:
    """Add ``--json PATH`` (and ``aliases``, e.g. ``--out``) to a parser or a subcommand's parser."""
    where = f" (default: {default})" if default else ""
    ap.add_argument(
        "--json",
        *aliases,
        dest="json",
        metavar="PATH",
        default=default,
        required=required,
        help=f"write the results, with their provenance, to this JSON file{where}",
    )


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran, the script named from the repository root (``argv``: the arguments after the script).

    Paths among the arguments are as given; :func:`provenance` records the folder they are relative to.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    script = Path(sys.argv[0]).resolve()
    name = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else str(script)
    return shlex.join(["python", name, *args])


def versions() -> dict[str, str]:
    """Python's version and those of :data:`PACKAGES` that are installed (read from their metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def git_commit() -> dict[str, Any] | None:
    """The checkout's commit and whether tracked files differ from it; ``None`` outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def machine() -> dict[str, Any]:
    """The machine the figures were taken on: its fingerprint, CPU model and cores, and GPU if torch sees one."""
    from carb.measure.fingerprint import here

    cpu = here("cpu")
    out: dict[str, Any] = {
        "fingerprint": cpu.to_dict(),
        "kind": cpu.key(),
        "cpu_model": cpu.name,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            out["gpu"] = here("cuda").to_dict()
    except ImportError:  # pragma: no cover - torch is a dependency of carb
        pass
    return out


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """Where figures come from: command, UTC time, machine, carb version and commit, library versions."""
    from carb import __version__

    return {
        "command": command_line(argv),
        "cwd": str(Path.cwd()),
        "utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "carb": __version__,
        "git": git_commit(),
        "versions": versions(),
        "threads": {v: os.environ.get(v) for v in THREAD_VARIABLES},
    }


def clean(o: Any) -> Any:
    """A JSON-ready copy: numpy scalars and arrays as Python values, tuples as lists, NaN and infinities as null."""
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, set, frozenset)):
        return [clean(v) for v in (sorted(o, key=str) if isinstance(o, (set, frozenset)) else o)]
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist") and callable(o.tolist) and type(o).__module__ == "numpy":
        return clean(o.tolist())
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def write_json(path: str | Path, payload: dict[str, Any], argv: list[str] | None = None, merge: bool = False) -> Path:
    """Write a benchmark's results to ``path`` with their provenance (key ``provenance``).

    Args:
        path: the result file (its folder is created).
        payload: the results (numpy values and NaN are made JSON-ready by :func:`clean`).
        argv: the arguments after the script (default: this process's).
        merge: keep the keys an earlier run wrote to the same file (subcommands that add their
            part): ``payload``'s keys replace theirs, and ``provenance_by_key`` says which command
            wrote each key.

    Returns:
        The path written.
    """
    path = Path(path)
    prov = provenance(argv)
    doc: dict[str, Any] = {}
    if merge and path.exists():
        doc = json.loads(path.read_text())
        by_key = doc.get("provenance_by_key") or {}
        if "provenance" in doc:
            by_key.update({k: doc["provenance"] for k in doc if k not in by_key and not k.startswith("provenance")})
        doc["provenance_by_key"] = {**by_key, **{k: prov for k in payload}}
    doc.update(payload)
    doc["provenance"] = prov
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean(doc), indent=1, allow_nan=False, default=str) + "\n")
    return path


def stamp(args: list[str]) -> int:
    """Run ``args``, a command that writes the JSON named by its ``--json PATH``, then add the provenance.

    The provenance names the whole command (``python benchmarks/_common.py stamp ...``); the git
    state is read before the command runs, as :func:`write_json` reads it before writing: the JSON
    the command rewrites is the only file it changes, and it would read as a dirty tree after.

    Returns:
        The command's exit status (2 when ``args`` names no ``--json PATH``).
    """
    if "--json" not in args[:-1]:
        print("error: stamp: the command names no --json PATH", file=sys.stderr)
        return 2
    path = Path(args[args.index("--json") + 1])
    prov = provenance(["stamp", *args])
    rc = subprocess.run(args).returncode
    if rc != 0:
        return rc
    doc = json.loads(path.read_text())
    doc["provenance"] = prov
    path.write_text(json.dumps(clean(doc), indent=1, allow_nan=False, default=str) + "\n")
    return 0


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()``'s result and the seconds it took (wall clock, ``time.perf_counter``)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# -- shipped data and models of one device ----------------------------------------------------


def cpu_pair_data(target: str):
    """The ok rows of ``cpu-1t`` (the source) and of ``target``.

    The target's latency is at its campaign's median speed where the paired sentinel timed a
    row, as ``carb train`` learns it.
    """
    from carb import datasets
    from carb.campaign.speed import corrected

    src, tgt = datasets.load("cpu-1t"), datasets.load(target)
    src, tgt = src[src.status == "ok"].reset_index(drop=True), tgt[tgt.status == "ok"].reset_index(drop=True)
    return src, corrected(tgt, paired_only=True)


class OutOfFold:
    """The device-specific model of the study, out-of-fold by architecture.

    Each config is predicted by the fold model that never saw its architecture (the
    ``arch_keys`` columns; default family, block, depth, width, early_downsample).
    ``params`` go to every fold's :class:`carb.model.CARB` (e.g. ``interval_spread``,
    ``interval_tail``: the interval ablations). :meth:`plain` drops the locally adaptive
    intervals (constant-width CV conformal).
    """

    def __init__(
        self,
        df,
        preset: str,
        folds: int = 5,
        seed: int = 0,
        id_col: str = "config_id",
        arch_keys: list[str] | None = None,
        prior=None,
        **params: Any,
    ) -> None:
        import numpy as np
        import pandas as pd

        from carb.model import CARB

        keys = arch_keys or [c for c in ("family", "block", "depth", "width", "early_downsample") if c in df.columns]
        groups = pd.factorize(df[keys].astype(str).agg("|".join, axis=1))[0]
        fold_of = np.random.default_rng(seed).permutation(groups.max() + 1)[groups] % folds
        self.fold_of = dict(zip(df[id_col], fold_of))
        self.id_col = id_col
        self.models = [
            CARB(preset=preset, random_state=seed, prior=prior, **params).fit(df[fold_of != f]) for f in range(folds)
        ]
        self.targets_ = list(self.models[0].targets_)
        self.coverage = self.models[0].coverage

    def plain(self) -> "OutOfFold":
        """The same fold models with constant-width (plain CV conformal) intervals."""
        import copy

        other = copy.copy(self)
        other.models = [copy.deepcopy(m) for m in self.models]
        for m in other.models:
            for tm in m.models_.values():
                tm.interval = None
        return other

    def predict(self, configs, coverage: float | None = None, budgets: dict | None = None):
        """Each config's prediction by the fold model that never saw its architecture, in ``configs``' order."""
        import numpy as np
        import pandas as pd

        fold = configs[self.id_col].map(self.fold_of).to_numpy()
        parts = [
            self.models[f].predict(configs[fold == f], coverage=coverage, budgets=budgets) for f in np.unique(fold)
        ]
        return pd.concat(parts).loc[configs.index]


# -- whole networks ----------------------------------------------------------------------------

#: torchvision classification networks at batch 1 and their usual input size
AT_224 = (
    "alexnet",
    "vgg11_bn",
    "vgg16_bn",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnext50_32x4d",
    "wide_resnet50_2",
    "resnext101_32x8d",
    "densenet121",
    "densenet169",
    "googlenet",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "mnasnet0_5",
    "mnasnet1_0",
    "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0",
    "squeezenet1_0",
    "squeezenet1_1",
    "efficientnet_b0",
    "efficientnet_b1",
    "efficientnet_v2_s",
    "regnet_x_400mf",
    "regnet_y_400mf",
    "regnet_x_1_6gf",
    "regnet_y_800mf",
    "regnet_y_1_6gf",
    "convnext_tiny",
)
#: (name, input size) of torchvision networks at batch 1 besides 224
OTHER_SIZES = (("inception_v3", 299), ("efficientnet_b2", 288))
#: the same networks at another batch and resolution: batch 4 at 160 px
AT_B4 = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "shufflenet_v2_x1_0",
    "efficientnet_b0",
    "regnet_y_400mf",
    "densenet121",
    "mnasnet1_0",
    "resnext50_32x4d",
)


def metrics(y, pred, lo=None, hi=None) -> dict:
    """Prediction error of ``pred`` against ``y``.

    Returns ``n``, ``mape`` (%), ``within10`` / ``within20`` (% within ±10/20%), ``spearman``
    and, with ``lo``/``hi``, the interval ``coverage`` (%).
    """
    import numpy as np
    from scipy.stats import spearmanr

    y, pred = np.asarray(y, float), np.asarray(pred, float)
    r = np.abs(pred / y - 1)
    out = {
        "n": int(len(y)),
        "mape": float(100 * r.mean()),
        "within10": float(100 * (r <= 0.10).mean()),
        "within20": float(100 * (r <= 0.20).mean()),
        "spearman": float(spearmanr(y, pred).statistic) if len(y) > 2 else float("nan"),
    }
    if lo is not None:
        out["coverage"] = float(100 * ((np.asarray(lo) <= y) & (y <= np.asarray(hi))).mean())
    return out


def drift_summary(speed) -> dict | None:
    """How much the machine's speed moved during a campaign (the sentinel's readings of a store)."""
    if speed is None or not len(speed):
        return None
    col = "sentinel_ms" if "sentinel_ms" in speed.columns else speed.select_dtypes("number").columns[0]
    noisy = 0
    if "used" in speed.columns:  # readings less precise than the drift they would measure are not used
        used = speed["used"].fillna(True).astype(bool)
        noisy = int((~used).sum())
        speed = speed[used]
    v = speed[col].dropna().to_numpy(float)
    if not len(v):
        return None
    import numpy as np

    return {
        "readings": int(len(v)),
        "noisy_readings_left_out": noisy,
        "sentinel_ms_median": float(np.median(v)),
        "max_over_min": float(v.max() / v.min()),
        "p90_over_p10": float(np.quantile(v, 0.9) / np.quantile(v, 0.1)),
    }


def measure_campaign(
    configs: list, store_path: str | Path, rounds: int, chunk: int, max_time: float, allocator: str = "default"
) -> None:
    """Measure ``configs`` on this CPU, 1 thread, with the ordinary pipeline, into a store.

    ``run_campaign``: a fresh worker per visit, ``rounds`` visits spread over the campaign,
    the speed sentinel; ``max_time`` sampling seconds per config; one line per pooled result.
    """
    from dataclasses import replace

    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.measure import Protocol, get_backend

    protocol = replace(Protocol.default_for("cpu"), max_time_s=max_time)
    backend = get_backend("cpu", threads=1, protocol=protocol, allocator=allocator)
    store = Store(store_path)
    t0 = time.time()

    def on_result(cfg, m) -> None:
        lat = m.latency_ms.median if m.latency_ms else float("nan")
        print(
            f"{time.time() - t0:7.0f}s {cfg.label():55s} {m.status:6s} {lat:9.2f} ms {m.memory_mb or 0:8.1f} MB"
            + ("" if m.status == "ok" else f" {m.message}"),
            flush=True,
        )

    try:
        res = run_campaign(
            configs,
            backend,
            store,
            rounds=rounds,
            chunk=chunk,
            command="python " + " ".join(sys.argv),
            on_result=on_result,
        )
        print(res.to_dict() if hasattr(res, "to_dict") else res, flush=True)
    finally:
        store.close()
        backend.close()


# -- the machine's speed -------------------------------------------------------------------------

#: size-elastic drift correction (tried, not adopted): latency up to which a config follows the
#: sentinel fully. Units: ms.
ELASTIC_REF_MS = 1.0
#: size-elastic drift correction: how much less a config follows the sentinel per e-fold of
#: latency above :data:`ELASTIC_REF_MS`
ELASTIC_SLOPE = 0.15


def at_speed(latency_ms: Any, ref_ms: Any, sentinel_ms: Any, slope: float = ELASTIC_SLOPE) -> Any:
    """A latency (ms) scaled to the speed where the sentinel reads ``ref_ms``, size-elastically.

    ``latency_ms * (ref_ms / sentinel_ms) ** beta`` with
    ``beta = clip(1 - slope * ln(max(latency_ms, 1 ms) / 1 ms), 0, 1)``: 1 up to 1 ms, 0.65 at
    10 ms, 0.31 at 100 ms (``slope=0``: carb's full correction). Arrays broadcast; NaN in, NaN out.
    """
    import numpy as np

    lat = np.asarray(latency_ms, float)
    beta = np.clip(1.0 - slope * np.log(np.maximum(lat, ELASTIC_REF_MS) / ELASTIC_REF_MS), 0.0, 1.0)
    return lat * (np.asarray(ref_ms, float) / np.asarray(sentinel_ms, float)) ** beta


def stress(kind: str, core: int, stop) -> None:
    """Load one core as a neighbour would until ``stop`` (a multiprocessing event) is set.

    ``memory``: stream a 256 MB buffer through memory; ``cache``: rewrite a 32 MB one.
    """
    import numpy as np

    os.sched_setaffinity(0, {core})
    n = (256 << 20) // 8 if kind == "memory" else (32 << 20) // 8
    a = np.ones(n)
    while not stop.is_set():
        a += 1.0  # reads and writes the whole buffer


if __name__ == "__main__":
    if sys.argv[1:2] != ["stamp"] or len(sys.argv) < 3:
        print("usage: python benchmarks/_common.py stamp COMMAND... --json PATH", file=sys.stderr)
        sys.exit(2)
    sys.exit(stamp(sys.argv[2:]))
