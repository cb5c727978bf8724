"""The library does what the commands do: the checks and steps the CLI calls, from Python, in one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from carb._safeio import OutputError, check_out_dir, check_out_file, release_outputs, write_json
from carb.datasets.views import latency_view
from carb.decide.screen import parse_budgets
from carb.decide.screening import check_budget_targets
from carb.graph.usercode import UserCodeExit, UserCodeInterrupted, running_user_code
from carb.studies.fewshot import fewshot
from carb.transfer.load import CONFIG_MODELS, load_model


def test_an_output_is_refused_before_any_work_under_the_name_the_caller_gives(tmp_path):
    src = tmp_path / "data.csv"
    src.write_text("a\n1\n")
    with pytest.raises(OutputError, match=r"^out .*: is a directory"):
        check_out_file(tmp_path)
    with pytest.raises(OutputError, match=r"^--json .*data.csv: is also --data"):
        check_out_file(src, "--json", inputs={"--data": src}, lock=False)
    with pytest.raises(OutputError, match="holds data"):
        check_out_dir(tmp_path, inputs={"data": src}, lock=False)


def test_an_output_locked_by_another_process_is_refused_until_released(tmp_path):
    out = tmp_path / "o" / "p.csv"
    check_out_file(out)
    lock = out.parent / ".p.csv.lock"
    assert lock.exists()
    other = subprocess.run(  # another process asks for the same output
        [sys.executable, "-c", f"from carb._safeio import lock_output; lock_output({str(out)!r})"],
        capture_output=True,
        text=True,
    )
    assert other.returncode == 1 and "another carb command is writing it" in other.stderr
    release_outputs()
    assert not lock.exists() and not out.parent.exists()  # the folder made for the lock is gone again


def test_the_user_code_ending_the_process_is_an_exception_that_names_it():
    with pytest.raises(UserCodeExit, match=r"^--module m: the code it names raised SystemExit\(3\)"):
        with running_user_code("--module m"):
            sys.exit(3)
    with pytest.raises(UserCodeExit, match=r"called os._exit\(0\)"):
        with running_user_code("--module m"):
            os._exit(0)
    with pytest.raises(UserCodeInterrupted, match="interrupted"):
        with running_user_code("--module m"):
            raise KeyboardInterrupt

    class Stopped(KeyboardInterrupt):  # carb's own campaign stopped: passes through as it is
        pass

    with pytest.raises(Stopped):
        with running_user_code("--module m"):
            raise Stopped


def test_two_budgets_for_one_target_are_refused_by_the_library():
    with pytest.raises(ValueError, match=r"^budget latency_ms given twice \(latency_ms=5 and latency_ms=7\)"):
        parse_budgets(["latency_ms=5", "latency_ms=7"])
    frame = pd.DataFrame({"latency_ms": [1.0], "energy_j": [None]})
    check_budget_targets({"latency_ms": 2.0}, frame, "rows")
    with pytest.raises(ValueError, match=r"^budget energy_j: rows has no energy_j \(targets there: latency_ms\)"):
        check_budget_targets({"energy_j": 2.0}, frame, "rows")


def test_the_one_loader_refuses_a_kind_not_asked_for(tmp_path):
    with pytest.raises(ValueError, match=r"not a model directory \(no manifest.json from carb train, no calibration"):
        load_model(tmp_path, CONFIG_MODELS)
    with pytest.raises(ValueError, match="no such model directory$"):  # a shipped network model is no config model
        load_model("layers-cpu-avx2-1t", CONFIG_MODELS)
    (tmp_path / "netmodel.json").write_text("{}")
    with pytest.raises(ValueError, match="not a model directory"):
        load_model(tmp_path, CONFIG_MODELS)


def test_fewshot_and_the_latency_view_name_the_parameter_they_refuse():
    with pytest.raises(ValueError, match="^give exactly one of measured or platform"):
        fewshot()
    with pytest.raises(ValueError, match="^space imagenet: unknown value"):
        fewshot("imagenet", platform="pixel3")
    with pytest.raises(ValueError, match="^method: unknown value 'magic'"):
        fewshot(platform="pixel3", method="magic")
    with pytest.raises(ValueError, match="^latency smooth: expected one of corrected, raw"):
        latency_view(pd.DataFrame({"latency_ms": [1.0]}), "smooth")


def test_json_written_whole_with_nan_as_null(tmp_path):
    import numpy as np

    write_json(tmp_path / "r.json", {"a": np.float64("nan"), "b": (np.int64(2), 1.5), 3: np.inf})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": None, "b": [2, 1.5], "3": None}
