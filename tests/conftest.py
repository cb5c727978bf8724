"""Fixtures the test folders share. Plain helpers (backends, configs, runners) are in
``tests/_helpers.py``."""

from __future__ import annotations

import os
import sys
import warnings

import pandas as pd
import pytest


@pytest.fixture(scope="session", autouse=True)
def calibration_cache(tmp_path_factory):
    """An empty per-user calibration cache for the session (``CARB_CACHE_DIR``), so that no
    calibration the developer keeps on this machine changes what a test sees."""
    old = os.environ.get("CARB_CACHE_DIR")
    os.environ["CARB_CACHE_DIR"] = str(tmp_path_factory.mktemp("carb-cache"))
    yield os.environ["CARB_CACHE_DIR"]
    if old is None:
        os.environ.pop("CARB_CACHE_DIR", None)
    else:
        os.environ["CARB_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def table(request) -> pd.DataFrame:
    """The feature table of a family's test sample: ``FEATURES(SAMPLE)``, both named by the
    test module (its configs and the features function under test), computed once per module."""
    return request.module.FEATURES(request.module.SAMPLE)


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run ``carb ARGS`` in-process (``carb.cli.main`` with ``sys.argv``), so a case takes
    milliseconds: ``cli(*args, cwd=None)`` returns (exit code, stdout, stderr)."""
    from carb.cli import main

    def run(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["carb", *map(str, args)])
        with pytest.raises(SystemExit) as e:
            main()
        out = capsys.readouterr()
        return e.value.code, out.out, out.err

    return run


@pytest.fixture(scope="session")
def cpu1t_source():
    """The demo's source model: CARB ``fast`` fitted on the shipped cpu-1t dataset, once a session."""
    from carb import datasets
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CARB(preset="fast").fit(datasets.load("cpu-1t"))
