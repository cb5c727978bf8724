"""The help texts: `carb --version` and `-h`, every command's `-h` with an example and no
markup left over. The CLI runs in-process. (`carb space list`'s whole descriptions are checked in
test_cli.py, beside its counts: one listing counts the spaces for both.)"""

import pytest

COMMANDS = [
    "characterize",
    "screen",
    "calibrate",
    "validate",
    "demo",
    "train",
    "evaluate",
    "predict",
    "report",
    "fewshot",
    "space list",
    "space show",
    "dataset list",
    "dataset check",
    "dataset info",
    "dataset export",
]


def test_version_and_short_help(cli, monkeypatch):
    from carb import __version__

    rc, out, _ = cli("--version")
    assert rc == 0 and out.strip() == f"carb {__version__}"
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, _ = cli("-h")
    assert rc == 0 and "characterize" in out and "--version" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_h_an_example_and_clean_help(cli, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, err = cli(*command.split(), "-h")
    assert rc == 0, err
    assert f"Example: carb {command}" in out
    assert "<bool>" not in out and "%%" not in out
    if command == "characterize":
        assert "pip install 'carb[ray]'" in out and "95% CI" in out
    if command == "evaluate":
        assert "results[model][target][metric]" in out
