"""The layers family: configs, ids, builder, closed-form columns against FlopCounterMode and
carb.graph, the built-in space and its balanced sample."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
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


NEW_CASES = [
    L.LayerConfig("convtranspose", 16, 8, 10, 2, 2, batch=2),
    L.LayerConfig("convtranspose", 16, 8, 10, 3, 2, groups=2),
    L.LayerConfig("convtranspose", 16, 8, 10, 4, 2),
    L.LayerConfig("conv", 16, 16, 14, 3, 1, dilation=2),
    L.LayerConfig("conv", 16, 0, 14, 3, 1, 0, dilation=4),
    L.LayerConfig("conv1d", 16, 32, 50, 5, 2, batch=2),
    L.LayerConfig("conv3d", 3, 8, 16, 7, 2, frames=8, kernel_d=3),
    L.LayerConfig("conv3d", 8, 8, 8, 3, 1, frames=4, kernel_d=1),
    L.LayerConfig("maxpool3d", 8, input_size=8, kernel=3, stride=2, frames=4),
    L.LayerConfig("avgpool3d", 8, input_size=8, kernel=2, stride=2, frames=5, ceil_mode=1),
    L.LayerConfig("maxpool", 8, input_size=15, kernel=3, stride=2, padding=0, ceil_mode=1),
    L.LayerConfig("avgpool", 8, input_size=15, kernel=3, stride=2, ceil_mode=1),
    L.LayerConfig("upsample_nearest", 8, input_size=7, stride=2),
    L.LayerConfig("upsample_nearest", 8, input_size=7, output_size=11),
    L.LayerConfig("upsample_bilinear", 8, input_size=7, stride=2, align_corners=1),
    L.LayerConfig("upsample_bilinear", 8, input_size=7, output_size=12),
    L.LayerConfig("layernorm", 32, input_size=7, batch=2),
    L.LayerConfig("groupnorm", 32, input_size=7, groups=1),
    L.LayerConfig("groupnorm", 32, input_size=7, groups=8),
    L.LayerConfig("instancenorm", 32, input_size=7),
    L.LayerConfig("mish", 32, input_size=7),
    L.LayerConfig("pad", 32, input_size=7, padding=2),
    L.LayerConfig("pixelshuffle", 32, input_size=7, stride=2),
    L.LayerConfig("sdpa", 64, input_size=7, groups=4, batch=2),
    L.LayerConfig("mha", 64, input_size=7, groups=4),
    L.LayerConfig("lstm", 16, 32, 10, batch=2),
    L.LayerConfig("gru", 16, 32, 10, batch=2),
]


def _in_network(cfg: L.LayerConfig) -> tuple[nn.Module, tuple[int, ...]]:
    """The layer of ``cfg`` as a network holds it: built from torch's modules by hand, between other layers."""
    c, o, s, k, st, g = cfg.cin, cfg.cout, cfg.input_size, cfg.kernel, cfg.stride, cfg.groups
    op = cfg.op
    mods = {
        "convtranspose": lambda: nn.ConvTranspose2d(c, o, k, st, cfg.pad, cfg.output_padding, g, bias=False),
        "conv": lambda: nn.Conv2d(c, o, k, st, cfg.pad, cfg.dilation, g, bias=False),
        "conv1d": lambda: nn.Conv1d(c, o, k, st, cfg.pad, cfg.dilation, g, bias=False),
        "conv3d": lambda: nn.Conv3d(c, o, (cfg.kd, k, k), (cfg.sd, st, st), (cfg.pd, cfg.pad, cfg.pad), bias=False),
        "maxpool3d": lambda: nn.MaxPool3d((cfg.kd, k, k), (cfg.sd, st, st), (cfg.pd, cfg.pad, cfg.pad)),
        "avgpool3d": lambda: nn.AvgPool3d(
            (cfg.kd, k, k), (cfg.sd, st, st), (cfg.pd, cfg.pad, cfg.pad), ceil_mode=bool(cfg.ceil_mode)
        ),
        "maxpool": lambda: nn.MaxPool2d(k, st, cfg.pad, ceil_mode=bool(cfg.ceil_mode)),
        "avgpool": lambda: nn.AvgPool2d(k, st, cfg.pad, ceil_mode=bool(cfg.ceil_mode)),
        "upsample_nearest": lambda: nn.Upsample(
            size=cfg.output_size or None, scale_factor=None if cfg.output_size else float(st)
        ),
        "upsample_bilinear": lambda: nn.Upsample(
            size=cfg.output_size or None,
            scale_factor=None if cfg.output_size else float(st),
            mode="bilinear",
            align_corners=bool(cfg.align_corners),
        ),
        "groupnorm": lambda: nn.GroupNorm(g, c),
        "instancenorm": lambda: nn.InstanceNorm2d(c),
        "mish": lambda: nn.Mish(),
        "pad": lambda: nn.ZeroPad2d(cfg.pad),
        "pixelshuffle": lambda: nn.PixelShuffle(st),
    }
    b = cfg.batch

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, c, 1)
            if op in mods:
                self.layer = mods[op]()
            elif op == "layernorm":
                self.layer = nn.LayerNorm(c)
            elif op in ("sdpa", "mha"):
                self.qkv = nn.Linear(c, 3 * c)
                self.layer = nn.MultiheadAttention(c, g, batch_first=True)
            elif op in ("lstm", "gru"):
                self.layer = (nn.LSTM if op == "lstm" else nn.GRU)(c, o, batch_first=True)

        def forward(self, x):
            x = self.stem(x)
            if op == "conv1d":
                return torch.relu(self.layer(x.flatten(2)[..., :s].contiguous()))
            if op in ("conv3d", "maxpool3d", "avgpool3d"):  # frames stacked along the depth
                return torch.relu(self.layer(torch.stack([x] * cfg.frames, 2)))
            if op == "layernorm":  # ConvNeXt's channels-last block
                return self.layer(x.permute(0, 2, 3, 1).contiguous())
            if op in ("sdpa", "mha"):  # a ViT's tokens
                t = x.flatten(2).transpose(1, 2)
                if op == "mha":
                    return self.layer(t, t, t, need_weights=False)[0]
                q, kk, v = self.qkv(t).reshape(b, s * s, 3, g, c // g).permute(2, 0, 3, 1, 4).contiguous().unbind(0)
                return F.scaled_dot_product_attention(q, kk, v)
            if op in ("lstm", "gru"):  # a CRNN's column sequence
                return self.layer(x.mean(2).transpose(1, 2)[:, :s].contiguous())[0]
            return torch.relu(self.layer(x))

    side = s if op not in ("conv1d", "lstm", "gru") else max(s, 8)
    return Net(), (b, 3, side, side)


@pytest.mark.parametrize("cfg", NEW_CASES, ids=lambda c: c.label())
def test_new_ops_closed_form_equals_capture_and_the_layer_inside_a_network(cfg: L.LayerConfig) -> None:
    m = L.build(cfg)
    x = torch.randn(cfg.batch, 3, cfg.input_size, cfg.input_size)
    with torch.inference_mode():
        m(x)
    row = L.layer_frame([cfg]).iloc[0]
    assert row["params"] == sum(p.numel() for p in m.parameters())
    t = graph.capture(m, x)
    costed = t.layers[t.layers["op"] != "view"]
    assert len(costed) == 1 and costed.iloc[0]["op"] == cfg.op
    g = costed.iloc[0]
    assert {c: g[c] for c in L.LAYER_COLUMNS} == {c: row[c] for c in L.LAYER_COLUMNS}
    # the same layer inside a network captures as the family's does
    net, shape = _in_network(cfg)
    rows = graph.capture(net, shape).layers
    cols = [c for c in L.LAYER_COLUMNS if c not in ("in_bytes", "bytes", "n_inputs")]
    inside = rows[(rows["op"] == cfg.op) & (rows["kind"] != "Conv2d") | (rows["op"] == cfg.op) & (cfg.op == "conv")]
    inside = inside[inside["geometry"] == row["geometry"]] if cfg.op == "conv" else inside
    assert len(inside) == 1, rows[["op", "kind"]]
    assert {c: inside.iloc[0][c] for c in cols} == {c: row[c] for c in cols}


def test_earlier_layers_keep_their_ids_and_new_fields_show_only_where_set() -> None:
    import pandas as pd

    shipped = pd.read_parquet(Path(L.__file__).parents[1] / "data" / "layers-cpu-avx2-1t.parquet")
    params = [c for c in L.PARAMETERS if c in shipped.columns]
    for r in shipped.sample(200, random_state=0).to_dict("records"):
        assert L.LayerConfig.from_dict({k: r[k] for k in params}).config_id == r["config_id"]
    c = L.LayerConfig("conv", 16, 16, 14, 3, 1, dilation=2)
    assert c.to_dict()["dilation"] == 2 and "padding" not in c.to_dict() and "-d2-" in c.label()
    # a field the op does not use is normalised away; a padding equal to the op's default too
    assert L.LayerConfig("relu", 8, dilation=3, frames=4).config_id == L.LayerConfig("relu", 8).config_id
    assert L.LayerConfig("maxpool", 8, input_size=9, kernel=3, padding=1) == L.LayerConfig(
        "maxpool", 8, input_size=9, kernel=3
    )
    assert L.LayerConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(op="pixelshuffle", cin=10, stride=2), "square of the shuffle's factor"),
        (dict(op="groupnorm", cin=30, groups=4), "groups: 4 must divide cin"),
        (dict(op="maxpool", cin=8, input_size=9, kernel=3, padding=2), "padding: 2 above half the kernel"),
        (dict(op="conv", cin=8, input_size=5, kernel=3, dilation=4, padding=0), "spans more than the padded input"),
        (dict(op="upsample_bilinear", cin=8, align_corners=2), "align_corners: 2 must be 0 or 1"),
        (dict(op="maxpool3d", cin=3, input_size=8, kernel=3, frames=1, kernel_d=4), "kernel_d: 4 larger than"),
    ],
)
def test_invalid_new_configs_one_line(bad: dict, match: str) -> None:
    with pytest.raises(families.SpaceError, match=match):
        L.LayerConfig.from_dict(bad)


