"""Predictions that know where they stand: machine kind, fitted range and precision widen the intervals."""

from __future__ import annotations

import json
import math

import pytest
import torch.nn as nn

from carb.measure.fingerprint import Fingerprint, here
from carb.netmodel import load, predict_module
from carb.netmodel.domain import fingerprint_of, steps_of

MODEL = "layers-cpu-avx2-1t"
# a machine of another kind than any the shipped models were measured on (synthetic facts)
OTHER = Fingerprint(device="cpu", name="Test CPU", isa=("avx2", "avx512f"), kernels="AVX512", native=())


def small_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(), nn.Flatten(start_dim=1)
    )


def zoo_net():
    from carb.families import zoo

    cfg = zoo.sample_configs(per_family=1, seed=3, archs=("mobilenetv2",))[0]
    return zoo.build(cfg), (cfg.batch, 3, cfg.input_size, cfg.input_size)


def test_the_shipped_model_records_its_machine_range_and_measured_steps():
    nm = load(MODEL)
    fp = fingerprint_of(nm)
    assert fp is not None and fp.known and fp.kernels == "AVX2"
    steps = steps_of(nm)
    for kind in ("machine_kind", "range", "precision"):
        for t in ("latency_ms", "memory_mb"):
            assert 0 < steps[kind][t]["q90_abs_log"] < 3 and steps[kind][t]["n"] >= 10
    assert set(nm.meta["range"]) >= {"flops", "batch"}


def test_on_its_own_machine_kind_an_in_range_network_keeps_its_interval():
    nm = load(MODEL)
    net, shape = zoo_net()
    p = predict_module(net, shape, nm, machine=fingerprint_of(nm))
    assert not p.extrapolated and p.outside == [] and p.machine_line is None
    q = nm.q["latency_ms"]
    assert p.latency_ms_hi / p.latency_ms == pytest.approx(math.exp(q), rel=1e-6)


def test_on_another_machine_kind_the_interval_widens_to_the_measured_step():
    nm = load(MODEL)
    net, shape = zoo_net()
    mine = predict_module(net, shape, nm, machine=fingerprint_of(nm))
    p = predict_module(net, shape, nm, machine=OTHER)
    assert p.latency_ms == mine.latency_ms  # the point stays
    assert p.extrapolated and p.outside[0] == "another machine kind"
    step = steps_of(nm)["machine_kind"]["latency_ms"]["q90_abs_log"]
    assert math.log(p.latency_ms_hi / p.latency_ms) >= step - 1e-9
    assert math.log(p.latency_ms / p.latency_ms_lo) >= step - 1e-9
    assert p.machine_line.startswith("another kind of machine") and "Test CPU" in p.machine_line


def test_beyond_the_fitted_range_the_interval_widens_and_says_why():
    nm = load(MODEL)
    own = fingerprint_of(nm)
    net, shape = zoo_net()
    inside = predict_module(net, shape, nm, machine=own)
    huge = predict_module(net, (8, 3, 1024, 1024), nm, machine=own)
    assert not inside.extrapolated
    assert huge.extrapolated and any(r.startswith("flops") for r in huge.outside)
    assert any(r.startswith("batch 8 > 4 fitted") for r in huge.outside)
    assert huge.latency_ms_hi / huge.latency_ms > inside.latency_ms_hi / inside.latency_ms


def test_an_unmeasured_precision_has_no_upper_bound_where_it_is_not_native():
    nm = load(MODEL)
    p = predict_module(small_net(), (1, 3, 64, 64), nm, precision="bf16", machine=OTHER)  # OTHER: no native bf16
    assert p.latency_ms_hi == math.inf and any("not native" in r for r in p.outside)
    d = p.to_dict()
    assert d["latency_ms"]["hi"] is None and json.loads(json.dumps(d))["extrapolated"] is True
    native = Fingerprint(**{**OTHER.__dict__, "native": ("bf16",)})
    q = predict_module(small_net(), (1, 3, 64, 64), nm, precision="bf16", machine=native)
    assert math.isfinite(q.latency_ms_hi) and q.extrapolated


def test_a_model_that_records_no_machine_is_never_in_domain():
    nm = load(MODEL)
    del nm.meta["fingerprint"]
    p = predict_module(small_net(), (1, 3, 64, 64), nm, machine=here())
    assert p.extrapolated and "records no machine" in p.machine_line


def test_with_no_model_named_the_shipped_model_of_this_machine_kind_prices_it():
    from carb.netmodel import DEFAULT_MODEL, SHIPPED, default_model

    picked = 0
    for name in SHIPPED:
        fp = fingerprint_of(load(name))
        if fp is not None and fp.known:  # a model whose machine is fully recorded is picked on that kind
            assert default_model(fp) == name
            picked += 1
    assert picked >= 1
    # a kind no shipped model was measured on gets the default, whose measured machine-kind step widens it
    assert default_model(OTHER) == DEFAULT_MODEL
    assert steps_of(load(DEFAULT_MODEL))["machine_kind"]["latency_ms"]["q90_abs_log"] > 0


def test_predict_module_with_no_model_uses_the_one_its_machine_kind_picks():
    import carb
    from carb.netmodel import DEFAULT_MODEL, default_model

    net = small_net()
    for machine in (OTHER, here()):
        named = predict_module(net, (1, 3, 64, 64), default_model(machine), machine=machine)
        picked = carb.predict_module(net, (1, 3, 64, 64), machine=machine)
        assert (picked.latency_ms, picked.memory_mb) == (named.latency_ms, named.memory_mb)
    # on a kind no shipped model was measured on, the default model prices it, its answer widened
    other = carb.predict_modules([net], (1, 3, 64, 64), machine=OTHER)[0]
    assert other.latency_ms == predict_module(net, (1, 3, 64, 64), DEFAULT_MODEL, machine=OTHER).latency_ms
