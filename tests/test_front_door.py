"""The front door: the names ``carb`` offers, its end-to-end example, and the old import paths."""

from __future__ import annotations

import doctest
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import carb

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_example_runs() -> None:
    """The package docstring's workflow runs as written (shipped data; nothing is measured)."""
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


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("carb.space", "carb.families.space", "Space"),
        ("carb.zoo", "carb.families.zoo", "build"),
        ("carb.store", "carb.campaign.store", "Store"),
        ("carb.pareto", "carb.decide.pareto", "front_mask"),
        ("carb.evaluate", "carb.model.evaluation", "evaluate"),
        ("carb.drift", "carb.campaign.rounds", "retake_off_state"),
        ("carb.drift", "carb.campaign.speed", "normalize"),
        ("carb.analysis", "carb.studies.analyses", "scaling"),
        ("carb.analysis", "carb.model.gbm", "GBMRegressor"),
    ],
)
def test_old_module_paths_warn_and_give_the_same_objects(old: str, new: str, name: str, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # a first import, as in a fresh program
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)


def test_a_moved_module_keeps_its_own_spec(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "carb.features", raising=False)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("carb.features")
    assert old.__spec__.name == "carb.families.features"


def test_calibrate_and_screen_are_functions_and_old_modules_at_once() -> None:
    from carb.decide.screen import parse_budgets
    from carb.transfer.calibrate import choose_samples

    assert carb.calibrate.__wrapped__ is importlib.import_module("carb.transfer.load").calibrate
    assert carb.screen.__wrapped__ is importlib.import_module("carb.decide.screen").screen
    with pytest.warns(DeprecationWarning, match="carb.transfer.calibrate"):
        assert carb.calibrate.choose_samples is choose_samples
    import carb.screen as old_screen

    with pytest.warns(DeprecationWarning, match="carb.decide.screen"):
        assert old_screen.parse_budgets is parse_budgets
    assert old_screen is carb.screen and callable(old_screen)
