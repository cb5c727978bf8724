"""An ONNX file reads the same op set as its module: 3-D convolutions and pools as 3-D ops,
transposed convolutions, upsampling, group / instance / layer norms, pixel shuffle, pad,
Mish, recurrent layers (with their FLOPs) and attention under the module path's op names and
geometry; control flow is refused, never dropped."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from carb import graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

FREE = ["view", "copy"]  # reshapes, and the transposes an exporter writes around what a module does in place


class Image(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.act = nn.Mish()
        self.pool = nn.MaxPool2d(3, 2, 1, ceil_mode=True)
        self.up1 = nn.ConvTranspose2d(16, 8, 2, 2)
        self.up2 = nn.Upsample(scale_factor=2.0, mode="bilinear")
        self.ps = nn.PixelShuffle(2)
        self.inorm = nn.InstanceNorm2d(2)
        self.pad = nn.ZeroPad2d(1)
        self.up3 = nn.Upsample(scale_factor=2.0)
        self.c2 = nn.Conv2d(2, 4, 3, dilation=2, groups=2)

    def forward(self, x):
        x = self.pool(self.act(self.gn(self.c1(x))))
        x = self.ps(self.up2(self.up1(x)))
        return self.c2(self.up3(self.pad(self.inorm(x))))


class Video(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv3d(3, 8, (3, 7, 7), (1, 2, 2), (1, 3, 3))
        self.relu = nn.ReLU()
        self.p = nn.MaxPool3d(3, 2, 1)
        self.ct = nn.ConvTranspose3d(8, 4, 2, 2)
        self.gap = nn.AdaptiveAvgPool3d(1)
        self.c1 = nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.c1(self.gap(self.ct(self.p(self.relu(self.c(x))))).flatten(2))


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.gru = nn.GRU(32, 24, batch_first=True, bidirectional=True)
        self.ln = nn.LayerNorm(48)
        self.fc = nn.Linear(48, 10)

    def forward(self, x):
        return self.fc(self.ln(self.gru(self.lstm(x)[0])[0]))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, 32)

    def forward(self, x):
        q = self.q(x).reshape(2, 10, 4, 8).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(2, 10, 32)


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.a(x, x, x)[0]


NETS = {
    "image": (Image, (1, 3, 32, 32)),
    "video": (Video, (1, 3, 8, 32, 32)),
    "sequence": (Sequence, (2, 10, 16)),
    "attention": (Attention, (2, 10, 32)),
}


def _export(m: nn.Module, shape, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), (torch.randn(*shape),), str(path), dynamo=False)
    return path


@pytest.mark.parametrize("name", list(NETS))
def test_onnx_reads_the_module_paths_ops_geometry_and_flops(name: str, tmp_path) -> None:
    cls, shape = NETS[name]
    m = cls()
    mod = graph.capture(m, shape).layers
    got = graph.capture_onnx(_export(m, shape, tmp_path / f"{name}.onnx")).layers
    cols = ["op", "geometry", "flops", "cin", "d", "h", "w", "cout", "ho", "wo"]
    a = mod[~mod["op"].isin(FREE)][cols].reset_index(drop=True)
    b = got[~got["op"].isin(FREE)][cols].reset_index(drop=True)
    assert list(b["op"]) == list(a["op"]) and "unknown" not in set(b["op"])
    if name == "sequence":  # the exporter transposes a batch-first input around the layer
        a["geometry"] = a["geometry"].str.replace("batch_first=1", "batch_first=0")
    assert a.to_dict("records") == b.to_dict("records")


def test_onnx_recurrent_layers_count_their_flops_and_coverage_sees_them(tmp_path) -> None:
    m = Sequence()
    t = graph.capture_onnx(_export(m, (2, 10, 16), tmp_path / "seq.onnx"))
    rnn = t.layers[t.layers["op"].isin(["lstm", "gru"])]
    # 2 * gates * (input + hidden) * hidden per step, direction and sequence: LSTM 16 -> 32, GRU 32 -> 24 x 2
    assert list(rnn["flops"]) == [2 * 4 * 48 * 32 * 10 * 2, 2 * 3 * 56 * 24 * 2 * 10 * 2]
    assert t.flops == graph.capture(m, (2, 10, 16)).flops
    assert t.params == sum(p.numel() for p in m.parameters())


def test_multihead_attention_reads_as_its_projections_and_attention(tmp_path) -> None:
    m = Heads()
    mod = graph.capture(m, (2, 10, 32))
    t = graph.capture_onnx(_export(m, (2, 10, 32), tmp_path / "mha.onnx"))
    ops = [o for o in t.layers["op"] if o not in FREE]
    assert ops.count("sdpa") == 1 and ops.count("linear") == 2 and "unknown" not in ops
    assert t.flops == mod.flops  # the module's one row counts the same products


def _if_model(path: Path) -> Path:
    """A graph whose output comes out of an ``If`` on a value computed from the input."""
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch"),
        helper.make_node("Conv", ["y", "w"], ["z"], pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.zeros(108, np.float32)),
        ],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize(
    "opset,axis,want",
    [
        (13, None, "row=7"),  # the last dimension by default from opset 13
        (13, 1, "row=3 inner=35"),
        (11, None, "row=105"),  # before: every dimension from axis (1 by default) on, one row
        (11, 3, "row=7"),
    ],
)
def test_onnx_softmax_reads_its_axis_as_the_module_path_does(tmp_path, opset: int, axis, want: str) -> None:
    node = helper.make_node("Softmax", ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    shape = [2, 3, 5, 7]
    g = helper.make_graph(
        [node],
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    path = tmp_path / "softmax.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    row = graph.capture_onnx(path).layers.iloc[0]
    assert (row["op"], row["geometry"]) == ("softmax", want)


def test_control_flow_is_refused_in_one_line_never_dropped(tmp_path) -> None:
    path = _if_model(tmp_path / "if.onnx")
    with pytest.raises(graph.CaptureError, match=r"If node 'branch': control flow is not read") as e:
        graph.capture_onnx(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_torch_default_exporter_with_carb_onnx_extra_reads_as_the_module(tmp_path) -> None:
    """``pip install 'carb[onnx]'`` brings onnxscript: ``torch.onnx.export``'s default (dynamo) exporter then works."""
    pytest.importorskip("onnxscript")
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Upsample(scale_factor=2.0)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(1, 3, 16, 16),), str(tmp_path / "d.onnx"), verbose=False)
    t = graph.capture_onnx(tmp_path / "d.onnx")
    assert [o for o in t.layers["op"] if o not in FREE] == ["conv", "relu", "upsample_nearest"]
    # the exporter folded the BN into the convolution: no BN node, a bias on the convolution
    assert (t.meta["bn_nodes"], t.meta["convs"], t.meta["convs_with_bias"]) == (0, 1, 1)


@pytest.mark.parametrize("swap", [False, True])
def test_the_exporters_exact_gelu_reads_as_one_gelu(tmp_path, swap: bool) -> None:
    """torch's export of nn.GELU() before opset 20: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)."""
    shape = [1, 8, 14, 14]
    c = [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("r2", 1.4142135), ("one", 1.0), ("half", 0.5))]

    def mul(a: str, b: str, out: str):
        return helper.make_node("Mul", [b, a] if swap else [a, b], [out])

    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Div", ["h", "r2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        mul("h", "a", "m"),
        mul("m", "half", "y"),
    ]
    g = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=c,
    )
    path = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    layers = graph.capture_onnx(path).layers
    assert list(layers["op"]) == ["relu", "gelu"] and list(layers["kind"]) == ["Relu", "Gelu"]
    assert layers.iloc[1]["out_shape"] == tuple(shape)
