"""The machine fingerprint: read here, from provenance, compared fact by fact; unknown never matches."""

from __future__ import annotations

import json

from carb.measure.fingerprint import Fingerprint, compare, from_provenance, here

AVX2 = Fingerprint(device="cpu", name="AMD EPYC", isa=("avx2",), kernels="AVX2", native=(), threads=1)
AVX512 = Fingerprint(
    device="cpu", name="AMD EPYC", isa=("avx2", "avx512_bf16", "avx512f"), kernels="AVX512", native=("bf16",)
)


def test_here_reads_this_machine_and_survives_json():
    fp = here()
    assert fp.device == "cpu" and fp.source == "this machine"
    back = Fingerprint.from_dict(json.loads(json.dumps(fp.to_dict())))
    assert back == fp
    assert compare(back, fp).same_kind == fp.known


def test_another_kind_is_named_by_what_differs():
    c = compare(AVX2, AVX512)
    assert not c.same_kind
    assert any(d.startswith("kernels AVX2 there, AVX512 here") for d in c.differences)
    line = c.line("carb calibrate --model M --out D")
    assert line.startswith("another kind of machine") and "AVX2 kernels, no native bf16/fp16" in line
    assert line.endswith("To fit it here: carb calibrate --model M --out D")
    # the kernels differ: the line names them (AVX2 / AVX512) and does not repeat the CPU flags; one line
    assert "AVX512 kernels" in line and "CPU flags" not in line and "avx512f" not in line and "\n" not in line
    assert line.count("To fit it here") == 1


def test_the_cpu_flags_are_said_where_the_kernels_do_not_differ():
    from dataclasses import replace

    no_bf16 = replace(AVX512, isa=("avx2", "avx512f"))  # same kernels and native set: only the flags differ
    line = compare(no_bf16, AVX512).line("FIX")
    assert "(CPU flags avx2, avx512f there, avx2, avx512_bf16, avx512f here)" in line
    # a fact unknown on one side is always said, with the flags
    hidden = replace(AVX512, kernels=None)
    line = compare(AVX2, hidden).line("FIX")
    assert "kernels unknown here" in line and "CPU flags avx2 there" in line


def test_threads_and_torch_do_not_decide_the_kind():
    from dataclasses import replace

    assert compare(AVX512, replace(AVX512, threads=2, torch="9.9")).same_kind


def test_unknown_facts_never_match():
    hidden = Fingerprint(device="cpu", name=None, isa=None, kernels=None, native=None)  # /proc/cpuinfo hidden
    assert not compare(hidden, hidden).same_kind
    assert not compare(None, AVX512).same_kind
    assert compare(None, AVX512).differences == ("the model records no machine",)
    assert not hidden.known and hidden.key() != AVX512.key()


def test_foreign_values_read_as_unknown():
    fp = Fingerprint.from_dict({"device": "cpu", "name": 3, "isa": "avx2", "threads": True, "native": [1]})
    assert fp.name is None and fp.isa is None and fp.threads is None and fp.native is None
    assert Fingerprint.from_dict(["not", "a", "mapping"]).source == "unreadable"


def test_from_provenance_of_a_cpu_and_a_gpu_campaign():
    cpu = from_provenance(
        {
            "device": "cpu",
            "cpu_model": "AMD EPYC",
            "cpu_isa": {"flags": ["avx2"], "torch_capability": "AVX2", "native": {"bf16": False, "fp16": False}},
            "threads": 1,
            "torch": "2.13.0+cpu",
            "allocator": "retain",
        }
    )
    assert compare(cpu, AVX2).same_kind and cpu.allocator == "retain"
    gpu = from_provenance(
        {"device": "cuda:0", "gpu_name": "NVIDIA H200", "compute_capability": [9, 0], "driver": "580.1"}
    )
    assert gpu.device == "cuda" and gpu.kernels == "9.0" and gpu.driver == "580.1"
    assert "NVIDIA H200" in gpu.describe() and not compare(gpu, AVX2).same_kind
