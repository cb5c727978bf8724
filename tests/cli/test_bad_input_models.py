"""Bad input to the commands that fit or use a model — `carb train`, `evaluate`, `predict` and `screen` — is one
line ``error: ...`` naming the value or the path, exit code 2, no traceback, nothing written (the in-process
``cli`` fixture)."""

import pytest

from tests.cli._probe import case_id, probe

TRAIN = ["train", "--data", "cpu-1t", "--out", "{out}"]
EVAL = ["evaluate", "--data", "cpu-1t"]
PRED = ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{out}.csv"]
MOD = ["predict", "--module", "{tmp}/nets.py:small", "--input", "1x3x32x32"]
SCREEN = ["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{out}"]

CASES = [
    (["train", "--out", "{out}"], ("--data",)),
    (["train", "--data", "cpu-1t"], ("--out",)),
    (["train", "--data", "nope", "--out", "{out}"], ("nope",)),
    (["train", "--data", "{tmp}/missing.parquet", "--out", "{out}"], ("missing.parquet",)),
    (["train", "--data", "{tmp}/notes.txt", "--out", "{out}"], ("notes.txt",)),
    (["train", "--data", "{tmp}/junk.parquet", "--out", "{out}"], ("junk.parquet",)),
    (["train", "--data", "{tmp}/empty.csv", "--out", "{out}"], ("empty.csv",)),
    (["train", "--data", "{tmp}/w.csv", "--out", "{out}"], ("w.csv",)),
    (["train", "--data", "{tmp}/one.csv", "--out", "{out}"], ("one.csv",)),
    ([*TRAIN, "--preset", "magic"], ("--preset magic",)),
    ([*TRAIN, "--coverage", "0"], ("--coverage 0",)),
    ([*TRAIN, "--coverage", "1.5"], ("--coverage 1.5",)),
    ([*TRAIN, "--coverage", "nan"], ("--coverage nan",)),
    ([*TRAIN, "--holdout", "0.9"], ("--holdout",)),
    ([*TRAIN, "--holdout", "-0.1"], ("--holdout",)),
    ([*TRAIN, "--jobs", "0"], ("--jobs",)),
    ([*TRAIN, "--latency", "fast"], ("--latency fast",)),
    ([*TRAIN, "--prior", "{tmp}/missing"], ("missing",)),
    ([*TRAIN, "--prior", "{tmp}/notmodel"], ("notmodel",)),
    ([*TRAIN, "--platform", "nope"], ("nope",)),
    ([*TRAIN, "--seed", "x"], ("--seed",)),
    (["train", "--data", "cpu-1t", "--out", "{tmp}/afile"], ("afile", "is a file")),
    (["train", "--data", "cpu-1t", "--out", "{tmp}/afile/m"], ("afile is a file",)),
    (["train", "--data", "cpu-1t", "--out", "{tmp}/notmodel"], ("notmodel", "not a CARB model bundle")),
    (["train", "--data", "cpu-1t", "--out", "{bundle}"], ("--force",)),
    (["train", "--data", "cpu-1t", "--out", "{tmp}/" + "m" * 300], ("bytes, above the 255",)),
    (["evaluate"], ("--data",)),
    (["evaluate", "--data", "nope"], ("nope",)),
    (["evaluate", "--data", "{tmp}/junk.parquet"], ("junk.parquet",)),
    (["evaluate", "--data", "{tmp}/notes.txt"], ("notes.txt",)),
    ([*EVAL, "--split", "sideways"], ("--split sideways",)),
    ([*EVAL, "--preset", "magic"], ("--preset magic",)),
    ([*EVAL, "--json", "{tmp}/adir"], ("adir",)),
    ([*EVAL, "--json", "{tmp}/afile/r.json"], ("afile is a file",)),
    ([*EVAL, "--budget", "latency_ms"], ("latency_ms",)),
    ([*EVAL, "--budget", "speed=1"], ("speed",)),
    ([*EVAL, "--budget", "energy_j=1"], ("energy_j",)),
    ([*EVAL, "--model", "{tmp}/missing"], ("missing",)),
    ([*EVAL, "--model", "{tmp}/notmodel"], ("notmodel",)),
    ([*EVAL, "--model", "{bundle}", "--preset", "fast"], ("not both",)),
    ([*EVAL, "--coverage", "2"], ("--coverage 2",)),
    ([*EVAL, "--platform", "nope"], ("nope",)),
    ([*EVAL, "--latency", "fast"], ("--latency fast",)),
    ([*EVAL, "--jobs", "0"], ("--jobs",)),
    ([*EVAL, "--prior", "{tmp}/missing"], ("missing",)),
    (["predict", "--model", "{bundle}", "--out", "{out}.csv"], ("--space", "--configs")),
    (["predict", "--model", "{bundle}", "--space", "tiny"], ("--out",)),
    (["predict", "--model", "{tmp}/missing", "--space", "tiny", "--out", "{out}.csv"], ("missing",)),
    (["predict", "--model", "{tmp}/notmodel", "--space", "tiny", "--out", "{out}.csv"], ("notmodel",)),
    (["predict", "--model", "{bundle}", "--space", "nope", "--out", "{out}.csv"], ("nope",)),
    (["predict", "--model", "{bundle}", "--configs", "{tmp}/missing.csv", "--out", "{out}.csv"], ("missing.csv",)),
    (["predict", "--model", "{bundle}", "--configs", "{tmp}/w.csv", "--out", "{out}.csv"], ("missing columns",)),
    (["predict", "--model", "{bundle}", "--configs", "{tmp}/inf.csv", "--out", "{out}.csv"], ("row 1",)),
    (["predict", "--model", "{bundle}", "--configs", "{tmp}/ids.csv", "--out", "{out}.csv"], ("deadbeefdeadbeef",)),
    (["predict", "--model", "{bundle}", "--configs", "{tmp}/junk.parquet", "--out", "{out}.csv"], ("junk.parquet",)),
    ([*PRED[:-2], "--out", "{out}.xlsx"], ("out.xlsx",)),
    ([*PRED[:-2], "--out", "{tmp}/adir"], ("adir",)),
    ([*PRED[:-2], "--out", "{long}"], ("bytes, above the 255",)),
    ([*PRED, "--jobs", "0"], ("--jobs",)),
    ([*PRED, "--calibrate"], ("--calibrate",)),
    ([*MOD, "--onnx", "{tmp}/junk.onnx"], ("--module or --onnx",)),
    (["predict", "--module", "{tmp}/nets.py:small"], ("--input",)),
    ([*MOD, "--space", "tiny"], ("--module",)),
    (["predict", "--module", "nocolon", "--input", "1x3x32x32"], ("nocolon",)),
    (["predict", "--module", "{tmp}/nofile.py:f", "--input", "1x3x32x32"], ("nofile.py",)),
    (["predict", "--module", "no_such_package_xyz:f", "--input", "1x3x32x32"], ("no_such_package_xyz",)),
    (["predict", "--module", "{tmp}/nets.py:missing", "--input", "1x3x32x32"], ("missing",)),
    (["predict", "--module", "{tmp}/nets.py:NOT_CALLABLE", "--input", "1x3x32x32"], ("NOT_CALLABLE",)),
    (["predict", "--module", "{tmp}/nets.py:not_a_module", "--input", "1x3x32x32"], ("not_a_module",)),
    (["predict", "--module", "{tmp}/nets.py:fails", "--input", "1x3x32x32"], ("fails", "no weights here")),
    (["predict", "--module", "{tmp}/nets.py:exits", "--input", "1x3x32x32"], ("exits", "SystemExit(7)")),
    (["predict", "--module", "{tmp}/exit_at_import.py:f", "--input", "1x3x32x32"], ("exit_at_import", "(5)")),
    (["predict", "--module", "{tmp}/nets.py:ExitsInForward", "--input", "1x3x32x32"], ("SystemExit(3)",)),
    (["predict", "--module", "{tmp}/notes.txt:f", "--input", "1x3x32x32"], ("notes.txt",)),
    (["predict", "--module", "{tmp}/nets.py:small", "--input", "0x3x32x32"], ("0x3x32x32",)),
    (["predict", "--module", "{tmp}/nets.py:small", "--input", "axbxc"], ("axbxc",)),
    (["predict", "--module", "{tmp}/nets.py:small", "--input", "1x3x32x32x"], ("1x3x32x32x",)),
    (
        ["predict", "--module", "{tmp}/nets.py:small", "--input", "99999999999x3x224x224"],
        ("99999999999x3x224x224", "more than this machine's memory"),
    ),
    (["predict", "--module", "{tmp}/nets.py:small", "--input", "99999999999999999999x3x224x224"], ("64-bit",)),
    (
        ["predict", "--module", "{tmp}/nets.py:small", "--input", "1x4x32x32"],
        ("example input 1x4x32x32", "the first layer (Conv2d '0') expects 3 input channels"),
    ),
    ([*MOD, "--precision", "fp8"], ("fp8",)),
    ([*MOD, "--json", "{out}.txt"], ("out.txt",)),
    ([*MOD, "--top", "0"], ("--top",)),
    ([*MOD, "--model", "nope-netmodel"], ("nope-netmodel",)),
    ([*MOD, "--model", "{tmp}/notmodel"], ("notmodel",)),
    (["predict", "--onnx", "{tmp}/notes.txt", "--input", "1x3x32x32"], ("notes.txt",)),
    (["predict", "--onnx", "{tmp}/missing.onnx", "--input", "1x3x32x32"], ("missing.onnx",)),
    (["predict", "--onnx", "{tmp}/junk.onnx", "--input", "1x3x32x32"], ("junk.onnx",)),
    (["screen", "--space", "tiny", "--out", "{out}"], ("--target-model",)),
    (["screen", "--space", "tiny", "--target-model", "{tmp}/missing", "--out", "{out}"], ("missing",)),
    (["screen", "--space", "tiny", "--target-model", "{tmp}/afile", "--out", "{out}"], ("afile",)),
    (["screen", "--space", "tiny", "--target-model", "{tmp}/notmodel", "--out", "{out}"], ("notmodel",)),
    (["screen", "--space", "nope", "--target-model", "{bundle}", "--out", "{out}"], ("nope",)),
    ([*SCREEN, "--source-model", "{tmp}/missing"], ("missing",)),
    ([*SCREEN, "--budget", "latency_ms"], ("latency_ms",)),
    ([*SCREEN, "--budget", "speed=5"], ("speed",)),
    ([*SCREEN, "--budget", "latency_ms=fast"], ("fast",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--budget", "latency_ms=7"], ("given twice",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--margin", "-1"], ("--margin -1",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--shortlist-share", "0"], ("--shortlist-share 0",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--shortlist-share", "2"], ("--shortlist-share 2",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--objective", "best:latency_ms"], ("best:latency_ms",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--objective", "min:"], ("min:",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--objective", "min:colour"], ("colour",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--precision", "fp8"], ("fp8",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--risk", "yolo"], ("yolo",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--confidence", "2"], ("confidence 2",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--rule", "guess"], ("guess",)),
    ([*SCREEN, "--budget", "latency_ms=5", "--max-shortlist", "0"], ("--max-shortlist",)),
    (["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{tmp}/afile"], ("afile", "is a file")),
    (["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{tmp}/afile/o"], ("afile is a file",)),
]


@pytest.mark.parametrize("args, words", CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line(cli, paths, args, words):
    probe(cli, paths, args, words)


def test_user_code_interrupting_is_one_line_and_exit_130(cli, paths):
    args = ["predict", "--module", "{tmp}/nets.py:interrupts", "--input", "1x3x32x32"]
    probe(cli, paths, args, ("interrupts", "KeyboardInterrupt"), code=130)
