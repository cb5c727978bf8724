"""A network model folder is as safe as a bundle: its document and forest are checksummed, file names stay
inside the folder, and whatever fails to check is one line (exit 2 in the CLI)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from carb import netmodel
from carb.netmodel import io
from tests._helpers import ROOT, one_line_error

MODEL = "layers-cpu-1t"

NET = """
from torch import nn

def build():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))
"""


@pytest.fixture
def copy(tmp_path):
    """A copy of a shipped model, to edit."""
    d = tmp_path / "m.netmodel"
    shutil.copytree(io.resolve(MODEL), d)
    return d


@pytest.fixture
def net(tmp_path) -> str:
    f = tmp_path / "my_net.py"
    f.write_text(NET)
    return f"{f}:build"


def _doc(d):
    return json.loads((d / io.MODEL_FILE).read_text())


def _predict(cli, net, model):
    return cli("predict", "--module", net, "--input", "1x3x16x16", "--model", model)


def test_the_shipped_models_are_sealed_as_they_are(tmp_path) -> None:
    for name, folder in io.SHIPPED.items():
        d = io.resolve(name)
        doc = _doc(d)
        assert doc["files"] == {io.FOREST_FILE: io._sha256(d / io.FOREST_FILE)} and doc[io.CHECKSUM_KEY]
        netmodel.load(name)
        # sealing again changes nothing: no edit waits for scripts/seal_netmodels.py
        again = tmp_path / folder
        shutil.copytree(d, again)
        io.seal(again)
        assert (again / io.MODEL_FILE).read_text() == (d / io.MODEL_FILE).read_text(), name


def test_save_writes_the_checksums_and_the_model_loads_back(copy, tmp_path) -> None:
    nm = netmodel.load(copy)
    d = nm.save(tmp_path / "saved")
    doc = _doc(d)
    assert doc[io.CHECKSUM_KEY] == io.doc_checksum(doc) and set(doc["files"]) == {io.FOREST_FILE}
    again = netmodel.load(d)
    assert again.lat_coef == nm.lat_coef and again.q == nm.q and again.meta == nm.meta
    assert not list(d.glob("*.tmp"))


def test_an_edited_coefficient_is_refused_in_one_line(copy, cli, net) -> None:
    doc = _doc(copy)
    doc["lat_coef"][0] *= 10
    (copy / io.MODEL_FILE).write_text(json.dumps(doc, indent=1))
    with pytest.raises(netmodel.ModelError, match="does not match its checksum netmodel_sha256") as e:
        netmodel.load(copy)
    assert "\n" not in str(e.value)
    rc, out, err = _predict(cli, net, copy)
    one_line_error(rc, err, str(copy), "does not match its checksum")


def test_a_flipped_byte_in_the_forest_is_one_line_not_a_zip_traceback(copy, cli, net) -> None:
    f = copy / io.FOREST_FILE
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(netmodel.ModelError, match="file layer_forest.npz does not match its checksum"):
        netmodel.load(copy)
    rc, out, err = _predict(cli, net, copy)
    one_line_error(rc, err, "layer_forest.npz does not match its checksum")
    (copy / io.FOREST_FILE).unlink()
    with pytest.raises(netmodel.ModelError, match="missing file layer_forest.npz"):
        netmodel.load(copy)


def test_a_forest_outside_the_folder_is_refused_even_when_resealed(copy, tmp_path) -> None:
    outside = tmp_path / "elsewhere.npz"
    shutil.copy(copy / io.FOREST_FILE, outside)
    for name in ("../elsewhere.npz", str(outside)):
        doc = _doc(copy)
        doc["layer"]["forest"] = name
        doc["files"] = {name: io._sha256(outside)}
        doc[io.CHECKSUM_KEY] = io.doc_checksum(doc)  # checksums rewritten to match: the name is still refused
        (copy / io.MODEL_FILE).write_text(json.dumps(doc))
        with pytest.raises(netmodel.ModelError, match="not a file name inside the model's folder"):
            netmodel.load(copy)
        with pytest.raises(netmodel.ModelError, match="not a file name inside the model's folder"):
            io.seal(copy)
    doc = _doc(copy)
    doc["layer"]["forest"], doc["files"] = io.FOREST_FILE, {}  # a forest that is not checksummed
    doc[io.CHECKSUM_KEY] = io.doc_checksum(doc)
    (copy / io.MODEL_FILE).write_text(json.dumps(doc))
    with pytest.raises(netmodel.ModelError, match="not among its checksummed files"):
        netmodel.load(copy)


def test_a_model_without_checksums_is_refused_with_how_to_seal_it(copy, cli, net) -> None:
    before = netmodel.load(copy)
    doc = _doc(copy)
    del doc[io.CHECKSUM_KEY], doc["files"]  # as carb wrote models before checksumming them
    (copy / io.MODEL_FILE).write_text(json.dumps(doc, indent=1))
    rc, out, err = _predict(cli, net, copy)
    one_line_error(rc, err, "no netmodel_sha256", "seal(")
    # the remedy it gives, as given: a subprocess runs it
    remedy = err.split("seal them: ", 1)[1].strip()
    assert remedy.startswith('python -c "') and remedy.endswith('"')
    subprocess.run([sys.executable, "-c", remedy[len('python -c "') : -1]], check=True, cwd=ROOT)
    after = netmodel.load(copy)
    assert after.lat_coef == before.lat_coef and after.mem_coef == before.mem_coef
    rows = np.ones((3, after.layer.forest.n_features))
    assert np.array_equal(after.layer.forest.predict(rows), before.layer.forest.predict(rows))


@pytest.mark.parametrize(
    "text,words",
    [
        ("{", "unreadable"),
        ("[1, 2]", "format None"),
        ('{"format": "carb-netmodel/1", "layer": 3}', "malformed network model"),
    ],
)
def test_a_malformed_document_is_one_line(copy, cli, net, text, words) -> None:
    (copy / io.MODEL_FILE).write_text(text)
    rc, out, err = _predict(cli, net, copy)
    one_line_error(rc, err, words)


def test_the_seal_script_seals_the_folders_it_is_given(copy) -> None:
    doc = _doc(copy)
    doc["meta"]["note"] = "edited on purpose"  # as the shipped models' meta is, by hand or by a benchmark
    (copy / io.MODEL_FILE).write_text(json.dumps(doc))
    with pytest.raises(netmodel.ModelError, match="does not match its checksum"):
        netmodel.load(copy)
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "seal_netmodels.py"), str(copy)], capture_output=True, text=True
    )
    assert p.returncode == 0 and f"sealed {copy}" in p.stdout, p.stderr
    assert netmodel.load(copy).meta["note"] == "edited on purpose"
