"""``carb predict --module/--onnx`` on the edges: an input or activations this machine could not
hold refused in one line (exit 2), an ONNX file's folded BatchNorm said, the coverage line
counting layers, FLOPs and bytes, a network mostly priced by the fallback left undecided."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from carb import netmodel
from tests._helpers import one_line_error

NETS = """
import torch
from torch import nn


def wide():
    return nn.Sequential(nn.Conv2d(3, 256, 1), nn.ReLU())


def recurrent():
    class R(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.lstm = nn.LSTM(8, 256, batch_first=True)

        def forward(self, x):
            return self.lstm(self.conv(x).mean(2).transpose(1, 2))[0]

    return R()
"""


@pytest.fixture
def nets(tmp_path):
    (tmp_path / "nets.py").write_text(NETS)
    return tmp_path / "nets.py"


@pytest.fixture
def small_machine(monkeypatch):
    """A machine of 100 MB."""
    import carb.transfer.network as priced_here

    monkeypatch.setattr(priced_here, "physical_memory_bytes", lambda: 100_000_000)


def test_an_input_or_activations_this_machine_cannot_hold_are_refused(cli, nets, small_machine) -> None:
    rc, _, err = cli("predict", "--module", f"{nets}:wide", "--input", "1x3x4000x4000")
    one_line_error(rc, err, "1x3x4000x4000", "its tensor alone is 192.0 MB", "more than this machine's memory")
    rc, _, err = cli("predict", "--module", f"{nets}:wide", "--input", "1x3x512x512")
    one_line_error(rc, err, "1x3x512x512", "activations reach", "more than this machine's memory (100.0 MB)")
    rc, out, err = cli("predict", "--module", f"{nets}:wide", "--input", "1x3x64x64")
    assert rc == 0, err


def test_the_audits_absurd_input_is_refused_on_any_machine(cli, nets) -> None:
    rc, _, err = cli("predict", "--module", f"{nets}:wide", "--input", "1x3x100000x100000")
    one_line_error(rc, err, "1x3x100000x100000", "120.0 GB", "more than this machine's memory")
    assert netmodel.physical_memory_bytes() > 1e8


def test_library_refuses_with_max_bytes_and_says_nothing_without() -> None:
    nm = netmodel.load("layers-cpu-avx2-1t")
    m = nn.Sequential(nn.Conv2d(3, 256, 1))
    with pytest.raises(netmodel.CaptureError, match="activations reach"):
        netmodel.predict_module(m, (1, 3, 512, 512), nm, max_bytes=100_000_000)
    assert netmodel.predict_module(m, (1, 3, 512, 512), nm).memory_mb > 100


def test_coverage_line_counts_bytes_and_a_fallback_priced_network_is_undecided(cli, nets) -> None:
    # the AVX2 model never measured a recurrent layer (the model of the AVX-512 EPYC kind did)
    rc, out, err = cli(
        "predict", "--module", f"{nets}:recurrent", "--input", "1x3x32x64", "--model", "layers-cpu-avx2-1t"
    )
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("coverage:"))
    assert "of bytes known" in line and "measured fallback of their class" in line and "LSTM" in line
    assert "no latency budget decision for this network" in out and "measure it" in out


def test_an_onnx_file_exported_with_bn_folded_says_so(cli, tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    del onnx
    m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 1)).eval()
    for mode, name in ((torch.onnx.TrainingMode.EVAL, "folded"), (torch.onnx.TrainingMode.PRESERVE, "kept")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                m, (torch.randn(1, 3, 32, 32),), str(tmp_path / f"{name}.onnx"), dynamo=False, training=mode
            )
    rc, out, err = cli(
        "predict", "--onnx", tmp_path / "folded.onnx", "--input", "1x3x32x32", "--json", tmp_path / "f.json"
    )
    assert rc == 0, err
    assert "no BatchNormalization node, and 2 of its 2 convolutions carry a bias" in out
    assert "the exporter folded it" in out
    import json

    cap = json.loads((tmp_path / "f.json").read_text())["capture"]
    assert (cap["capture"], cap["bn_nodes"], cap["convs"], cap["convs_with_bias"]) == ("onnx", 0, 2, 2)
    rc, out, err = cli("predict", "--onnx", tmp_path / "kept.onnx", "--input", "1x3x32x32")
    assert rc == 0 and "no BatchNormalization node" not in out, err
    rc, _, err = cli("predict", "--onnx", tmp_path / "kept.onnx")
    one_line_error(rc, err, "--onnx needs --input")
