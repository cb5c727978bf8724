"""carb.netmodel and carb.predict_module on SYNTHETIC measurements (made-up costs from a
known formula, labelled synthetic: they test the fitting and the plumbing, not any device)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import carb
from carb import graph, netmodel
from carb.families import layers as L
from carb.families import space, zoo
from carb.netmodel.io import seal
from tests._helpers import one_line_error

# synthetic device: each op class costs a0 + flops / P + bytes / B (ms), grouped and
# depthwise convolutions at a lower FLOP rate, like real CPUs
_P = {"conv": 2e7, "conv_grouped": 6e6, "conv_dw": 3e6, "linear": 1e7, "matmul": 1e7}


def synthetic_latency_ms(rows: pd.DataFrame) -> np.ndarray:
    cls = netmodel.op_class(rows)
    p = np.array([_P.get(c, 1e7) for c in cls])
    t = 0.004 + rows["flops"].to_numpy(float) / p + rows["bytes"].to_numpy(float) / 4e6
    return np.where(cls == "view", 0.0, t)


@pytest.fixture(scope="module")
def layers() -> space.Space:
    """The built-in layers space, listed once for the module's samples (listing its configs takes seconds)."""
    return space.load("layers")


@pytest.fixture(scope="module")
def layer_model(layers) -> netmodel.LayerModel:
    sample = L.balanced_sample(layers, 200, seed=0)
    rows = L.layer_frame(sample)
    return netmodel.LayerModel.fit(rows, synthetic_latency_ms(rows), trees=30)


def _net_rows(cfgs, lm):
    out = []
    for c in cfgs:
        t = graph.capture(zoo._meta_build(c), (c.batch, 3, c.input_size, c.input_size))
        out.append(netmodel.network_row(t, lm)[0])
    return pd.DataFrame(out)


@pytest.fixture(scope="module")
def model(layer_model) -> netmodel.NetModel:
    cfgs = [
        zoo.ZooConfig(a, w, d, 0, s, b)
        for a, w, d in (("mobilenetv2", 0.5, 0.7), ("vgg", 0.25, 11), ("resnext", 0.25, 26), ("densenet", 0.375, 0.34))
        for s, b in ((96, 1), (128, 2))
    ]
    rows = _net_rows(cfgs, layer_model)
    # synthetic whole-network truth: 1.1 x the layers + 0.01 ms per node + 0.3 ms
    y = pd.DataFrame(
        {
            "latency_ms": 1.1 * rows["layer_sum_ms"] + 0.01 * rows["nodes"] + 0.3,
            "memory_mb": (rows["model_bytes"] + rows["input_bytes"] + 1.2 * rows["peak_live_bytes"]) / 1e6 + 5,
        }
    )
    # no shrinkage: the terms must come back exactly (the shrinkage is tested on its own)
    return netmodel.fit_netmodel(
        layer_model, rows, y, groups=[c.arch for c in cfgs], device="synthetic", shrink_strength=0.0
    )


def test_layer_model_learns_synthetic_costs(layer_model, layers) -> None:
    test = L.layer_frame(L.balanced_sample(layers, 150, seed=7))
    test = test[test["op"] != "se"]
    y = synthetic_latency_ms(test)
    err = np.abs(layer_model.predict(test) / y - 1)
    assert np.median(err) < 0.05
    assert layer_model.known(test).all()


def test_network_terms_recovered(model) -> None:
    s, o, c = model.lat_coef
    assert s == pytest.approx(1.1, rel=0.02) and o == pytest.approx(0.01, rel=0.2) and c == pytest.approx(0.3, abs=0.15)
    assert model.mem_coef[2] == pytest.approx(1.2, rel=0.05)


def test_grouped_convs_are_not_ignored(model) -> None:
    a = netmodel.predict_module(zoo.build(zoo.ZooConfig("resnext", 0.25, 26, 0, 96, 1)), (1, 3, 96, 96), model)
    b = netmodel.predict_module(zoo.build(zoo.ZooConfig("wideresnet", 0.25, 26, 0, 96, 1)), (1, 3, 96, 96), model)
    assert a.latency_ms < 0.8 * b.latency_ms
    assert set(a.layers.loc[a.layers["op"] == "conv", "groups"]) >= {1, 32}


