"""carb demo on a CPU without native kernels for a precision of its space (synthetic
measurements through the real pipeline; the CPU's flags are faked)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import carb.measure
from carb import demo
from carb.families import space


def _isa(bf16: bool):
    return lambda: {"flags": ["avx2"] + (["avx512_bf16"] if bf16 else []), "torch_capability": "AVX2",
                    "native": {"bf16": bf16, "fp16": False}}


def test_foreign_precisions_reads_the_cpu() -> None:
    from carb.measure import foreign_precisions

    assert foreign_precisions("cpu", ["bf16", "fp32"], _isa(False)()) == ["bf16"]
    assert foreign_precisions("cuda:0", ["bf16", "fp32"], _isa(False)()) == []  # GPUs: not judged by CPU flags
    assert foreign_precisions("cpu", ["bf16", "fp32"], _isa(True)()) == []
    unread = {"flags": None, "torch_capability": None, "native": None}
    assert foreign_precisions("cpu", ["bf16", "fp32"], unread) == []  # unreadable flags: leave the space whole


def test_cpu_isa_is_recorded_in_provenance() -> None:
    from carb.measure._common import host_facts

    isa = host_facts()["cpu_isa"]
    assert set(isa) == {"flags", "torch_capability", "native"}
    if isa["flags"] is not None:  # a Linux /proc/cpuinfo
        assert isa["native"]["bf16"] == any(f in isa["flags"] for f in ("avx512_bf16", "amx_bf16", "avx_ne_convert"))


def test_demo_leaves_out_a_precision_the_cpu_runs_on_fallback_kernels(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))
    seen: list[set] = []

    def measure(frame, what):
        f = frame.reset_index(drop=True)
        seen.append(set(f["precision"]))
        lat = 0.5 + f["batch"].to_numpy(float) * f["depth"].to_numpy(float) * 0.1  # synthetic costs
        return f.assign(status="ok", latency_ms=lat, memory_mb=30.0 + f["batch"].to_numpy(float), energy_j=np.nan)

    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = demo.run_demo(demo.DemoSettings(out=tmp_path / "d", samples=6, validate=3, control=3), measure,
                          say=said.append)
    assert len(seen) == 2 and all(p == {"fp32"} for p in seen)  # calibration and validation: no bf16 measured
    why = s["precisions_left_out"]["bf16"]
    assert "no native bf16" in why and "median" in why  # with cpu-1t's own bf16 / fp32 ratio
    assert any(m.startswith("cpu space without bf16") for m in said)
    space_fp32 = int((space.load("cpu").to_frame()["precision"] == "fp32").sum())
    assert s["screening"]["candidates"] == space_fp32
    assert set(pd.read_csv(tmp_path / "d" / "shortlist.csv")["precision"]) == {"fp32"}
    assert s["source_dataset"] == "cpu-1t"  # the default source


def test_demo_source_setting_trains_on_that_dataset(tmp_path, monkeypatch) -> None:
    # cpu-avx2-1t was measured on a CPU of this kind (AVX2, no native bf16): its source model is
    # trained on its 592 rows, at their campaign's median speed (the paired sentinel's rows)
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))

    def measure(frame, what):
        f = frame.reset_index(drop=True)
        lat = 0.5 + f["batch"].to_numpy(float) * f["depth"].to_numpy(float) * 0.1  # synthetic costs
        return f.assign(status="ok", latency_ms=lat, memory_mb=30.0 + f["batch"].to_numpy(float), energy_j=np.nan)

    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = demo.run_demo(demo.DemoSettings(out=tmp_path / "d", samples=6, validate=3, control=3,
                                            source="cpu-avx2-1t"), measure, say=said.append)
    assert s["source_dataset"] == "cpu-avx2-1t" and s["source_model"]["rows"] == 592
    assert any("trained on 592 configs measured on cpu-avx2-1t (shipped)" in m for m in said), said
    # the source data has no bf16 to compare with: the reason says what the CPU lacks, no ratio
    assert "no native bf16" in s["precisions_left_out"]["bf16"]
    assert "median" not in s["precisions_left_out"]["bf16"]


def test_demo_cli_refuses_an_unknown_source_before_measuring(tmp_path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "carb.cli", "demo", "--out", str(tmp_path / "d"), "--source", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: --source nope: ") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "d" / "demo.duckdb").exists()


def test_demo_precisions_setting_wins(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))
    with pytest.raises(ValueError, match="no config of `cpu` left"):
        demo.run_demo(demo.DemoSettings(out=tmp_path / "d", samples=6, precisions=("fp16",)),
                      lambda f, w: f, say=lambda m: None)


@pytest.mark.parametrize("cpuinfo,native", [
    ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n", {"bf16": False, "fp16": False}),
    ("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n", {"bf16": True, "fp16": False}),
    ("processor\t: 0\nFeatures\t: fp asimd asimdhp bf16 sve\n", {"bf16": True, "fp16": True}),  # Arm
    ("processor\t: 0\n", None),  # no flags line: nothing claimed
])
def test_cpu_isa_from_cpuinfo(monkeypatch, cpuinfo, native) -> None:
    from carb.measure import _common

    monkeypatch.setattr(_common, "read_text", lambda path: cpuinfo if path == "/proc/cpuinfo" else None)
    assert _common.cpu_isa()["native"] == native
