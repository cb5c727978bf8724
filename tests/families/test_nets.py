"""carb.families.nets (any network a user names, as a measurable family) and ``carb calibrate`` of a
network model. Measured values come from real (short) measurements of tiny networks; the
device of the calibration tests is synthetic."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from carb import families, graph, netmodel
from carb.families import SpaceError, nets, zoo
from tests._helpers import one_line_error

MODEL = "carb/data/layers-cpu-1t.netmodel"

NETS = """
from torch import nn

def tiny():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))

def wider():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))

def grouped():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1, groups=8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))

def number():
    return 3

def flaky():
    import torch
    if not torch.empty(1).is_meta:  # builds on the meta device (capture), fails for real (the worker)
        raise RuntimeError("no real build")
    return tiny()
"""

# a module whose import holds 200 MB: the worker imports it before its memory baseline
HEAVY_IMPORT = """
from torch import nn
BALLAST = bytearray(200 * 1024 * 1024)
for i in range(0, len(BALLAST), 4096):
    BALLAST[i] = 1  # touch every page, so it is resident

def tiny():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
"""


@pytest.fixture()
def nets_file(tmp_path):
    f = tmp_path / "my_nets.py"
    f.write_text(NETS)
    return f


def test_config_round_trip_and_validation(nets_file) -> None:
    c = nets.NetConfig(f"{nets_file}:tiny", 32, 2, "bf16")
    assert nets.NetConfig.from_dict(c.to_dict()) == c
    assert c.config_id == nets.NetConfig.from_dict(json.loads(json.dumps(c.to_dict()))).config_id
    assert c.config_id != nets.NetConfig(f"{nets_file}:tiny", 32, 1, "bf16").config_id
    assert c.label() == "tiny-i32-b2-bf16" and c.input_shape == (2, 3, 32, 32)
    for bad, words in (
        (dict(module="no_colon"), "module"),
        (dict(module="a:b", precision="fp8"), "precision"),
        (dict(module="a:b", batch=0), "batch"),
        (dict(module="a:b", batch=1.5), "integer"),
    ):
        with pytest.raises(SpaceError, match=words):
            nets.NetConfig(**bad)
    with pytest.raises(SpaceError, match="unknown parameter 'width'"):
        nets.NetConfig.from_dict({"module": "a:b", "width": 1})
    with pytest.raises(SpaceError, match="module: missing"):
        nets.NetConfig.from_dict({"input_size": 8})


def test_build_capture_and_store_rows(nets_file) -> None:
    c = nets.NetConfig(f"{nets_file}:wider", 16, 1)
    m = nets.build(c)
    assert isinstance(m, nn.Module) and not m.training
    assert not any(p.is_meta for p in m.parameters())  # real weights: the worker runs it
    with torch.inference_mode():
        assert m(torch.randn(*c.input_shape)).shape == (1, 4)
    t = netmodel.capture_config(c)
    ref = graph.capture(graph.load_module(c.module), c.input_shape, "fp32")
    assert t.flops == ref.flops > 0 and len(t.layers) == len(ref.layers)
    # a store row keeps a foreign family's parameters as JSON in ``arch``
    row = {
        "config_id": c.config_id,
        "family": "net",
        "input_size": 16,
        "batch": 1,
        "precision": "fp32",
        "arch": json.dumps(c.to_dict()),
    }
    assert families.config_from_row(row) == c
    # captured once (at measurement), then read back from the rows: features() never builds
    stored = nets.measured_features(c)
    assert stored["flops"] == ref.flops and stored["n_layers"] == len(ref.layers)
    assert set(stored) == set(nets.CAPTURED_COLUMNS)
    feats = nets.features(pd.DataFrame([{**c.to_dict(), **stored}, nets.NetConfig("os:abort", 16, 1).to_dict()]))
    assert feats["flops"].tolist()[0] == ref.flops and np.isnan(feats["flops"].iloc[1])
    assert feats[list(nets.CAPTURED_COLUMNS)].iloc[1].isna().all()  # never stored: missing, nothing imported
    with pytest.raises(graph.CaptureError, match="returned a int"):
        nets.build(nets.NetConfig(f"{nets_file}:number", 16, 1))
    with pytest.raises(netmodel.ModelError, match="not a network config"):
        netmodel.capture_config("resnet18")


def test_read_networks(tmp_path) -> None:
    f = tmp_path / "nets.txt"
    f.write_text("# my networks\n\npkg.mod:a 1x3x224x224\npkg.mod:b 4x3x160x160 bf16  # batch 4\n")
    got = nets.read_networks(f)
    assert got == [nets.NetConfig("pkg.mod:a", 224, 1), nets.NetConfig("pkg.mod:b", 160, 4, "bf16")]
    for line, words in (
        ("pkg.mod:a", "expected SPEC INPUT"),
        ("pkg.mod:a 1x3x224x200", "square"),
        ("pkg.mod:a 1x1x224x224", "BATCHx3"),
        ("pkg.mod:a 1x3x224x224 fp8", "precision"),
        ("pkg.mod:a 1x3x224", "BATCHx3"),
    ):
        f.write_text("pkg.mod:ok 1x3x8x8\n" + line + "\n")
        with pytest.raises(SpaceError, match=f"line 2: .*{words}"):
            nets.read_networks(f)
    with pytest.raises(SpaceError, match="no such file"):
        nets.read_networks(tmp_path / "missing.txt")


@pytest.fixture(scope="module")
def shipped() -> netmodel.NetModel:
    return netmodel.load(MODEL)


def test_choose_networks_spans_the_families(shipped) -> None:
    cfgs = netmodel.choose_networks(shipped, 10, seed=0, per_family=2)
    assert len(set(cfgs)) == 10 and len({c.arch for c in cfgs}) >= 8  # the least-used family first per bin
    lat = shipped.predict_rows(netmodel._network_rows([netmodel.capture_config(c) for c in cfgs], shipped.layer)[0])[
        "latency_ms"
    ]
    assert lat.max() / lat.min() > 5  # spread over the predicted latency
    assert max(pd.Series([c.input_size for c in cfgs]).value_counts()) <= 3  # over the input sizes (5 of them)
    assert netmodel.choose_networks(shipped, 10, seed=0, per_family=2) == cfgs  # seeded
    with pytest.raises(netmodel.ModelError, match="between 2 and 20"):
        netmodel.choose_networks(shipped, 21, per_family=2)


def test_pick_networks_spreads_the_input_sizes() -> None:
    # synthetic candidates: the fast half all at 96 px, the slow half spread over 4 sizes
    from types import SimpleNamespace as C

    cands = [C(arch=f"a{i % 5}", input_size=96) for i in range(20)]
    cands += [C(arch=f"a{i % 5}", input_size=(128, 160, 192, 224)[i % 4]) for i in range(20)]
    lat = np.concatenate([np.linspace(1, 10, 20), np.linspace(11, 100, 20)])
    # 8 bins of 5, the first 4 inside the 96-px-only half: there no rule has a choice; in the
    # slow half the sizes rule takes a new size in each bin, the families rule need not
    fams = netmodel.pick_networks(cands, lat, 8, np.random.default_rng(0), "families")
    sizes = netmodel.pick_networks(cands, lat, 8, np.random.default_rng(0), "sizes")
    assert [cands[i].input_size for i in sizes[:4]] == [96] * 4
    assert sorted(cands[i].input_size for i in sizes[4:]) == [128, 160, 192, 224]
    assert len({cands[i].arch for i in fams}) == 5 and len(set(fams)) == len(set(sizes)) == 8
    with pytest.raises(netmodel.ModelError, match="unknown choice rule"):
        netmodel.pick_networks(cands, lat, 6, np.random.default_rng(0), "nope")


def test_calibrate_on_a_synthetic_slower_device(shipped) -> None:
    # synthetic truth: a device 1.6x slower than the shipped model predicts, memory + 10 MB
    cfgs = netmodel.choose_networks(shipped, 8, seed=1, per_family=2)
    tables = [netmodel.capture_config(c) for c in cfgs]
    before = shipped.predict_rows(netmodel._network_rows(tables, shipped.layer)[0])
    truth = pd.DataFrame({"latency_ms": 1.6 * before["latency_ms"], "memory_mb": before["memory_mb"] + 10})
    for method in netmodel.CALIBRATION_METHODS:
        cal = netmodel.calibrate_on(shipped, tables, truth, method, meta={"samples": 8})
        after = cal.predict_rows(netmodel._network_rows(tables, cal.layer)[0])
        assert np.allclose(after["latency_ms"] / truth["latency_ms"], 1.0, rtol=0.03), method
        assert np.allclose(after["memory_mb"] / truth["memory_mb"], 1.0, rtol=0.05), method
        assert cal.meta["calibration_method"] == method and cal.meta["samples"] == 8
    with pytest.raises(netmodel.ModelError, match="unknown value 'nnls'"):
        netmodel.calibrate_on(shipped, tables, truth, "nnls")
    with pytest.raises(netmodel.ModelError, match="need at least 3"):
        netmodel.calibrate_on(shipped, tables[:2], truth[:2])


def test_factor_calibration_fits_no_slope_or_batch_term(shipped) -> None:
    # synthetic truth whose ratio to the prediction grows with batch and with latency: the
    # full log map may fit that with 10 points, the default `factor` holds to one factor
    cfgs = netmodel.choose_networks(shipped, 10, seed=2, per_family=2)
    tables = [netmodel.capture_config(c) for c in cfgs]
    rows = netmodel._network_rows(tables, shipped.layer)[0]
    before = shipped.predict_rows(rows)
    lat = before["latency_ms"].to_numpy()
    truth = pd.DataFrame(
        {"latency_ms": 1.3 * lat**1.2 * rows["batch"].to_numpy() ** -0.3, "memory_mb": before["memory_mb"]}
    )
    assert netmodel.DEFAULT_CALIBRATION_METHOD == "factor"
    fac = netmodel.calibrate_on(shipped, tables, truth)
    assert len(fac.calibration["latency_ms"]["coef"]) == 2 and fac.calibration["latency_ms"]["coef"][1] == 1.0
    full = netmodel.calibrate_on(shipped, tables, truth, "log")
    assert full.calibration["latency_ms"]["coef"][1:] != [1.0]  # it took the slope (and batch) terms


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--method", "nnls"], ["unknown value 'nnls' for a network model"]),
        (["--networks", "{d}/missing.txt"], ["no such file"]),
        (["--networks", "{d}/two.txt"], ["2 networks; need at least 3"]),
    ],
)
def test_cli_calibrate_netmodel_bad_input(tmp_path, cli, nets_file, extra, words) -> None:
    (tmp_path / "two.txt").write_text(f"{nets_file}:tiny 1x3x8x8\n{nets_file}:wider 1x3x8x8\n")
    rc, out, err = cli("calibrate", "--model", MODEL, "--out", tmp_path / "o", *[a.format(d=tmp_path) for a in extra])
    one_line_error(rc, err, *words)
    assert not (tmp_path / "o").exists()


def test_cli_networks_need_a_network_model(tmp_path, cli) -> None:
    (tmp_path / "cfg").mkdir()  # not a network model (no netmodel.json)
    (tmp_path / "cfg" / "manifest.json").write_text("{}")
    rc, out, err = cli(
        "calibrate", "--model", tmp_path / "cfg", "--out", tmp_path / "o", "--networks", tmp_path / "n.txt"
    )
    one_line_error(rc, err, "--networks: only with a network model")


@pytest.mark.slow
@pytest.mark.shares_cpu  # statuses, counts and memory: no timing is checked
def test_cli_calibrate_netmodel_measures_and_predicts(tmp_path, cli, nets_file) -> None:
    heavy = tmp_path / "heavy_import.py"
    heavy.write_text(HEAVY_IMPORT)
    lst = tmp_path / "nets.txt"
    lst.write_text(
        f"{nets_file}:tiny 1x3x32x32\n{nets_file}:wider 2x3x32x32\n{nets_file}:grouped 1x3x48x48\n"
        f"{heavy}:tiny 1x3x32x32\n{nets_file}:flaky 1x3x32x32\n"
    )
    out_dir = tmp_path / "cal"
    # --force: the test is of measuring, not of the machine's state (tests/transfer/test_here_state.py)
    rc, out, err = cli(
        "calibrate", "--model", MODEL, "--networks", lst, "--max-time", "0.2", "--force", "--out", out_dir
    )
    assert rc in (0, None), err
    assert "4 networks measured on cpu (factor)" in out and f"wrote {out_dir}" in out
    assert "left out of the calibration: flaky-i32-b1-fp32" in err and "no real build" in err
    cal = netmodel.load(out_dir)
    assert cal.meta["calibration_method"] == "factor" and cal.meta["samples"] == 4 and cal.device == "cpu-1t"
    assert len(cal.meta["networks"]) == 4 and (out_dir / "calibration.duckdb").is_file()
    from carb.campaign.store import Store

    with Store(out_dir / "calibration.duckdb") as st:
        m = st.measurements()
    assert (m["status"] == "ok").sum() == 4 and set(m["family"]) == {"net"}
    # the 200 MB held by the heavy module's import is not the network's inference memory
    heavy_mb = m.loc[m["module"] == f"{heavy}:tiny", "memory_mb"].iloc[0]
    assert heavy_mb < 100, heavy_mb
    rc, out, err = cli("predict", "--module", f"{nets_file}:grouped", "--input", "1x3x48x48", "--model", out_dir)
    assert rc in (0, None), err
    from carb.measure.fingerprint import compare, here
    from carb.netmodel.domain import fingerprint_of

    # calibrated here: priced for this machine, by what it is, with no other-machine line
    assert f"priced for {here().describe()}" in out and "another kind of machine" not in out
    assert f"calibrated (factor) on 4 networks measured on {here().describe()}" in out
    assert compare(fingerprint_of(cal), here()).same_kind == here().known
    # the calibrated directory is refused as --out: it is not empty
    rc, out, err = cli("calibrate", "--model", MODEL, "--networks", lst, "--out", out_dir)
    one_line_error(rc, err, "not empty")


def test_zoo_and_net_families_are_built_in() -> None:
    assert {"net", "zoo"} <= set(families.names())
    assert families.get("zoo") is zoo.ZOO and families.get("net") is nets.NET
