"""Plain helpers several test modules share: paths, configs, synthetic backends and predictors,
the CLI run in a subprocess, and a tracker of the tensors a forward allocates.

Test modules import them as ``from tests._helpers import ...``: tests/ and its folders are
packages, so pytest's default import mode puts the repository root on ``sys.path``.
Fixtures live in ``tests/conftest.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import weakref
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from carb.families import space
from carb.families.arch import dtype_of
from carb.families.features import compute
from carb.families.space import Config
from carb.measure.base import Backend, Measurement, Protocol, Stats
from carb.measure.protocol import summarize
from carb.measure.sentinel import Sentinel

#: the repository's root folder
ROOT = Path(__file__).resolve().parents[1]

# -- configs --------------------------------------------------------------------------------

#: a ResNet config as a table row (a valid row of a configs file)
RESNET_ROW = {
    "family": "cifar",
    "block": "basic",
    "depth": 20,
    "width": 1.0,
    "early_downsample": False,
    "input_size": 32,
    "batch": 1,
    "precision": "fp32",
}

#: the smallest ResNet the backends measure in tests (milliseconds a forward)
TINY = Config(depth=8, width=0.25, early_downsample=True, batch=1)

#: the synthetic backends' speed sentinel config
SENT = Config(
    family="cifar",
    block="basic",
    depth=20,
    width=1.0,
    early_downsample=False,
    input_size=32,
    batch=8,
    precision="fp32",
    classes=10,
)


# -- the command line in a subprocess -------------------------------------------------------

CARB_CLI = [sys.executable, "-m", "carb.cli"]


def run_carb(*args, cwd=None, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``carb ARGS`` in a subprocess; returns the completed process (text output captured)."""
    return subprocess.run(
        [*CARB_CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def one_line_error(rc, err: str, *words: str) -> None:
    """Assert that a command failed on bad input: exit code 2, one line ``error: ...`` holding
    every one of ``words``, no traceback."""
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], err
    assert "Traceback" not in err


# -- the tensors of a forward ---------------------------------------------------------------


def meta_input(cfg) -> torch.Tensor:
    """The input batch of a config, on the meta device (shapes only, no memory)."""
    return torch.empty(cfg.batch, 3, cfg.input_size, cfg.input_size, device="meta", dtype=dtype_of(cfg.precision))


class TensorTracker(TorchDispatchMode):
    """Tracks the tensors a forward allocates: their bytes alive (peak), every operator's
    output, and input + output of the operators that allocate."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: dict[int, int] = {}
        self.live_peak = self.written = self.largest = self.io_peak = self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        assert len(outs) == 1, func
        t = outs[0]
        key = t.untyped_storage()._cdata
        inplace = str(func).split(".")[1].endswith("_")
        if key in self.alive and not inplace:
            return out  # a view (flatten, a shuffle's view/transpose): no new tensor, no kernel
        nbytes = t.numel() * t.element_size()
        self.ops += 1
        self.written += nbytes
        self.largest = max(self.largest, nbytes)
        if key not in self.alive:
            x = args[0]
            self.io_peak = max(self.io_peak, x.numel() * x.element_size() + nbytes)
            self.alive[key] = nbytes
            self.live_peak = max(self.live_peak, sum(self.alive.values()))
            weakref.finalize(t, self.alive.pop, key, None)
        return out


def assert_flops_equal_torch(sample: list, table: pd.DataFrame, module_of) -> None:
    """Assert that a family's feature table counts the FLOPs FlopCounterMode counts in
    ``module_of(cfg)`` on a meta batch, config by config, and that each output is (batch, classes)."""
    bad = []
    for cfg, row in zip(sample, table.itertuples()):
        model = module_of(cfg)
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            y = model(meta_input(cfg))
        assert tuple(y.shape) == (cfg.batch, cfg.classes)
        if row.flops != counter.get_total_flops():
            bad.append((cfg.label(), row.flops, counter.get_total_flops()))
    assert not bad, bad[:5]
    assert (table["flops"] == table["flops_per_image"] * table["batch"]).all()


def assert_module_figures(row, model: torch.nn.Module, label: str) -> list[torch.nn.Module]:
    """Assert the figures every family's feature row shares with its module: parameters,
    weight and state bytes, convolution, BN and linear counts, the channel range. Returns the
    module's submodules, for the family's own checks."""
    mods = list(model.modules())
    convs = [m for m in mods if isinstance(m, torch.nn.Conv2d)]
    assert row.params == sum(p.numel() for p in model.parameters()), label
    assert row.weight_bytes == sum(p.numel() * p.element_size() for p in model.parameters())
    assert row.model_bytes == sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert row.n_conv == len(convs)
    assert row.n_bn == sum(isinstance(m, torch.nn.BatchNorm2d) for m in mods)
    assert row.n_linear == sum(isinstance(m, torch.nn.Linear) for m in mods) == 1
    assert (row.min_channels, row.max_channels) == (
        min(c.out_channels for c in convs),
        max(c.out_channels for c in convs),
    )
    return mods


def assert_activation_figures(row, model: torch.nn.Module, x: torch.Tensor) -> None:
    """Assert that a feature row's activation figures equal what a :class:`TensorTracker`
    sees in ``model(x)`` (the input batch itself not counted)."""
    tracker = TensorTracker()
    tracker.alive[x.untyped_storage()._cdata] = 0
    with torch.inference_mode(), tracker:
        y = model(x)
    assert row.live_activation_bytes == tracker.live_peak
    assert row.activation_bytes == tracker.written
    assert row.largest_activation_bytes == tracker.largest
    assert row.n_ops == tracker.ops
    assert row.peak_activation_bytes == tracker.io_peak
    assert row.output_bytes == y.numel() * y.element_size()
    assert row.input_bytes == x.numel() * x.element_size()


# -- synthetic backends ---------------------------------------------------------------------


class SyntheticBackend(Backend):
    """Returns made-up measurements; fails on configs whose batch is in ``fail_batches``."""

    device = "cpu"

    def __init__(self, fail_batches=(), interrupt_after=None):
        self.fail_batches = set(fail_batches)
        self.calls = 0
        self.interrupt_after = interrupt_after

    def provenance(self):
        return {"threads": 1, "synthetic": True}

    def measure(self, config):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        if config.batch in self.fail_batches:
            return Measurement(status="error", message="synthetic failure")
        v = float(config.depth * config.batch)
        st = Stats(median=v, mean=v, p5=v, p95=v, cov=0.01, n=5, ci_rel=float("nan"))
        return Measurement(
            status="ok",
            latency_ms=st,
            memory_mb=v / 10,
            timed_s=0.5,
            wall_s=0.6,
            energy_missing_reason="synthetic: no sensor",
            extra={"threads": 1},
        )


class SampledBackend(SyntheticBackend):
    """Synthetic backend with a protocol and raw samples, as the real ones have; the
    latency of a config drifts up by 10% per visit (synthetic drift)."""

    def __init__(self, fail_on_visit=None):
        super().__init__()
        self.protocol = Protocol(max_time_s=3.0)
        self.visits = {}
        self.protocols = []
        self.fail_on_visit = fail_on_visit

    def measure(self, config, protocol=None):
        self.protocols.append(protocol)
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            raise KeyboardInterrupt
        k = self.visits.get(config, 0)
        self.visits[config] = k + 1
        if self.fail_on_visit == k:
            return Measurement(status="timeout", message="synthetic timeout")
        base = config.depth * (1 + 0.1 * k)
        samples = [base * f for f in (0.99, 1.0, 1.01)]
        st = Stats(median=base, mean=base, p5=base, p95=base, cov=0.01, n=3, ci_rel=float("nan"))
        return Measurement(
            status="ok",
            latency_ms=st,
            memory_mb=10.0 + k,
            timed_s=0.1,
            wall_s=0.2,
            extra={"latency_samples_ms": samples},
        )


class DriftingBackend(Backend):
    """Synthetic: latency = depth x slowness ms; the slowness (the machine's speed) moves
    by ``step`` after every call, the sentinel config :data:`SENT` included (3 ms x slowness)."""

    device = "cpu"

    def __init__(self, step=0.05, fail_sentinel=False, interrupt_after=None, sentinel_spread=0.004):
        self.protocol = Protocol(max_time_s=2.0)
        self.slowness = 1.0
        self.step = step
        self.log = []  # (kind, config) in call order
        self.fail_sentinel = fail_sentinel
        self.interrupt_after = interrupt_after
        self.sentinel_spread = sentinel_spread
        self.call_s = 0.004

    def provenance(self):
        return {"threads": 1, "synthetic": True}

    def measure(self, config, protocol=None):
        if self.interrupt_after is not None and len(self.log) >= self.interrupt_after:
            raise KeyboardInterrupt
        kind = "sentinel" if config == SENT else "visit"
        self.log.append((kind, config))
        # the runner places visits and readings on the wall clock (to the ms): calls spaced evenly
        # by more than that keep the synthetic drift per call a drift in time, also on a busy machine
        time.sleep(self.call_s)
        s = self.slowness
        self.slowness *= 1 + self.step
        if kind == "sentinel" and self.fail_sentinel:
            return Measurement(status="error", message="synthetic sentinel failure")
        base = (3.0 if kind == "sentinel" else float(config.depth)) * s
        spread = self.sentinel_spread if kind == "sentinel" else 0.004
        samples = [base * f for f in np.linspace(1 - spread, 1 + spread, 8)]  # 8 samples: a defined CI
        return Measurement(
            status="ok",
            latency_ms=summarize(samples),
            memory_mb=10.0,
            timed_s=0.0,
            wall_s=0.0,
            extra={"latency_samples_ms": samples},
        )


def every_visit(every_s=0.0, window_s=0.0) -> Sentinel:
    """A sentinel of :data:`SENT` read before every visit; each visit's sentinel interpolated
    between readings."""
    return Sentinel(
        configs=(SENT,), protocol=Protocol(max_time_s=0.2), every_s=every_s, window_s=window_s, name="synthetic"
    )


def old_store(path: Path) -> None:
    """Write a store of the schema without the speed index (schema 2: no speed_index table,
    no drift columns, no fastest sample), holding 3 rows measured by :class:`DriftingBackend`."""
    from carb.campaign.runner import run_campaign
    from carb.campaign.store import DRIFT_COLUMNS, MEASUREMENT_COLUMNS, TARGETS, Store

    src = path.with_name("src.duckdb")
    with Store(src) as store:
        run_campaign(list(space.load("tiny"))[:3], DriftingBackend(step=0.0), store, sentinel=None)
    cols = [
        (c, t) for c, t in MEASUREMENT_COLUMNS if (c, t) not in DRIFT_COLUMNS and c not in {f"{x}_min" for x in TARGETS}
    ]
    ddl = ", ".join(f"{c} {t}" for c, t in cols)
    names = ", ".join(c for c, _ in cols)
    con = duckdb.connect(str(path))
    con.execute(f"ATTACH '{src}' AS src (READ_ONLY)")
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta SELECT * FROM src.meta")
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, platform VARCHAR, "
        "device VARCHAR, command VARCHAR, carb_version VARCHAR, provenance JSON, protocol JSON)"
    )
    con.execute("INSERT INTO runs SELECT * FROM src.runs")
    con.execute(f"CREATE TABLE measurements ({ddl}, PRIMARY KEY (config_id, platform))")
    con.execute(f"CREATE TABLE remeasurements ({ddl})")
    con.execute(f"CREATE TABLE rounds ({ddl}, round INTEGER, PRIMARY KEY (config_id, platform, round))")
    con.execute(f"INSERT INTO measurements SELECT {names} FROM src.measurements")
    con.close()


# -- synthetic predictors -------------------------------------------------------------------


class SyntheticPredictor:
    """Made-up device: latency and energy proportional to FLOPs, memory to bytes; the
    interval is +-``rel`` around the point."""

    def __init__(self, scale=1.0, rel=0.1, noise=0.0, targets=("energy_j", "latency_ms", "memory_mb")):
        self.scale, self.rel, self.noise = scale, rel, noise
        self.targets_ = list(targets)
        self.calls = []

    def predict(self, df):
        self.calls.append(len(df))
        f = compute(df)
        rng = np.random.default_rng(len(df))
        jitter = np.exp(rng.normal(0, self.noise, len(df))) if self.noise else 1.0
        out = pd.DataFrame(index=df.index)
        point = {
            "latency_ms": self.scale * f.flops.to_numpy() / 1e8 * jitter + 0.1,
            "energy_j": self.scale * f.flops.to_numpy() / 1e9 * jitter,
            "memory_mb": (f.weight_bytes + f.live_activation_bytes).to_numpy() / 1e6 + 20,
        }
        for t in self.targets_:
            out[t] = point[t]
            out[f"{t}_lo"] = point[t] * (1 - self.rel)
            out[f"{t}_hi"] = point[t] * (1 + self.rel)
        return out


def chromium() -> str | None:
    """The headless browser the page tests use (Debian's ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_dump_dom(
    url: str, profile: Path, *, budget_ms: int = 5000, extra: tuple[str, ...] = (), timeout: float = 120
) -> subprocess.CompletedProcess:
    """Open ``url`` headless, let its scripts run for ``budget_ms`` of virtual time, return the run (DOM on stdout)."""
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-extensions",
        *extra,
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        "--dump-dom",
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
