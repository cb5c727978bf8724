"""A channels-last network is read as one: each node's input layout as torch's CPU kernels give it,
and every op whose kernels differ on that layout priced as unknown, never as the channels-first
op the layer campaigns measured."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

import carb
from carb import graph
from carb.netmodel.roofline import LAYOUT_FREE, op_class


def _real_layouts(module: nn.Module, x: torch.Tensor) -> dict[str, bool]:
    """Per traced node: whether it runs on a channels-last layout when the module runs on the CPU.

    A 2-D convolution: whether it wrote channels last (its kernels' choice, from its input or its
    weight); any other node: whether its first tensor input is channels last.
    """
    gm = fx.symbolic_trace(module)
    seen: dict[str, bool] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            ts = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            out = super().run_node(n)
            conv2d = (
                n.op == "call_module" and isinstance(gm.get_submodule(n.target), (nn.Conv2d, nn.ConvTranspose2d))
            ) or (n.op == "call_function" and n.target in (F.conv2d, F.conv_transpose2d))
            if conv2d:
                seen[n.name] = graph._layout.channels_last(out)
            elif n.op in ("call_module", "call_function", "call_method") and ts:
                seen[n.name] = graph._layout.channels_last(ts[0])
            return out

    with torch.no_grad():
        Recorder(gm).run(x)
    return seen


class Mixed(nn.Module):
    """The layers a channels-last CNN is made of, 2-D convolutions of every kind among them."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.grouped = nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=4)
        self.fc1 = nn.Conv2d(32, 8, 1)
        self.fc2 = nn.Conv2d(8, 32, 1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.up = nn.ConvTranspose2d(32, 16, 2, 2)
        self.norm = nn.GroupNorm(4, 32)
        self.weight = nn.Parameter(torch.randn(16, 32, 3, 3) * 0.1)
        self.rep = nn.ReplicationPad2d(1)
        self.tail = nn.Conv2d(8, 4, 3)
        self.sliced = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.relu(self.bn(self.stem(x)))
        y = y + self.dw(y)
        y = self.grouped(y)
        y = y * torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(y, 1)))))
        y = F.hardswish(self.norm(y))
        z = self.up(self.pool(y))
        w = F.conv2d(y, self.weight, padding=1)
        v = self.tail(F.relu(self.rep(F.pad(F.pixel_shuffle(y, 2), (1, 1, 1, 1), mode="reflect"))))
        v = v + self.sliced(y[:, :16]).mean()  # a channel slice of a channels-last map: read as one
        return torch.cat([z, F.interpolate(F.avg_pool2d(w, 2), scale_factor=2.0)], 1), v


