"""carb.campaign.store_info: what `carb dataset info` reads of a store, callable from Python (SYNTHETIC backend)."""

from __future__ import annotations

import json

from carb.campaign.characterization import characterize, select_configs
from carb.campaign.store_info import gpu_line, isa_line, store_info
from tests._helpers import SyntheticBackend


def test_store_info_reads_runs_summary_and_remeasurements(tmp_path):
    store = tmp_path / "s.duckdb"
    configs = select_configs(space="tiny", samples=3, seed=0)
    characterize(configs, store, backend=SyntheticBackend(), rounds=1, sentinel=False)
    characterize(configs, store, backend=SyntheticBackend(), rounds=1, sentinel=False, remeasure=True)
    info = store_info(store)
    assert len(info.runs) == 2 and not info.snapshot and list(info.repeat) == [info.runs.platform.iloc[0]]
    doc = json.loads(json.dumps(info.to_dict(), default=str))
    assert doc["runs"] == 2 and doc["summary"][0]["configs"] == 3 and doc["store"] == str(store)
    assert not info.speed.get("readings")  # no sentinel timed: no speed index


def test_gpu_line_says_the_clocks_and_energy_of_a_gpu_run_and_nothing_of_a_cpu_run():
    gpu = {
        "device": "cuda:0",
        "gpu_name": "SYNTHETIC GPU",
        "driver": "1.0",
        "clock_lock": {"applied": False, "reason": "no permission"},
        "energy_sensor": {"available": True},
        "update_period_s": 0.1,
        "idle_power_w": 50.0,
    }
    line = gpu_line(json.dumps(gpu))
    assert line.startswith("GPU SYNTHETIC GPU (driver 1.0") and "clocks not locked (no permission)" in line
    assert "energy counter every 100 ms" in line and "idle 50.0 W subtracted" in line
    assert gpu_line({"device": "cpu"}) == "" and gpu_line("not json") == "" and gpu_line("[1]") == ""


def test_isa_line_says_which_precisions_run_natively():
    p = {"cpu_model": "SYNTHETIC CPU", "cpu_isa": {"flags": ["avx2"], "native": {"bf16": False}}}
    assert isa_line(p) == "CPU SYNTHETIC CPU: flags avx2; torch kernels ?; bf16 NOT native"
    assert isa_line({}) == ""
