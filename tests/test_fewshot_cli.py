"""`carb fewshot` and carb.transfer.fewshot_help_fbnet on HELP's public measured data."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from carb.datasets import help_fbnet as hf
from carb.transfer import fewshot_help_fbnet

CARB = [sys.executable, "-m", "carb.cli", "fewshot"]


def run(*args):
    return subprocess.run([*CARB, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_fewshot_cli_on_a_held_out_device(tmp_path):
    p = run("--device", "raspi4", "--samples", "10", "--seed", "1", "--out", tmp_path / "p.parquet", "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["k"] == 10 and "raspi4" not in s["sources"] and s["test_archs"] == 1000
    assert s["spearman"] > 0.9  # HELP reached 0.887 on raspi4 with 10 + 10 measurements
    pred = pd.read_parquet(tmp_path / "p.parquet")
    assert len(pred) == 5000 and pred.measured.sum() == 10 and (pred.latency_ms.notna()).all()
    # the command is the function: the same K measurements give the same predictions
    wide = hf.load(wide=True)
    meas = wide.loc[wide.arch_id.isin(pred.arch_id[pred.measured]), ["arch_id", "latency_ms_raspi4"]]
    again, _ = fewshot_help_fbnet(meas.rename(columns={"latency_ms_raspi4": "latency_ms"}),
                                  sources=s["sources"], table=wide)
    pd.testing.assert_series_equal(again.latency_ms, pred.latency_ms, check_exact=False, rtol=1e-9)


@pytest.mark.parametrize("args, message", [
    ((), "give exactly one of --data or --platform"),
    (("--platform", "nope"), "--platform 'nope': not in help-fbnet"),
    (("--device", "fpga", "--method", "magic"), "--method: unknown value 'magic'"),
    (("--device", "fpga", "--source", "tpu"), "source device 'tpu' not in help-fbnet"),
])
def test_fewshot_cli_errors_are_one_line(args, message):
    p = run(*args)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_measured_file_errors(tmp_path):
    bad = tmp_path / "m.csv"
    bad.write_text("arch_id,latency_ms\n1,2.0\n9999,1.0\n")
    p = run("--measured", bad)
    assert p.returncode == 2 and "arch_id 9999 is not an architecture" in p.stderr
    bad.write_text("arch_id,latency_ms\n1,2.0\n2,-1\n")
    p = run("--measured", bad)
    assert p.returncode == 2 and "positive number" in p.stderr