class Video(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool3d(2)
        self.up = nn.ConvTranspose3d(8, 4, 2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.pool(F.relu(self.conv(x))))


def _cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


#: module, input shape, input channels last, weights channels last, whether any node reads channels last
CASES = {
    "input channels last": (Mixed, (1, 3, 32, 32), True, False, True),
    "weights channels last": (Mixed, (1, 3, 32, 32), False, True, True),
    "channels first": (Mixed, (1, 3, 32, 32), False, False, False),
    "3-D input channels last": (Video, (1, 3, 4, 16, 16), True, False, True),
    "3-D weights channels last": (Video, (1, 3, 4, 16, 16), False, True, False),  # a 3-D conv writes channels first
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_node_reads_the_layout_the_cpu_gives_its_input(case: str) -> None:
    build, shape, input_cl, weights_cl, any_cl = CASES[case]
    torch.manual_seed(0)
    module = build().eval()
    if weights_cl:
        module = module.to(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    x = torch.randn(shape)
    if input_cl:
        x = _cl(x)
    real = _real_layouts(module, x)
    layers = graph.capture(module, x).layers
    read = {r["name"]: "cl=1" in str(r["geometry"]).split() for _, r in layers.iterrows()}
    compared = {k: v for k, v in read.items() if k in real}
    assert len(compared) >= len(read) - 2  # all but a cat of a list
    assert {k: real[k] for k in compared} == compared
    assert any(compared.values()) == any_cl


def test_ops_on_a_channels_last_input_are_classes_of_their_own_but_element_wise_ones() -> None:
    module = Mixed().eval()
    layers = graph.capture(module, _cl(torch.randn(1, 3, 32, 32))).layers
    cls = op_class(layers)
    cl = layers["geometry"].astype(str).str.split().apply(lambda g: "cl=1" in g).to_numpy()
    assert cl.sum() >= 10
    for c, on_cl in zip(cls, cl):
        base = c.removesuffix("_cl")
        if on_cl and base not in (*LAYOUT_FREE, "view", "layernorm_strided", "copy", "copy_strided"):
            assert c.endswith("_cl"), c
        else:
            assert not c.endswith("_cl"), c
    assert {"conv_cl", "conv_dw_cl", "conv_dilated_cl", "bn_cl", "pool_cl", "groupnorm_cl", "pixelshuffle_cl"} <= set(
        cls
    )
    assert {"relu", "hardswish", "add_cl", "mul_cl"} <= set(cls)
    first = graph.capture(module, torch.randn(1, 3, 32, 32)).layers
    assert not any(c.endswith("_cl") for c in op_class(first))


def test_a_channels_last_network_is_priced_with_its_convolutions_unknown_and_no_budget_decision() -> None:
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1)).eval()
    x = torch.randn(1, 3, 64, 64)
    first = carb.predict_module(net, x)
    last = carb.predict_module(net.to(memory_format=torch.channels_last), _cl(x))
    assert first.unknown_ops == [] and first.coverage_flops == 1.0
    assert last.unknown_ops == ["Conv2d (channels last)"]
    assert last.coverage_flops == 0.0 and last.unknown_share > 0.9
    assert last.latency_ms_hi / last.latency_ms_lo > first.latency_ms_hi / first.latency_ms_lo
    assert last.decision(latency_ms=1e6) == "measure"


class Views(nn.Module):
    """Views by name: two that copy (one of them striding over its last dimension), an index by a tensor, a view."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("idx", torch.tensor([2, 0, 1]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, c, h, w = x.shape
        shuffled = x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        flat = x.transpose(-2, -1).flatten(1)
        picked = x[:, self.idx]
        same = x.reshape(b, c, h * w)
        return shuffled, flat, picked, same


def test_a_view_by_name_that_copies_is_a_copy_and_an_index_by_a_tensor_is_unknown() -> None:
    layers = graph.capture(Views().eval(), (1, 4, 8, 8)).layers.set_index("kind")
    cls = dict(zip(layers.index, op_class(layers.reset_index())))
    assert layers.loc["reshape", "op"].tolist() == ["copy", "view"]  # the shuffle's reshape copies; the last is a view
    assert (layers.loc["flatten", "op"], cls["flatten"]) == ("copy", "copy_strided")
    assert layers.loc["getitem", "op"] == "unknown"
    assert layers.loc["reshape", "alloc_bytes"].tolist() == [4 * 4 * 8 * 8, 0]
    assert (layers.loc["transpose", "op"] == "view").all()
    priced = carb.predict_module(Views().eval(), (1, 4, 8, 8))
    assert sorted(priced.unknown_ops) == ["flatten", "getitem"]  # a strided copy is not the copy measured


@pytest.mark.parametrize("perm,cls", [([0, 2, 1, 3], "copy"), ([0, 1, 3, 2], "copy_strided"), (None, "copy_strided")])
def test_an_onnx_transpose_moving_the_last_axis_is_a_strided_copy(tmp_path, perm, cls) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    attrs = {} if perm is None else {"perm": perm}
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], **attrs)],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "t.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    layers = graph.capture_onnx(str(path), None).layers
    assert list(op_class(layers)) == [cls]


def test_the_layout_free_classes_are_those_measured_alike_on_both_layouts() -> None:
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[2] / "experiments/layer-costs/results/channels_last.json").read_text())
    assert set(LAYOUT_FREE) <= set(doc["layout_free"])
    for row in doc["rows"]:
        if row["op"] in LAYOUT_FREE:
            assert all(abs(r - 1) <= doc["tol"] for r in row["ratio"]), row


def test_torch_exports_capture_reads_channels_last_as_torch_fxs_does() -> None:
    """A block torch.fx cannot trace (a list of a split, extended) goes through torch.export: its layouts too."""
    from tests.graph.test_factories import Split

    module = Split().eval()
    x = _cl(torch.randn(1, 3, 32, 32))
    t = graph.capture(module, x)
    assert t.meta["capture"] == "torch.export"
    convs = t.layers[t.layers["kind"] == "Conv2d"]
    with torch.no_grad():  # each convolution writes channels last on the CPU, the slices' ones too
        y = module.cv1(x)
        assert graph._layout.channels_last(module.m[0](y.split(16, 1)[-1]))
    assert convs["geometry"].str.contains("cl=1").all() and len(convs) == 4
