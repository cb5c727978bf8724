"""Unknown ops are priced by a measured fallback, honestly: the roofline of their class fitted
on measured layers (SYNTHETIC measurements here, made up from a known formula: they test the
fitting and plumbing), widened by the class's leave-one-op-out error; the coverage counts
what is really unknown; a network mostly priced so gets no latency budget decision."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from carb import graph, netmodel
from carb.families import layers as L

# synthetic device: each op class costs a0 + flops / P + bytes / B (ms), slower per byte for
# the normalizations, like real CPUs
_B = {"bn": 2e6, "softmax": 2e6, "gap": 3e6}


def synthetic_latency_ms(rows: pd.DataFrame) -> np.ndarray:
    cls = netmodel.op_class(rows)
    b = np.array([_B.get(c, 4e6) for c in cls])
    return 0.004 + rows["flops"].to_numpy(float) / 1e7 + rows["bytes"].to_numpy(float) / b


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """The shapes (only) of 400 layers of the shipped layers-cpu-avx2-1t dataset: every op of the layers space."""
    from pathlib import Path

    df = pd.read_parquet(Path(L.__file__).parents[1] / "data" / "layers-cpu-avx2-1t.parquet")
    df = df[df["op"] != "se"]
    df = pd.concat([df[df["op"] != "conv"], df[df["op"] == "conv"].sample(200, random_state=0)])
    return L.layer_frame(df).reset_index(drop=True)


@pytest.fixture(scope="module")
def model(rows) -> netmodel.NetModel:
    lm = netmodel.LayerModel.fit(rows, synthetic_latency_ms(rows), trees=20)
    fake = pd.DataFrame(
        {
            "layer_sum_ms": [1.0, 2.0, 4.0, 8.0],
            "unknown_ms": 0.0,
            "nodes": [10.0, 20.0, 30.0, 40.0],
            **{c: [1e6, 2e6, 4e6, 8e6] for c in ("flops", "model_bytes", "input_bytes", "peak_live_bytes")},
            "max_weight_bytes": 1e5,
            "batch": 1.0,
            "flops_known_share": 1.0,
            "layers_known_share": 1.0,
            "onednn_convs": 1.0,
        }
    )
    y = pd.DataFrame({"latency_ms": 1.1 * fake["layer_sum_ms"] + 0.05, "memory_mb": [10.0, 12.0, 15.0, 22.0]})
    return netmodel.fit_netmodel(lm, fake, y, device="synthetic", shrink_strength=0.0)


def test_fallback_classes_are_fitted_with_their_leave_one_op_out_error(rows) -> None:
    y = synthetic_latency_ms(rows)
    fb = netmodel.fit_fallback(rows, y)
    assert set(fb) == {*netmodel.FALLBACK_CLASSES, "generic"}
    assert fb["normalization"]["ops"] == ["bn", "gap", "softmax"]
    assert fb["movement"]["ops"] == ["cat", "copy"] and fb["pooling"]["ops"] == ["avgpool", "maxpool"]
    # the normalizations cost per byte at two rates: left out, each is predicted from the others
    cls = netmodel.op_class(rows)
    norm = np.isin(cls, ["bn", "softmax", "gap"])
    work, b = rows["flops"].to_numpy(float), rows["bytes"].to_numpy(float)
    res = []
    for op in ("bn", "gap", "softmax"):
        tr, te = norm & (cls != op), cls == op
        from carb.netmodel.layers import _apply_roofline, _roofline

        coef = _roofline(work[tr], b[tr], y[tr])
        res += list(np.abs(np.log(np.maximum(_apply_roofline(coef, work[te], b[te]), 1e-6) / y[te])))
    assert fb["normalization"]["q"] == pytest.approx(np.quantile(res, 0.9))
    assert fb["normalization"]["q"] > 0.05
    # the element-wise ops all cost alike here: left out, each is predicted right
    assert fb["elementwise"]["q"] < 0.02


def test_unknown_ops_take_their_class_roofline_and_widen_by_its_error(model) -> None:
    lm = model.layer
    t = graph.capture(
        nn.Sequential(nn.Conv2d(3, 8, 3), nn.LayerNorm(30), nn.Mish(), nn.Upsample(scale_factor=2)), (1, 3, 32, 32)
    )
    layers = t.layers
    assert list(layers["op"]) == ["conv", "layernorm", "mish", "upsample_nearest"]
    cls = netmodel.op_class(layers)
    assert list(netmodel.fallback_class(layers, cls)) == ["compute", "normalization", "elementwise", "movement"]
    ms = lm.predict(layers)
    for i, name in ((1, "normalization"), (2, "elementwise"), (3, "movement")):
        a0, a1, a2 = lm.fallback[name]["coef"]
        assert ms[i] == pytest.approx(a0 + a1 * layers["flops"].iloc[i] + a2 * layers["bytes"].iloc[i])
    q = lm.fallback_q(layers)
    assert q[0] == 0.0 and list(q[1:]) == [lm.fallback[n]["q"] for n in ("normalization", "elementwise", "movement")]
    row, _ = netmodel.network_row(t, lm)
    full = model.predict_rows(pd.DataFrame([row])).iloc[0]
    base = model.predict_rows(pd.DataFrame([{**row, "unknown_hi_ms": 0.0, "unknown_lo_ms": 0.0}])).iloc[0]
    s = model.lat_coef[0]
    assert full["latency_ms_hi"] - base["latency_ms_hi"] == pytest.approx(
        s * sum(ms[i] * np.expm1(q[i]) for i in (1, 2, 3))
    )
    assert base["latency_ms_lo"] - full["latency_ms_lo"] == pytest.approx(
        s * sum(ms[i] * -np.expm1(-q[i]) for i in (1, 2, 3))
    )
    # an op capture cannot read: compute where it counts FLOPs, else every measured layer's roofline
    odd = pd.DataFrame([{**layers.iloc[0].to_dict(), "op": "unknown", "flops": 0}])
    assert netmodel.fallback_class(odd)[0] == "generic"


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3)
        self.lstm = nn.LSTM(16, 64, batch_first=True)

    def forward(self, x):
        return self.lstm(self.conv(x).transpose(1, 2))[0]


def test_coverage_counts_unknown_layers_flops_and_bytes(model) -> None:
    p = netmodel.predict_module(Recurrent(), (2, 8, 50), model)
    t = graph.capture(Recurrent(), (2, 8, 50)).layers
    costed = t[t["op"] != "view"]
    assert sorted(p.unknown_ops) == ["Conv1d", "LSTM"] and p.coverage_layers == 0.0
    assert p.coverage_flops == 0.0 and costed["flops"].sum() == p.flops > 0
    d = p.to_dict()["coverage"]
    assert d["bytes"] == p.coverage_bytes == 0.0 and d["unknown_latency_share"] == pytest.approx(1.0)


def test_a_network_mostly_priced_by_the_fallback_gets_no_latency_decision(model) -> None:
    # inside the model's domain (the synthetic model records no machine or range to be outside of)
    p = replace(netmodel.predict_module(Recurrent(), (2, 8, 50), model), extrapolated=False)
    assert p.unknown_share > netmodel.UNKNOWN_SHARE_MAX and "measured fallback" in p.no_decision
    assert p.decision(latency_ms=1e9) == "measure" and p.decision(latency_ms=1e-9) == "measure"
    assert p.decision(memory_mb=1e9) == "accept"  # memory does not rest on the ops' prices
    q = netmodel.predict_module(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), (1, 3, 32, 32), model)
    q = replace(q, extrapolated=False)
    assert q.unknown_share == 0.0 and q.no_decision is None
    assert q.decision(latency_ms=1e9) == "accept" and q.decision(latency_ms=1e-9) == "reject"
    assert q.decision(latency_ms=q.latency_ms) == "measure"
    with pytest.raises(ValueError, match="budget"):
        q.decision()
    assert replace(q, extrapolated=True).decision(latency_ms=1e9) == "measure"  # never accepted outside its domain


def test_the_fallback_is_saved_and_shipped_models_take_their_datasets(model, tmp_path) -> None:
    again = netmodel.load(model.save(tmp_path / "m"))
    assert again.layer.fallback == model.layer.fallback
    shipped = netmodel.load("layers-cpu-avx2-1t")
    fb = shipped.layer.fallback
    classes = {k: v for k, v in fb.items() if not k.startswith("op:")}
    assert set(classes) == {*netmodel.FALLBACK_CLASSES, "generic"}
    assert fb["compute"]["ops"] == ["conv", "conv_dw", "conv_dw_multiplier", "conv_grouped", "linear", "matmul"]
    # measured on the shipped layers (leave-one-op-out 90% error): every class well above the model's own
    assert all(v["q"] > shipped.q["latency_ms"] for v in classes.values())
    # the op campaign's ops (layers-ops-cpu-avx2-1t) have rooflines of their own, each with its measured error
    own = {k: v for k, v in fb.items() if k.startswith("op:")}
    assert {"op:upsample_nearest", "op:convtranspose", "op:lstm", "op:mish", "op:conv3d"} <= set(own)
    assert all(v["n"] >= 4 and v["q"] > 0 for v in own.values())
    x = torch.randn(1, 3, 32, 32)
    p = netmodel.predict_module(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Upsample(scale_factor=2)), x, shipped)
    assert p.unknown_ops == ["Upsample"] and 0 < p.coverage_bytes < 1


def test_dilated_convolutions_and_layer_norms_of_permuted_views_are_classes_of_their_own() -> None:
    """Known means measured: the shipped layers hold neither, so neither is priced as what they hold."""
    import torch.nn.functional as F

    class LayerNorm2d(nn.LayerNorm):  # torchvision's ConvNeXt: a channels-last norm of a permuted view
        def forward(self, x):
            y = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
            return y.permute(0, 3, 1, 2)

    net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.Conv2d(16, 16, 3, dilation=2), nn.LayerNorm(26), LayerNorm2d(16))
    layers = graph.capture(net, (1, 3, 32, 32)).layers
    costed = layers[layers["op"] != "view"]
    assert list(netmodel.op_class(costed)) == ["conv", "conv_dilated", "layernorm", "layernorm_strided"]
    assert list(netmodel.fallback_class(costed)) == ["compute", "compute", "normalization", "normalization"]
    assert "contiguous=0" in costed["geometry"].iloc[3] and "contiguous" not in costed["geometry"].iloc[2]
    # the permute back leaves LayerNorm2d's output channels last: a convolution after it runs that layout
    after = graph.capture(nn.Sequential(nn.Conv2d(3, 16, 3), LayerNorm2d(16), nn.Conv2d(16, 8, 3)), (1, 3, 32, 32))
    assert list(netmodel.op_class(after.layers[after.layers["op"] != "view"])) == [
        "conv",
        "layernorm_strided",
        "conv_cl",
    ]


def test_an_op_measured_by_an_op_campaign_is_priced_by_its_own_roofline_and_error() -> None:
    """The shipped model never measured nearest upsampling or Mish: each is priced by the roofline of its own
    layers in layers-ops-cpu-avx2-1t (leave-one-layer-out error), not by its class's."""
    from carb.netmodel.layers import OWN, fallback_unit, op_class

    shipped = netmodel.load("layers-cpu-avx2-1t")
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Upsample(scale_factor=2), nn.Mish())
    layers = graph.capture(net, (1, 3, 64, 64)).layers
    costed = layers[layers["op"] != "view"].reset_index(drop=True)
    cls = op_class(costed)
    keys = shipped.layer._fallback_keys(costed, cls)
    assert (
        keys[1:] == [OWN + "upsample_nearest", OWN + "mish"]
        and keys[0] == "compute"
        or not shipped.layer.known(costed.iloc[:1]).all()
    )
    q = shipped.layer.fallback_q(costed, cls)
    fb = shipped.layer.fallback
    assert q[1] == pytest.approx(fb[OWN + "upsample_nearest"]["q"]) and q[2] == pytest.approx(fb[OWN + "mish"]["q"])
    assert list(fallback_unit(costed, cls))[1:] == ["upsample_nearest", "mish"]


