"""Bad input to `carb space`, `carb dataset`, `carb report` and `carb fewshot`: one line ``error: ...`` naming the
value or the path, exit code 2, no traceback, nothing written (the in-process ``cli`` fixture)."""

import pytest

from tests.cli._probe import case_id, probe

SPACE_FILES = {
    "syntax": "[[grid]\ndepth = [20]\n",
    "unknown_key": "colour = 'red'\n[[grid]]\ndepth = [20]\n",
    "unknown_parameter": "[[grid]]\nheight = [20]\n",
    "empty_values": "[[grid]]\ndepth = []\n",
    "string_depth": '[[grid]]\ndepth = ["deep"]\n',
    "zero_batch": "[[grid]]\nbatch = [0]\n",
    "negative_batch": "[[grid]]\nbatch = [-1]\n",
    "fp8": '[[grid]]\nprecision = ["fp8"]\n',
    "fractional_size": "[[grid]]\ninput_size = [1.5]\n",
    "no_grid": "name = 'x'\n",
    "huge_string": "constraints = [\"'a' * (2**34) == 'b'\"]\n[[grid]]\ndepth = [20]\n",
    "huge_string_left": "constraints = [\"(2**34) * 'a' == 'b'\"]\n[[grid]]\ndepth = [20]\n",
    "huge_tuple": "constraints = [\"('a',) * 10**9 == 1\"]\n[[grid]]\ndepth = [20]\n",
    "huge_power": 'constraints = ["(2**256)**256 > 1"]\n[[grid]]\ndepth = [20]\n',
    "huge_product": 'constraints = ["(2**255 * 2**255 * 2**255) ** 100 > 1"]\n[[grid]]\ndepth = [20]\n',
    "format": "constraints = [\"'%09999999999d' % batch == 'x'\"]\n[[grid]]\ndepth = [20]\n",
    "unknown_name": 'constraints = ["height > 1"]\n[[grid]]\ndepth = [20]\n',
    "lambda": 'constraints = ["(lambda: 1)() == 1"]\n[[grid]]\ndepth = [20]\n',
    "attribute": 'constraints = ["batch.real > 0"]\n[[grid]]\ndepth = [20]\n',
    "call": 'constraints = ["abs(batch) > 0"]\n[[grid]]\ndepth = [20]\n',
    "subscript": 'constraints = ["precision[0] == 1"]\n[[grid]]\ndepth = [20]\n',
    "comprehension": 'constraints = ["[x for x in (1,)] == 1"]\n[[grid]]\ndepth = [20]\n',
    "walrus": 'constraints = ["(y := 1) == 1"]\n[[grid]]\ndepth = [20]\n',
    "excludes_all": 'constraints = ["batch > 10**6"]\n[[grid]]\ndepth = [20]\n',
}

SPACE_WORDS = {
    "syntax": "s.toml",
    "unknown_key": "colour",
    "unknown_parameter": "height",
    "empty_values": "depth",
    "string_depth": "deep",
    "zero_batch": "batch = 0",
    "negative_batch": "batch = -1",
    "fp8": "fp8",
    "fractional_size": "input_size",
    "no_grid": "grid",
    "huge_string": "above the limit",
    "huge_string_left": "above the limit",
    "huge_tuple": "above the limit",
    "huge_power": "above the limit",
    "huge_product": "above the limit",
    "format": "string formatting",
    "unknown_name": "height",
    "lambda": "not allowed",
    "attribute": "Attribute",
    "call": "Call",
    "subscript": "Subscript",
    "comprehension": "ListComp",
    "walrus": "NamedExpr",
    "excludes_all": "empty",
}


@pytest.mark.parametrize("name", list(SPACE_FILES))
def test_a_bad_space_file_is_one_line_naming_it(cli, paths, name):
    f = paths["tmp"] / "s.toml"
    f.write_text(SPACE_FILES[name])
    probe(cli, paths, ["space", "show", str(f)], (str(f), SPACE_WORDS[name]))
    probe(cli, paths, ["predict", "--model", "{bundle}", "--space", str(f), "--out", "{out}.csv"], (str(f),))


