"""The per-user calibration cache: kept per source model and machine kind; broken or foreign entries ignored."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from carb.measure.fingerprint import Fingerprint
from carb.netmodel import load, resolve
from carb.transfer import cache

MODEL = "layers-cpu-avx2-1t"
HERE = Fingerprint(device="cpu", name="Test CPU", isa=("avx2",), kernels="AVX2", native=(), source="test")


@pytest.fixture
def calibrated(tmp_path):
    """A stand-in for a calibrated model: a copy of the shipped model (synthetic: nothing was measured)."""
    d = tmp_path / "calibrated"
    shutil.copytree(resolve(MODEL), d)
    return d


def test_a_kept_calibration_is_found_for_the_same_kind_only(calibrated, monkeypatch, tmp_path):
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "c"))
    path = cache.store(calibrated, MODEL, resolve(MODEL), HERE, 10)
    assert (path / "netmodel.json").is_file() and path.is_relative_to(tmp_path / "c")
    got = cache.find(MODEL, resolve(MODEL), replace(HERE, threads=2, torch="x"))  # same kind
    assert got is not None and got.path == path and got.networks == 10
    assert cache.find(MODEL, resolve(MODEL), replace(HERE, kernels="AVX512")) is None  # another kind
    nm = load(calibrated)
    nm.coverage = 0.8
    other = nm.save(tmp_path / "other")
    assert cache.find(MODEL, other, HERE) is None  # another source model (by its content)
    assert cache.find(MODEL, resolve(MODEL), replace(HERE, isa=None)) is None  # unknown: never a match


def test_a_broken_or_foreign_entry_warns_once_and_is_never_loaded(calibrated, monkeypatch, tmp_path):
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "c"))
    path = cache.store(calibrated, MODEL, resolve(MODEL), HERE, 10)
    entry = path.parent / "entry.json"
    doc = json.loads(entry.read_text())
    for bad, why in (
        ("{not json", "not valid JSON"),
        (json.dumps({**doc, "format": "other/1"}), "format"),
        (json.dumps({**doc, "machine": {**doc["machine"], "kernels": "AVX512"}}), "another machine kind"),
    ):
        entry.write_text(bad)
        with pytest.warns(UserWarning, match=why) as rec:
            assert cache.find(MODEL, resolve(MODEL), HERE) is None
        assert len(rec) == 1 and "\n" not in str(rec[0].message)
    entry.write_text(json.dumps(doc))
    (path / "netmodel.json").write_text("{")  # a corrupted model
    with pytest.warns(UserWarning, match="calibration cache: ignoring"):
        assert cache.find(MODEL, resolve(MODEL), HERE) is None


def test_the_cache_directory_follows_carb_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "calibrations"


def test_list_models_shows_the_shipped_models_and_each_kept_calibration(calibrated, monkeypatch, tmp_path):
    import carb

    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "c"))
    shipped = {m.name for m in carb.list_models() if m.where == "shipped"}
    assert MODEL in shipped and all(m.where == "shipped" for m in carb.list_models())
    path = cache.store(calibrated, MODEL, resolve(MODEL), HERE, 10)
    kept = [m for m in carb.list_models() if m.where == "cache"]
    assert len(kept) == 1 and kept[0].path == path and kept[0].source == MODEL and kept[0].kind == "network"
    assert kept[0].machine == HERE.describe()
    assert carb.load_model(kept[0].name) is not None  # each listed model loads by the name listed
