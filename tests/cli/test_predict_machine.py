"""``carb predict --module`` says first when this machine is another kind, and uses the user's calibration for it."""

from __future__ import annotations

import json

import pytest

from carb.measure.fingerprint import here
from carb.netmodel import load

NET = "tests/cli/_nets.py:small"


@pytest.fixture
def foreign_model(tmp_path):
    """The shipped model as if measured on a CPU of a kind no test machine is (edited facts: synthetic)."""
    nm = load("layers-cpu-avx2-1t")
    nm.meta["fingerprint"] = {**nm.meta["fingerprint"], "name": "Test CPU 9000", "kernels": "TEST"}
    return nm.save(tmp_path / "foreign")


def test_another_machine_kind_is_the_first_line_and_in_the_json(cli, foreign_model, tmp_path):
    code, out, err = cli(
        "predict", "--module", NET, "--input", "1x3x64x64", "--model", foreign_model, "--json", tmp_path / "p.json"
    )
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("another kind of machine: the model was measured on Test CPU 9000")
    # one line, with the one command that fixes it: this very prediction with --calibrate
    assert f"To fit it here: carb predict --module {NET} --input 1x3x64x64 --model {foreign_model} --calibrate" in first
    assert "CPU flags" not in first  # the kernels differ (TEST here): they say it
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["extrapolated"] is True and d["outside"][0] == "another machine kind"
    assert d["machine"].startswith("Test CPU 9000") and d["machine_line"]


def test_a_cached_calibration_for_this_machine_is_used_and_said(cli, foreign_model, tmp_path):
    from carb.transfer import cache

    if not here().known:
        pytest.skip("this machine's fingerprint cannot be read: no calibration ever matches it")
    nm = load(foreign_model)  # stands in for a calibration made here (synthetic: nothing measured)
    nm.meta["fingerprint"] = here().to_dict()
    cal = nm.save(tmp_path / "cal")
    cache.store(cal, str(foreign_model), foreign_model, here(), 10)
    code, out, err = cli("predict", "--module", NET, "--input", "1x3x64x64", "--model", foreign_model)
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"using your calibration of {foreign_model} for this machine (10 networks")
    assert "another kind of machine" not in out
    code, out, err = cli("predict", "--module", NET, "--input", "1x3x64x64", "--model", foreign_model, "--no-cache")
    assert code == 0 and out.splitlines()[0].startswith("another kind of machine")


def test_calibrate_measures_here_once_then_the_cache_serves(cli, foreign_model, tmp_path, monkeypatch):
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "cache"))  # a user with no calibration yet
    if not here().known:
        pytest.skip("this machine's fingerprint cannot be read: no calibration ever matches it")
    # --force: the test is of measuring and caching, not of the machine's state (tests/transfer/test_here_state.py);
    # --samples 3, the fewest a network model calibrates on: the default K of 10 only takes longer
    args = ("predict", "--module", NET, "--input", "1x3x64x64", "--model", foreign_model, "--calibrate")
    code, out, err = cli(*args, "--force", "--samples", "3")
    assert code == 0, err
    assert "measuring 3 networks here first" in out and "kept for this machine in your calibration cache" in out
    assert "another kind of machine" not in out.split("kept for this machine")[1]
    code, out, err = cli("predict", "--module", NET, "--input", "1x3x64x64", "--model", foreign_model, "--calibrate")
    assert code == 0 and out.splitlines()[0].startswith("using your calibration") and "measuring" not in out
    assert f"using your calibration of {foreign_model} for this machine (3 networks measured here" in out
