"""The results page, the README's headline table and the docs' figure markers are generated from
the benchmarks' JSON (scripts/results_page.py): a cited JSON that is missing or records no clean
commit, machine and versions, a figure path that does not lead to one number, a page that no
longer matches its JSON, or a rerun that prints another digit fails here.

The trees built in ``tmp_path`` hold SYNTHETIC results and provenance: only the generator is under
test."""

from __future__ import annotations

import importlib.util
import io
import json
import shlex
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
        if not s.get("timing"):  # --rerun writes a data-only source's JSON elsewhere by its path
            assert s["json"] in s["command"], s["id"]
    for sec in spec["section"]:
        for row in sec["rows"]:
            assert row["source"] in ids, row


def test_every_published_data_only_json_records_a_clean_commit_its_machine_and_versions():
    import tomllib

    mod = _module()
    spec = tomllib.loads((ROOT / "benchmarks" / "results.toml").read_text())
    sources = mod._load_sources(spec, ROOT)
    assert mod.refused(spec, sources) == []
    assert any(not s.timing for s in sources.values())


#: the provenance benchmarks/_common.py writes, reduced to what the generator reads (SYNTHETIC)
PROVENANCE = {
    "utc": "2026-01-01T00:00:00Z",
    "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
    "machine": {"fingerprint": {"device": "cpu", "name": "SYNTHETIC CPU", "kernels": "AVX2"}, "kind": "kind-a"},
    "versions": {"python": "3.11.7", "numpy": "2.4.6"},
}

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
    data = {"rows": [{"name": "a", "accuracy": 0.9912}, {"name": "b", "accuracy": 0.5}], "provenance": PROVENANCE}
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
    assert "| study: 95.8% | test machine (on SYNTHETIC CPU, AVX2), 2026-01-01, at 0123456 | [run](#run) |" in page
    assert "Written at commit `0123456789ab` from a clean tree on SYNTHETIC CPU (AVX2 kernels)" in page
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


# -- provenance or no figure ---------------------------------------------------------------------------


def _edit_json(tree, change) -> None:
    path = tree / "benchmarks" / "results" / "run.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda d: d.pop("provenance"), "records no provenance"),
        (lambda d: d["provenance"]["git"].pop("commit"), "records no commit"),
        (lambda d: d["provenance"].pop("git"), "records no commit, clean-tree flag"),
        (lambda d: d["provenance"]["git"].update(dirty=None), "records no clean-tree flag"),
        (lambda d: d["provenance"]["machine"].pop("fingerprint"), "records no machine fingerprint"),
        (lambda d: d["provenance"].update(versions={}), "records no versions"),
    ],
)
def test_a_cited_json_without_commit_clean_flag_machine_or_versions_is_refused(tree, change, said):
    mod = _module()
    _edit_json(tree, change)
    with pytest.raises(mod.ResultsError, match=f"source 'run': benchmarks/results/run.json {said}"):
        mod.render(tree)


def test_a_json_written_from_a_dirty_tree_is_refused(tree):
    mod = _module()
    _edit_json(tree, lambda d: d["provenance"]["git"].update(dirty=True))
    with pytest.raises(mod.ResultsError, match="was written from a dirty tree .* not publishable"):
        mod.render(tree)


def test_a_timing_source_says_it_was_not_rerun_and_without_provenance_is_refused(tree):
    mod = _module()
    spec = tree / "benchmarks" / "results.toml"
    spec.write_text(SPEC.replace('date = "2026-01-01"', 'date = "2026-01-01"\ntiming = true'))
    page = mod.render(tree)[tree / "docs" / "results.md"]
    assert "| accuracy | 99.1% | study: 95.8% | test machine, 2026-01-01, not rerun at HEAD | [run](#run) |" in page
    assert "**run** (measured on hardware)" in page and "Measured on hardware: not rerun at HEAD." in page
    _edit_json(tree, lambda d: d.pop("provenance"))
    with pytest.raises(mod.ResultsError, match="source 'run': benchmarks/results/run.json records no provenance"):
        mod.render(tree)