def test_a_depthwise_convolution_with_a_channel_multiplier_is_not_priced_as_a_depthwise_one() -> None:
    """It runs no depthwise kernel (1.3-10x the time conv_dw priced it at): a class no model measured."""
    import carb

    ghost = nn.Sequential(nn.Conv2d(16, 16, 1), nn.Conv2d(16, 32, 3, padding=1, groups=16))
    layers = graph.capture(ghost, (1, 16, 28, 28)).layers
    assert list(netmodel.op_class(layers)) == ["conv", "conv_dw_multiplier"]
    assert list(netmodel.fallback_class(layers)) == ["compute", "compute"]
    plain = graph.capture(nn.Conv2d(16, 16, 3, padding=1, groups=16), (1, 16, 28, 28)).layers
    assert list(netmodel.op_class(plain)) == ["conv_dw"]
    p = carb.predict_module(ghost, (1, 16, 28, 28))
    assert p.unknown_ops == ["Conv2d (depthwise, channel multiplier)"]


def test_a_dilated_pooling_is_a_class_of_its_own() -> None:
    """No layer campaign measured one (1.3x the time of the same pooling undilated, on the AVX-512 EPYC kind)."""
    net = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.MaxPool2d(3, 1, 1, dilation=2), nn.AvgPool2d(2))
    layers = graph.capture(net, (1, 8, 32, 32)).layers
    assert list(netmodel.op_class(layers)) == ["pool", "pool_dilated", "pool"]
    assert list(netmodel.fallback_class(layers)) == ["pooling"] * 3
    video = graph.capture(nn.MaxPool3d(3, 1, 1, dilation=(1, 2, 2)), (1, 4, 4, 16, 16)).layers
    assert list(netmodel.op_class(video)) == ["pool3d_dilated"]
