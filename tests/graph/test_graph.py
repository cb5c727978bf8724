"""carb.graph: capture on the meta device, FLOPs equal to FlopCounterMode, shapes, groups,
liveness, bad input."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from carb import graph
from carb.families import fbnet
from carb.graph import trace


def _flops(m: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as fc, torch.inference_mode():
        m(x)
    return fc.get_total_flops()


class Tiny(nn.Module):
    """conv-bn-relu, a grouped conv, a depthwise conv, SE-style scaling, concat, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.grouped = nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=4, bias=False)
        self.dw = nn.Conv2d(32, 32, 5, padding=2, groups=32)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn(self.conv(x)))
        y = self.grouped(x)
        y = y * torch.sigmoid(self.pool(y))
        y = self.dw(y)
        z = torch.cat((x, y), 1)
        return self.fc(torch.flatten(self.pool(z), 1))


def test_flops_equal_flop_counter_and_no_weight_touched() -> None:
    m = Tiny().eval()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    t = graph.capture(m, (2, 3, 32, 32))
    assert t.flops == _flops(m, torch.randn(2, 3, 32, 32))
    # the user's module is untouched: same tensors, same device
    for k, v in m.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, before[k])
    assert t.params == sum(p.numel() for p in m.parameters())


def test_layer_columns_shapes_kernel_groups() -> None:
    t = graph.capture(Tiny().eval(), torch.zeros(2, 3, 32, 32))
    L = t.layers.set_index("name")
    conv = L.loc["conv"]
    assert (conv.op, conv.kernel, conv.stride, conv.padding, conv.groups) == ("conv", 3, 2, 1, 1)
    assert conv.in_shape == (2, 3, 32, 32) and conv.out_shape == (2, 16, 16, 16)
    g = L.loc["grouped"]
    assert (g.groups, g.dilation, g.padding, g.cin, g.cout) == (4, 2, 2, 16, 32)
    assert g.flops == 2 * 2 * (16 // 4) * 32 * 9 * 16 * 16
    dw = L.loc["dw"]
    assert dw.groups == 32 and dw.kernel == 5
    assert L.loc["relu"].inplace and L.loc["relu"].alloc_bytes == 0
    assert set(t.layers.op) <= set(graph.KNOWN_OPS)
    assert L.loc["fc"].op == "linear" and L.loc["fc"].flops == 2 * 2 * 48 * 10
    assert t.layers["dtype"].eq("float32").all()


def test_fbnet_liveness_matches_closed_form_peak() -> None:
    # FBNet's closed-form live_activation_bytes tracks eager PyTorch's tensors exactly
    cfg = fbnet.FBNetConfig(("k3_e1_g2",) * 11 + ("k5_e6",) * 11, batch=2)
    t = graph.capture(fbnet.build(cfg), (2, 3, 32, 32))
    f = fbnet.features([cfg]).iloc[0]
    assert t.flops == f["flops"]
    assert t.peak_live_bytes == f["live_activation_bytes"]
    assert t.model_bytes == f["model_bytes"]
    assert (t.layers["op"] == "copy").sum() == 11  # the channel shuffles' contiguous copies


def test_precision_scales_bytes_not_flops() -> None:
    m = Tiny().eval()
    a = graph.capture(m, (1, 3, 32, 32), "fp32")
    b = graph.capture(m, (1, 3, 32, 32), "bf16")
    assert a.flops == b.flops
    assert b.input_bytes * 2 == a.input_bytes
    assert b.layers["bytes_per_element"].eq(2).all()
    assert next(m.parameters()).dtype == torch.float32  # untouched


def test_fold_bn_option() -> None:
    t = graph.capture(Tiny().eval(), (1, 3, 32, 32), fold_bn=True)
    assert "bn" not in set(t.layers["op"])
    assert t.layers.set_index("name").loc["conv"].fused == "bn"


def test_meta_module_and_unknown_op_listed() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.up = nn.Upsample(scale_factor=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(self.up(self.conv(x)), dim=1)

    with torch.device("meta"):
        m = Odd()
    t = graph.capture(m, (1, 3, 8, 8))
    # the upsampling is read (an op of its own, with its scale); the cumsum is not
    assert t.unknown == ["cumsum"]
    up = t.layers.set_index("name").loc["up"]
    assert (up.op, up.geometry, up.alloc_bytes) == ("upsample_nearest", "scale=2x2", 1 * 8 * 16 * 16 * 4)


def test_bad_inputs_one_line_errors() -> None:
    class Dyn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent control flow: fx cannot trace it
                return x
            return -x

    with pytest.raises(graph.CaptureError, match="does not trace"):
        graph.capture(Dyn(), (1, 3, 4, 4))
    with pytest.raises(graph.CaptureError, match="unknown dtype"):
        graph.capture(Tiny(), (1, 3, 4, 4), "fp8")
    with pytest.raises(graph.CaptureError, match="nn.Module"):
        graph.capture(lambda x: x, (1, 3, 4, 4))
    with pytest.raises(graph.CaptureError, match=r"^a TorchScript module \(RecursiveScriptModule\) cannot be"):
        graph.capture(torch.jit.script(Tiny().eval()), (1, 3, 32, 32))
    # int8 kernels: refused in one line naming the module, not an internal error from the meta run
    head = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 30 * 30, 10)).eval()
    dynamic = torch.ao.quantization.quantize_dynamic(head, {nn.Linear}, dtype=torch.qint8)
    with pytest.raises(graph.CaptureError, match=r"^a quantized module \(Linear of torch.ao.nn.quantized.dynamic\)"):
        graph.capture(dynamic, (1, 3, 32, 32))
    # 5 channels into a 3-channel conv: the input given and what the first layer expects, in one line
    with pytest.raises(graph.CaptureError, match=r"input 1x5x32x32 failed at node .*expects 3 input channels$"):
        graph.capture(Tiny(), (1, 5, 32, 32))
    with pytest.raises(graph.CaptureError, match=r"input 2x7 failed .*\(Linear\) expects 8 input features$"):
        graph.capture(nn.Linear(8, 4), (2, 7))
    assert graph.parse_shape("8x3x160x160") == (8, 3, 160, 160)

    class LaterMismatch(nn.Module):
        """The first conv takes the input's 3 channels; a later reshape breaks the linear head."""

        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.conv(x).flatten(1))

    # the input has what the first layer expects: no hint pointing at the input
    with pytest.raises(graph.CaptureError, match=r"input 1x3x8x8 failed at node 'fc'") as e:
        graph.capture(LaterMismatch(), (1, 3, 8, 8))
    assert "expects" not in str(e.value)
    for bad in ("8x3xx160", "axb", "0x3x4x4", ""):
        with pytest.raises(graph.CaptureError, match="malformed input shape"):
            graph.parse_shape(bad)


