"""carb.families.features: the closed-form figures equal what torch counts on the built networks."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from carb.families import arch, features, space
from carb.families.space import Config
from tests._helpers import RESNET_ROW, assert_activation_figures, assert_module_figures, meta_input

K_PER_SPACE = 15


def _resnet_only(name: str) -> bool:
    """Whether every grid of a built-in space names only ResNet families (read off its grids:
    enumerating the layers space takes seconds, at every collection)."""
    fams = [g.get("family", ["cifar"]) for g in space.load(name).grids]
    return all(set(f if isinstance(f, list) else [f]) <= set(space.FAMILIES) for f in fams)


RESNET_SPACES = [n for n in space.builtin_names() if _resnet_only(n)]


def _sample() -> list[Config]:
    """A seeded sample of every built-in ResNet space, plus every imagenet config of ``cpu``
    (the spaces of other families, nb201 and layers, have their own tests)."""
    out: list[Config] = []
    for name in RESNET_SPACES:
        out += space.load(name).sample(K_PER_SPACE, seed=0)
    out += [c for c in space.load("cpu") if c.family == "imagenet"]
    # corners the sample may miss: fp16/bf16, width rounding down to 1 channel, odd sizes
    out += [
        Config(family="cifar", block="bottleneck", depth=200, width=4.0, input_size=128, batch=256, precision="fp16"),
        Config(family="cifar", depth=8, width=0.01, input_size=9, batch=3, precision="bf16", classes=3),
        Config(family="imagenet", block="bottleneck", depth=152, width=0.5, input_size=97, batch=2, classes=17),
    ]
    return list(dict.fromkeys(out))


SAMPLE = _sample()


@lru_cache(maxsize=None)
def _module(arch_key: tuple, precision: str) -> nn.Module:
    cfg = Config(*arch_key[:6], batch=1, precision=precision, classes=arch_key[6])
    with torch.device("meta"):
        return arch.build(cfg).to(arch.dtype_of(precision))


def _torch_flops(cfg: Config) -> int:
    model = _module(cfg.arch_key, cfg.precision)
    x = meta_input(cfg)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(x)
    return counter.get_total_flops()


FEATURES = features.compute  # the ``table`` fixture (tests/conftest.py): FEATURES(SAMPLE)


def test_sample_covers_every_space_and_family() -> None:
    assert {"paper", "screening", "cpu", "tiny"} <= set(RESNET_SPACES)
    assert len(SAMPLE) >= K_PER_SPACE * len(RESNET_SPACES)
    assert {c.family for c in SAMPLE} == {"cifar", "imagenet"}
    assert {c.block for c in SAMPLE} == {"basic", "bottleneck"}
    assert {c.precision for c in SAMPLE} == {"fp32", "fp16", "bf16"}


def test_flops_equal_flop_counter_mode(table: pd.DataFrame) -> None:
    got = table["flops"].tolist()
    want = [_torch_flops(c) for c in SAMPLE]
    bad = [(c.label(), g, w) for c, g, w in zip(SAMPLE, got, want) if g != w]
    assert not bad, bad[:5]
    assert (table["flops"] == table["flops_per_image"] * table["batch"]).all()


def test_params_and_layer_counts_equal_the_module(table: pd.DataFrame) -> None:
    for cfg, row in zip(SAMPLE, table.itertuples()):
        model = _module(cfg.arch_key, cfg.precision)
        mods = assert_module_figures(row, model, cfg.label())
        assert row.n_layers == row.n_conv + 1
        assert row.n_projections == sum(getattr(m, "downsample", None) is not None for m in mods)
        assert row.n_blocks == sum(isinstance(m, (arch.BasicBlock, arch.Bottleneck)) for m in mods)
        assert row.final_channels == model.fc.in_features


# a spread of networks: both families and blocks, both stems, odd sizes, precisions
LIVE_SAMPLE = SAMPLE[:: max(1, len(SAMPLE) // 25)] + SAMPLE[-3:]


@pytest.mark.parametrize("cfg", LIVE_SAMPLE, ids=lambda c: c.label())
def test_activation_figures_equal_a_tensor_tracker(cfg: Config) -> None:
    row = features.compute([cfg]).iloc[0]
    assert_activation_figures(row, _module(cfg.arch_key, cfg.precision), meta_input(cfg))


def test_list_of_configs_and_dataframe_agree(table: pd.DataFrame) -> None:
    frame = space.Space("t", [{}]).to_frame(SAMPLE)
    from_frame = features.compute(frame)
    pd.testing.assert_frame_equal(from_frame, table)
    assert list(table.columns) == ["config_id", *space.PARAMETERS, *features.FEATURE_COLUMNS]
    assert features.compute(SAMPLE[0]).equals(table.iloc[:1])


def test_input_table_is_not_modified_and_index_is_kept() -> None:
    frame = space.load("tiny").to_frame()
    frame.index = frame.index * 10 + 3
    before = frame.copy()
    out = features.compute(frame)
    pd.testing.assert_frame_equal(frame, before)
    assert (out.index == frame.index).all()
    again = features.compute(out)  # recomputing replaces, never duplicates
    pd.testing.assert_frame_equal(again, out)
    dup = frame.sample(n=40, replace=True, random_state=0)  # a repeated index
    assert not dup.index.is_unique
    got = features.compute(dup)
    assert (got.index == dup.index).all() and (got["config_id"] == dup["config_id"]).all()
    want = features.compute(dup.reset_index(drop=True))
    assert (got["flops"].to_numpy() == want["flops"].to_numpy()).all()


def test_row_order_and_batch_scaling_are_vectorized_right() -> None:
    frame = space.load("screening").to_frame()
    shuffled = frame.sample(frac=1.0, random_state=1)
    a = features.compute(frame).loc[shuffled.index]
    b = features.compute(shuffled)
    pd.testing.assert_frame_equal(a, b)
    per_image = ["activation_bytes", "live_activation_bytes", "input_bytes"]
    one = features.compute(frame.assign(batch=1))
    for col in per_image:
        assert (b[col] == one.loc[b.index, col] * b["batch"]).all(), col


def test_units_and_precision() -> None:
    out = features.compute([Config(depth=20, precision=p) for p in ("fp32", "fp16", "bf16")])
    assert out["bytes_per_element"].tolist() == [4, 2, 2]
    assert out["weight_bytes"].tolist() == [4 * out.params[0], 2 * out.params[0], 2 * out.params[0]]
    assert out["flops"].nunique() == 1
    ai = out["flops"] / (out["weight_bytes"] + out["activation_bytes"])
    np.testing.assert_allclose(out["arithmetic_intensity"], ai)
    r18 = features.compute([Config(family="imagenet", depth=18, input_size=224)]).iloc[0]
    assert (r18.stem_output_size, r18.final_feature_size, r18.final_channels, r18.n_stages) == (56, 7, 512, 4)
    assert r18.flops == 2 * 1_814_073_344  # torchvision's 1.81 GMACs
    for col in features.FEATURE_COLUMNS:
        assert pd.api.types.is_numeric_dtype(out[col]), col
    assert 0 <= out["conv1x1_flop_fraction"].min() and out["conv1x1_flop_fraction"].max() <= 1


def test_classes_column_optional() -> None:
    frame = space.load("cpu").to_frame().groupby("family").head(2)
    full = features.compute(frame)
    no_classes = features.compute(frame.drop(columns="classes"))
    pd.testing.assert_frame_equal(no_classes, full.drop(columns="classes"))
    with_nan = features.compute(frame.assign(classes=np.nan))
    assert (with_nan["params"].to_numpy() == full["params"].to_numpy()).all()


@pytest.mark.parametrize("drop", ["batch", "precision", "family", "width"])
def test_missing_column_is_a_clear_value_error(drop: str) -> None:
    frame = space.load("tiny").to_frame().drop(columns=drop)
    with pytest.raises(ValueError, match=f"missing column {drop}"):
        features.compute(frame)


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("precision", "int8", "row 2: precision: unknown value 'int8'"),
        ("batch", 0, "row 2: batch: 0 must be >= 1"),
        ("depth", 21, "row 2: depth: 21 is not 6n\\+2"),
        ("family", "vit", "row 2: family: unknown value 'vit'"),
    ],
)
def test_invalid_row_is_a_clear_value_error(column: str, value, message: str) -> None:
    frame = space.load("tiny").to_frame()
    frame[column] = frame[column].astype(object)
    frame.loc[2, column] = value
    with pytest.raises(ValueError, match=message):
        features.compute(frame)


def test_empty_table() -> None:
    frame = space.load("tiny").to_frame().iloc[:0]
    out = features.compute(frame)
    assert len(out) == 0 and list(out.columns)[-len(features.FEATURE_COLUMNS) :] == features.FEATURE_COLUMNS


def test_not_configs_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="DataFrame or Configs"):
        features.compute([{"family": "cifar"}])


def test_features_of_a_huge_batch_never_wrap_around():
    df = pd.DataFrame([{**RESNET_ROW, "batch": 10**12}, RESNET_ROW])
    f = features.compute(df)
    one = features.compute(pd.DataFrame([RESNET_ROW]))
    # int64 would wrap 8.2e19 FLOPs around silently; the table turns float64 instead
    assert f.flops.dtype == np.float64
    assert f.flops.iloc[0] == pytest.approx(one.flops.iloc[0] * 1e12, rel=1e-12)
    assert f.flops.iloc[1] == one.flops.iloc[0] and one.flops.dtype == np.int64
    with pytest.raises(ValueError, match="batch"):
        features.compute(pd.DataFrame([{**RESNET_ROW, "batch": 1e30}]))
