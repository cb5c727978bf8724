"""The results page, the README's headline table and the docs' figure markers are generated from
the benchmarks' JSON (scripts/results_page.py): a cited JSON that is missing, a figure path that
does not lead to one number, or a page that no longer matches its JSON fails here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results_page.py"


def _module():
    spec = importlib.util.spec_from_file_location("results_page", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("results_page", mod)  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_pages_match_their_json():
    p = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr


def test_every_cited_json_is_in_the_repository_and_every_row_has_a_command():
    import tomllib

    spec = tomllib.loads((ROOT / "benchmarks" / "results.toml").read_text())
    ids = {s["id"] for s in spec["source"]}
    for s in spec["source"]:
        assert (ROOT / s["json"]).is_file(), s["json"]
        assert s["command"].strip() and s["machine"].strip() and s["date"][:4].isdigit(), s["id"]
    for sec in spec["section"]:
        for row in sec["rows"]:
            assert row["source"] in ids, row


SPEC = """
[page]
intro = "SYNTHETIC figures for a test."

[[source]]
id = "run"
json = "benchmarks/results/run.json"
command = "python benchmarks/bench_x.py --json benchmarks/results/run.json"
machine = "test machine"
date = "2026-01-01"

[[figure]]
key = "acc"
source = "run"
path = ["rows", {name = "a"}, "accuracy"]
format = ".1%"

[[section]]
title = "One"
intro = "One table."
rows = [{ what = "accuracy", carb = "{acc}", anchor = "study: 95.8%", source = "run", headline = true }]
"""


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "results.toml").write_text(SPEC)
    data = {"rows": [{"name": "a", "accuracy": 0.9912}, {"name": "b", "accuracy": 0.5}]}
    (tmp_path / "benchmarks" / "results" / "run.json").write_text(json.dumps(data))
    (tmp_path / "README.md").write_text(
        "# X\nright <!--fig:acc-->?<!--/fig--> of the time\n<!--results:headline-->\nold\n<!--/results:headline-->\n"
    )
    return tmp_path


def _write(mod, root):
    for p, text in mod.render(root).items():
        p.write_text(text)


def test_figures_fill_the_page_the_readme_table_and_the_markers(tree):
    mod = _module()
    assert set(mod.stale(tree)) == {tree / "docs" / "results.md", tree / "README.md"}
    _write(mod, tree)
    assert mod.stale(tree) == []
    readme = (tree / "README.md").read_text()
    assert "right <!--fig:acc-->99.1%<!--/fig--> of the time" in readme
    assert "| accuracy | 99.1% | study: 95.8% |" in readme and "old" not in readme
    page = (tree / "docs" / "results.md").read_text()
    assert "| accuracy | 99.1% | study: 95.8% | test machine, 2026-01-01 | [run](#run) |" in page
    assert "python benchmarks/bench_x.py --json benchmarks/results/run.json" in page


def test_a_changed_json_makes_the_pages_stale(tree):
    mod = _module()
    _write(mod, tree)
    data = json.loads((tree / "benchmarks" / "results" / "run.json").read_text())
    data["rows"][0]["accuracy"] = 0.9
    (tree / "benchmarks" / "results" / "run.json").write_text(json.dumps(data))
    assert set(mod.stale(tree)) == {tree / "docs" / "results.md", tree / "README.md"}


def test_a_missing_json_is_an_error_naming_it(tree):
    mod = _module()
    (tree / "benchmarks" / "results" / "run.json").unlink()
    with pytest.raises(mod.ResultsError, match="benchmarks/results/run.json is missing"):
        mod.render(tree)


@pytest.mark.parametrize(
    "path, message",
    [
        ('["rows", {kind = "a"}, "accuracy"]', "matches 0 elements"),
        ('["rows", 0, "nope"]', "no 'nope'"),
        ('["rows", 0, "name"]', "not a number"),
    ],
)
def test_a_path_that_does_not_lead_to_one_number_is_an_error(tree, path, message):
    mod = _module()
    spec = tree / "benchmarks" / "results.toml"
    spec.write_text(SPEC.replace('["rows", {name = "a"}, "accuracy"]', path))
    with pytest.raises(mod.ResultsError, match=message):
        mod.render(tree)


def test_a_quoted_figure_must_be_on_the_results_page(tree):
    mod = _module()
    spec = tree / "benchmarks" / "results.toml"
    extra = '\n[[figure]]\nkey = "off"\nsource = "run"\npath = ["rows", 1, "accuracy"]\n'
    spec.write_text(SPEC + extra)
    (tree / "docs" / "guide.md").write_text("see <!--fig:off-->?<!--/fig-->\n")
    with pytest.raises(mod.ResultsError, match="'off' is quoted but not on the results page"):
        mod.render(tree)


def test_check_exits_2_with_one_line_when_a_json_is_missing(tmp_path):
    # the script reads the repository it sits in: run a copy of it in a tree without the JSON
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "results_page.py").write_text(SCRIPT.read_text())
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "results.toml").write_text(SPEC)
    p = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "results_page.py"), "--check"], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["error: source 'run': cited JSON benchmarks/results/run.json is missing"]
