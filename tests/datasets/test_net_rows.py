"""Network rows (``family = net``) are data: their features are captured once, when measured, and no
command that reads a data file or a store imports the code a row names."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from carb import datasets, graph
from carb.families import nets

TINY = """
from torch import nn

def tiny():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))
"""

# the same name, edited after measuring: another network, and a side effect at import
EDITED = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from torch import nn

def tiny():
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.Conv2d(64, 64, 3, padding=1))
"""

# runs carb commands in one process and says how each ended; os.abort() at import would kill it (exit -6)
RUN_COMMANDS = """
import json, sys
from carb.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["carb", *argv]
    try:
        main()
        codes.append(0)
    except SystemExit as e:
        codes.append(e.code if isinstance(e.code, int) else 1)
    except Exception as e:  # a traceback is another problem than running the row's code: say which
        codes.append(type(e).__name__)
print(json.dumps(codes))
"""


def _hostile_rows(module: str, n: int = 12) -> pd.DataFrame:
    """Synthetic network rows naming ``module`` (valid ids, made-up targets), without stored features."""
    rows = []
    for i in range(n):
        c = nets.NetConfig(module, 8 + 8 * (i % 6), 1 + i // 6)
        rows.append(
            {
                "config_id": c.config_id,
                "device": "cpu-1t",
                **c.to_dict(),
                "status": "ok",
                "latency_ms": 1.0 + i,
                "energy_j": np.nan,
                "memory_mb": 10.0 + i,
                "energy_missing_reason": "synthetic",
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.slow
@pytest.mark.shares_cpu  # statuses and stored features: no timing is checked
def test_features_are_frozen_at_measurement_and_export_runs_no_code(tmp_path, cli) -> None:
    work, other = tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    (work / "my_nets.py").write_text(TINY)
    pd.DataFrame(
        [
            nets.NetConfig("my_nets.py:tiny", 16, 1).to_dict(),  # relative to the campaign's directory
            nets.NetConfig("missing.py:tiny", 16, 1).to_dict(),  # fails: no such file
        ]
    ).to_csv(work / "nets.csv", index=False)
    rc, out, err = cli(
        "characterize", "--configs", "nets.csv", "--store", "s.duckdb", "--max-time", "0.1", "--rounds", "1",
        "--no-sentinel", cwd=work,
    )  # fmt: skip
    assert rc in (0, None), err
    measured = graph.capture(graph.load_module(f"{work}/my_nets.py:tiny"), (1, 3, 16, 16), "fp32")
    marker = tmp_path / "imported"
    (work / "my_nets.py").write_text(EDITED.format(marker=str(marker)))  # edited after measuring
    rc, out, err = cli("dataset", "export", "--store", work / "s.duckdb", "--out", "x.csv", cwd=other)
    assert rc in (0, None), err
    assert not marker.exists()  # export imported nothing
    df = datasets.load(other / "x.csv")  # reading it back imports nothing either
    assert not marker.exists()
    ok, failed = df[df.status == "ok"].iloc[0], df[df.status == "error"].iloc[0]
    assert ok["flops"] == measured.flops and ok["params"] == measured.params  # the network that was measured
    assert ok["n_layers"] == len(measured.layers) and ok["live_activation_bytes"] == measured.peak_live_bytes
    assert "missing.py" in failed["message"] and np.isnan(failed["flops"])  # a failed row blocks nothing
    # a shipped (slim) form keeps the stored features: nothing could recompute them
    slim = datasets.slim(df)
    assert slim.loc[slim.status == "ok", "flops"].iloc[0] == measured.flops


def test_no_command_runs_the_code_a_data_file_names(tmp_path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\ndef build(): pass\n"
    )
    _hostile_rows("os:abort").to_parquet(tmp_path / "abort.parquet", index=False)
    _hostile_rows(f"{tmp_path}/evil.py:build").to_csv(tmp_path / "evil.csv", index=False)
    # a store whose rows name them (failed rows: the campaign captured nothing)
    make_store = (
        "from carb.campaign.store import Store; from carb.families import nets; "
        "from carb.measure.base import Measurement\n"
        f"with Store({str(tmp_path / 's.duckdb')!r}) as st:\n"
        f"    for m in ('os:abort', {str(tmp_path / 'evil.py:build')!r}):\n"
        "        st.add(nets.NetConfig(m, 16, 1), 'cpu-1t', Measurement(status='error', message='synthetic'), 'r')\n"
    )
    subprocess.run([sys.executable, "-c", make_store], check=True, cwd=tmp_path)
    commands = []
    for f in ("abort.parquet", "evil.csv"):
        commands += [["report", "--data", f, "--out", f"r-{f}"], ["train", "--data", f, "--out", f"m-{f}"]]
        commands += [["evaluate", "--data", f]]
    commands += [["dataset", "export", "--store", "s.duckdb", "--out", "s.parquet"]]
    p = subprocess.run(
        [sys.executable, "-c", RUN_COMMANDS, json.dumps(commands)], capture_output=True, text=True, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-2000:]  # os.abort() was never called
    assert not marker.exists()  # evil.py was never imported
    codes = dict(zip(map(" ".join, commands), json.loads(p.stdout.strip().splitlines()[-1])))
    assert all(c in (0, 2) for c in codes.values()), codes  # each ends well or with one error line
    assert codes["train --data evil.csv --out m-evil.csv"] == 2  # a config model does not learn net rows: one line
    assert codes["dataset export --store s.duckdb --out s.parquet"] == 0
    assert datasets.load(tmp_path / "s.parquet")["flops"].isna().all()  # failed rows: exported, no features