def test_prediction_shape_and_coverage(model) -> None:
    p = netmodel.predict_module(
        zoo.build(zoo.ZooConfig("efficientnet", 0.5, 0.7, 0, 96, 1)), torch.zeros(1, 3, 96, 96), model
    )
    assert p.coverage_flops == 1.0 and p.coverage_layers == 1.0 and p.unknown_ops == []
    assert p.latency_ms_lo < p.latency_ms < p.latency_ms_hi
    assert p.memory_mb_lo < p.memory_mb < p.memory_mb_hi
    top = p.top(5)
    assert list(top["latency_ms"]) == sorted(top["latency_ms"], reverse=True)
    assert p.layers["share"].sum() == pytest.approx(1.0)
    d = p.to_dict()
    assert list(d)[0] == "coverage" and d["energy_j"] is None and d["energy_missing_reason"]
    json.dumps(d)


class WithUnknown(nn.Module):
    def __init__(self, odd: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2) if odd else nn.Identity()
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.odd = odd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(self.up(self.conv(x)))
        return torch.cumsum(y, 1) if self.odd else y


def test_unknown_ops_never_free_and_widen(model) -> None:
    p = netmodel.predict_module(WithUnknown(True), (1, 3, 32, 32), model)
    assert sorted(p.unknown_ops) == ["Upsample", "cumsum"]
    # 2 of 4 costed layers unknown; FlopCounterMode has no formula for either (0 FLOPs)
    assert p.coverage_layers == 0.5 and p.coverage_flops == 1.0
    unk = p.layers[~p.layers["known"]]
    assert (unk["latency_ms"] > 0).all()
    # the same network priced as if the unknown ops were known: narrower relative interval
    t = graph.capture(WithUnknown(True), (1, 3, 32, 32))
    row, _ = netmodel.network_row(t, model.layer)
    base = model.predict_rows(pd.DataFrame([{**row, "unknown_ms": 0.0}])).iloc[0]
    assert p.latency_ms_hi / p.latency_ms > base["latency_ms_hi"] / base["latency_ms"]


def test_save_load_round_trip_and_errors(model, tmp_path) -> None:
    d = model.save(tmp_path / "m")
    again = netmodel.load(d)
    m = zoo.build(zoo.ZooConfig("shufflenetv2", 0.5, 0.5, 3, 96, 1))
    a = netmodel.predict_module(m, (1, 3, 96, 96), model)
    b = netmodel.predict_module(m, (1, 3, 96, 96), str(d))
    assert a.latency_ms == pytest.approx(b.latency_ms, rel=1e-9) and a.memory_mb == pytest.approx(b.memory_mb)
    assert again.layer.classes == model.layer.classes
    with pytest.raises(netmodel.ModelError, match="no netmodel.json"):
        netmodel.load(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "netmodel.json").write_text('{"format": "carb-netmodel/1"}')
    with pytest.raises(netmodel.ModelError, match="malformed"):
        netmodel.load(tmp_path / "bad")


