"""The deployed networks of ``benchmarks/nets/deployed_nets.py`` build, run at their declared input and capture.

Each network is built on the meta device and run forward there at its declared input (its
output shapes checked), then captured by :func:`carb.graph.capture`. A recurrent network runs
forward with real weights instead (a GRU or LSTM runs step by step on meta, seconds per
hundred steps) and is captured at a shorter sequence. The file is loaded as the user code it
is (``carb predict --module FILE:BUILDER``), never imported as a benchmark; nothing is timed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

NETS = Path(__file__).resolve().parents[1] / "benchmarks" / "nets" / "deployed_nets.py"

#: each network's output shapes at its declared input
OUTPUTS = {
    "unet_transposed": [(1, 2, 256, 256)],
    "unet_bilinear": [(1, 2, 192, 192)],
    "deeplab_aspp": [(1, 21, 256, 256)],
    "pspnet": [(1, 21, 256, 256)],
    "fcn8s": [(1, 21, 256, 256)],
    "fpn_resnet": [(1, 64, 40, 40), (1, 64, 20, 20), (1, 64, 10, 10), (1, 64, 5, 5)],
    "fcos_gn": [(1, 1364, 80), (1, 1364, 4), (1, 1364)],
    "yolo_pan": [(1, 255, 40, 40), (1, 255, 20, 20), (1, 255, 10, 10)],
    "ssd_mobilenet": [(1, 2268, 4), (1, 2268, 21)],
    "convnext_lite": [(1, 1000)],
    "mobilenetv3_large": [(1, 1000)],
    "efficientnet_b0": [(1, 1000)],
    "resnext_32x4d": [(1, 1000)],
    "regnetx_400mf": [(1, 1000)],
    "repvgg_deploy": [(1, 1000)],
    "cnn_mha": [(1, 1000)],
    "cnn_transformer": [(1, 256, 92), (1, 256, 4)],
    "crnn_lstm": [(1, 63, 37)],
    "crnn_gru": [(1, 256, 10)],
    "c3d_video": [(1, 101)],
    "audio_m11": [(1, 35)],
    "wavenet_tcn": [(1, 80, 400)],
    "edsr_x2": [(1, 3, 192, 192)],
    "pose_deconv": [(1, 17, 64, 48)],
    "style_transfer": [(1, 3, 192, 192)],
}
#: the shorter input a recurrent network is captured at (8 steps of its recurrent head)
CAPTURED_AT = {"crnn_lstm": (1, 1, 32, 36), "crnn_gru": (1, 1, 64, 8)}


@pytest.fixture(scope="module")
def nets():
    spec = importlib.util.spec_from_file_location("deployed_nets_under_test", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recurrent(net) -> bool:
    import torch

    return any(isinstance(m, torch.nn.RNNBase) for m in net.modules())


def test_the_set_holds_at_least_22_networks_each_named_by_its_builder(nets):
    assert len(nets.NETWORKS) >= 22
    assert set(nets.NETWORKS) == set(OUTPUTS)
    for name, spec in nets.NETWORKS.items():
        assert spec.build.__name__ == name and getattr(nets, name) is spec.build
        assert spec.input[0] == 1 and spec.task and spec.ops


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_each_network_runs_at_its_declared_input_and_is_captured(nets, name):
    import torch

    from carb.graph import build_meta, capture

    spec = nets.NETWORKS[name]
    net = build_meta(spec.build)
    assert not net.training
    if _recurrent(net):
        net = spec.build()
        with torch.inference_mode():
            out = net(torch.randn(*spec.input))
    else:
        out = net(torch.empty(*spec.input, device="meta"))
    outs = out if isinstance(out, tuple) else (out,)
    assert [tuple(o.shape) for o in outs] == OUTPUTS[name]

    table = capture(net, CAPTURED_AT.get(name, spec.input))
    assert len(table.layers) > 0 and table.layers["flops"].sum() > 0
