"""carb.families.arch: the networks match torchvision and He et al., run, and stay plain modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from carb.families import arch
from carb.families.space import Config, SpaceError

# torchvision.models.resnetNN(weights=None) parameter counts (width 1, 1000 classes)
TORCHVISION_PARAMS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032, 101: 44_549_160, 152: 60_192_808}


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _meta(cfg: Config | dict) -> nn.Module:
    with torch.device("meta"):
        return arch.build(cfg)


@pytest.mark.parametrize("depth", sorted(TORCHVISION_PARAMS))
def test_imagenet_param_counts_equal_torchvision(depth: int) -> None:
    block = "basic" if depth < 50 else "bottleneck"
    model = _meta(Config(family="imagenet", block=block, depth=depth, input_size=224))
    assert _params(model) == TORCHVISION_PARAMS[depth]


def test_imagenet_module_names_follow_torchvision() -> None:
    model = _meta(Config(family="imagenet", block="bottleneck", depth=50, input_size=224))
    sd = model.state_dict()
    for key in (
        "conv1.weight",
        "bn1.running_mean",
        "layer1.0.downsample.0.weight",
        "layer4.2.conv3.weight",
        "layer2.0.conv2.weight",
        "fc.weight",
        "fc.bias",
    ):
        assert key in sd, key
    # v1.5: the stride sits on the 3x3 convolution
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv1.stride == (1, 1)
    assert len(sd) == 320  # torchvision resnet50's state_dict has 320 entries


def test_cifar_resnet20_is_he_et_al_with_projection_shortcuts() -> None:
    model = _meta(Config(family="cifar", block="basic", depth=20))
    # 269,722 with parameter-free (option A) shortcuts; option B adds two 1x1 conv + BN:
    # 16->32 (512 + 64) and 32->64 (2048 + 128)
    assert _params(model) == 269_722 + 512 + 64 + 2048 + 128
    assert [len(s) for s in (model.layer1, model.layer2, model.layer3)] == [3, 3, 3]
    assert model.conv1.stride == (1, 1) and model.conv1.kernel_size == (3, 3)
    assert _meta(Config(family="cifar", depth=20, early_downsample=True)).conv1.stride == (2, 2)


def test_cifar_bottleneck_layout() -> None:
    model = _meta(Config(family="cifar", block="bottleneck", depth=29, width=0.5))
    assert [len(s) for s in (model.layer1, model.layer2, model.layer3)] == [3, 3, 3]
    b = model.layer2[0]
    assert (b.conv1.in_channels, b.conv1.out_channels, b.conv3.out_channels) == (32, 16, 64)
    assert b.conv2.stride == (2, 2) and b.downsample is not None
    assert model.layer1[0].downsample is not None  # 8 -> 32 channels
    assert model.layer1[1].downsample is None
    assert model.fc.in_features == 4 * 32


@pytest.mark.parametrize("width, expected", [(0.1, (2, 3, 6)), (0.25, (4, 8, 16)), (1.5, (24, 48, 96))])
def test_width_multiplier_rounds(width: float, expected: tuple[int, int, int]) -> None:
    model = _meta(Config(family="cifar", depth=8, width=width))
    assert (
        model.layer1[0].conv1.out_channels,
        model.layer2[0].conv1.out_channels,
        model.layer3[0].conv1.out_channels,
    ) == expected


@pytest.mark.parametrize(
    "cfg",
    [
        Config(family="cifar", depth=8, width=0.25, batch=3, classes=7),
        Config(family="cifar", block="bottleneck", depth=11, early_downsample=True, input_size=48, batch=2),
        Config(family="imagenet", block="basic", depth=34, input_size=96, batch=2),
        Config(family="imagenet", block="bottleneck", depth=101, input_size=64, batch=1, classes=5),
    ],
)
def test_output_shape_is_batch_by_classes(cfg: Config) -> None:
    model = _meta(cfg)
    y = model(torch.empty(cfg.batch, 3, cfg.input_size, cfg.input_size, device="meta"))
    assert tuple(y.shape) == (cfg.batch, cfg.classes)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "cfg",
    [
        dict(family="cifar", block="basic", depth=8, width=0.25, input_size=8, batch=2),
        dict(family="cifar", block="bottleneck", depth=11, width=0.25, early_downsample=True, input_size=16, batch=2),
        dict(family="imagenet", block="basic", depth=18, width=0.125, input_size=32, batch=2, classes=10),
        dict(family="imagenet", block="bottleneck", depth=50, width=0.0625, input_size=32, batch=1, classes=10),
    ],
)
def test_forward_on_a_real_tiny_input(cfg: dict, precision: str) -> None:
    torch.manual_seed(0)
    c = Config.from_dict({**cfg, "precision": precision})
    dtype = arch.dtype_of(precision)
    model = arch.build(c).to(dtype)
    x = torch.randn(c.batch, 3, c.input_size, c.input_size, dtype=dtype)
    with torch.inference_mode():
        y = model(x)
    assert y.shape == (c.batch, c.classes) and y.dtype == dtype
    assert torch.isfinite(y.float()).all()


def test_build_accepts_a_dict_returns_eval_fp32() -> None:
    d = dict(family="cifar", depth=14, width=0.5, precision="fp16", batch=4)
    model = arch.build(d)
    assert not model.training and all(not m.training for m in model.modules())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert _params(model) == _params(arch.build(Config.from_dict(d)))


def test_invalid_config_is_a_value_error() -> None:
    with pytest.raises(SpaceError, match="6n\\+2"):
        arch.build(dict(family="cifar", depth=21))
    with pytest.raises(ValueError, match="unknown parameter"):
        arch.build(dict(family="cifar", dept=20))


def test_dtype_of() -> None:
    assert arch.dtype_of("fp32") is torch.float32
    assert arch.dtype_of("fp16") is torch.float16
    assert arch.dtype_of("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="precision"):
        arch.dtype_of("int8")


def test_plain_module_tree_traces_symbolically() -> None:
    # no data-dependent Python control flow: torch.fx traces it without concrete inputs
    for cfg in (
        Config(family="cifar", block="bottleneck", depth=11),
        Config(family="imagenet", block="basic", depth=18),
    ):
        gm = torch.fx.symbolic_trace(arch.build(cfg))
        assert sum(1 for n in gm.graph.nodes if n.op == "call_module") > 10
