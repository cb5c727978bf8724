"""carb.measure_cost: a network measured here with CARB's protocol, from Python (real measurements, tiny nets)."""

from __future__ import annotations

import pytest
import torch

import carb
from carb.measure.cost import CostMeasurement, ModuleConfig
from carb.params import InvalidParameterError


class TwoConvs(torch.nn.Module):
    """A network whose class lives in this (importable) test module."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.slow
@pytest.mark.shares_cpu  # statuses, intervals' order and names: no timing is checked
def test_a_module_is_measured_with_intervals_memory_machine_and_sentinel() -> None:
    m = carb.measure_cost(TwoConvs(), torch.randn(1, 3, 32, 32), max_time_s=0.3, visits=2)
    assert isinstance(m, CostMeasurement) and m.ok, m.message
    assert m.latency_ms_lo <= m.latency_ms <= m.latency_ms_hi and m.latency_ms > 0
    assert m.memory_mb_lo <= m.memory_mb <= m.memory_mb_hi and m.memory_mb > 0
    assert m.visits == 2 and len(m.measurements) == 2 and m.threads == 1
    assert m.machine and m.fingerprint["device"] == "cpu" and "VmHWM" in m.memory_definition
    assert m.sentinel_ms is not None and m.sentinel_ms > 0  # the paired speed sentinel
    assert m.target == "TwoConvs-1x3x32x32-fp32"
    if m.energy_j is None:  # no RAPL on this machine: missing with its reason, never made up
        assert m.energy_missing_reason
    assert m.to_dict()["latency_ms"] == m.latency_ms


@pytest.mark.slow
@pytest.mark.shares_cpu  # a status and the shape it ran at: no timing is checked
def test_any_input_rank_runs_at_its_own_shape() -> None:
    """A video network's 5-D input reaches the worker as it is (a 2-D image input would not run a Conv3d)."""
    m = carb.measure_cost(torch.nn.Conv3d(3, 4, 3), (1, 3, 4, 16, 16), max_time_s=0.2, sentinel=False)
    assert m.ok, m.message
    assert m.target.endswith("1x3x4x16x16-fp32") and m.sentinel_ms is None


NET_FILE = """
import torch


class Wave(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 512, 3, padding=1)  # 12,288 weights and 512 biases

    def forward(self, x):
        return self.conv(x).relu()


def build():
    return Wave()
"""


@pytest.mark.slow
@pytest.mark.shares_cpu  # a status, the target's name and memory: no timing is checked
def test_a_builder_spec_of_a_file_runs_at_any_input_rank_with_real_weights(tmp_path) -> None:
    """A file's builder with an input that is not a square RGB image: its class, defined in the user's file,
    reaches the worker, and the network runs with real weights (not the meta device's)."""
    (tmp_path / "wave.py").write_text(NET_FILE)
    m = carb.measure_cost(f"{tmp_path / 'wave.py'}:build", (1, 8, 4000), max_time_s=0.2, sentinel=False)
    assert m.ok, m.message
    assert m.target == "Wave-1x8x4000-fp32" and m.latency_ms > 0
    assert m.memory_mb > 4000 * 512 * 4 / 1e6  # at least the output tensor: the forward really ran


@pytest.mark.slow
@pytest.mark.shares_cpu  # a status and its message: no timing is checked
def test_a_failing_network_comes_back_as_a_status_not_an_exception() -> None:
    m = carb.measure_cost(torch.nn.Conv2d(4, 8, 3), (1, 3, 16, 16), max_time_s=0.2, sentinel=False)
    assert m.status == "error" and "channels" in m.message and m.latency_ms is None


def test_a_class_a_worker_cannot_import_is_refused_in_one_line() -> None:
    class Local(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(ValueError, match="not importable"):
        carb.measure_cost(Local(), (1, 3, 8, 8))


@pytest.mark.parametrize(
    "kwargs,param",
    [
        ({"threads": 0}, "threads"),
        ({"visits": 0}, "visits"),
        ({"max_time_s": float("nan")}, "max_time_s"),
        ({"precision": "fp8"}, "precision"),
        ({"allocator": "jemalloc"}, "allocator"),
    ],
)
def test_parameter_rules_are_checked_before_anything_runs(kwargs, param) -> None:
    with pytest.raises(InvalidParameterError) as e:
        carb.measure_cost(TwoConvs(), (1, 3, 8, 8), **kwargs)
    assert e.value.param == param


@pytest.mark.parametrize(
    "target,inp,match",
    [
        (TwoConvs(), None, "needs its input"),
        (TwoConvs(), torch.zeros(1, 3, 8, 8, dtype=torch.long), "int64"),
        (TwoConvs(), (1, 0, 8), ">= 1"),
        (42, (1, 3, 8, 8), "not a config"),
        ("missing.onnx", (1, 3, 8, 8), "no such ONNX file"),
    ],
)
def test_bad_targets_and_inputs_are_one_line_value_errors(target, inp, match) -> None:
    with pytest.raises(ValueError, match=match):
        carb.measure_cost(target, inp)


def test_a_module_config_keys_on_its_bytes_shape_and_precision() -> None:
    net = TwoConvs()
    a = ModuleConfig.of(net, (1, 3, 8, 8))
    assert a.config_id == ModuleConfig.of(net, (1, 3, 8, 8)).config_id
    assert a.config_id != ModuleConfig.of(net, (2, 3, 8, 8)).config_id
    assert a.config_id != ModuleConfig.of(net, (1, 3, 8, 8), "bf16").config_id
    assert a.config_id != ModuleConfig.of(TwoConvs(), (1, 3, 8, 8)).config_id  # other weights
    assert "tests.measure.test_cost" in a.modules and (a.batch, a.input_size) == (1, 8)
