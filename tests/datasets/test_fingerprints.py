"""Where data were measured: the shipped datasets' machines, recorded into the models trained on them."""

from __future__ import annotations

import json

from carb import datasets
from carb.measure.fingerprint import compare


def test_every_shipped_measured_dataset_names_its_machine():
    for name in (
        "cpu-1t",
        "cpu-2t",
        "cpu-avx2-1t",
        "cpu-avx2-2t",
        "layers-cpu-1t",
        "layers-cpu-avx2-1t",
        "layers-cpu-epyc512-1t",
        "h200",
    ):
        fp = datasets.fingerprint(name)
        assert fp is not None and fp.name and fp.source.startswith("carb/data/"), name
    assert datasets.fingerprint("cpu-avx2-1t").kernels == "AVX2"
    assert not datasets.fingerprint("cpu-1t").known  # its store did not record the CPU's flags: unknown
    assert datasets.fingerprint("h200").device == "cuda"
    assert datasets.fingerprint("nb201") is None and datasets.fingerprint("some.parquet") is None


def test_a_trained_bundle_records_the_machine_and_predict_names_it(cli, tmp_path):
    code, out, err = cli("train", "--data", "cpu-avx2-2t", "--preset", "fast", "--out", tmp_path / "m")
    assert code == 0, err
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    fp = man["training"]["fingerprint"]
    assert compare(datasets.fingerprint("cpu-avx2-2t"), datasets.fingerprint("cpu-avx2-2t")).same_kind
    assert fp["kernels"] == "AVX2" and fp["threads"] == 2
    code, out, err = cli("predict", "--model", tmp_path / "m", "--space", "cpu", "--out", tmp_path / "p.parquet")
    assert code == 0, err
    assert "priced for AMD EPYC, AVX2 kernels, no native bf16/fp16" in out
