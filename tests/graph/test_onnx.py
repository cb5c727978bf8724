"""carb.graph.capture_onnx: an ONNX file read into the same layer table a module gives, priced
alike; every bad file one line naming it; no weight read, no code run."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from carb import graph
from carb.families import zoo
from carb.netmodel import load, predict_module
from carb.netmodel.domain import fingerprint_of
from carb.netmodel.predict import predict_table

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

SHAPE = (2, 3, 64, 64)


def _cfg(arch: str) -> zoo.ZooConfig:
    g = zoo.GRIDS[arch]
    return zoo.ZooConfig(arch, float(min(g["width"])), float(min(g["depth"])), int(max(g["kernel"])), SHAPE[-1], 2)


def _export(m: torch.nn.Module, path: Path, shape=SHAPE, *, keep_bn: bool = False, **kw) -> Path:
    """``torch.onnx.export`` (TorchScript exporter); ``keep_bn``: BN left unfolded (TrainingMode.PRESERVE)."""
    mode = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(*shape),), str(path), dynamo=False, training=mode, **kw)
    return path


@pytest.fixture(scope="module")
def netmodel():
    return load("layers-cpu-avx2-1t")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(arch, keep_bn)``: the zoo network's ONNX file, exported on first use, with BN
    folded into the convolutions (the exporter's default in eval mode) or kept."""
    d = tmp_path_factory.mktemp("onnx")
    done: dict[tuple[str, bool], Path] = {}

    def get(arch: str, keep_bn: bool) -> Path:
        if (arch, keep_bn) not in done:
            done[arch, keep_bn] = _export(zoo.build(_cfg(arch)), d / f"{arch}-{keep_bn}.onnx", keep_bn=keep_bn)
        return done[arch, keep_bn]

    return get


@pytest.mark.parametrize(
    "arch,keep_bn", [("mobilenetv3", True), ("mobilenetv3", False), ("shufflenetv2", True), ("efficientnet", False)]
)
def test_zoo_networks_read_back_priced_as_their_modules(arch, keep_bn, exported, netmodel) -> None:
    # the module path folds BN where the exporter did, so both price the same graph
    mod = graph.capture(zoo._meta_build(_cfg(arch)), SHAPE, fold_bn=not keep_bn)
    t = graph.capture_onnx(exported(arch, keep_bn), SHAPE)
    assert t.meta["capture"] == "onnx" and t.input_shape == SHAPE and t.precision == "fp32"
    assert abs(t.flops / mod.flops - 1) < 0.01
    assert t.unknown == []
    if keep_bn:
        assert t.params == mod.params  # every parameter read where the module holds it
        assert (t.layers["op"] == "bn").sum() == (mod.layers["op"] == "bn").sum()
    fp = fingerprint_of(netmodel)
    a, b = predict_table(mod, netmodel, fp), predict_table(t, netmodel, fp)
    assert abs(b.latency_ms / a.latency_ms - 1) < 0.02
    # exporters' patterns priced as the modules they came from
    ops = set(t.layers["op"])
    if arch == "efficientnet":  # nn.SiLU exports as Mul(x, Sigmoid(x))
        assert (t.layers["op"] == "silu").sum() == (mod.layers["op"] == "silu").sum() > 0
    if arch == "shufflenetv2":  # chunk -> Slice with sizes computed at run time, shuffle -> Transpose
        assert {"copy", "view", "cat"} <= ops
    assert t.peak_live_bytes > 0 and (t.layers["live_bytes"] >= 0).all()


def test_predict_module_accepts_an_onnx_path(exported, netmodel) -> None:
    path = exported("mobilenetv3", True)
    fp = fingerprint_of(netmodel)
    p = predict_module(path, SHAPE, netmodel, machine=fp)
    q = predict_table(graph.capture_onnx(path, SHAPE), netmodel, fp)
    assert p.latency_ms == q.latency_ms and p.flops == q.flops and p.unknown_ops == []
    assert predict_module(str(path), None, netmodel, machine=fp).latency_ms == p.latency_ms  # the file's own shape


