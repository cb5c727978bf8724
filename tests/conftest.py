"""Fixtures the test folders share, and how the suite runs on several workers. Plain helpers
(backends, configs, runners) are in ``tests/_helpers.py``.

The whole suite (``python -m pytest``, no paths given) runs on two pytest-xdist workers, each
test module on one worker (``--dist loadfile``); a chosen file or folder runs in one process.
A test marked ``slow`` measures for real: under xdist it runs with no other test alongside
(see :func:`_turn`), unless it is also marked ``shares_cpu`` (its assertions hold on a loaded
machine: bookkeeping, files and statuses, no timing). Modules are handed out in the order of
:data:`LONGEST_FIRST` (those with an exclusive test first, beside short tests; then the longest), so
the two workers finish together.
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

#: The order xdist hands modules out in (``--dist loadfile``, its reordering by test count turned off in
#: :func:`pytest_configure`), so that the two workers finish together. First the modules that hold an exclusive
#: (``slow``) test, each beside a module of many short tests: an exclusive test waits for the test running on the
#: other worker to end, and a short one ends soon. Then the longest modules, longest first (seconds of test time on
#: a 2-core AMD EPYC VM, pytest --durations), the two Ray modules apart (each starts a cluster of its own); the rest
#: follow in collection order.
LONGEST_FIRST = (
    "tests/measure/test_measure.py",  # 20 s, two exclusive tests
    "tests/cli/test_bad_input_models.py",  # 11 s in 115 tests
    "tests/families/test_layers.py",  # 11 s, one exclusive test
    "tests/cli/test_bad_input_measure.py",  # 9 s in 100 tests
    "tests/measure/test_gpu_zeus.py",  # 66 s, one exclusive test (its first measuring one)
    "tests/cli/test_bad_input_data.py",  # 6 s in 76 tests
    "tests/campaign/test_ray_executor.py",  # 88 s
    "tests/cli/test_cli.py",  # 56 s
    "tests/test_demo.py",  # 55 s
    "tests/families/test_nb201.py",  # 52 s
    "tests/campaign/test_ray_cluster.py",  # 72 s
    "tests/docs/test_site.py",  # 42 s
    "tests/report/test_report.py",  # 34 s
    "tests/decide/test_decisions.py",  # 32 s
    "tests/datasets/test_datasets.py",  # 32 s
    "tests/test_behaviour.py",  # 31 s
    "tests/model/test_model.py",  # 31 s
    "tests/model/test_prior.py",  # 30 s
    "tests/decide/test_extrapolation.py",  # 29 s
    "tests/cli/test_campaign_commands.py",  # 29 s
    "tests/test_front_door.py",  # 27 s
    "tests/measure/test_onnx_runtime.py",  # 21 s
    "tests/families/test_nets.py",  # 21 s
    "tests/netmodel/test_netmodel.py",  # 20 s
    "tests/families/test_features.py",  # 18 s
    "tests/cli/test_failure_paths.py",  # 18 s
    "tests/cli/test_predict_machine.py",  # 15 s
    "tests/cli/test_bad_input.py",  # 14 s
    "tests/studies/test_fewshot_studies.py",  # 13 s
    "tests/cli/test_speed_cli.py",  # 12 s
)


def pytest_configure(config: pytest.Config) -> None:
    """Keep :data:`LONGEST_FIRST`: pytest-xdist (3.6 on) hands ``loadfile`` modules out by their number of tests
    unless told not to (``--no-loadscope-reorder``), which would start the long modules of few tests last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of :data:`LONGEST_FIRST` first, in its order; every module's own tests keep their order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = Path(str(config.rootpath))

    def key(item: pytest.Item) -> int:
        try:
            rel = Path(str(item.path)).relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(rel, len(rank))

    items[:] = sorted(items, key=key)  # stable: the rest keep the collection order


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
    exclusive = item.get_closest_marker("slow") is not None and item.get_closest_marker("shares_cpu") is None
    with _turn(run_dir, exclusive=exclusive):
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
