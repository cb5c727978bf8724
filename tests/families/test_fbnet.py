"""carb.families.fbnet: the FBNet family's networks, configs and closed-form features.

The features must equal what torch counts on the built modules, exactly: FLOPs
(FlopCounterMode on the meta device), parameters and state bytes, module counts, and the
activation figures of a tracker of the tensors an eager forward allocates.

The network follows FBNet v1 (facebookresearch/maskrcnn-benchmark ``fbnet_builder.py``:
``IRFBlock``, ``Identity`` = 1x1 ConvBNRelu where the shape changes, ``ir_k*_s2`` = 2-group
1x1 convs with a channel shuffle) in HW-NAS-Bench's CIFAR-100 macro-architecture
(hw_nas_bench_api ``fbnet_get_metrics``: stem 16, stages [1, 4, 4, 4, 4, 4, 1] x
[16, 24, 32, 64, 112, 184, 352], strides [1, 1, 2, 2, 1, 2, 1], head 1504, 32x32).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from carb.datasets import help_fbnet as hf
from carb.families import fbnet
from carb.families.arch import dtype_of
from carb.families.fbnet import FBNetConfig
from carb.families.space import Config, SpaceError
from tests._helpers import assert_activation_figures, assert_flops_equal_torch, assert_module_figures, meta_input

torch.set_num_threads(1)


@lru_cache(maxsize=1)
def _archs() -> pd.DataFrame:
    archs, _, _ = hf._load_validated(hf._data_dir(None))
    return archs


def _sample() -> list[FBNetConfig]:
    """20 seeded HELP architectures, hand-made extremes, and other sizes and precisions."""
    archs = _archs()
    rows = archs.iloc[np.random.default_rng(0).choice(len(archs), 20, replace=False)]
    out = fbnet.from_help(rows)
    out += [
        FBNetConfig(("skip",) * 22),  # every projection, no block
        FBNetConfig(("k5_e6",) * 22, precision="fp16"),  # the largest network
        FBNetConfig(("k3_e1_g2",) * 22, batch=2),  # every shuffle
        FBNetConfig(("k5_e1_g2",) * 22, precision="bf16"),
        FBNetConfig(out[0].ops, input_size=45, batch=3, classes=7),  # odd sides: (h-1)//s+1
        FBNetConfig(fbnet.OPS[:9] * 2 + fbnet.OPS[:4], input_size=8, precision="bf16", classes=1),
    ]
    return out


SAMPLE = _sample()


@lru_cache(maxsize=None)
def _module(ops: tuple[str, ...], classes: int, precision: str) -> nn.Module:
    with torch.device("meta"):
        return fbnet.build(FBNetConfig(ops, classes=classes)).to(dtype_of(precision))


FEATURES = fbnet.features  # the ``table`` fixture (tests/conftest.py): FEATURES(SAMPLE)


def test_flops_and_output_shape_equal_torch(table: pd.DataFrame) -> None:
    assert_flops_equal_torch(SAMPLE, table, lambda cfg: _module(cfg.ops, cfg.classes, cfg.precision))


def test_params_and_module_counts_equal_the_module(table: pd.DataFrame) -> None:
    for cfg, row in zip(SAMPLE, table.itertuples()):
        model = _module(cfg.ops, cfg.classes, cfg.precision)
        mods = assert_module_figures(row, model, cfg.label())
        assert row.n_layers == row.n_conv + 1
        assert row.n_blocks == sum(isinstance(m, fbnet.IRBlock) for m in mods) == 22 - row.n_skip
        assert row.n_projections == sum(isinstance(m, fbnet.SkipProjection) for m in mods)
        assert row.n_residual == sum(getattr(m, "residual", False) for m in mods)
        assert row.final_channels == model.fc.in_features == 1504
        assert [getattr(row, f"n_{op}") for op in fbnet.OPS] == [cfg.ops.count(op) for op in fbnet.OPS]
    # skip is an identity exactly where the shape is kept: the first layers of stages 2..7
    # change the channels and project, the 16 others pass their input on
    all_skip = table[table["n_skip"] == 22].iloc[0]
    assert (all_skip.n_projections, all_skip.n_blocks, all_skip.n_conv) == (6, 0, 8)


def test_block_structure_follows_fbnet() -> None:
    model = fbnet.build(FBNetConfig(("k3_e1_g2",) + ("k5_e6",) * 4 + ("skip",) * 17))
    first, second = model.layers[0], model.layers[1]
    assert (first.conv_pw.groups, first.conv_pwl.groups, first.conv_dw.groups) == (2, 2, 16)
    assert first.residual and not second.residual  # 16 -> 16 stride 1; 16 -> 24
    assert (second.conv_pw.out_channels, second.conv_dw.kernel_size, second.conv_dw.stride) == (96, (5, 5), (1, 1))
    assert isinstance(model.layers[6], nn.Identity)  # stage 3, second layer
    proj = model.layers[5]  # stage 3, first layer
    assert isinstance(proj, fbnet.SkipProjection) and proj.conv.stride == (2, 2)
    assert not model.training
    # the shuffle interleaves the two groups' channels
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert fbnet.channel_shuffle(x, 2).flatten().tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("cfg", list(dict.fromkeys(SAMPLE[::3] + SAMPLE[-6:])), ids=lambda c: c.label())
def test_activation_figures_equal_a_tensor_tracker(cfg: FBNetConfig) -> None:
    row = fbnet.features(cfg).iloc[0]
    assert_activation_figures(row, _module(cfg.ops, cfg.classes, cfg.precision), meta_input(cfg))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_real_forward(precision: str) -> None:
    cfg = FBNetConfig(
        ("k3_e1_g2", "k5_e6", "skip", "k3_e3") * 5 + ("k5_e1_g2", "skip"),
        input_size=16,
        batch=2,
        precision=precision,
        classes=10,
    )
    torch.manual_seed(0)
    model = fbnet.build(cfg).to(dtype_of(precision))
    with torch.inference_mode():
        y = model(torch.randn(2, 3, 16, 16).to(dtype_of(precision)))
    assert y.shape == (2, 10) and y.dtype == dtype_of(precision)
    assert torch.isfinite(y.float()).all() and y.float().abs().sum() > 0


def test_config_id_is_stable_and_round_trips() -> None:
    cfg = FBNetConfig(("k3_e1",) * 21 + ("skip",))
    assert cfg.config_id == "be913220a1391846"  # pinned: ids are keys in stores and datasets
    assert cfg.config_id == hashlib.sha256(cfg.canonical().encode()).hexdigest()[:16]
    assert cfg.canonical().startswith('{"batch":1,"classes":100,"family":"fbnet","input_size":32,"ops":["k3_e1"')
    assert FBNetConfig.from_dict(cfg.to_dict()) == cfg
    # the same network from a list, numpy strings and numpy ints hashes the same
    same = FBNetConfig(list(np.array(cfg.ops)), input_size=np.int64(32), batch=1.0)
    assert same == cfg and same.config_id == cfg.config_id and hash(same) == hash(cfg)
    assert FBNetConfig(cfg.ops, batch=2).config_id != cfg.config_id
    assert cfg.config_id != Config().config_id
    assert cfg.label() == "fbnet-0000000000000000000008-i32-b1-fp32"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ops": ("k3_e1",) * 21}, "ops: expected 22 operations"),
        ({"ops": ("k3_e1",) * 10 + ("k7_e9",) + ("skip",) * 11}, r"ops\[10\]: unknown operation 'k7_e9'"),
        ({"ops": "k3_e1"}, "ops: expected a sequence"),
        ({"ops": ("skip",) * 22, "precision": "int8"}, "precision: unknown value 'int8'"),
        ({"ops": ("skip",) * 22, "input_size": 4}, "input_size: 4 too small"),
        ({"ops": ("skip",) * 22, "input_size": 31.5}, "input_size: 31.5 is not an integer"),
        ({"ops": ("skip",) * 22, "batch": 0}, "batch: 0 must be >= 1"),
        ({"ops": ("skip",) * 22, "classes": 0}, "classes: 0 must be >= 1"),
    ],
)
def test_validation_errors_are_one_line(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        FBNetConfig(**kwargs)
    assert "\n" not in str(info.value) and isinstance(info.value, SpaceError)


def test_from_dict_and_features_errors_are_one_line() -> None:
    d = FBNetConfig(("skip",) * 22).to_dict()
    for bad, match in [
        ({**d, "family": "cifar"}, "family: 'cifar' is not 'fbnet'"),
        ({**d, "width": 2}, "unknown parameter 'width'"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            FBNetConfig.from_dict(bad)
        assert "\n" not in str(info.value)
    frame = fbnet.to_frame([FBNetConfig(("skip",) * 22)] * 3)
    for bad, match in [
        (frame.drop(columns="layer_07"), "missing column layer_07"),
        (frame.assign(layer_03=["skip", "k9", "skip"]), "layer_03: unknown operation 'k9'"),
        (frame.assign(batch=[1, 0, 1]), "row 1: batch: 0 must be >= 1"),
        (frame.assign(input_size=[32, 32, 4]), "row 2: input_size: 4 must be >= 8"),
        (frame.assign(precision=["fp32", "fp8", "fp32"]), "row 1: precision: unknown value 'fp8'"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            fbnet.features(bad)
        assert "\n" not in str(info.value)


def test_features_of_frames_and_configs_agree_and_scale(table: pd.DataFrame) -> None:
    frame = fbnet.to_frame(SAMPLE)
    pd.testing.assert_frame_equal(fbnet.features(frame), table)
    assert list(table.columns) == list(frame.columns) + fbnet.FEATURE_COLUMNS
    shuffled = frame.sample(frac=1.0, random_state=1)
    shuffled.index = shuffled.index * 10 + 3
    before = shuffled.copy()
    got = fbnet.features(shuffled)
    pd.testing.assert_frame_equal(shuffled, before)  # the input is not modified
    assert (got.index == shuffled.index).all()
    want = table.set_index(table["config_id"]).loc[got["config_id"]]
    for c in fbnet.FEATURE_COLUMNS:
        np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy(), err_msg=c)
    one = fbnet.features(frame.assign(batch=1, precision="fp32"))
    bpe = table["bytes_per_element"]
    assert (bpe == table["precision"].map({"fp32": 4, "fp16": 2, "bf16": 2})).all()
    for c in ("activation_bytes", "live_activation_bytes", "peak_activation_bytes", "input_bytes", "output_bytes"):
        assert (table[c] * 4 == one[c] * table["batch"] * bpe).all(), c
    assert (table["weight_bytes"] == table["params"] * bpe).all()
    np.testing.assert_allclose(
        table["arithmetic_intensity"], table["flops"] / (table["weight_bytes"] + table["activation_bytes"])
    )
    assert table[fbnet.OP_COUNT_COLUMNS].sum(axis=1).eq(22).all()
    assert ((0 <= table["depthwise_flop_fraction"]) & (table["conv1x1_flop_fraction"] <= 1)).all()
    assert fbnet.features([]).empty and list(fbnet.features([]).columns) == list(table.columns)


def test_from_help_and_help_fbnet_features() -> None:
    archs = _archs().iloc[:50]
    cfgs = fbnet.from_help(archs, batch=4, precision="fp16")
    layers = archs[list(hf.LAYER_COLUMNS)].astype(str)
    assert [c.ops for c in cfgs] == [tuple(r) for r in layers.itertuples(index=False)]
    assert all((c.input_size, c.classes, c.batch, c.precision) == (32, 100, 4, "fp16") for c in cfgs)
    ours = fbnet.features(cfgs)
    theirs = hf.features(archs, batch=4, precision="fp16")
    assert (theirs.index == archs.index).all()
    for c in fbnet.FEATURE_COLUMNS:
        np.testing.assert_array_equal(ours[c].to_numpy(), theirs[c].to_numpy(), err_msg=c)
    with pytest.raises(ValueError, match="missing column layer_21"):
        fbnet.from_help(archs.drop(columns="layer_21"))