def _script_copy(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    script = tmp_path / "scripts" / "results_page.py"
    script.write_text(SCRIPT.read_text())
    return script


def test_check_refuses_with_one_line_per_file(tree):
    second = SPEC.replace('id = "run"', 'id = "other"').replace("run.json", "other.json")
    second = second[second.index("[[source]]") : second.index("[[figure]]")]
    (tree / "benchmarks" / "results.toml").write_text(SPEC + second)
    _edit_json(tree, lambda d: d["provenance"]["git"].update(dirty=True))
    (tree / "benchmarks" / "results" / "other.json").write_text(json.dumps({"rows": []}))
    p = subprocess.run([sys.executable, str(_script_copy(tree)), "--check"], capture_output=True, text=True)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: source 'run': benchmarks/results/run.json was written from a dirty tree")
    assert lines[1].startswith("error: source 'other': benchmarks/results/other.json records no provenance")


def test_a_study_anchor_is_quoted_with_a_link_to_its_setup(tree):
    mod = _module()
    study = (
        '\n[[study]]\nkey = "screen"\nwhat = "budget calls"\nfigure = "95.8%"\n'
        'setup = "two GPUs"\ndiffers = "two-way calls"\n'
    )
    spec = tree / "benchmarks" / "results.toml"
    spec.write_text(SPEC.replace('anchor = "study: 95.8%"', 'anchor = "{study:screen}"') + study)
    out = mod.render(tree)
    assert "| accuracy | 99.1% | [study](#study): 95.8% |" in out[tree / "docs" / "results.md"]
    assert "| budget calls | 95.8% | two GPUs | two-way calls |" in out[tree / "docs" / "results.md"]
    assert "| accuracy | 99.1% | [study](docs/results.md#study): 95.8% |" in out[tree / "README.md"]


# -- rerunning the data-only figures -------------------------------------------------------------------

#: a SYNTHETIC benchmark: writes the accuracy and the machine kind it is given, with provenance
WRITER = """
import json, sys
path, accuracy, kind = sys.argv[1], float(sys.argv[2]), sys.argv[3]
prov = json.loads(sys.argv[4])
prov["machine"]["kind"] = kind
rows = [{"name": "a", "accuracy": accuracy}, {"name": "b", "accuracy": 0.5}]
open(path, "w").write(json.dumps({"rows": rows, "provenance": prov}))
"""


def _rerun_tree(tree, accuracy: str, kind: str = "kind-a"):
    (tree / "write.py").write_text(WRITER)
    command = shlex.join(
        [sys.executable, "write.py", "benchmarks/results/run.json", accuracy, kind, json.dumps(PROVENANCE)]
    )
    old = 'command = "python benchmarks/bench_x.py --json benchmarks/results/run.json"'
    (tree / "benchmarks" / "results.toml").write_text(SPEC.replace(old, f"command = {json.dumps(command)}"))


def _rerun(mod, tree, **kw) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = mod.rerun(tree, out=out, **kw)
    return rc, out.getvalue().splitlines()


def test_rerun_passes_when_every_digit_is_the_same(tree):
    mod = _module()
    _rerun_tree(tree, "0.99118")  # another value, the same printed digits (99.1%)
    rc, lines = _rerun(mod, tree)
    assert rc == 0, lines
    assert lines[0].startswith("same digits: run, 1 of 1 figures")
    # the committed JSON is left as it was: the rerun writes elsewhere
    assert json.loads((tree / "benchmarks" / "results" / "run.json").read_text())["rows"][0]["accuracy"] == 0.9912


def test_rerun_fails_on_a_changed_printed_digit(tree):
    mod = _module()
    _rerun_tree(tree, "0.9951")
    rc, lines = _rerun(mod, tree)
    assert rc == 1
    assert lines[0] == "changed: run acc: 99.1% -> 99.5%"
    assert lines[1].startswith("CHANGED: run, 0 of 1 figures")


def test_rerun_allows_one_unit_of_the_last_digit_on_another_machine_kind_only(tree):
    mod = _module()
    _rerun_tree(tree, "0.9921", kind="kind-b")
    rc, lines = _rerun(mod, tree)
    assert rc == 0, lines
    assert lines[0] == "last digit: run acc: 99.1% -> 99.2% (machine kind kind-b here, kind-a in the JSON)"
    _rerun_tree(tree, "0.9921", kind="kind-a")
    assert _rerun(mod, tree)[0] == 1
    _rerun_tree(tree, "0.9931", kind="kind-b")
    assert _rerun(mod, tree)[0] == 1


def test_rerun_compares_with_the_json_its_command_wrote_on_the_same_machine_kind(tree):
    mod = _module()
    # the same command's JSON from another kind, where the learners' floating point gave 99.5%
    other = json.loads((tree / "benchmarks" / "results" / "run.json").read_text())
    other["rows"][0]["accuracy"] = 0.9951
    other["provenance"]["machine"]["kind"] = "kind-b"
    (tree / "benchmarks" / "results" / "run_b.json").write_text(json.dumps(other))
    spec = tree / "benchmarks" / "results.toml"
    also = 'date = "2026-01-01"\nalso = ["benchmarks/results/run_b.json"]'
    _rerun_tree(tree, "0.9951", kind="kind-b")
    spec.write_text(spec.read_text().replace('date = "2026-01-01"', also))
    rc, lines = _rerun(mod, tree)
    assert rc == 0, lines
    assert lines[0] == "compared with benchmarks/results/run_b.json: written on this machine kind"
    # on the primary JSON's kind the primary is the reference: 99.5% is a change there
    _rerun_tree(tree, "0.9951", kind="kind-a")
    spec.write_text(spec.read_text().replace('date = "2026-01-01"', also))
    rc, lines = _rerun(mod, tree)
    assert rc == 1 and lines[0] == "changed: run acc: 99.1% -> 99.5%"
    # the page prints from the primary JSON, and an also-JSON without provenance is refused
    assert "| accuracy | 99.1% |" in mod.render(tree)[tree / "docs" / "results.md"]
    del other["provenance"]
    (tree / "benchmarks" / "results" / "run_b.json").write_text(json.dumps(other))
    p = subprocess.run([sys.executable, str(_script_copy(tree)), "--check"], capture_output=True, text=True)
    assert p.returncode == 2 and "run_b.json records no provenance" in p.stderr, p.stderr


def test_rerun_quick_and_only_select_sources_and_a_timing_source_is_never_rerun(tree):
    mod = _module()
    _rerun_tree(tree, "0.5")
    rc, lines = _rerun(mod, tree, quick=True)  # run is not marked quick: nothing reruns
    assert rc == 0 and lines == ["reran 0 data-only sources in 0 s: 0 changed, 0 failed"]
    assert _rerun(mod, tree, only=["nope"]) == (2, ["error: no source 'nope' in benchmarks/results.toml"])
    spec = tree / "benchmarks" / "results.toml"
    spec.write_text(spec.read_text().replace('date = "2026-01-01"', 'date = "2026-01-01"\ntiming = true'))
    rc, lines = _rerun(mod, tree, only=["run"])
    assert rc == 2 and "timing source" in lines[0]


def test_rerun_reports_a_failing_command(tree):
    mod = _module()
    spec = tree / "benchmarks" / "results.toml"
    spec.write_text(SPEC.replace("python benchmarks/bench_x.py", "false"))
    rc, lines = _rerun(mod, tree)
    assert rc == 1 and lines[0].startswith("failed: run (exit 1")


def test_last_digit_only_reads_the_printed_figures():
    mod = _module()
    assert mod.last_digit_only("0.988", "0.987") and mod.last_digit_only("1,459", "1,460")
    assert mod.last_digit_only("12.8%", "12.9%") and mod.last_digit_only("9.9%", "10.0%")
    assert not mod.last_digit_only("0.988", "0.986") and not mod.last_digit_only("9.9%", "10.1%")
    assert not mod.last_digit_only("12.8%", "12.9 ms")
