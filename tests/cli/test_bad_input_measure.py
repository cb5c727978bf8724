"""Bad input to the commands that measure — `carb characterize`, `calibrate`, `validate` and `demo` — is refused
before anything is measured: one line ``error: ...`` naming the value or the path, exit code 2, no traceback,
no store or output written (the in-process ``cli`` fixture)."""

import os

import pytest

from tests.cli._probe import case_id, probe

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
TOO_MANY = str(CPUS + 1)

CHAR = ["characterize", "--space", "tiny", "--store", "{tmp}/s.duckdb"]
CASES = [
    (["characterize", "--space", "tiny"], ("--store",)),
    (["characterize", "--store", "{tmp}/s.duckdb"], ("exactly one of --space or --configs",)),
    (["characterize", "--space", "tiny", "--configs", "{tmp}/w.csv", "--store", "{tmp}/s.duckdb"], ("exactly one",)),
    (["characterize", "--space", "nope", "--store", "{tmp}/s.duckdb"], ("nope", "no such space")),
    (["characterize", "--configs", "{tmp}/missing.csv", "--store", "{tmp}/s.duckdb"], ("missing.csv",)),
    (["characterize", "--configs", "{tmp}/empty.csv", "--store", "{tmp}/s.duckdb"], ("empty.csv",)),
    (["characterize", "--configs", "{tmp}/notes.txt", "--store", "{tmp}/s.duckdb"], ("notes.txt",)),
    (["characterize", "--configs", "{tmp}/junk.parquet", "--store", "{tmp}/s.duckdb"], ("junk.parquet",)),
    (["characterize", "--configs", "{tmp}/w.csv", "--store", "{tmp}/s.duckdb"], ("missing columns",)),
    (["characterize", "--configs", "{tmp}/inf.csv", "--store", "{tmp}/s.duckdb"], ("row 1", "width")),
    (["characterize", "--configs", "{tmp}/ids.csv", "--store", "{tmp}/s.duckdb"], ("deadbeefdeadbeef",)),
    (["characterize", "--configs", "{tmp}/w.csv", "--samples", "2", "--store", "{tmp}/s.duckdb"], ("w.csv",)),
    ([*CHAR, "--samples", "0"], ("--samples",)),
    ([*CHAR, "--samples", "many"], ("--samples",)),
    ([*CHAR, "--method", "sobol"], ("sobol",)),
    ([*CHAR, "--device", "tpu"], ("tpu",)),
    ([*CHAR, "--device", "cuda:99"], ("cuda",)),
    ([*CHAR, "--threads", "0"], ("--threads",)),
    ([*CHAR, "--threads", TOO_MANY], (f"--threads {TOO_MANY}", "--oversubscribe")),
    ([*CHAR, "--threads", "2", "--device", "cuda"], ("--threads applies to --device cpu only",)),
    ([*CHAR, "--executor", "dask"], ("dask",)),
    ([*CHAR, "--address", "auto"], ("--address",)),
    ([*CHAR, "--workers", "2"], ("--workers",)),
    ([*CHAR, "--allocator", "jemalloc"], ("jemalloc",)),
    ([*CHAR, "--allocator", "retain", "--device", "cuda"], ("--allocator applies to --device cpu only",)),
    ([*CHAR, "--energy-periods", "5"], ("--energy-periods",)),
    ([*CHAR, "--energy-periods", "1"], ("--energy-periods",)),
    ([*CHAR, "--ci-target", "-1"], ("--ci-target",)),
    ([*CHAR, "--max-time", "-1"], ("--max-time",)),
    ([*CHAR, "--timeout", "0"], ("--timeout",)),
    ([*CHAR, "--rounds", "0"], ("--rounds",)),
    ([*CHAR, "--rounds", "1", "--retakes", "2"], ("--retakes",)),
    ([*CHAR, "--retakes", "-1"], ("--retakes",)),
    ([*CHAR, "--chunk", "0"], ("--chunk",)),
    ([*CHAR, "--seed", "x"], ("--seed",)),
    ([*CHAR, "--nope"], ("--nope",)),
    (["characterize", "--space", "tiny", "--store", "{tmp}/adir"], ("adir", "is a directory")),
    (["characterize", "--space", "tiny", "--store", "{tmp}/afile/s.duckdb"], ("afile is a file",)),
    (["characterize", "--space", "tiny", "--store", "{tmp}/foreign.duckdb"], ("foreign.duckdb", "not a CARB store")),
    (["characterize", "--space", "tiny", "--store", "{tmp}/notdb.duckdb"], ("notdb.duckdb",)),
    (["characterize", "--space", "tiny", "--store", "{tmp}/" + "s" * 300], ("bytes, above the 255",)),
    (["calibrate", "--out", "{out}"], ("--model",)),
    (["calibrate", "--model", "{bundle}"], ("--out",)),
    (["calibrate", "--model", "{tmp}/missing", "--out", "{out}"], ("missing",)),
    (["calibrate", "--model", "{tmp}/notmodel", "--out", "{out}"], ("notmodel",)),
    (["calibrate", "--model", "{tmp}/afile", "--out", "{out}"], ("afile",)),
    (["calibrate", "--model", "{bundle}", "--out", "{bundle}"], ("--out",)),
    (["calibrate", "--model", "{bundle}", "--out", "{bundle}/inside"], ("--out",)),
    (["calibrate", "--model", "{bundle}", "--out", "{tmp}/afile"], ("afile", "is a file")),
    (["calibrate", "--model", "{bundle}", "--out", "{tmp}/" + "c" * 300], ("bytes, above the 255",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--samples", "1"], ("--samples",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--method", "magic"], ("magic",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--space", "nope"], ("nope",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--precision", "fp8"], ("fp8",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--networks", "{tmp}/nets2.txt"], ("--networks",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--device", "tpu"], ("tpu",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--threads", TOO_MANY], (f"--threads {TOO_MANY}",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--max-time", "0"], ("--max-time",)),
    (["calibrate", "--model", "{bundle}", "--out", "{out}", "--rounds", "0"], ("--rounds",)),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--samples", "2"], ("--samples 2", "3")),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--method", "nnls"], ("nnls",)),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--precision", "fp32"], ("--precision",)),
    (
        ["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--networks", "{tmp}/nets2.txt"],
        ("2 networks",),
    ),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--networks", "{tmp}/missing.txt"], ("missing",)),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--networks", "{tmp}/badline.txt"], ("line 1",)),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--networks", "{tmp}/badshape.txt"], ("1x4",)),
    (["calibrate", "--model", "layers-cpu-avx2-1t", "--out", "{out}", "--networks", "{tmp}/netexit.txt"], ("(7)",)),
    (["calibrate", "--model", "nope-netmodel", "--out", "{out}"], ("nope-netmodel",)),
    (["validate", "--screen", "{screen}"], ("exactly one of --device or --data",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--data", "cpu-1t"], ("exactly one",)),
    (["validate", "--device", "cpu"], ("--screen",)),
    (["validate", "--screen", "{tmp}/missing", "--data", "cpu-1t"], ("missing",)),
    (["validate", "--screen", "{tmp}/notmodel", "--data", "cpu-1t"], ("notmodel", "carb screen")),
    (["validate", "--screen", "{tmp}/afile", "--data", "cpu-1t"], ("afile",)),
    (["validate", "--screen", "{screen}", "--data", "nope"], ("nope",)),
    (["validate", "--screen", "{screen}", "--data", "{tmp}/junk.parquet"], ("junk.parquet",)),
    (["validate", "--screen", "{screen}", "--data", "cpu-1t", "--platform", "nope"], ("nope",)),
    (["validate", "--screen", "{screen}", "--device", "tpu"], ("tpu",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--threads", TOO_MANY], (f"--threads {TOO_MANY}",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--limit", "0"], ("--limit",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--control", "-1"], ("--control",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--measure-limit", "0"], ("--measure-limit",)),
    (["validate", "--screen", "{screen}", "--device", "cpu", "--max-time", "0"], ("--max-time",)),
    (["demo", "--out", "{out}", "--device", "tpu"], ("tpu",)),
    (["demo", "--out", "{out}", "--device", "cuda", "--threads", "2"], ("--threads applies",)),
    (["demo", "--out", "{out}", "--threads", TOO_MANY], (f"--threads {TOO_MANY}",)),
    (["demo", "--out", "{out}", "--samples", "1"], ("--samples",)),
    (["demo", "--out", "{out}", "--validate", "0"], ("--validate",)),
    (["demo", "--out", "{out}", "--control", "-1"], ("--control",)),
    (["demo", "--out", "{out}", "--max-time", "0"], ("--max-time",)),
    (["demo", "--out", "{out}", "--rounds", "0"], ("--rounds",)),
    (["demo", "--out", "{out}", "--retakes", "-1"], ("--retakes",)),
    (["demo", "--out", "{out}", "--budget", "latency_ms"], ("latency_ms",)),
    (["demo", "--out", "{out}", "--budget", "speed=5"], ("speed",)),
    (["demo", "--out", "{out}", "--precision", "fp8"], ("fp8",)),
    (["demo", "--out", "{out}", "--source", "nope"], ("nope",)),
    (["demo", "--out", "{out}", "--source", "{tmp}/junk.parquet"], ("junk.parquet",)),
    (["demo", "--out", "{tmp}/afile"], ("afile", "is a file")),
    (["demo", "--out", "{tmp}/afile/d"], ("afile is a file",)),
]


@pytest.mark.parametrize("args, words", CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_refused_before_measuring(cli, paths, args, words):
    probe(cli, paths, args, words)


def test_a_foreign_duckdb_file_keeps_its_tables(cli, paths):
    import duckdb

    probe(cli, paths, ["characterize", "--space", "tiny", "--store", "{tmp}/foreign.duckdb"], ("sales",))
    con = duckdb.connect(str(paths["tmp"] / "foreign.duckdb"), read_only=True)
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    assert tables == ["sales"] and con.execute("SELECT * FROM sales").fetchall() == [("north", 1.5)]
    con.close()
