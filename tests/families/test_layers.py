"""The layers family: configs, ids, builder, closed-form columns against FlopCounterMode and
carb.graph, the built-in space and its balanced sample."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from carb import families, graph
from carb.families import layers as L
from carb.families import space

CASES = [
    L.LayerConfig("conv", 64, 128, 28, 3, 2, 1, 2),
    L.LayerConfig("conv", 64, 0, 28, 5, 1, 0, 1),
    L.LayerConfig("conv", 64, 128, 14, 1, 1, 4, 1),
    L.LayerConfig("conv", 3, 32, 64, 7, 2),
    L.LayerConfig("linear", 512, 1000, 1, batch=2),
    L.LayerConfig("linear", 64, 128, 7, batch=2),
    L.LayerConfig("matmul", 32, 49, 7, groups=4, batch=2),
    L.LayerConfig("bn", 32, input_size=14),
    *[
        L.LayerConfig(a, 24, input_size=10, batch=2)
        for a in (
            "relu",
            "relu6",
            "hardswish",
            "hardsigmoid",
            "sigmoid",
            "silu",
            "gelu",
            "softmax",
            "gap",
            "add",
            "mul",
        )
    ],
    L.LayerConfig("maxpool", 32, input_size=14, kernel=3, stride=2),
    L.LayerConfig("avgpool", 32, input_size=14, kernel=2, stride=2),
    L.LayerConfig("cat", 32, 48, 7),
    L.LayerConfig("copy", 32, input_size=7, groups=4),
]


def test_registered_and_rows_round_trip() -> None:
    assert "layers" in families.names()
    for c in CASES:
        row = families.to_row(c)
        assert families.config_from_row(row) == c
        assert families.of(c).name == "layers"


def test_normalisation_gives_equal_ids() -> None:
    a = L.LayerConfig("relu", 32, cout=64, input_size=7, kernel=3, stride=2, groups=4)
    b = L.LayerConfig("relu", 32, input_size=7)
    assert a == b and a.config_id == b.config_id
    dw = L.LayerConfig("conv", 96, 0, 14, 3, 1, 0)
    assert (dw.cout, dw.groups) == (96, 96)
    assert L.LayerConfig("conv", 96, 96, 14, 3, 1, 96).config_id == dw.config_id
    assert dw.config_id != L.LayerConfig("conv", 96, 96, 14, 3, 1, 1).config_id


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(op="conv", cin=30, cout=64, groups=4), "groups"),
        (dict(op="nope", cin=3), "op: unknown"),
        (dict(op="relu", cin=0), "cin"),
        (dict(op="relu", cin=8, precision="fp8"), "precision"),
        # absurd values: the limits every family shares (run_limits_problem), then the layers' own
        (dict(op="relu", cin=8, input_size=10**6), "input_size: 1000000 is above the limit 8,192"),
        (dict(op="conv", cin=8, batch=2**60), "batch: .* is above the limit"),
        (dict(op="linear", cin=8, cout=10**9), "cout: 1000000000 is above the limit 1,000,000"),
        (dict(op="conv", cin=10**7, groups=0), "cin: 10000000 is above the limit"),
        (dict(op="conv", cin=8, input_size=8, kernel=10**5), "kernel: 100000 is above the limit 8,192"),
    ],
)
def test_invalid_configs_one_line(bad: dict, match: str) -> None:
    with pytest.raises(families.SpaceError, match=match):
        L.LayerConfig.from_dict(bad)


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.label())
def test_closed_form_equals_flop_counter_and_capture(cfg: L.LayerConfig) -> None:
    m = L.build(cfg)
    x = torch.randn(cfg.batch, 3, cfg.input_size, cfg.input_size)  # what the CPU backend feeds
    with FlopCounterMode(display=False) as fc, torch.inference_mode():
        m(x)
    row = L.layer_frame([cfg]).iloc[0]
    assert row["flops"] == fc.get_total_flops()
    assert row["params"] == sum(p.numel() for p in m.parameters())
    t = graph.capture(m, x)
    costed = t.layers[t.layers["op"] != "view"]
    assert len(costed) == 1
    g = costed.iloc[0]
    for col in L.LAYER_COLUMNS:
        assert g[col] == row[col], col


def test_se_composite_counts_and_features() -> None:
    cfg = L.LayerConfig("se", 64, 16, 14, batch=2)
    m = L.build(cfg)
    with FlopCounterMode(display=False) as fc, torch.inference_mode():
        m(None)
    assert L.layer_frame([cfg]).iloc[0]["flops"] == fc.get_total_flops()
    ops = list(graph.capture(m, (1, 3, 1, 1)).layers["op"])
    assert ops == ["gap", "conv", "relu", "conv", "sigmoid", "mul"]
    f = families.get("layers").features(
        space.Space(
            "t", [{"family": ["layers"], "op": ["se"], "cin": [64], "cout": [16], "input_size": [14]}]
        ).to_frame()
    )
    assert f["flops"].iloc[0] == 2 * 2 * 64 * 16


def test_builtin_space_and_balanced_sample() -> None:
    sp = space.load("layers")
    sample = L.balanced_sample(sp, 120, seed=1)
    groups = {L.op_group(c) for c in sample}
    # every operator group of the space is represented, convolutions most
    assert groups == {L.op_group(c) for c in sp}
    counts = {g: sum(L.op_group(c) == g for c in sample) for g in groups}
    assert counts["conv_dense"] == max(counts.values())
    assert L.balanced_sample(sp, 120, seed=1) == sample
    # every sampled layer is cheap enough (the space's FLOP constraint)
    lf = L.layer_frame(sample)
    assert lf["flops"].max() <= 1.5e9