class Edges(nn.Module):
    """Nodes the closed forms of carb.graph price by formula, and their edge cases (ceil
    mode, padding, dilation, in-place and broadcast element-wise ops, a 3-D linear and a
    'same'-padded conv that fall back to running on meta)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 12, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
        self.same = nn.Conv2d(12, 12, 3, padding="same", groups=3, bias=False)
        self.mp = nn.MaxPool2d(3, 2, 1, ceil_mode=True)
        self.mp2 = nn.MaxPool2d(2, dilation=2)
        self.ap = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
        self.gp = nn.AdaptiveAvgPool2d((2, None))
        self.fc3 = nn.Linear(5, 7)
        self.fc = nn.Linear(12 * 2, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.relu(self.c1(x), inplace=True)
        y = self.same(x)
        y.add_(x)
        y = y * torch.sigmoid(y.mean((2, 3), keepdim=True)) + 1.0
        z = torch.cat([self.mp(y), self.ap(y)], dim=-1)
        z = self.mp2(z).sigmoid()
        t = self.fc3(z.flatten(2)[..., :5])  # 3-D input: torch's matmul path
        g = self.gp(z).mean(3).flatten(1)
        return self.fc(g).sum() + t.sum()


def _both(m: nn.Module, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch, precision: str | None = None) -> tuple:
    runner = sys.modules[trace._GraphRun.__module__]  # the closed forms' switch: where the graph's nodes run
    fast = graph.capture(m, shape, precision)
    monkeypatch.setattr(runner, "_CLOSED_FORMS", False)
    slow = graph.capture(m, shape, precision)
    monkeypatch.setattr(runner, "_CLOSED_FORMS", True)
    return fast, slow


def test_closed_forms_equal_running_on_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    # the closed forms (shapes, FLOP) give the same table as running every node on meta
    # tensors under the counting mode, column for column, and FlopCounterMode's total
    m = Edges().eval()
    for shape in ((2, 3, 17, 23), (1, 3, 32, 32)):
        fast, slow = _both(m, shape, monkeypatch)
        pd.testing.assert_frame_equal(fast.layers, slow.layers)
        assert fast.peak_live_bytes == slow.peak_live_bytes
        assert fast.flops == _flops(m, torch.randn(*shape))
    L = fast.layers.set_index("name")
    assert L.loc["relu"].inplace and L.loc["add_"].inplace
    # at another precision the closed forms read the user's fp32 module as cast (no copy
    # of it is made for them): the same table as running the cast copy on meta
    for precision in ("bf16", "fp16"):
        fast16, slow16 = _both(m, (1, 3, 32, 32), monkeypatch, precision)
        pd.testing.assert_frame_equal(fast16.layers, slow16.layers)
        assert fast16.model_bytes * 2 == fast.model_bytes and fast16.layers["weight_bytes"].sum() > 0
        assert (fast16.layers["weight_bytes"] * 2 == fast.layers["weight_bytes"]).all()
    assert next(m.parameters()).dtype == torch.float32 and not next(m.parameters()).is_meta  # untouched
    assert L.loc["fc3"].flops == 2 * 1 * 12 * 5 * 7


@pytest.mark.parametrize(
    "arch",
    [
        "vgg",
        "mobilenetv2",
        "mobilenetv3",
        "shufflenetv2",
        "mnasnet",
        "efficientnet",
        "regnet",
        "densenet",
        "resnext",
        "wideresnet",
    ],
)
def test_closed_forms_on_every_zoo_family(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from carb.families import zoo

    g = zoo.GRIDS[arch]
    cfg = zoo.ZooConfig(arch, float(min(g["width"])), float(min(g["depth"])), int(max(g["kernel"])), 64, 2)
    # built on meta without initialisation, as the benchmarks do; the same shapes as a real build
    m = zoo._meta_build(cfg)
    assert all(p.is_meta for p in m.parameters())
    real = zoo.build(cfg)
    assert [p.shape for p in m.parameters()] == [p.shape for p in real.parameters()]
    fast, slow = _both(m, (2, 3, 64, 64), monkeypatch)
    pd.testing.assert_frame_equal(fast.layers, slow.layers)
    assert (fast.peak_live_bytes, fast.model_bytes) == (slow.peak_live_bytes, slow.model_bytes)
    assert fast.flops == _flops(real, torch.randn(2, 3, 64, 64))


def test_user_function_named_like_torch_is_run_not_priced_by_name() -> None:
    # a user's fx-wrapped function called 'add' that multiplies matrices keeps its FLOPs
    m = WrappedAdd().eval()
    t = graph.capture(m, (3, 8))
    assert t.flops == _flops(m, torch.randn(3, 8)) == 2 * 3 * 8 * 8


@torch.fx.wrap
def add(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


class WrappedAdd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return add(x, self.w)


class _Branchy(nn.Module):
    """Different graphs in training and eval mode, as stochastic depth and aux heads make."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.aux = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = self.conv(x)
        if self.training:
            y = y + self.aux(y)
        return y


def test_capture_traces_in_eval_mode_and_restores_the_flags() -> None:
    m = _Branchy().train()
    t = graph.capture(m, (1, 3, 8, 8))
    assert list(t.layers["op"]) == ["conv"]  # the training branch is not in the graph
    assert m.training and m.conv.training and m.aux.training  # the user's flags are back
    m.aux.eval()
    graph.capture(m, (1, 3, 8, 8))
    assert m.training and not m.aux.training


def _passthrough(x, training: bool = False):
    return x


def scale_(x):
    return x  # an in-place op by its name (on meta it cannot be told from an identity)


torch.fx.wrap("_passthrough")
torch.fx.wrap("scale_")


class _Wrapped(nn.Module):
    def forward(self, x):
        return scale_(_passthrough(torch.relu(x)))


def test_pass_through_ops_are_free_unless_named_in_place() -> None:
    t = graph.capture(_Wrapped(), (1, 3, 8, 8))
    ops = dict(zip(t.layers["name"], t.layers["op"]))
    assert ops["_passthrough"] == "view"
    assert ops["scale_"] == "unknown"  # never silently free
