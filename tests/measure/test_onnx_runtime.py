"""ONNX files measured by ``carb characterize --configs``: a ``family = onnx`` row run by ONNX Runtime
in the CPU backend's fresh worker, its runtime in provenance, its features frozen from the graph;
a bad file one line and exit 2 before any worker starts."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import duckdb
import pytest
import torch

from carb import families, graph
from carb.campaign import read_config_file
from carb.families import SpaceError, onnxfile
from carb.families.nets import CAPTURED_COLUMNS
from carb.measure import Protocol, classify, get_backend
from tests._helpers import CARB_CLI, one_line_error

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

#: the installed console script beside this Python (the module entry point where it is absent)
_SCRIPT = shutil.which("carb", path=str(Path(sys.executable).parent))
CARB = [_SCRIPT] if _SCRIPT else CARB_CLI
FAST = ("--max-time", "0.2", "--rounds", "1", "--no-sentinel", "--threads", "1")


def _export(m: torch.nn.Module, path: Path, shape: tuple[int, ...]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.eval(), (torch.randn(*shape),), str(path), dynamo=False)
    return path


def _run(*args, cwd: Path):
    import subprocess

    return subprocess.run([*CARB, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Two tiny networks exported to ONNX and measured through the CLI into one store."""
    d = tmp_path_factory.mktemp("onnxrt")
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )
    dw = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1),
        torch.nn.Hardswish(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),
        torch.nn.Conv2d(16, 24, 1),
        torch.nn.AdaptiveAvgPool2d(1),
    )
    _export(conv, d / "conv.onnx", (2, 3, 32, 32))
    _export(dw, d / "dw.onnx", (1, 3, 40, 40))
    # the two spellings of a shape: batch and input_size, or input_shape
    (d / "configs.csv").write_text(
        "family,onnx,input_shape,input_size,batch,precision\nonnx,conv.onnx,,32,2,fp32\nonnx,dw.onnx,1x3x40x40,,,fp32\n"
    )
    r = _run("characterize", "--configs", "configs.csv", "--store", "s.duckdb", *FAST, cwd=d)
    assert r.returncode == 0, r.stderr
    with duckdb.connect(str(d / "s.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT * FROM measurements").df()
        runs = con.execute("SELECT provenance FROM runs").df()
    return d, rows, runs


def test_one_row_per_file_run_by_onnx_runtime_with_its_provenance(measured) -> None:
    d, rows, runs = measured
    assert len(rows) == 2 and set(rows["status"]) == {"ok"}
    arch = [json.loads(a) for a in rows["arch"]]
    assert sorted(a["onnx"] for a in arch) == ["conv.onnx", "dw.onnx"]
    assert {a["family"] for a in arch} == {"onnx"}
    assert (rows["latency_ms"] > 0).all() and (rows["memory_mb"] > 0).all()
    for a, extra in zip(arch, rows["extra"]):
        e = json.loads(extra)
        assert e["runtime"] == "onnxruntime" and e["onnxruntime_version"] == ort.__version__
        assert e["providers"] == ["CPUExecutionProvider"]
        assert (
            e["session_options"]["intra_op_num_threads"] == 1 and e["session_options"]["execution_mode"] == "sequential"
        )
        assert e["onnx_sha256"] == a["sha256"] == onnxfile.file_sha256(d / a["onnx"])
    assert json.loads(runs["provenance"][0])["onnxruntime_version"] == ort.__version__
    by_file = {a["onnx"]: (int(b), int(s)) for a, b, s in zip(arch, rows["batch"], rows["input_size"])}
    assert by_file == {"conv.onnx": (2, 32), "dw.onnx": (1, 40)}


def test_features_frozen_from_the_graph_at_measurement(measured) -> None:
    d, rows, _ = measured
    for arch, feats in zip(rows["arch"], rows["features"]):
        a, f = json.loads(arch), json.loads(feats)
        t = graph.capture_onnx(d / a["onnx"], a["input_shape"], "fp32")
        want = {
            "flops": t.flops,
            "params": t.params,
            "model_bytes": t.model_bytes,
            "input_bytes": t.input_bytes,
            "live_activation_bytes": t.peak_live_bytes,
            "n_layers": len(t.layers),
        }
        assert f == want and set(f) == set(CAPTURED_COLUMNS) and t.flops > 0


def test_dataset_export_keeps_the_rows_and_their_features(measured) -> None:
    from carb import datasets
    from carb.campaign.store import Store

    d, rows, _ = measured
    with Store(d / "s.duckdb", read_only=True) as store:
        df = datasets.from_store(store, with_features=True)
    assert list(df["family"]) == ["onnx", "onnx"] and df["flops"].gt(0).all()
    assert set(df["config_id"]) == set(rows["config_id"])
    assert list(df.sort_values("onnx")["input_shape"]) == ["2x3x32x32", "1x3x40x40"]


@pytest.mark.parametrize("content", [b"not a protobuf at all", None])
def test_a_non_onnx_or_truncated_file_is_one_line_before_any_worker(tmp_path, measured, content) -> None:
    d = measured[0]
    data = content if content is not None else (d / "conv.onnx").read_bytes()[:300]
    (tmp_path / "bad.onnx").write_bytes(data)
    bad = tmp_path / "bad.onnx"  # relative in the CLI's folder, absolute when read here
    name = "bad.onnx" if content is None else str(bad)
    (tmp_path / "c.csv").write_text(f"family,onnx,input_size,batch,precision\nonnx,{name},32,1,fp32\n")
    if content is None:  # the CLI: one line, exit 2, no store written
        r = _run("characterize", "--configs", "c.csv", "--store", "s.duckdb", *FAST, cwd=tmp_path)
        one_line_error(r.returncode, r.stderr, "bad.onnx", "not an ONNX model")
        assert not (tmp_path / "s.duckdb").exists()
    else:
        with pytest.raises(SpaceError, match="bad.onnx: not an ONNX model"):
            read_config_file(str(tmp_path / "c.csv"))


def test_the_missing_runtime_says_what_to_install() -> None:
    assert onnxfile.runtime_missing() is None  # installed here
    msg = onnxfile.runtime_missing(("onnxruntime", "no_such_package_carb_test"))
    assert msg == onnxfile.INSTALL and "pip install 'carb[onnx]'" in msg and "\n" not in msg


def test_the_config_is_the_file_content_and_a_store_row_reads_no_file(tmp_path) -> None:
    p = _export(torch.nn.Conv2d(3, 4, 3), tmp_path / "m.onnx", (1, 3, 16, 16))
    a = onnxfile.OnnxConfig.from_dict({"onnx": str(p), "batch": 1, "input_size": 16})
    assert a == onnxfile.OnnxConfig(str(p), "1x3x16x16") and (a.batch, a.input_size) == (1, 16)
    assert families.of(a) is onnxfile.ONNX  # measured by ONNX Runtime: the runs above record it
    with pytest.raises(SpaceError, match="disagree"):
        onnxfile.OnnxConfig.from_dict({"onnx": str(p), "input_shape": "1x3x16x16", "batch": 2})
    row = families.to_row(a)
    _export(torch.nn.Conv2d(3, 5, 3), p, (1, 3, 16, 16))  # exported again under the same name
    b = onnxfile.OnnxConfig(str(p), "1x3x16x16")
    assert b.config_id != a.config_id
    with pytest.raises(SpaceError, match="content"):
        a.check_measurable()
    p.unlink()
    assert families.config_from_row(row) == a  # the stored hash: the file is not read
    # a backend without ONNX Runtime (a torch worker) records the config as unsupported
    with pytest.raises(NotImplementedError) as e:
        onnxfile.build(a)
    assert classify(e.value) == "unsupported"


def test_the_worker_refuses_a_file_changed_after_the_config_was_made(tmp_path) -> None:
    p = _export(torch.nn.Conv2d(3, 4, 3), tmp_path / "m.onnx", (1, 3, 16, 16))
    cfg = onnxfile.OnnxConfig(str(p), "1x3x16x16")
    _export(torch.nn.Conv2d(3, 6, 3), p, (1, 3, 16, 16))
    with get_backend("cpu", threads=1, protocol=Protocol(max_time_s=0.1, timeout_s=60)) as backend:
        m = backend.measure(cfg)
    assert m.status == "error" and "content changed" in m.message
    assert m.extra["runtime"] == "onnxruntime" and m.extra["onnx_sha256"] != cfg.sha256
