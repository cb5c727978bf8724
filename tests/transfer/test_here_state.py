"""A calibration checks the machine's state first, visits its K in rounds, and carries the state spread it measured.

The machine's state is given as injected readings (load, CPUs, sentinel readings), never waited for; the measuring
step is a SYNTHETIC device (``measure=``): the shipped network model's own prediction times a factor per round.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import carb
from carb.campaign.state import (
    DisturbedMachine,
    MachineState,
    Thresholds,
    check_state,
    pool_rounds_at_median_speed,
    state_spread,
)
from carb.params import InvalidParameterError
from carb.transfer.here import calibrate_here

MODEL = "layers-cpu-avx2-1t"
QUIET = [(0.41, 0.01), (0.40, 0.02), (0.405, 0.01), (0.404, 0.015), (0.39, 0.01)]  # 5 readings of an idle VM


def test_a_quiet_machine_passes_and_its_record_says_what_was_read():
    st = check_state("cpu", 1, load=1.2, cpus=2, readings=QUIET, reference_ms=0.40)
    assert not st.disturbed and not st.forced and st.problems == ()
    assert st.spread == pytest.approx(0.41 / 0.39) and st.speed_index == pytest.approx(0.40 / 0.404)
    d = json.loads(json.dumps(st.to_dict()))
    assert d["load_1m"] == 1.2 and d["readings_ms"][0] == 0.41 and d["thresholds"]["spread"] == 1.25
    assert "quiet" in st.line()


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"load": 4.5}, "load 4.5 on 2 CPUs"),  # the busy machine that cached a x1.64 factor
        ({"readings": [(1.29, 0.63), (1.31, 0.11), (1.80, 0.37), (0.84, 0.015), (0.75, 0.11)]}, "too noisy"),
        ({"readings": [(0.40, 0.01), (0.41, 0.01), (0.80, 0.01), (0.79, 0.01)]}, "x2.00 apart"),
        ({"reference_ms": 0.30}, "speed index 0.74"),  # the machine runs slower than where it was calibrated
    ],
)
def test_a_disturbed_machine_is_refused_under_force_unless_forced(kw, words):
    args = {"load": 1.0, "cpus": 2, "readings": QUIET, **kw}
    with pytest.raises(DisturbedMachine, match=words) as e:
        check_state("cpu", 1, **args)
    assert isinstance(e.value, InvalidParameterError) and e.value.param == "force"  # the CLI says it under --force
    assert str(e.value).startswith("force: the machine is disturbed")
    st = check_state("cpu", 1, force=True, **args)
    assert st.disturbed and st.forced and st.to_dict()["forced"] and "(forced)" in st.line()


def test_the_load_alone_refuses_without_reading_the_sentinel():
    with pytest.raises(DisturbedMachine, match="load 9.0") as e:
        check_state("cpu", 1, load=9.0, cpus=2)  # no readings given: none are taken on a machine the load refuses
    assert e.value.state.readings_ms == () and e.value.state.spread is None


def test_the_load_is_judged_against_the_cpus_the_worker_leaves():
    # the caller counts itself once: load 3 on 2 CPUs leaves 2 other tasks for the one CPU a 1-thread worker leaves
    assert not check_state("cpu", 1, load=3.0, cpus=2, readings=QUIET).disturbed
    assert check_state("cpu", 1, load=3.2, cpus=2, readings=QUIET, force=True).disturbed
    # a 2-thread worker leaves no CPU: any other runnable task takes turns on its cores
    assert check_state("cpu", 2, load=1.5, cpus=2, readings=QUIET, force=True).disturbed
    # off the CPU the host's load is read, not judged
    assert not check_state("cuda", 1, load=9.0, cpus=2, readings=[]).disturbed
    assert not check_state(
        "cpu", 1, load=4.5, cpus=2, readings=QUIET, thresholds=Thresholds(others_per_free_cpu=4.0)
    ).disturbed


def test_the_state_spread_pools_each_samples_rounds():
    a = pd.DataFrame({"config_id": ["x", "y"], "status": "ok", "latency_ms": [10.0, 50.0], "sentinel_ms": 0.6})
    b = a.assign(latency_ms=a.latency_ms * 1.2, sentinel_ms=0.6)
    s = state_spread([a, b])
    # two visits per sample, x1.2 apart: deviations +-log(1.2)/2, one degree of freedom each
    assert s["round_sd"] == pytest.approx(math.log(1.2) / math.sqrt(2)) and s["dof"] == 2
    assert s["sentinel_sd"] == 0.0 and s["state_sd"] == s["round_sd"] and s["rounds"] == 2
    assert state_spread([a])["round_sd"] is None and state_spread([a])["state_sd"] == 0.0
    pooled, ref = pool_rounds_at_median_speed(a, [a, b])
    assert ref == pytest.approx(0.6) and pooled.latency_ms.tolist() == pytest.approx([11.0, 55.0])


def _device(factors: list[float], sentinel: list[float] | None = None):
    """A SYNTHETIC device: round r's latency is the shipped model's prediction times ``factors[r]``."""
    nm = carb.load_model(MODEL)
    calls = []

    def measure(frame: pd.DataFrame, what: str, again: bool = False, allocator: str = "default") -> pd.DataFrame:
        from carb.families import config_from_row
        from carb.netmodel import capture_config, predict_tables

        r = len(calls)
        calls.append((what, len(frame), again))
        preds = predict_tables([capture_config(config_from_row(x)) for x in frame.to_dict("records")], nm)
        return frame.assign(
            status="ok", message="", latency_ms=np.array([p.latency_ms for p in preds]) * factors[r],
            memory_mb=[p.memory_mb for p in preds], energy_j=np.nan, sentinel_ms=(sentinel or [0.6] * 9)[r],
        )  # fmt: skip

    return measure, calls


class _Check:
    """An injected state check: the readings of a busy machine, as :func:`check_state` judges them."""

    def __init__(self, load: float) -> None:
        self.load, self.asked = load, []

    def __call__(self, reference_ms: float | None, force: bool) -> MachineState:
        self.asked.append(force)
        return check_state("cpu", 1, load=self.load, cpus=2, readings=QUIET, reference_ms=reference_ms, force=force)


def test_a_disturbed_machine_is_refused_before_anything_is_measured(tmp_path):
    measure, calls = _device([1.64, 1.64])
    with pytest.raises(DisturbedMachine, match="load 4.5"):
        calibrate_here(MODEL, samples=3, measure=measure, check=_Check(4.5), out=tmp_path / "cal")
    assert calls == [] and not (tmp_path / "cal").exists()
    said = []
    res = calibrate_here(MODEL, samples=3, measure=measure, check=_Check(4.5), force=True, say=said.append)
    kept = res.model.meta["machine_state"]
    assert kept["forced"] and kept["disturbed"] and kept["load_1m"] == 4.5 and kept["thresholds"]["spread"] == 1.25
    assert res.machine.forced and any("disturbed" in s and "(forced)" in s for s in said)


def test_a_calibration_kept_nowhere_is_measured_on_a_disturbed_machine_with_a_warning():
    measure, calls = _device([1.64, 1.64])
    said = []
    res = calibrate_here(MODEL, samples=3, measure=measure, check=_Check(4.5), say=said.append)
    assert calls and res.out is None and res.cached is None
    kept = res.model.meta["machine_state"]
    assert kept["disturbed"] and not kept["forced"] and not res.machine.forced
    assert any("disturbed" in s and "neither cached nor saved" in s for s in said)
    with pytest.raises(DisturbedMachine):  # the same, to be cached: refused
        calibrate_here(MODEL, samples=3, measure=measure, check=_Check(4.5), cache=True)


def test_the_k_are_visited_in_rounds_and_the_interval_carries_their_spread():
    steady, _ = _device([1.4, 1.4])
    moving, calls = _device([1.4, 1.4 * 1.2])  # the machine ran 20% slower in the second round
    a = calibrate_here(MODEL, samples=3, measure=steady, check=_Check(1.0))
    b = calibrate_here(MODEL, samples=3, measure=moving, check=_Check(1.0))
    assert [c[2] for c in calls] == [False, True] and b.model.meta["rounds"] == 2
    assert a.spread["state_sd"] == 0.0 and "state_widening" not in a.model.meta
    sd = b.spread["state_sd"]
    assert sd == pytest.approx(math.log(1.2) / math.sqrt(2))
    w = b.model.meta["state_widening"]
    z = 1.6448536269514722
    assert w["q"] == pytest.approx(math.sqrt(w["q_before"] ** 2 + 2 * (z * sd) ** 2))
    assert b.model.calibration["latency_ms"]["q"] == pytest.approx(w["q"]) and w["q_before"] == pytest.approx(
        a.model.calibration["latency_ms"]["q"]
    )
    # each network's latency is the median of its rounds: the factor lies between the two rounds'
    from carb.netmodel import network_row

    nm = carb.load_model(MODEL)
    rows = pd.DataFrame([network_row(t, nm.layer)[0] for t in b.tables])
    pb, pa = b.model.predict_rows(rows), a.model.predict_rows(rows)
    ratio = pb["latency_ms"] / nm.predict_rows(rows)["latency_ms"]
    assert ((ratio > 1.4) & (ratio < 1.4 * 1.2)).all()
    # the K themselves: the calibration taken in a moving moment claims the wider interval
    assert (pb["latency_ms_hi"] / pb["latency_ms"] > pa["latency_ms_hi"] / pa["latency_ms"]).all()


def _net():
    import torch

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2))
    return net, (1, 3, 64, 64)


def test_a_calibrated_models_layers_add_up_to_its_total():
    measure, _ = _device([1.6, 1.6])
    cal = calibrate_here(MODEL, samples=3, measure=measure, check=_Check(1.0)).model
    p = carb.predict_module(*_net(), cal)
    assert p.layers["latency_ms"].sum() == pytest.approx(p.latency_ms, rel=1e-9)
    assert p.layers["share"].sum() == pytest.approx(1.0)
    # the uncalibrated model's table is the layer model's own prices, as before
    nm = carb.load_model(MODEL)
    u = carb.predict_module(*_net(), nm)
    assert u.layers["latency_ms"].to_numpy() == pytest.approx(
        p.layers["latency_ms"].to_numpy() * u.layers["latency_ms"].sum() / p.latency_ms
    )
    assert u.layers["latency_ms"].sum() < u.latency_ms  # the network terms' overheads sit outside the layers


def test_a_config_models_rounds_are_visits_whose_scatter_widens_its_intervals(tmp_path, cpu1t_source):
    """A config model: the K's second round, 20% slower, is a visit of each config; its scatter from the kept
    row widens every interval (:func:`carb.transfer.calibrate.visit_scatter`), where a steady machine's does not."""
    from carb.model import save

    save(cpu1t_source, tmp_path / "src")

    def device(slower: float):
        calls = []

        def measure(df, what, again=False, allocator="default"):
            calls.append((len(df), again))
            p = cpu1t_source.predict(df.reset_index(drop=True))["latency_ms"].to_numpy() * 1.5
            lat = p * (slower if len(calls) > 1 else 1.0)
            return df.reset_index(drop=True).assign(
                status="ok", latency_ms=lat, memory_mb=50.0, energy_j=np.nan, sentinel_ms=0.6
            )

        return measure, calls

    steady, _ = device(1.0)
    moving, calls = device(1.2)
    a = calibrate_here(tmp_path / "src", samples=8, measure=steady, check=_Check(1.0))
    b = calibrate_here(tmp_path / "src", samples=8, measure=moving, check=_Check(1.0))
    assert calls == [(8, False), (8, True)] and b.model.meta["rounds"] == 2
    assert b.spread["round_sd"] == pytest.approx(math.log(1.2) / math.sqrt(2))
    assert b.model.meta["machine_state"]["disturbed"] is False
    z = 1.6448536269514722  # sqrt(2) z times the state sd log(1.2) / sqrt(2)
    assert not a.model.scatter_.get("latency_ms") and b.model.scatter_["latency_ms"] == pytest.approx(z * math.log(1.2))
    # the K under both: the calibration taken in a moving moment claims the wider intervals
    pa, pb = a.model.predict(b.measured), b.model.predict(b.measured)
    assert (pb.latency_ms_hi / pb.latency_ms > pa.latency_ms_hi / pa.latency_ms).all()
