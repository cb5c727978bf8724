"""The front door: the names ``carb`` offers and its end-to-end example."""

from __future__ import annotations

import doctest
import importlib
import re
import warnings
from pathlib import Path

import pytest

import carb

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_example_runs() -> None:
    """The package docstring's workflow runs as written: it measures on this machine (a two-layer module, then
    K = 3 networks and K = 4 configs to calibrate, each with a short protocol) and fits CARB on a shipped dataset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # energy is not trained on cpu-1t: CARB warns, as it should
        result = doctest.testmod(carb, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 9 and result.failed == 0


def test_the_readme_shows_the_same_example() -> None:
    example = [line[4:] for line in carb.__doc__.splitlines() if line.startswith(">>> ")]
    block = re.search(r"### Python API.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None, "README has no Python API example"
    assert block.group(1).splitlines() == example


@pytest.mark.parametrize("name", carb.__all__)
def test_every_front_door_name_resolves(name: str) -> None:
    assert getattr(carb, name) is not None
    assert name in dir(carb)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        carb.nope  # noqa: B018


def test_calibrate_and_screen_are_the_library_functions() -> None:
    assert carb.calibrate is importlib.import_module("carb.transfer.here").calibrate
    assert carb.screen is importlib.import_module("carb.decide.screen").screen
