"""Fixtures the test folders share, and how the suite runs on several workers. Plain helpers
(backends, configs, runners) are in ``tests/_helpers.py``.

The whole suite (``python -m pytest``, no paths given) runs on two pytest-xdist workers, each
test module on one worker (``--dist loadfile``); a chosen file or folder runs in one process.
A test marked ``slow`` measures for real: under xdist it runs with no other test alongside
(see :func:`_turn`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

#: workers for the whole suite: the 2-core machines it is sized for
SUITE_WORKERS = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the ini's addopts): two workers for the whole suite, none (one process)
    when the command names its tests; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides both."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return min(SUITE_WORKERS, len(os.sched_getaffinity(0))) if whole else 0


@contextlib.contextmanager
def _turn(base: Path, exclusive: bool):
    """A readers-writer lock across the xdist workers of one run: a ``slow`` test (exclusive)
    waits for the test running on the other worker to end and holds off the next; other tests
    share. The gate keeps a waiting exclusive test from being starved by a stream of shared ones."""
    with open(base / "turn.gate", "a") as gate, open(base / "turn.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test (setup, call, teardown) takes its turn: see :func:`_turn`."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)
    run_dir = item.config._tmp_path_factory.getbasetemp().parent  # the run's, above each worker's own
    with _turn(run_dir, exclusive=item.get_closest_marker("slow") is not None):
        return (yield)


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