def test_latency_overheads_shrink_with_few_networks_and_the_scale_stays_free() -> None:
    # SYNTHETIC network rows: truth 0.5 x the layers (another day's speed) + 0.02 ms per node + 0.5 ms
    rng = np.random.default_rng(0)

    def rows(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        r = pd.DataFrame(
            {
                "layer_sum_ms": rng.uniform(5, 100, n),
                "nodes": rng.integers(30, 400, n).astype(float),
                "model_bytes": 1e7,
                "input_bytes": 1e5,
                "peak_live_bytes": 1e6,
                "max_weight_bytes": 1e6,
            }
        )
        return r, pd.DataFrame({"latency_ms": 0.5 * r["layer_sum_ms"] + 0.02 * r["nodes"] + 0.5, "memory_mb": 20.0})

    few, many = rows(5), rows(400)
    lm = netmodel.LayerModel({}, [0.0, 0.0, 0.0], [])
    plain = netmodel.fit_netmodel(lm, *few, shrink_strength=0.0).lat_coef
    assert plain == pytest.approx([0.5, 0.02, 0.5], rel=1e-3, abs=1e-3)
    s, o, c = netmodel.fit_netmodel(lm, *few, shrink_strength=10.0).lat_coef
    # the overheads shrink towards 0 (together: ridge spreads them over both terms); the
    # scale takes up what they leave, and is not pulled towards 1
    n = few[0]["nodes"]
    assert (o * n + c).mean() < 0.75 * (0.02 * n + 0.5).mean() and 0.5 < s < 0.75
    # a fixed total: many networks move the terms almost all the way to the data
    s, o, c = netmodel.fit_netmodel(lm, *many, shrink_strength=10.0).lat_coef
    assert s == pytest.approx(0.5, abs=0.01) and o == pytest.approx(0.02, rel=0.1)


def test_pooling_work_and_version_1_models(layer_model, layers, tmp_path) -> None:
    rows = L.layer_frame(
        [
            L.LayerConfig("maxpool", 16, 16, 32, 3, 1, 1, 1),
            L.LayerConfig("maxpool", 16, 16, 32, 3, 2, 1, 1),
            L.LayerConfig("conv", 16, 32, 32, 3, 1, 1, 1),
        ]
    )
    cls = netmodel.op_class(rows)
    w = netmodel._work(rows, cls)
    # a pooling window's reads are its work: 3x3 stride 1 reads 4x what stride 2 does
    assert w[0] == 16 * 32 * 32 * 9 and w[0] == pytest.approx(4 * w[1], rel=0.1)
    assert w[2] == rows["flops"].iloc[2] and (netmodel._work(rows, cls, 1) == rows["flops"].to_numpy()).all()
    assert netmodel._x(rows, ["pool"]).shape == (3, len(netmodel._FEATURES) + 1)
    assert netmodel._x(rows, ["pool"], 1).shape == (3, len(netmodel._FEATURES_V1) + 1)
    assert netmodel._x(rows, ["pool"], 2).shape == (3, len(netmodel._FEATURES_V2) + 1)
    # a model saved before the features key existed loads as version 1 and predicts with
    # version 1's features (its forest was fitted on them)
    from sklearn.ensemble import ExtraTreesRegressor

    from carb.model import ArrayForest

    train = L.layer_frame(L.balanced_sample(layers, 60, seed=3))
    train = train[train["op"] != "se"].reset_index(drop=True)
    et = ExtraTreesRegressor(n_estimators=5, random_state=0).fit(
        netmodel._x(train, layer_model.classes, 1), np.random.default_rng(0).normal(0, 0.1, len(train))
    )
    old = netmodel.LayerModel(
        layer_model.rooflines, layer_model.generic, layer_model.classes, ArrayForest.from_sklearn(et), features=1
    )
    nm = netmodel.NetModel(old, [1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0], {"latency_ms": 0.1, "memory_mb": 0.1})
    d = nm.save(tmp_path / "v1")
    doc = json.loads((d / "netmodel.json").read_text())
    assert doc["layer"].pop("features") == 1
    (d / "netmodel.json").write_text(json.dumps(doc))
    seal(d)  # as a model written before the feature version was recorded, sealed
    again = netmodel.load(d)
    assert again.layer.features == 1
    assert np.array_equal(again.layer.predict(train), old.predict(train))
    new = netmodel.NetModel(layer_model, [1.0, 0.0, 0.0], [1.0] * 5, {}).save(tmp_path / "v2")
    assert netmodel.load(new).layer.features == layer_model.features == netmodel.FEATURES_VERSION


@pytest.mark.parametrize("threads", [1, 2])
def test_onednn_rule_matches_the_installed_torch(threads) -> None:
    """The ``onednn`` feature says which path the installed torch really runs: each small
    convolution is run once under the profiler and its ATen kernel compared with the rule,
    on the graph's rows and on the layer family's closed-form rows alike."""
    import itertools

    import torch
    from torch.profiler import ProfilerActivity, profile

    from carb import graph

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        shapes = [
            (b, c, hw, k, s, g)
            for b, c, hw, k, s, g in itertools.product([1, 2, 16], [4, 32], [8, 40], [1, 3, 5], [1, 2], [1, 0])
            if k <= hw
        ]
        cfgs = [L.LayerConfig("conv", c, c, hw, k, s, g, b) for b, c, hw, k, s, g in shapes]
        runs_onednn = []
        for cfg in cfgs:
            conv = torch.nn.Conv2d(cfg.cin, cfg.cout, cfg.kernel, cfg.stride, cfg.kernel // 2, groups=cfg.groups).eval()
            x = torch.randn(cfg.batch, cfg.cin, cfg.input_size, cfg.input_size)
            with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
                conv(x)
            names = {e.key for e in prof.key_averages()}
            assert names & {"aten::mkldnn_convolution", "aten::_slow_conv2d_forward"}, names
            runs_onednn.append("aten::mkldnn_convolution" in names)
        closed = netmodel.onednn_conv(L.layer_frame(cfgs), threads)
        captured = np.concatenate(
            [
                netmodel.onednn_conv(
                    graph.capture(L.build(c), (c.batch, c.cin, c.input_size, c.input_size)).layers, threads
                )
                for c in cfgs
            ]
        )
    finally:
        torch.set_num_threads(before)
    assert 0 < sum(runs_onednn) < len(cfgs)  # both paths occur in the grid
    assert list(closed) == runs_onednn
    assert list(captured) == runs_onednn


def test_onednn_memory_from_the_layers_and_off_networks_that_never_run_it(layer_model, tmp_path) -> None:
    """SYNTHETIC memory: small oneDNN convolutions read 7 MB above small native ones; the
    figure comes back from the layers, and a network none of whose convolutions runs on
    oneDNN is priced that much lower, while the terms fitted on oneDNN networks stay put."""
    import dataclasses

    cfgs = [
        L.LayerConfig("conv", c, c, s, k, 1, 1, b) for c in (4, 8) for s in (8, 16) for k in (1, 3) for b in (1, 2, 4)
    ]
    rows = L.layer_frame(cfgs)
    on = netmodel.onednn_conv(rows)
    assert 5 <= on.sum() <= len(cfgs) - 5
    mem = np.where(on, 21.0, 14.0) + np.random.default_rng(0).normal(0, 0.1, len(cfgs))
    lm = netmodel.LayerModel.fit(rows, synthetic_latency_ms(rows), trees=5, memory_mb=mem)
    assert lm.onednn_mb == pytest.approx(7.0, abs=0.2)
    assert netmodel.LayerModel.fit(rows, synthetic_latency_ms(rows), trees=5).onednn_mb is None  # no memory given
    assert netmodel._onednn_mb(rows[~on], mem[~on]) is None  # no oneDNN layer: nothing to measure

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return self.b(self.a(x))

    lm7 = dataclasses.replace(layer_model, onednn_mb=7.0)
    one, two = (graph.capture(Tiny(), (b, 3, 16, 16)) for b in (1, 2))  # batch 1: native; 2: oneDNN
    r = pd.DataFrame([netmodel.network_row(t, lm7)[0] for t in (one, two)])
    assert list(r["onednn_convs"]) == [0, 2]
    nm = netmodel.NetModel(lm7, [1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 30.0], {})
    plain = netmodel.NetModel(layer_model, [1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 30.0], {})
    shift = plain.predict_rows(r)["memory_mb"].to_numpy() - nm.predict_rows(r)["memory_mb"].to_numpy()
    assert shift == pytest.approx([7.0, 0.0])
    assert netmodel.load(nm.save(tmp_path / "m")).layer.onednn_mb == 7.0
    # fitted on networks that all run oneDNN, the memory terms do not see the figure
    y = pd.DataFrame({"latency_ms": [1.0, 2.0, 3.0], "memory_mb": [40.0, 41.0, 42.5]})
    rr = pd.concat([r.iloc[[1]]] * 3, ignore_index=True).assign(peak_live_bytes=[1e6, 2e6, 3.5e6])
    assert netmodel.fit_netmodel(lm7, rr, y).mem_coef == netmodel.fit_netmodel(layer_model, rr, y).mem_coef


def test_calibration_to_a_slower_synthetic_device(model, layer_model) -> None:
    cfgs = [
        zoo.ZooConfig(a, 0.5, 1.0, 0, s, 1)
        for a in ("mobilenetv2", "mnasnet", "efficientnet", "regnet", "shufflenetv2")
        for s in (96, 128)
    ]
    rows = _net_rows(cfgs, layer_model)
    before = model.predict_rows(rows)
    truth = pd.DataFrame({"latency_ms": 2.0 * before["latency_ms"], "memory_mb": before["memory_mb"]})
    cal = model.calibrate(rows, truth)
    after = cal.predict_rows(rows)
    assert np.allclose(after["latency_ms"] / truth["latency_ms"], 1.0, rtol=0.02)
    assert cal.calibration["latency_ms"]["n"] == 10


def test_import_carb_stays_light_and_exports_predict_module() -> None:
    code = (
        "import sys, carb; assert 'torch' not in sys.modules; f = carb.predict_module; "
        "import carb.netmodel as n; assert f is n.predict_module"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert carb.predict_module is netmodel.predict_module


def test_predict_tables_equals_one_table_at_a_time(model) -> None:
    # batched prediction (one layer-model call over every network's layers) gives each
    # network the figures it gets alone, unknown operators and breakdown included
    nets = [
        WithUnknown(True),
        zoo._meta_build(zoo.ZooConfig("resnext", 0.25, 26, 0, 96, 2)),
        WithUnknown(False),
        zoo._meta_build(zoo.ZooConfig("mobilenetv3", 0.5, 0.5, 3, 96, 1)),
    ]
    shapes = [(1, 3, 32, 32), (2, 3, 96, 96), (1, 3, 16, 16), (1, 3, 96, 96)]
    tables = [graph.capture(m, s) for m, s in zip(nets, shapes)]
    many = netmodel.predict_tables(tables, model)
    for t, b in zip(tables, many):
        a = netmodel.predict_table(t, model)
        for f in (
            "latency_ms",
            "latency_ms_lo",
            "latency_ms_hi",
            "memory_mb",
            "memory_mb_lo",
            "memory_mb_hi",
            "coverage_flops",
            "coverage_layers",
        ):
            assert getattr(b, f) == pytest.approx(getattr(a, f), rel=1e-12), f
        assert (b.unknown_ops, b.flops, b.params) == (a.unknown_ops, a.flops, a.params)
        pd.testing.assert_frame_equal(b.layers, a.layers)
        assert b.to_dict()["top_layers"] == a.to_dict()["top_layers"]
    assert many[0].unknown_ops and not many[2].unknown_ops and many[0].coverage_layers < 1.0
    assert netmodel.predict_tables([], model) == []


def test_predict_modules_in_workers_matches_predict_module(model) -> None:
    import functools

    cfgs = [
        zoo.ZooConfig(a, 0.5, 0.5 if a != "vgg" else 11, 3 if a in ("mobilenetv3", "shufflenetv2") else 0, 96, 1)
        for a in ("mobilenetv3", "shufflenetv2", "vgg")
    ]
    builders = [functools.partial(zoo._meta_build, c) for c in cfgs]
    shape = (1, 3, 96, 96)
    one = [netmodel.predict_module(zoo._meta_build(c), shape, model) for c in cfgs]
    seen: list[int] = []
    for workers in (1, 2):  # in-process, and two spawned capture processes
        many = carb.predict_modules(builders, shape, model, workers=workers, progress=seen.append)
        assert [p.latency_ms for p in many] == pytest.approx([p.latency_ms for p in one], rel=1e-12)
        assert [p.memory_mb for p in many] == pytest.approx([p.memory_mb for p in one], rel=1e-12)
        assert [len(p.layers) for p in many] == [len(p.layers) for p in one]
    assert seen and seen[-1] == 3
    # modules themselves, one input each
    got = netmodel.predict_modules([WithUnknown(True), WithUnknown(False)], [(1, 3, 32, 32), (1, 3, 16, 16)], model)
    assert got[0].unknown_ops and not got[1].unknown_ops
    # a network that does not build: one line naming it; a wrong number of inputs
    bad = builders[:1] + [functools.partial(zoo.ZooConfig, "nosuch")]
    with pytest.raises(graph.CaptureError, match=r"^network 1: building it failed \(SpaceError") as e:
        netmodel.predict_modules(bad, shape, model, workers=1)
    assert "\n" not in str(e.value)
    with pytest.raises(graph.CaptureError, match="2 inputs for 3 networks"):
        netmodel.predict_modules(builders, [shape, shape], model)


def test_skip_meta_init_skips_meta_tensors_only() -> None:
    import gc

    import torch.nn.init as init

    before = init.kaiming_uniform_
    with torch.device("meta"), graph.skip_meta_init():
        meta = nn.Conv2d(3, 4, 3)
        real = nn.Conv2d(3, 4, 3, device="cpu")  # a real tensor meanwhile: initialised as usual
        assert init.kaiming_uniform_ is not before
    assert init.kaiming_uniform_ is before  # restored
    assert meta.weight.is_meta and real.weight.abs().sum() > 0
    # capture pauses the garbage collector and restores its state, either way
    gc.disable()
    try:
        graph.capture(real, (1, 3, 8, 8))
        assert not gc.isenabled()
    finally:
        gc.enable()
    graph.capture(real, (1, 3, 8, 8))
    assert gc.isenabled()


# --------------------------------------------------------------------------- CLI

NETS = """
import torch
from torch import nn

def build():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(16, 10))

class Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
    def forward(self, x):
        return torch.cumsum(self.conv(x), 1)

def odd():
    return Odd()

class Dyn(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x

def dyn():
    return Dyn()

def number():
    return 3
"""


def test_cli_predict_module(model, tmp_path, cli) -> None:
    d = model.save(tmp_path / "m")
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    rc, out, err = cli(
        "predict", "--module", f"{f}:build", "--input", "2x3x32x32", "--model", d, "--json", tmp_path / "o.json"
    )
    assert rc in (0, None), err
    # a model that records no machine: that comes first, then the coverage
    assert out.splitlines()[0].startswith("another kind of machine: the model was measured on a machine it does not")
    assert out.splitlines()[1].startswith("coverage: 100.0% of layers")
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["input"] == [2, 3, 32, 32] and doc["latency_ms"]["lo"] < doc["latency_ms"]["value"]
    assert doc["top_layers"][0]["op"] in ("conv", "bn", "relu", "linear", "gap")
    assert "not calibrated to this machine" in out and f"carb calibrate --model {d}" in out
    # unknown operators: still an answer, coverage below 100% shown first
    rc, out, err = cli("predict", "--module", f"{f}:odd", "--input", "1x3x16x16", "--model", d)
    assert rc in (0, None), err
    first = out.splitlines()[1]
    assert first.startswith("coverage: 50.0% of layers") and "cumsum" in first
    # an importable package callable
    rc, out, err = cli("predict", "--module", "carb.families.fbnet:FBNet", "--input", "1x3x32x32", "--model", d)
    assert rc == 2  # FBNet() needs its ops: the call fails, one line
    one_line_error(rc, err, "FBNet()")


@pytest.mark.parametrize(
    "args,words",
    [
        (["--module", "{f}:dyn", "--input", "1x3x8x8"], ["does not trace"]),
        (["--module", "{f}:number", "--input", "1x3x8x8"], ["returned a int"]),
        (["--module", "{f}:nope", "--input", "1x3x8x8"], ["no attribute"]),
        (["--module", "{f}:build", "--input", "1x3xx8"], ["malformed input shape"]),
        (["--module", "{f}:build", "--input", "1x3x8x8", "--precision", "fp8"], ["unknown dtype"]),
        (["--module", "nosuchpkg.mod:build", "--input", "1x3x8x8"], ["importing nosuchpkg.mod failed"]),
        (["--module", "{f}", "--input", "1x3x8x8"], ["expected pkg.module:callable"]),
        (["--module", "{f}:build"], ["needs --input"]),
    ],
)
def test_cli_predict_module_bad_input(model, tmp_path, cli, args, words) -> None:
    d = model.save(tmp_path / "m")
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    rc, out, err = cli("predict", *[a.format(f=f) for a in args], "--model", d)
    one_line_error(rc, err, *words)


def test_cli_predict_module_needs_a_network_model(tmp_path, cli) -> None:
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    rc, out, err = cli("predict", "--module", f"{f}:build", "--input", "1x3x8x8", "--model", tmp_path)
    one_line_error(rc, err, "not a network model")


class _TokenMLP(nn.Module):
    """ConvNeXt's block MLP: a linear layer on channels-last N x H x W x C tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        return self.fc(x.permute(0, 2, 3, 1))


def test_linear_over_tokens_is_priced_as_a_pointwise_conv(layer_model) -> None:
    t = graph.capture(_TokenMLP(), (2, 16, 8, 4)).layers
    fc = t[t["op"] == "linear"].iloc[0]
    # features are the last dimension, the 8 x 4 positions are rows
    assert (fc.batch, fc.cin, fc.h, fc.w, fc.cout, fc.ho, fc.wo) == (2, 16, 32, 1, 32, 32, 1)
    conv = graph.capture(nn.Conv2d(16, 32, 1), (2, 16, 32, 1)).layers
    assert fc.flops == conv.flops.iloc[0] and fc.weight_bytes == conv.weight_bytes.iloc[0]
    assert list(netmodel.op_class(t[t["op"] == "linear"])) == ["conv"]
    assert np.isclose(layer_model.predict(t[t["op"] == "linear"])[0], layer_model.predict(conv)[0])
    # a 3-D N x L x C input was read the same way already; a classifier head stays linear
    t3 = graph.capture(nn.Linear(16, 32), (2, 5, 16)).layers.iloc[0]
    assert (t3.cin, t3.h, t3.w) == (16, 5, 1)
    head = graph.capture(nn.Linear(16, 32), (2, 16)).layers
    assert list(netmodel.op_class(head)) == ["linear"]


def test_cli_predict_module_defaults_to_the_shipped_model(tmp_path, cli) -> None:
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    rc, out, err = cli("predict", "--module", f"{f}:build", "--input", "1x3x8x8")
    assert rc == 0, err
    here = netmodel.default_model()  # the shipped model of this machine's kind, else the default
    assert f"model: the shipped {here}" in out
    # the same model named, and loaded by name from Python
    rc2, out2, _ = cli("predict", "--module", f"{f}:build", "--input", "1x3x8x8", "--model", here)
    assert rc2 == 0 and "model: the shipped" not in out2
    lat = [line for line in out.splitlines() if line.startswith("latency")]
    assert lat and lat == [line for line in out2.splitlines() if line.startswith("latency")]
    assert netmodel.load(netmodel.DEFAULT_MODEL).device == "cpu-1t"
    # the default model was measured with the retain allocator: the answer says which latency it is
    assert "steady state of a process that keeps freed memory" in " ".join(out.split())
    rc3, out3, _ = cli(
        "predict",
        "--module",
        f"{f}:build",
        "--input",
        "1x3x8x8",
        "--model",
        "layers-cpu-1t",
        "--json",
        tmp_path / "p.json",
    )
    assert rc3 == 0 and "steady state" not in out3
    assert json.loads((tmp_path / "p.json").read_text())["allocator"] == "default"


def test_every_shipped_network_model_says_its_allocator() -> None:
    assert {n: netmodel.allocator_of(netmodel.load(n)) for n in netmodel.SHIPPED} == {
        "layers-cpu-avx2-1t": "retain",
        "layers-cpu-epyc512-1t": "retain",
        "layers-cpu-1t": "default",
    }


def test_a_path_wins_over_a_shipped_name(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / netmodel.DEFAULT_MODEL).mkdir()  # a directory of that name here: it is what the user means
    with pytest.raises(netmodel.ModelError, match="not a network model"):
        netmodel.load(netmodel.DEFAULT_MODEL)


def test_cli_predict_without_module_still_needs_a_model(cli) -> None:
    rc, out, err = cli("predict", "--space", "tiny", "--out", "x.parquet")
    one_line_error(rc, err, "--model")


def test_a_precision_the_model_never_measured_is_said(model, layer_model, tmp_path, cli) -> None:
    assert layer_model.precisions == ["fp32"]  # the layers space measures fp32 layers
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    assert netmodel.predict_module(net, (1, 3, 16, 16), model, precision="fp32").precision_measured is True
    p = netmodel.predict_module(net, (1, 3, 16, 16), model, precision="bf16")
    assert p.precision == "bf16" and p.precision_measured is False
    assert p.to_dict()["coverage"]["precision_measured"] is False
    d = model.save(tmp_path / "m")
    assert netmodel.load(d).layer.precisions == ["fp32"]
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    rc, out, err = cli("predict", "--module", f"{f}:build", "--input", "1x3x8x8", "--precision", "bf16", "--model", d)
    assert rc == 0 and "precision bf16: not measured by this model (its layers are fp32)" in out
    rc, out, err = cli("predict", "--module", f"{f}:build", "--input", "1x3x8x8", "--model", d)
    assert rc == 0 and "not measured by this model" not in out
    # a model saved before precisions were recorded: unknown, nothing claimed either way
    doc = json.loads((d / "netmodel.json").read_text())
    del doc["layer"]["precisions"]
    (d / "netmodel.json").write_text(json.dumps(doc))
    seal(d)
    assert netmodel.predict_module(net, (1, 3, 16, 16), netmodel.load(d), precision="bf16").precision_measured is None
    # the shipped model measured fp32 layers only
    assert netmodel.load(netmodel.DEFAULT_MODEL).layer.precisions == ["fp32"]
