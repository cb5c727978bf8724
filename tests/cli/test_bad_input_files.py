"""Files and data from anyone: JSON and TOML with limits on size and nesting, stores that fetch nothing, targets no
forward pass can have, repeated configs, manifests re-checksummed after an edit, and the user's code ending carb's
process. Each bad case is one line ``error: ...`` and exit code 2 (the in-process ``cli`` fixture); the models are
fitted on SYNTHETIC edits of shipped data."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb import datasets
from carb._safeio import DocumentError, loads_json, loads_toml
from carb.model import evaluation
from tests.cli._probe import case_id, probe

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def deep(paths):
    """Folders whose JSON nests 100,000 levels: a model (``deep``) and a screen output (``deepscreen``)."""
    t = paths["tmp"]
    (t / "deep").mkdir()
    (t / "deep" / "manifest.json").write_text(DEEP)
    shutil.copytree(paths["screen"], t / "deepscreen")
    (t / "deepscreen" / "summary.json").write_text(DEEP)
    (t / "deepnet").mkdir()
    (t / "deepnet" / "netmodel.json").write_text(DEEP)
    return paths


NESTED = [
    (["predict", "--model", "{tmp}/deep", "--space", "tiny", "--out", "{out}.csv"], ("manifest.json", "nested deeper")),
    (["screen", "--space", "tiny", "--target-model", "{tmp}/deep", "--out", "{out}"], ("nested deeper",)),
    (["evaluate", "--data", "cpu-1t", "--model", "{tmp}/deep"], ("nested deeper",)),
    (["validate", "--screen", "{tmp}/deepscreen", "--data", "cpu-1t"], ("summary.json", "nested deeper")),
    (["predict", "--module", "{tmp}/nets.py:small", "--input", "1x3x32x32", "--model", "{tmp}/deepnet"], ("nested",)),
]


@pytest.mark.parametrize("args, words", NESTED, ids=[case_id(c) for c in NESTED])
def test_deeply_nested_json_in_a_folder_is_one_line(cli, deep, args, words):
    probe(cli, deep, args, words)


SPACES = {
    "nested_array": ("x = " + "[" * 5000 + "]" * 5000 + "\n[[grid]]\ndepth = [20]\n", "nested deeper than 32"),
    "nested_table": ("x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n", "nested deeper than 32"),
    "deep_constraint": ('constraints = ["' + "not " * 200 + 'true"]\n[[grid]]\ndepth = [20]\n', "nests deeper"),
    "long_sum": ('constraints = ["' + "+".join(["1"] * 400) + ' > 0"]\n[[grid]]\ndepth = [20]\n', "nests deeper"),
    "long_constraint": ('constraints = ["' + "-" * 100_000 + '1 > 0"]\n[[grid]]\ndepth = [20]\n', "above the limit"),
    "huge_file": ("# " + "x" * 2**21 + "\n[[grid]]\ndepth = [20]\n", "above the limit"),
}


@pytest.mark.parametrize("name", list(SPACES))
def test_a_space_file_beyond_the_limits_is_one_line(cli, paths, name):
    f = paths["tmp"] / "s.toml"
    f.write_text(SPACES[name][0])
    probe(cli, paths, ["space", "show", str(f)], (str(f), SPACES[name][1]))


def test_the_reader_limits_size_and_nesting():
    assert loads_json('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    with pytest.raises(DocumentError, match="nested deeper than 3"):
        loads_json("[[[[1]]]]", max_depth=3)
    with pytest.raises(DocumentError, match="above the limit of 10 bytes"):
        loads_json("[" + "1," * 10 + "1]", "x.json", max_bytes=10)
    with pytest.raises(DocumentError, match="not valid JSON"):
        loads_json("{nope")
    assert loads_toml("a = [[1]]\n") == {"a": [[1]]}
    with pytest.raises(DocumentError, match="nested deeper than 2"):
        loads_toml("a = [[[1]]]\n", max_depth=2)


# -- stores: nothing fetched, nothing loaded --------------------------------------------


def test_an_sqlite_file_as_a_store_fetches_nothing(cli, paths):
    import sqlite3

    f = paths["tmp"] / "x.sqlite"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    export = ["dataset", "export", "--store", str(f), "--out", "{out}.csv"]
    for args in (["dataset", "info", "--store", str(f)], export):
        line = probe(cli, paths, args, ("x.sqlite",))
        assert "download" not in line.lower()


def test_every_connection_loads_no_extension_and_cannot_be_changed(tmp_path):
    import duckdb

    from carb.campaign.store import connect

    con = connect(tmp_path / "a.duckdb")
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('autoinstall_known_extensions', "
            "'autoload_known_extensions', 'enable_external_access', 'lock_configuration')"
        ).fetchall()
    )
    assert settings == {
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "enable_external_access": "false",
        "lock_configuration": "true",
    }
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET autoload_known_extensions = true")
    con.close()


def test_a_deeply_nested_json_cell_of_a_store_is_one_line(cli, paths):
    import duckdb

    store = paths["tmp"] / "deep.duckdb"
    shutil.copy(paths["store"], store)
    con = duckdb.connect(str(store))
    con.execute("UPDATE measurements SET arch = ?", ["[" * 5000 + "]" * 5000])
    con.close()
    probe(cli, paths, ["dataset", "export", "--store", str(store), "--out", "{out}.csv"], ("nested deeper",))


# -- targets no forward pass can have --------------------------------------------------------


@pytest.fixture(scope="module")
def impossible(tmp_path_factory):
    """SYNTHETIC: 200 rows of cpu-1t with an infinite, a negative and a 1e308 ms latency, and a 1e308 MB memory."""
    df = datasets.load("cpu-1t", features=False).head(200).copy()
    df.loc[0, "latency_ms"], df.loc[1, "latency_ms"], df.loc[2, "latency_ms"] = np.inf, -3.0, 1e308
    df.loc[3, "memory_mb"] = 1e308
    f = tmp_path_factory.mktemp("impossible") / "imp.csv"
    df.to_csv(f, index=False)
    return f


def test_check_reports_impossible_targets(cli, impossible):
    rc, out, err = cli("dataset", "check", impossible, "--json")
    assert rc == 1, err
    problems = [p for p in json.loads(out)["problems"] if p["problem"] == "impossible target"]
    assert sorted(p["detail"].split(" = ")[0] for p in problems) == ["latency_ms"] * 3 + ["memory_mb"]


def test_impossible_targets_are_left_out_before_learning_with_a_count(cli, impossible, tmp_path):
    with pytest.warns(UserWarning, match=r"4 impossible target value\(s\) left out \(latency_ms 3, memory_mb 1\)"):
        df = datasets.load(str(impossible), features=False)
    assert df.loc[:2, "latency_ms"].isna().all() and np.isnan(df.loc[3, "memory_mb"]) and len(df) == 200
    with pytest.warns(UserWarning, match="impossible"):
        rc, out, err = cli("train", "--data", impossible, "--preset", "fast", "--out", tmp_path / "m")
    assert rc == 0, err
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert man["training"]["cv_metrics"]["latency_ms"]["mape"] < 1.0  # not the 1e63 of a 1e308 ms row


# -- repeated configs -----------------------------------------------------------------------


def test_a_configs_copies_stay_in_one_fold_and_on_one_side():
    df = datasets.load("cpu-1t", features=False).head(300)
    three = pd.concat([df] * 3, ignore_index=True)
    assert evaluation.duplicate_rows(df) == 0 and evaluation.duplicate_rows(three) == 600
    folds = evaluation.cv_folds(three, 5, seed=1)
    assert (pd.Series(folds).groupby(three["config_id"]).nunique() == 1).all()
    for kind in ("random", "stratified", "grouped"):
        s = evaluation.split(three, kind, seed=2)
        assert not set(three.config_id.iloc[s["train"]]) & set(three.config_id.iloc[s["test"]]), kind
    kept, held = evaluation.holdout(three, 0.25, seed=3)
    assert not set(three.config_id.iloc[kept]) & set(three.config_id.iloc[held])
    assert len(kept) + len(held) == len(three) and abs(len(held) - 225) <= 3
    # without copies the folds and sides are those of a plain permutation of the rows
    perm = np.random.default_rng(3).permutation(len(df))
    kept, held = evaluation.holdout(df, 0.25, seed=3)
    assert (held == perm[:75]).all() and (kept == perm[75:]).all()
    assert (evaluation.cv_folds(df, 5, seed=1) == np.random.default_rng(1).permutation(len(df)) % 5).all()


def test_train_reports_repeated_configs_and_records_them(cli, tmp_path):
    df = datasets.load("cpu-1t", features=False).head(150)
    f = tmp_path / "twice.csv"
    pd.concat([df, df], ignore_index=True).to_csv(f, index=False)
    rc, out, err = cli("train", "--data", f, "--preset", "fast", "--holdout", "0.2", "--out", tmp_path / "m")
    assert rc == 0, err
    assert "150 row(s) repeat a config already there" in " ".join(out.split())
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert man["training"]["duplicate_rows"] == 150


# -- manifests re-checksummed after an edit ---------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        ("targets_missing", 5),
        ("targets_trained", None),
        ("training", None),
        ("training", "x"),
        ("domain", 5),
        ("domain", {"a": 1}),
        ("domain", {"ranges": {"depth": "x"}, "categories": {}}),
    ],
    ids=lambda e: f"{e[0]}={e[1]!r}",
)
def test_a_rechecksummed_manifest_of_the_wrong_types_is_one_line(cli, paths, edit):
    from carb.model import doc_checksum

    d = paths["tmp"] / "m"
    shutil.copytree(paths["bundle"], d)
    man = json.loads((d / "manifest.json").read_text())
    man[edit[0]] = edit[1]
    man["manifest_sha256"] = doc_checksum(man, "manifest_sha256")
    (d / "manifest.json").write_text(json.dumps(man))
    probe(cli, paths, ["predict", "--model", str(d), "--space", "tiny", "--out", "{out}.csv"], ("malformed",))


# -- network rows where a command learns the cpu space ---------------------------------------


@pytest.fixture(scope="module")
def with_net_rows(tmp_path_factory):
    """SYNTHETIC: 120 rows of cpu-1t and two network rows (features captured from tests/cli/_nets.py)."""
    from carb.families import nets

    rows = []
    for batch in (1, 2):
        c = nets.NetConfig(f"{Path(__file__).parent / '_nets.py'}:small", 32, batch)
        rows.append(
            {
                **c.to_dict(),
                **nets.measured_features(c),
                "config_id": c.config_id,
                "device": "cpu-1t",
                "status": "ok",
                "latency_ms": 0.5 * batch,
                "memory_mb": 9.0,
            }
        )
    df = pd.concat([datasets.load("cpu-1t", features=False).head(120), pd.DataFrame(rows)], ignore_index=True)
    f = tmp_path_factory.mktemp("nets") / "withnet.parquet"
    df.to_parquet(f, index=False)
    return f


def test_the_demo_refuses_a_source_with_network_rows(cli, paths, with_net_rows):
    probe(cli, paths, ["demo", "--source", str(with_net_rows), "--out", "{out}"], ("family net",))


def test_batch_scaling_reads_network_rows(with_net_rows):
    from carb.studies import analyses

    r = analyses.scaling(datasets.load(str(with_net_rows)))
    assert len(r.summary)


# -- small ones -------------------------------------------------------------------------------

CASES = [
    (["train", "--data", "cpu-1t", "--jobs", "100000", "--out", "{out}"], ("--jobs 100000",)),
    (["evaluate", "--data", "cpu-1t", "--jobs", "100000"], ("--jobs 100000",)),
    (["predict", "--model", "{bundle}", "--space", "tiny", "--jobs", "100000", "--out", "{out}.csv"], ("--jobs",)),
    (["predict", "--onnx", "{tmp}/junk.onnx"], ("--onnx needs --input",)),
    (["characterize", "--space", "tiny", "--samples", "1000000000", "--store", "{tmp}/s.duckdb"], ("--samples",)),
    (["fewshot", "--platform", "pixel3", "--samples", "1000000000"], ("--samples 1000000000",)),
    (["calibrate", "--model", "{bundle}", "--samples", "1000000000", "--out", "{out}"], ("--samples 1000000000",)),
    (["predict", "--module", "{tmp}/quits.py:build", "--input", "1x3x32x32"], ("quits.py", "os._exit(0)")),
]


@pytest.mark.parametrize("args, words", CASES, ids=[case_id(c) for c in CASES])
def test_small_ones_are_one_line(cli, paths, args, words):
    (paths["tmp"] / "quits.py").write_text("import os\n\n\ndef build():\n    os._exit(0)\n")
    probe(cli, paths, args, words)


def test_ctrl_c_in_train_is_one_line_and_exit_130(cli, paths, monkeypatch):
    from carb.model import CARB

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(CARB, "fit", interrupted)
    rc, _, err = cli("train", "--data", "cpu-1t", "--preset", "fast", "--out", paths["out"])
    assert rc == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: carb train: interrupted (Ctrl-C)"), err
    assert not paths["out"].exists()


def test_the_reader_refuses_a_document_beyond_its_size(tmp_path):
    from carb._safeio import read_json

    f = tmp_path / "big.json"
    f.write_text("[" + "1," * 100 + "1]")
    with pytest.raises(DocumentError, match="big.json: .* above the limit of 100 bytes"):
        read_json(f, max_bytes=100)