def test_new_ops_sample_is_balanced_space_filling_and_within_budget() -> None:
    sample = L.new_ops_sample(3, seed=1)
    members = {g: set(L.new_op_configs(g)) for g in L.NEW_OP_GRIDS}
    groups = {g: [c for c in sample if c in members[g]] for g in L.NEW_OP_GRIDS}
    assert all(len(v) == 3 for v in groups.values())
    assert {c.op for c in sample} >= set(L.NEW_OPS)
    assert L.new_ops_sample(3, seed=1) == sample and L.new_ops_sample({"lstm": 2}, seed=1) != sample
    lf = L.layer_frame(sample)
    assert lf["flops"].max() <= L.NEW_OPS_MAX_FLOPS
    assert sorted({c.ceil_mode for c in groups["pool_k3s2"]}) == [0, 1] or len(groups["pool_k3s2"]) < 3


@pytest.mark.slow
def test_a_measured_layer_holds_no_image_shaped_placeholder() -> None:
    """A 1-D layer of 8,192 steps measured by CARB's worker: its memory is the layer's own, not that
    of a placeholder image of batch x 3 x 8,192 x 8,192 (1,610 MB at batch 2) the module would ignore."""
    import carb

    cfg = L.LayerConfig("conv1d", 4, 8, 8192, 7, batch=2)
    m = carb.measure_cost(cfg, threads=1, visits=1)
    assert m.status == "ok", m.message
    assert 0 < m.memory_mb < 100
