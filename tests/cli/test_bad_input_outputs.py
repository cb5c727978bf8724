"""Nothing a user relies on is lost: an output that is one of the command's inputs is refused, a second writer of
one output is refused, and outputs are written under a private name and renamed into place. Each refusal is one line
``error: ...`` and exit code 2 (the in-process ``cli`` fixture)."""

import fcntl
import json
import os

import pandas as pd
import pytest

from carb.cli import atomic_dir, atomic_file
from tests._helpers import RESNET_ROW
from tests.cli._probe import case_id, probe

SAME = [
    (
        ["predict", "--model", "{bundle}", "--configs", "{tmp}/one.csv", "--out", "{tmp}/one.csv"],
        ("--out {tmp}/one.csv", "is also --configs"),
    ),
    (
        ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{bundle}/p.csv"],
        ("lies inside --model",),
    ),
    (["evaluate", "--data", "{tmp}/one.csv", "--json", "{tmp}/one.csv"], ("--json", "is also --data")),
    (["fewshot", "--data", "{tmp}/noarch.csv", "--out", "{tmp}/noarch.csv"], ("is also --data",)),
    (["characterize", "--configs", "{tmp}/one.csv", "--store", "{tmp}/one.csv"], ("--store", "is also --configs")),
    (["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{bundle}"], ("is also --target-model",)),
    (["calibrate", "--model", "{bundle}", "--out", "{bundle}"], ("--model",)),
    (["report", "--data", "{tmp}/adir/one.csv", "--out", "{tmp}/adir"], ("holds --data",)),
    (["demo", "--source", "{tmp}/adir/one.csv", "--out", "{tmp}/adir"], ("holds --source",)),
]


@pytest.mark.parametrize("args, words", SAME, ids=[case_id(c) for c in SAME])
def test_an_output_that_is_an_input_is_refused(cli, paths, args, words):
    (paths["tmp"] / "adir" / "one.csv").write_bytes((paths["tmp"] / "one.csv").read_bytes())
    before = (paths["tmp"] / "one.csv").read_bytes()
    probe(cli, paths, args, words)
    assert (paths["tmp"] / "one.csv").read_bytes() == before


def test_an_output_linked_to_an_input_is_refused(cli, paths):
    t = paths["tmp"]
    (t / "link.csv").symlink_to(t / "one.csv")
    args = ["predict", "--model", "{bundle}", "--configs", "{tmp}/one.csv", "--out", "{tmp}/link.csv"]
    probe(cli, paths, args, ("link.csv", "is also --configs"))
    assert (t / "link.csv").is_symlink() and len(pd.read_csv(t / "one.csv")) == 1


def _hold(path):
    """Take ``path``'s output lock as another process would (a descriptor of its own)."""
    fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--data", "cpu-1t", "--out", "{tmp}/m"],
        ["predict", "--model", "{bundle}", "--space", "tiny", "--out", "{tmp}/m.csv"],
        ["screen", "--space", "tiny", "--target-model", "{bundle}", "--out", "{tmp}/m"],
        ["dataset", "export", "--store", "{store}", "--out", "{tmp}/m.csv"],
    ],
    ids=lambda a: a[0] if a[0] != "dataset" else "export",
)
def test_a_second_writer_of_one_output_is_refused(cli, paths, args):
    out = paths["tmp"] / args[-1].rsplit("/", 1)[1]
    fd = _hold(out)
    try:
        probe(cli, paths, args, (str(out), "another carb command is writing it", f".{out.name}.lock"))
    finally:
        os.close(fd)
    assert not out.exists()


def test_a_written_output_leaves_no_lock_or_temporary_file(cli, tmp_path, probe_bundle):
    out = tmp_path / "new" / "p.csv"
    rc, _, err = cli("predict", "--model", probe_bundle, "--space", "tiny", "--out", out)
    assert rc == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["p.csv"]
    rc, _, err = cli("predict", "--model", probe_bundle, "--space", "tiny", "--out", out)  # the lock is free again
    assert rc == 0, err


def test_a_refused_output_leaves_no_folder_made_for_its_lock(cli, tmp_path, probe_bundle):
    rc, _, err = cli("predict", "--model", probe_bundle, "--space", "nope", "--out", tmp_path / "a" / "b" / "p.csv")
    assert rc == 2 and "nope" in err
    assert list(tmp_path.iterdir()) == []


def test_a_file_is_renamed_into_place_only_when_written(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(f) as tmp:
        tmp.write_text("half")
        raise RuntimeError("a full disk")
    assert f.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    with atomic_file(f) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".json"
        tmp.write_text("new")
    assert f.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_folder_is_moved_into_place_only_when_written(tmp_path):
    d = tmp_path / "o"
    d.mkdir()
    (d / "a.txt").write_text("old")
    (d / "keep.txt").write_text("yours")
    with pytest.raises(RuntimeError), atomic_dir(d) as stage:
        (stage / "a.txt").write_text("half")
        raise RuntimeError("a full disk")
    assert (d / "a.txt").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["o"]
    with atomic_dir(d) as stage:
        (stage / "a.txt").write_text("new")
        (stage / "sub").mkdir()
        (stage / "sub" / "b.txt").write_text("b")
    assert sorted(p.name for p in d.iterdir()) == ["a.txt", "keep.txt", "sub"]
    assert (d / "a.txt").read_text() == "new" and (d / "keep.txt").read_text() == "yours"
    with atomic_dir(tmp_path / "fresh") as stage:
        (stage / "x.txt").write_text("x")
    assert (tmp_path / "fresh" / "x.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "o"]


def test_screen_writes_its_folder_whole_and_drops_a_stale_measure_set(cli, tmp_path, probe_bundle):
    out = tmp_path / "s"
    out.mkdir()
    pd.DataFrame([RESNET_ROW]).to_parquet(out / "measure.parquet")
    (out / "notes.md").write_text("mine")
    args = ["screen", "--space", "tiny", "--target-model", probe_bundle, "--budget", "latency_ms=5", "--out", out]
    rc, _, err = cli(*args)
    assert rc == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no private folder or lock file left beside it
    names = {p.name for p in out.iterdir()}
    assert {"feasible.parquet", "notes.md", "shortlist.csv", "shortlist.parquet", "summary.json"} <= names
    assert (out / "notes.md").read_text() == "mine"
    three_way = "decisions" in json.loads((out / "summary.json").read_text())
    assert ("measure.parquet" in names) == three_way
    if three_way:  # this screening's measure set, not the stale one
        assert len(pd.read_parquet(out / "measure.parquet")) == len(pd.read_csv(out / "measure.csv"))
    rc, _, err = cli(*args, "--risk", "safe")  # a two-way screening into the same folder: no measure set
    assert rc == 0, err
    assert not (out / "measure.parquet").exists() and not (out / "measure.csv").exists()
