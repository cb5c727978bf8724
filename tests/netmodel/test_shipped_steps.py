"""The measured domain steps a shipped model carries come from the benchmark's JSON through
``scripts/ship.py steps``: shipping that JSON again gives the same model meta, sealed.

The memory definition step's JSON is rebuilt from what the shipped model holds (committed data),
so that no test reads ``experiments/``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from carb.netmodel import load

ROOT = Path(__file__).resolve().parents[2]
SHIP = ROOT / "scripts" / "ship.py"
#: the machine-kind steps measured, one per kind; the shipped model carries the widest per target
STEP_JSONS = [ROOT / "benchmarks" / "results" / f for f in ("machine_kind_step_xeon.json", "machine_kind_step.json")]


def _ship(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SHIP), "steps", *args], capture_output=True, text=True, cwd=ROOT)


def test_the_shipped_network_model_holds_the_steps_its_json_measured(tmp_path):
    shipped = Path(str(resources.files("carb") / "data" / "layers-cpu-avx2-1t.netmodel"))
    copy = tmp_path / "m.netmodel"
    shutil.copytree(shipped, copy)
    meta = json.loads((copy / "netmodel.json").read_text())["meta"]
    meta_before = {k: meta[k] for k in ("domain_steps", "range")}
    # the memory definition step as its measurement writes it: the step and where it comes from
    definition = {**meta["domain_steps"]["memory_definition"], "runs": "the run's JSON"}
    definition_json = tmp_path / "memory_definition_step.json"
    definition_json.write_text(json.dumps(definition))
    doc = json.loads((copy / "netmodel.json").read_text())
    doc["meta"].pop("domain_steps")  # ship into a model that has none
    (copy / "netmodel.json").write_text(json.dumps(doc))
    kinds = [a for j in STEP_JSONS for a in ("--network", str(j))]
    p = _ship(*kinds, "--memory-definition", str(definition_json), "--model", str(copy))
    assert p.returncode == 0, p.stderr
    after = json.loads((copy / "netmodel.json").read_text())["meta"]
    assert {k: after[k] for k in ("domain_steps", "range")} == meta_before
    steps = load(str(copy)).meta["domain_steps"]  # sealed again
    widest = max(json.loads(j.read_text())["targets"]["latency_ms"]["q90_abs_log"] for j in STEP_JSONS)
    assert steps["machine_kind"]["latency_ms"]["q90_abs_log"] == widest
    assert steps["memory_definition"]["memory_mb"] == definition["memory_mb"]


def test_config_steps_are_written_where_config_models_read_them(tmp_path):
    # SYNTHETIC steps: only the writing is under test
    doc = {"about": "x", "runs": [], "config": {"range": {"latency_ms": {"q90_abs_log": 0.3, "n": 40}}}}
    src = tmp_path / "config_steps.json"
    src.write_text(json.dumps({**doc, "provenance": {"utc": "2026-01-01T00:00:00Z"}}))
    p = _ship("--config", str(src), "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "domain_steps.json").read_text()) == doc


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    for args, said in (
        ((), "give --network"),
        (("--network", str(STEP_JSONS[0])), "give --model"),
        (("--network", str(tmp_path / "nope.json"), "--model", str(tmp_path)), "no such file"),
        (("--config", str(tmp_path / "other.json")), "no config, runs"),
        (("--network", str(STEP_JSONS[0]), "--model", str(tmp_path)), "no netmodel.json"),
    ):
        p = _ship(*args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert p.stderr.startswith("error: ") and said in p.stderr, (args, p.stderr)
