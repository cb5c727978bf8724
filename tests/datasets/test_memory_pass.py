"""A memory pass written into a shipped CPU dataset (``scripts/ship.py memory``), and the shipped datasets' memory."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import numpy as np
import pandas as pd
import pytest

from carb.campaign import Store, run_campaign
from carb.families import space
from carb.measure.cpu import MEMORY_BASELINE, MEMORY_DEFINITION
from tests._helpers import ROOT, DriftingBackend, SyntheticBackend, every_visit

SHIP = ROOT / "scripts" / "ship.py"


class _TodayBackend(SyntheticBackend):
    """SYNTHETIC: a pass's worker, its memory half the first campaign's, under today's memory definition."""

    def __init__(self, definition: str = MEMORY_DEFINITION) -> None:
        super().__init__()
        self.definition = definition

    def provenance(self):
        return {"threads": 1, "device": "cpu", "cpu_model": "SYNTHETIC CPU", "memory_definition": self.definition}

    def measure(self, config, protocol=None):
        m = super().measure(config)
        m.memory_mb = config.depth * config.batch / 20
        m.extra = {"threads": 1, "memory_prefault_mb": 1.5, "loadavg_before": [0.5, 0.5, 0.5]}
        return m


def _ship(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SHIP), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A dataset shipped from a SYNTHETIC campaign (its card, a fingerprints.json), and its configs."""
    out = tmp_path_factory.mktemp("data")
    configs = list(space.load("tiny"))
    with Store(out / "first.duckdb") as s:
        run_campaign(configs, DriftingBackend(step=0.0), s, platform="cpu-1t", sentinel=every_visit())
    r = _ship("dataset", "--store", str(out / "first.duckdb"), "--name", "cpu-1t", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    (out / "fingerprints.json").write_text(json.dumps({"cpu-1t": {"device": "cpu", "name": "SYNTHETIC"}}))
    return out, configs


def test_a_pass_replaces_memory_keeps_the_first_and_fills_no_row_it_did_not_reach(shipped, tmp_path):
    out, configs = shipped
    first = pd.read_parquet(out / "cpu-1t.parquet")
    reached = configs[: len(configs) // 2]
    with Store(tmp_path / "pass.duckdb") as s:
        run_campaign(reached, _TodayBackend(), s, platform="cpu-1t", sentinel=None)
    for _ in range(2):  # a second run of the same pass changes nothing
        r = _ship(
            "memory",
            "--name",
            "cpu-1t",
            "--store",
            str(tmp_path / "pass.duckdb"),
            "--code-commit",
            "abc1234",
            "--out",
            str(out),
        )
        assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_parquet(out / "cpu-1t.parquet").set_index("config_id")
    ids = {c.config_id for c in reached}
    hit = df.index.isin(ids)
    want = {c.config_id: c.depth * c.batch / 20 for c in reached}
    assert np.allclose(df.loc[hit, "memory_mb"], [want[i] for i in df.index[hit]])
    assert df.loc[~hit, "memory_mb"].isna().all() and (~hit).any()  # never filled
    np.testing.assert_array_equal(
        df["memory_mb_older"].to_numpy(), first.set_index("config_id").loc[df.index].memory_mb
    )
    facts = [json.loads(e)["memory_pass"] for e in df.loc[hit, "extra"]]
    assert all(f["memory_prefault_mb"] == 1.5 and f["run_id"] for f in facts)
    assert not any("memory_pass" in json.loads(e) for e in df.loc[~hit, "extra"])
    card = (out / "cpu-1t.md").read_text()
    assert card.count("## Memory: measured again by today's worker") == 1
    assert f"a random sample of {len(reached)} of the {len(configs)} configs" in card and "commit abc1234" in card
    assert card.count("- memory_mb: measured again by today's worker") == 1 and "`memory_mb_older`" in card
    assert card.index("## Memory") < card.index("## Known limits")
    memory = json.loads((out / "fingerprints.json").read_text())["cpu-1t"]["memory"]
    assert memory["memory_baseline"] == MEMORY_BASELINE and memory["definition"] == MEMORY_DEFINITION
    assert memory["rows"] == len(reached) and memory["machine"]["name"] == "SYNTHETIC CPU"
    ratio = df.loc[hit, "memory_mb"] / df.loc[hit, "memory_mb_older"]
    assert memory["ratio_to_older"][1] == pytest.approx(float(ratio.median())) and ratio.median() != 1


def test_a_pass_under_another_memory_definition_is_refused(shipped, tmp_path):
    out, configs = shipped
    with Store(tmp_path / "pass.duckdb") as s:
        run_campaign(configs[:2], _TodayBackend("an older definition"), s, platform="cpu-1t", sentinel=None)
    before = (out / "cpu-1t.parquet").read_bytes()
    r = _ship(
        "memory",
        "--name",
        "cpu-1t",
        "--store",
        str(tmp_path / "pass.duckdb"),
        "--code-commit",
        "abc",
        "--out",
        str(out),
    )
    assert r.returncode == 2 and r.stderr.startswith("error:") and "another memory definition" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and (out / "cpu-1t.parquet").read_bytes() == before


def test_each_shipped_cpu_dataset_says_which_memory_definition_its_memory_is_of():
    data = resources.files("carb") / "data"
    fps = json.loads((data / "fingerprints.json").read_text())
    for name in ("cpu-1t", "cpu-2t", "cpu-avx2-1t", "cpu-avx2-2t"):
        memory = fps[name]["memory"]
        assert memory["memory_baseline"] == MEMORY_BASELINE and memory["definition"] == MEMORY_DEFINITION
        df = pd.read_parquet(data / f"{name}.parquet")
        measured = df["memory_mb"].notna()
        assert measured.sum() == memory["rows"] and df["memory_mb_older"].notna().all()
        assert df.loc[measured, "extra"].map(lambda e: "memory_pass" in json.loads(e)).all()
        assert memory["machine"]["kernels"] and "## Memory: measured again" in (data / f"{name}.md").read_text()
    for name in ("cpu-avx2-1t", "cpu-avx2-2t"):  # measured again on an AVX-512 CPU, on the dataset's AVX2 kernels
        memory = fps[name]["memory"]
        assert memory["machine"]["kernels"] == "AVX2" and memory["kernel_env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