CASES = [
    (["space", "show", "nope"], ("nope", "no such space")),
    (["space", "show", "{tmp}/missing.toml"], ("missing.toml",)),
    (["space", "show", "{tmp}/adir"], ("adir",)),
    (["space", "show", "{tmp}/junk.parquet"], ("junk.parquet",)),
    (["space", "show"], ("Missing argument",)),
    (["space", "list", "--nope"], ("--nope",)),
    (["dataset", "info", "--store", "{tmp}/missing.duckdb"], ("missing.duckdb", "no such store")),
    (["dataset", "info", "--store", "{tmp}/notdb.duckdb"], ("notdb.duckdb",)),
    (["dataset", "info", "--store", "{tmp}/adir"], ("adir",)),
    (["dataset", "info", "--store", "{tmp}/foreign.duckdb"], ("foreign.duckdb", "not a CARB store")),
    (["dataset", "info"], ("--store",)),
    (["dataset", "export", "--store", "{tmp}/foreign.duckdb", "--out", "{out}.csv"], ("not a CARB store",)),
    (["dataset", "export", "--store", "{tmp}/notdb.duckdb", "--out", "{out}.csv"], ("notdb.duckdb",)),
    (["dataset", "export", "--store", "{tmp}/missing.duckdb", "--out", "{out}.csv"], ("missing.duckdb",)),
    (["dataset", "export", "--store", "{store}", "--out", "{out}.xlsx"], ("out.xlsx", "unknown output type")),
    (["dataset", "export", "--store", "{store}", "--out", "{tmp}/adir"], ("adir",)),
    (["dataset", "export", "--store", "{store}", "--out", "{tmp}/afile/d.csv"], ("afile is a file",)),
    (["dataset", "export", "--store", "{store}", "--out", "{long}"], ("bytes, above the 255",)),
    (["dataset", "export", "--store", "{store}", "--out", "{out}.csv", "--platform", "nope"], ("nope",)),
    (["dataset", "export", "--store", "{store}"], ("--out",)),
    (["dataset", "check", "nope"], ("nope",)),
    (["dataset", "check", "{tmp}/notes.txt"], ("notes.txt",)),
    (["dataset", "check", "{tmp}/junk.parquet"], ("junk.parquet",)),
    (["dataset", "check", "{tmp}/empty.csv"], ("empty.csv",)),
    (["dataset", "nope"], ("nope",)),
    (["report", "--data", "nope", "--out", "{out}"], ("nope",)),
    (["report", "--data", "{tmp}/junk.parquet", "--out", "{out}"], ("junk.parquet",)),
    (["report", "--data", "{tmp}/notes.txt", "--out", "{out}"], ("notes.txt",)),
    (["report", "--data", "{tmp}/empty.csv", "--out", "{out}"], ("empty.csv",)),
    (["report", "--data", "cpu-1t", "--holdout", "0", "--out", "{out}"], ("--holdout 0",)),
    (["report", "--data", "cpu-1t", "--holdout", "1", "--out", "{out}"], ("--holdout 1",)),
    (["report", "--data", "cpu-1t", "--holdout", "nan", "--out", "{out}"], ("--holdout nan",)),
    (["report", "--data", "cpu-1t", "--model", "{tmp}/missing", "--out", "{out}"], ("missing", "no such folder")),
    (["report", "--data", "cpu-1t", "--model", "{tmp}/notmodel", "--out", "{out}"], ("notmodel",)),
    (["report", "--data", "cpu-1t", "--screen", "{tmp}/missing", "--out", "{out}"], ("missing", "no such folder")),
    (["report", "--data", "cpu-1t", "--screen", "{tmp}/notmodel", "--out", "{out}"], ("notmodel", "carb screen")),
    (["report", "--data", "cpu-1t", "--out", "{tmp}/afile"], ("afile", "is a file")),
    (["report", "--data", "cpu-1t", "--out", "{tmp}/afile/r"], ("afile is a file",)),
    (["report", "--data", "cpu-1t", "--out", "{tmp}/" + "r" * 300], ("bytes, above the 255",)),
    (["report", "--out", "{out}"], ("--data",)),
    (["fewshot", "--platform", "nope"], ("nope",)),
    (["fewshot"], ("--data or --platform",)),
    (["fewshot", "--data", "{tmp}/missing.csv"], ("missing.csv",)),
    (["fewshot", "--data", "{tmp}/noarch.csv"], ("noarch.csv", "arch_id")),
    (["fewshot", "--data", "{tmp}/nolatency.csv"], ("nolatency.csv", "latency_ms")),
    (["fewshot", "--data", "{tmp}/notes.txt"], ("notes.txt",)),
    (["fewshot", "--data", "{tmp}/noarch.csv", "--platform", "x"], ("exactly one of --data or --platform",)),
    (["fewshot", "--platform", "pixel3", "--samples", "1"], ("--samples",)),
    (["fewshot", "--platform", "pixel3", "--method", "magic"], ("magic",)),
    (["fewshot", "--platform", "pixel3", "--space", "imagenet"], ("imagenet",)),
    (["fewshot", "--platform", "pixel3", "--out", "{out}.txt"], ("out.txt",)),
    (["fewshot", "--platform", "pixel3", "--source", "nope"], ("nope",)),
]


@pytest.mark.parametrize("args, words", CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line(cli, paths, args, words):
    probe(cli, paths, args, words)
