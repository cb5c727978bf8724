"""Fixtures of the bad-input probes (tests/cli/test_bad_input_*.py): a model bundle, a screening and a store, made
once a session, and a folder of bad files made for each case."""

from __future__ import annotations

import json

import pytest

from tests._helpers import RESNET_ROW

#: a user's network file: one builder per way of ending the process, and a good one
USER_NETS = """import sys

import torch.nn as nn


def exits():
    raise SystemExit(7)


def interrupts():
    raise KeyboardInterrupt


def fails():
    raise ValueError("no weights here")


def not_a_module():
    return 42


def small():
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1))


class ExitsInForward(nn.Module):
    def forward(self, x):
        sys.exit(3)


NOT_CALLABLE = 5
"""


@pytest.fixture(scope="session")
def probe_bundle(tmp_path_factory, cpu1t_source):
    """A CARB bundle (``fast`` on the shipped cpu-1t)."""
    from carb.model import save

    d = tmp_path_factory.mktemp("probe") / "bundle"
    save(cpu1t_source, d)
    return d


@pytest.fixture(scope="session")
def probe_screen(tmp_path_factory, probe_bundle):
    """A ``carb screen`` output of the tiny space."""
    from carb.cli import app

    d = tmp_path_factory.mktemp("probe") / "screen"
    args = [
        "screen",
        "--space",
        "tiny",
        "--target-model",
        str(probe_bundle),
        "--budget",
        "latency_ms=5",
        "--out",
        str(d),
    ]
    app(args, standalone_mode=False)
    return d


@pytest.fixture(scope="session")
def probe_store(tmp_path_factory):
    """A campaign store with two SYNTHETIC failed rows (no measuring)."""
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure.base import Measurement

    path = tmp_path_factory.mktemp("probe") / "s.duckdb"
    with Store(path) as store:
        run = store.begin_run("cpu-1t", "cpu", {"synthetic": True}, {}, "test")
        for depth in (20, 32):
            cfg = space.Config(**{**RESNET_ROW, "depth": depth})
            store.add(cfg, "cpu-1t", Measurement(status="error", message="synthetic"), run)
    return path


@pytest.fixture
def paths(tmp_path, probe_bundle, probe_screen, probe_store):
    """Every path a probe names, by placeholder: good inputs (``bundle``, ``screen``, ``store``), bad files in
    ``tmp``, and ``out`` (an output that must not appear)."""
    import duckdb
    import pandas as pd

    t = tmp_path
    (t / "afile").write_text("x")
    (t / "adir").mkdir()
    (t / "notes.txt").write_text("not a dataset\n")
    (t / "empty.csv").write_text("")
    (t / "junk.parquet").write_bytes(b"PAR1 not really")
    (t / "junk.onnx").write_bytes(b"\x08\x07garbage")
    (t / "notdb.duckdb").write_text("not a database")
    (t / "nets.py").write_text(USER_NETS)
    (t / "exit_at_import.py").write_text("import sys\n\nsys.exit(5)\n")
    pd.DataFrame([{"width": 0.5}]).to_csv(t / "w.csv", index=False)
    pd.DataFrame([RESNET_ROW, {**RESNET_ROW, "width": "inf"}]).to_csv(t / "inf.csv", index=False)
    pd.DataFrame([{**RESNET_ROW, "config_id": "deadbeefdeadbeef"}]).to_csv(t / "ids.csv", index=False)
    pd.DataFrame([{"arch_id": 1}]).to_csv(t / "nolatency.csv", index=False)
    pd.DataFrame([{"latency_ms": 1.0}]).to_csv(t / "noarch.csv", index=False)
    pd.DataFrame([{**RESNET_ROW, "latency_ms": 1.0, "status": "ok"}]).to_csv(t / "one.csv", index=False)
    (t / "nets2.txt").write_text(f"{t}/nets.py:small 1x3x32x32\n{t}/nets.py:small 2x3x32x32\n")
    (t / "badline.txt").write_text(f"{t}/nets.py:small\n")
    (t / "badshape.txt").write_text(f"{t}/nets.py:small 1x4x32x32\n")
    (t / "netexit.txt").write_text("\n".join(f"{t}/nets.py:{f} 1x3x32x32" for f in ("exits", "small", "small")))
    (t / "nonsense.json").write_text(json.dumps({"not": "a model"}))
    (t / "notmodel").mkdir()
    (t / "notmodel" / "x.txt").write_text("x")
    con = duckdb.connect(str(t / "foreign.duckdb"))
    con.execute("CREATE TABLE sales (region VARCHAR, amount DOUBLE)")
    con.execute("INSERT INTO sales VALUES ('north', 1.5)")
    con.close()
    return {
        "tmp": t,
        "bundle": probe_bundle,
        "screen": probe_screen,
        "store": probe_store,
        "out": t / "out",
        "long": t / ("n" * 300 + ".parquet"),
    }