class _Small(torch.nn.Module):
    """conv-BN-hardswish, SE, pooling and a linear head: a few nodes, exported in a blink."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.act = torch.nn.Hardswish()
        self.se = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(16, 16, 1), torch.nn.Hardsigmoid())
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.bn(self.conv(x)))
        y = y * self.se(y)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def test_dynamic_dims_fixed_by_the_input_shape(tmp_path) -> None:
    m = _Small().eval()
    path = _export(m, tmp_path / "dyn.onnx", input_names=["x"], dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}})
    one = graph.capture_onnx(path, (1, 3, 64, 64))
    assert one.flops == graph.capture(m, (1, 3, 64, 64), fold_bn=True).flops
    two = graph.capture_onnx(path, "2x3x64x64")
    assert two.flops == 2 * one.flops and two.input_shape == (2, 3, 64, 64)
    big = graph.capture_onnx(path, (1, 3, 96, 96))
    assert big.flops > one.flops
    half = graph.capture_onnx(path, (1, 3, 64, 64), "fp16")
    assert half.precision == "fp16" and half.flops == one.flops
    assert half.layers["dtype"].eq("float16").all() and half.model_bytes * 2 == one.model_bytes


def _tiny_model(**kw) -> object:
    """A synthetic graph: a 3-D linear (MatMul + bias), Transpose, Resize and Erf, 1x4x8 input."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [8, 16], np.ones(128, np.float32))
    b = helper.make_tensor("B", TensorProto.FLOAT, [16], np.zeros(16, np.float32))
    scales = helper.make_tensor("S", TensorProto.FLOAT, [3], [1.0, 2.0, 1.0])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["lin"]),
        helper.make_node("Transpose", ["lin"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Resize", ["t", "", "S"], ["r"], mode="nearest"),
        helper.make_node("Erf", ["r"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, kw.get("dims", [1, 4, 8]))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "tiny", [x], [y], [w, b, scales])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", kw.get("opset", 17))])


def test_synthetic_graph_patterns_and_unknown_ops_listed(tmp_path) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(_tiny_model(), path)
    t = graph.capture_onnx(path)
    L = t.layers
    assert list(L["op"]) == ["linear", "copy", "unknown", "unknown"]
    assert t.unknown == ["Resize", "Erf"]
    lin = L.iloc[0]
    assert (lin.flops, lin.params, lin.weight_bytes, lin.cin, lin.cout) == (2 * 4 * 8 * 16, 8 * 16 + 16, 144 * 4, 8, 16)
    assert L.iloc[2].out_shape == (1, 32, 4)  # Resize's shape from the scales
    assert t.params == 144 and t.model_bytes == 144 * 4


def _one_line(e: pytest.ExceptionInfo, path: Path, *words: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    for w in words:
        assert w in msg, msg


def test_bad_files_one_line_naming_the_file(tmp_path, exported) -> None:
    good = exported("mobilenetv3", True)
    data = good.read_bytes()
    cases = {
        "truncated.onnx": data[: len(data) // 2],
        "text.onnx": b"this is not a model\n",
        "empty.onnx": b"",
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(graph.CaptureError) as e:
            graph.capture_onnx(p, SHAPE)
        _one_line(e, p, "not an ONNX model")
    with pytest.raises(graph.CaptureError) as e:
        graph.capture_onnx(tmp_path / "missing.onnx", SHAPE)
    _one_line(e, tmp_path / "missing.onnx", "no such file")


def test_versions_the_onnx_package_cannot_read(tmp_path) -> None:
    newest = onnx.defs.onnx_opset_version()
    m = _tiny_model(opset=newest + 1)
    p = tmp_path / "opset.onnx"
    onnx.save(m, p)
    with pytest.raises(graph.CaptureError) as e:
        graph.capture_onnx(p)
    _one_line(e, p, f"opset {newest + 1}", "pip install -U onnx")
    m = _tiny_model()
    m.ir_version = onnx.IR_VERSION + 1
    onnx.save(m, p)
    with pytest.raises(graph.CaptureError) as e:
        graph.capture_onnx(p)
    _one_line(e, p, "IR version")


def test_dynamic_dims_left_unfixed_or_contradicted(tmp_path) -> None:
    p = tmp_path / "dyn.onnx"
    onnx.save(_tiny_model(dims=["batch", 4, 8]), p)
    with pytest.raises(graph.CaptureError) as e:
        graph.capture_onnx(p)
    _one_line(e, p, "dynamic", "batch")
    assert graph.capture_onnx(p, (3, 4, 8)).input_shape == (3, 4, 8)
    for bad, words in (
        ((3, 5, 8), ("does not fit",)),
        ((3, 4), ("3-D",)),
        ([(1, 4, 8), (1, 4, 8)], ("2 input shapes",)),
    ):
        with pytest.raises(graph.CaptureError) as e:
            graph.capture_onnx(p, bad)
        _one_line(e, p, *words)
    # a shape the graph's operators reject: shape inference says so
    onnx.save(_tiny_model(dims=["batch", 4, "features"]), p)
    with pytest.raises(graph.CaptureError) as e:
        graph.capture_onnx(p, (1, 4, 9))
    _one_line(e, p, "shape inference")


def test_external_data_never_read_and_confined_to_the_folder(tmp_path, exported) -> None:
    m = onnx.load(exported("mobilenetv3", True))
    d = tmp_path / "model"
    d.mkdir()
    onnx.save_model(m, d / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=1024)
    inline = graph.capture_onnx(exported("mobilenetv3", True), SHAPE)
    t = graph.capture_onnx(d / "m.onnx", SHAPE)
    assert (t.flops, t.params, t.model_bytes) == (inline.flops, inline.params, inline.model_bytes)
    (d / "m.data").unlink()  # the weights' bytes come from their dims: the data is never read
    assert graph.capture_onnx(d / "m.onnx", SHAPE).model_bytes == inline.model_bytes
    ext = onnx.load(d / "m.onnx", load_external_data=False)
    for where in ("../../etc/passwd", "/etc/passwd", "sub/../../m.data"):
        for t0 in ext.graph.initializer:
            for e0 in t0.external_data:
                if e0.key == "location":
                    e0.value = where
        p = d / "evil.onnx"
        onnx.save(ext, p)
        with pytest.raises(graph.CaptureError) as e:
            graph.capture_onnx(p, SHAPE)
        _one_line(e, p, "outside the model's folder", where)


def test_reading_imports_no_torch_and_missing_onnx_says_what_to_install(tmp_path) -> None:
    p = tmp_path / "tiny.onnx"
    onnx.save(_tiny_model(), p)
    # then, without the onnx package (an import that fails, as where it is not installed)
    code = (
        "import sys; from carb.graph import CaptureError, capture_onnx; t = capture_onnx(sys.argv[1])\n"
        "assert 'torch' not in sys.modules, 'torch imported'; print(t.flops)\n"
        "for m in [m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')]:\n    del sys.modules[m]\n"
        "sys.modules['onnx'] = None\n"
        "try:\n    capture_onnx(sys.argv[1])\nexcept CaptureError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [str(2 * 4 * 8 * 16), graph.onnx.INSTALL]
    assert "pip install 'carb[onnx]'" in graph.onnx.INSTALL
