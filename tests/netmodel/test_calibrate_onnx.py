"""A network model calibrated on ONNX files measured with ONNX Runtime: the format users deploy.

Real (short) measurements of three tiny networks exported to ONNX; the calibrated model records
the runtime, stays out of the per-user cache (which serves PyTorch eager), and says which
runtime it prices when asked about a torch module."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from carb import netmodel
from carb.families import nets, onnxfile
from tests._helpers import one_line_error

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

MODEL = "carb/data/layers-cpu-1t.netmodel"

TINY = """
from torch import nn


def tiny():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
"""


def _export(m: nn.Module, path, shape) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), (torch.randn(*shape),), str(path), dynamo=False)
    return str(path)


@pytest.fixture()
def onnx_list(tmp_path):
    nets_ = [
        (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)), (1, 3, 32, 32)),
        (nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 16, 3)), (2, 3, 32, 32)),
        (nn.Sequential(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 3, groups=8), nn.AdaptiveAvgPool2d(1)), (1, 3, 48, 48)),
    ]
    lines = [f"{_export(m, tmp_path / f'n{i}.onnx', s)} {'x'.join(map(str, s))}" for i, (m, s) in enumerate(nets_)]
    f = tmp_path / "onnx_nets.txt"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_a_networks_file_names_onnx_files_and_one_runtime(onnx_list, tmp_path) -> None:
    cfgs = netmodel.read_networks(onnx_list)
    assert all(isinstance(c, onnxfile.OnnxConfig) for c in cfgs) and cfgs[1].input_shape == "2x3x32x32"
    assert netmodel.runtime_of(cfgs) == "onnxruntime"
    assert netmodel.capture_config(cfgs[0]).meta["capture"] == "onnx"
    (tmp_path / "tiny.py").write_text(TINY)
    mixed = cfgs + [nets.NetConfig(f"{tmp_path / 'tiny.py'}:tiny", 32, 1, "fp32")]
    with pytest.raises(netmodel.ModelError, match="calibrate one runtime at a time"):
        netmodel.runtime_of(mixed)


def test_cli_refuses_a_list_that_mixes_runtimes(onnx_list, tmp_path, cli) -> None:
    (tmp_path / "tiny.py").write_text(TINY)
    with open(onnx_list, "a") as f:
        f.write(f"{tmp_path / 'tiny.py'}:tiny 1x3x32x32\n")
    rc, out, err = cli("calibrate", "--model", MODEL, "--networks", onnx_list, "--out", tmp_path / "o")
    one_line_error(rc, err, "calibrate one runtime at a time")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.shares_cpu  # counts, statuses and runtime names: no timing is checked
def test_calibrate_on_onnx_runtime_measurements_and_predict_with_it(onnx_list, tmp_path, cli) -> None:
    out_dir = tmp_path / "cal"
    rc, out, err = cli(
        "calibrate",
        "--model",
        MODEL,
        "--networks",
        onnx_list,
        "--max-time",
        "0.2",
        "--rounds",
        "1",
        "--force",
        "--out",
        out_dir,
    )
    assert rc in (0, None), err
    assert "3 networks measured on cpu with ONNX Runtime (factor)" in out
    assert "not kept in your calibration cache" in out and "kept for this machine" not in out
    cal = netmodel.load(out_dir)
    assert cal.meta["runtime"] == "onnxruntime" and cal.meta["runtime_version"]
    from carb.campaign.store import Store

    with Store(out_dir / "calibration.duckdb") as st:
        m = st.measurements()
    assert (m["status"] == "ok").sum() == 3 and set(m["family"]) == {"onnx"}

    first = onnx_list.read_text().split()[0]
    rc, out, err = cli("predict", "--onnx", first, "--input", "1x3x32x32", "--model", out_dir)
    assert rc in (0, None), err
    assert "networks measured with onnxruntime" in out and "this model is calibrated for" not in out
    (tmp_path / "tiny.py").write_text(TINY)
    rc, out, err = cli(
        "predict", "--module", f"{tmp_path / 'tiny.py'}:tiny", "--input", "1x3x32x32", "--model", out_dir
    )
    assert rc in (0, None), err
    assert "this model is calibrated for onnxruntime" in out
