"""carb.graph.capture falls back to torch.export where torch.fx cannot trace: networks that
branch on their input's shape capture and predict; where both trace, the tables agree."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from carb import graph
from carb.families import zoo
from carb.graph.table import COLUMNS
from carb.netmodel import load, predict_module
from carb.netmodel.domain import fingerprint_of
from carb.netmodel.predict import predict_table

#: Columns that name a node (fx names ``x += y`` ``iadd``, export ``add_``): all others must agree.
_NAMING = ("name", "target", "kind")


def _flops(m: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as fc, torch.inference_mode():
        m(x)
    return fc.get_total_flops()


class PadToMultiple(nn.Module):
    """A segmentation-style stem: pads the input to a multiple of 32, downsamples wide maps."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ph, pw = (32 - h % 32) % 32, (32 - w % 32) % 32
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph))
        y = F.relu(self.bn(self.conv(x)))
        if y.shape[-1] > 64:
            y = self.pool(y)
        return self.head(y)


class Pyramid(nn.Module):
    """A detection-style head: as many pyramid levels as the input size allows, concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.level = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.act = nn.Hardswish()
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        levels = int(math.log2(min(y.shape[-2:]) // 4))
        pooled = []
        for _ in range(levels):
            y = F.max_pool2d(self.act(self.level(y)), 2)
            pooled.append(y.mean((2, 3)))
        return self.fc(torch.stack(pooled, 1).sum(1))


class SizeSwitch(nn.Module):
    """A classifier choosing its stem by the input size (a strided one for large inputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(inplace=True))
        self.large = nn.Sequential(nn.Conv2d(3, 12, 7, stride=4, padding=3), nn.ReLU(inplace=True))
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(12, 12, 1), nn.Sigmoid())
        self.fc = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.large(x) if x.shape[-1] >= 96 else self.small(x)
        y = y * self.se(y)
        return self.fc(y.view(y.shape[0], y.shape[1], -1).mean(-1))


@pytest.fixture(scope="module")
def netmodel():
    return load("layers-cpu-avx2-1t")


@pytest.mark.parametrize(
    "cls,shapes",
    [
        (PadToMultiple, [(1, 3, 40, 72), (2, 3, 64, 64)]),
        (Pyramid, [(1, 3, 32, 32), (1, 3, 128, 96)]),
        (SizeSwitch, [(2, 3, 48, 48), (1, 3, 128, 128)]),
    ],
)
def test_shape_dependent_networks_capture_and_predict_through_export(cls, shapes, netmodel) -> None:
    m = cls().eval()
    with pytest.raises(graph.CaptureError, match="does not trace with torch.fx"):
        graph.capture(m, shapes[0], via="fx")
    kinds = []
    for shape in shapes:
        t = graph.capture(m, shape)
        assert t.meta["capture"] == "torch.export"
        # the branch the static shape takes, counted as FlopCounterMode counts a real forward
        assert t.flops == _flops(m, torch.randn(*shape)) > 0
        assert t.params == sum(p.numel() for p in m.parameters())
        assert t.input_shape == shape and t.peak_live_bytes > 0
        kinds.append(list(zip(t.layers["kind"], t.layers["kernel"], t.layers["stride"])))
        p = predict_module(m, shape, netmodel, machine=fingerprint_of(netmodel))
        assert p.flops == t.flops and np.isfinite(p.latency_ms) and p.latency_ms > 0
        assert p.memory_mb > 0
    assert kinds[0] != kinds[1]  # each shape specializes its own graph


@pytest.mark.parametrize("arch", ["mobilenetv3", "shufflenetv2", "densenet"])
def test_export_table_equals_fx_table_on_zoo(arch: str, netmodel) -> None:
    g = zoo.GRIDS[arch]
    cfg = zoo.ZooConfig(arch, float(min(g["width"])), float(min(g["depth"])), int(max(g["kernel"])), 64, 2)
    m = zoo._meta_build(cfg)
    fx = graph.capture(m, (2, 3, 64, 64), via="fx")
    ex = graph.capture(m, (2, 3, 64, 64), via="export")
    assert (fx.meta["capture"], ex.meta["capture"]) == ("torch.fx", "torch.export")
    cols = [c for c in COLUMNS if c not in _NAMING]
    assert fx.layers[cols].equals(ex.layers[cols])  # ops, shapes, groups, FLOPs, liveness, row for row
    assert (fx.flops, fx.params, fx.peak_live_bytes, fx.model_bytes) == (
        ex.flops,
        ex.params,
        ex.peak_live_bytes,
        ex.model_bytes,
    )
    fp = fingerprint_of(netmodel)
    a, b = predict_table(fx, netmodel, fp), predict_table(ex, netmodel, fp)
    assert abs(b.latency_ms / a.latency_ms - 1) < 0.005


class _Attention(nn.Module):
    """A leaf module called with three tensors and returning two, the second dropped by the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 1)
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).flatten(2).transpose(1, 2)
        out, _ = self.mha(y, y, y)
        return out


@pytest.mark.parametrize("precision", [None, "bf16"])
def test_export_of_a_real_module_leaves_it_untouched_and_agrees_with_fx(precision) -> None:
    m = _Attention().eval()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    fx = graph.capture(m, (1, 3, 8, 8), precision, via="fx")
    ex = graph.capture(m, (1, 3, 8, 8), precision, via="export")
    for k, v in m.state_dict().items():
        assert v.device.type == "cpu" and v.dtype == torch.float32 and torch.equal(v, before[k])
    assert ex.flops == fx.flops > 0
    # the attention weights the caller drops are still allocated: the same peak as fx's
    assert (ex.peak_live_bytes, ex.model_bytes, ex.precision) == (fx.peak_live_bytes, fx.model_bytes, fx.precision)
    assert list(ex.layers["op"]) == list(fx.layers["op"])


def test_fold_bn_through_export_as_through_fx() -> None:
    m = PadToMultiple().eval()
    t = graph.capture(m, (1, 3, 64, 64), fold_bn=True)
    assert t.meta["capture"] == "torch.export"
    assert "bn" not in set(t.layers["op"]) and t.layers.set_index("kind").loc["Conv2d"].iloc[0].fused == "bn"


def test_neither_tracer_one_line_naming_both_reasons(capsys) -> None:
    class Dyn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x  # data-dependent: neither tracer can follow it

    with pytest.raises(graph.CaptureError) as e:
        graph.capture(Dyn(), (1, 3, 4, 4))
    msg = str(e.value)
    assert "\n" not in msg and "torch.fx" in msg and "torch.export" in msg
    assert capsys.readouterr().err == ""  # export's partial-graph dump is not printed
    with pytest.raises(graph.CaptureError, match="unknown capture method"):
        graph.capture(Dyn(), (1, 3, 4, 4), via="jit")


def test_a_wrong_input_through_the_fallback_names_the_input_and_what_the_first_layer_expects() -> None:
    with pytest.raises(graph.CaptureError) as e:
        graph.capture(PadToMultiple(), (1, 4, 40, 40))  # fx cannot trace it; export fails on 4 channels
    msg = str(e.value)
    assert "\n" not in msg and "torch.fx" in msg and "torch.export" in msg
    assert "example input 1x4x40x40" in msg and "expects 3 input channels" in msg
