"""benchmarks/ holds the maintained benchmarks only: few, standalone, importing no experiment, writing no carb global.

Each rule is a function over a folder of scripts that returns its violations; the tests run
them on ``benchmarks/`` and, on scripts written here that break each rule, check that they
catch it. Scripts are read as text and parsed (``ast``), never imported.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
EXPERIMENTS = ROOT / "experiments"
#: the most scripts benchmarks/ may hold (the maintained benchmarks and their shared helper)
MAX_SCRIPTS = 22
#: the one module benchmarks share
HELPER = "_common"


def _scripts(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.py"))


def too_many(folder: Path) -> list[str]:
    """The scripts beyond :data:`MAX_SCRIPTS` (all of them when there are too many)."""
    scripts = _scripts(folder)
    return [p.name for p in scripts] if len(scripts) > MAX_SCRIPTS else []


def path_edits(folder: Path) -> list[str]:
    """``file:line`` of every mention of ``sys.path`` (benchmarks import ``_common`` from their own folder)."""
    return [
        f"{p.name}:{i}"
        for p in _scripts(folder)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "sys.path" in line
    ]


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level module name) of every import, and of ``importlib.import_module("...")`` with a literal."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module.split(".")[0]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("import_module", "spec_from_file_location", "run_path")
            and node.args
            and isinstance(node.args[-1] if node.func.attr == "spec_from_file_location" else node.args[0], ast.Constant)
        ):
            arg = node.args[-1] if node.func.attr == "spec_from_file_location" else node.args[0]
            out.append((node.lineno, Path(str(arg.value)).stem.split(".")[0]))
    return out


def foreign_imports(folder: Path, experiments: Path) -> list[str]:
    """``file:line name`` of every import of another script of the folder (but the helper) or of an experiment."""
    siblings = {p.stem for p in _scripts(folder)} - {HELPER}
    explored = {p.stem for p in experiments.rglob("*.py")} | {experiments.name}
    out = []
    for p in _scripts(folder):
        for line, name in _imported_names(ast.parse(p.read_text(), str(p))):
            if name in siblings or name in explored:
                out.append(f"{p.name}:{line} {name}")
    return out


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _carb_modules(tree: ast.AST) -> set[str]:
    """The names bound to a carb module: ``import carb...``, ``import carb.x as y``, ``from carb.x import module``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "carb":
                    names.add(a.asname or "carb")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "carb":
                names |= {a.asname or a.name for a in node.names if _is_module(f"{node.module}.{a.name}")}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def carb_writes(folder: Path) -> list[str]:
    """``file:line target`` of every assignment to an attribute of a carb module (``mod.NAME = ...``, ``setattr``)."""
    out = []
    for p in _scripts(folder):
        tree = ast.parse(p.read_text(), str(p))
        mods = _carb_modules(tree)
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
            for t in targets:
                if isinstance(t, ast.Attribute) and _root(t) in mods:
                    out.append(f"{p.name}:{node.lineno} {ast.unparse(t)}")
    return out


# -- the rules on benchmarks/ ------------------------------------------------------------------------


def test_benchmarks_holds_at_most_twenty_scripts():
    assert not too_many(BENCHMARKS), f"{len(_scripts(BENCHMARKS))} scripts in benchmarks/ (at most {MAX_SCRIPTS})"


def test_no_benchmark_edits_sys_path():
    assert not path_edits(BENCHMARKS)


def test_benchmarks_import_no_other_benchmark_and_no_experiment():
    assert not foreign_imports(BENCHMARKS, EXPERIMENTS)


def test_benchmarks_write_no_name_of_a_carb_module():
    assert not carb_writes(BENCHMARKS)


def test_every_benchmark_shares_the_helper():
    scripts = [p for p in _scripts(BENCHMARKS) if p.stem != HELPER]
    assert (BENCHMARKS / f"{HELPER}.py").is_file()
    lonely = [p.name for p in scripts if HELPER not in {n for _, n in _imported_names(ast.parse(p.read_text()))}]
    assert not lonely, f"not importing {HELPER}: {lonely}"


# -- each rule catches what it is for ------------------------------------------------------------------


def test_each_rule_catches_a_script_that_breaks_it(tmp_path):
    bench, exp = tmp_path / "benchmarks", tmp_path / "experiments"
    (exp / "drift").mkdir(parents=True)
    bench.mkdir()
    (exp / "drift" / "probe_x.py").write_text("X = 1\n")
    (bench / "_common.py").write_text("Y = 1\n")
    (bench / "bench_a.py").write_text("import _common\nfrom carb.model import CARB\nm = CARB()\nm.coverage = 0.8\n")
    clean = [too_many(bench), path_edits(bench), foreign_imports(bench, exp), carb_writes(bench)]
    assert clean == [[], [], [], []]

    (bench / "bench_b.py").write_text("import sys\nsys.path.insert(0, '.')\nfrom bench_a import m\n")
    (bench / "bench_c.py").write_text("def f():\n    from probe_x import X\n    return X\n")
    (bench / "bench_d.py").write_text(
        "import importlib\nimport carb.model.conformal as cf\nimport carb\nfrom carb.model import estimator\n"
        "from carb import model\n"
        "cf.TARGET_TAIL = {}\nestimator.SPREAD_SCALE += 1\ncarb.model.conformal.X = 2\n"
        "setattr(model, 'Y', 3)\nimportlib.import_module('bench_a')\n"
    )
    assert path_edits(bench) == ["bench_b.py:2"]
    assert foreign_imports(bench, exp) == ["bench_b.py:3 bench_a", "bench_c.py:2 probe_x", "bench_d.py:10 bench_a"]
    assert carb_writes(bench) == [
        "bench_d.py:6 cf.TARGET_TAIL",
        "bench_d.py:7 estimator.SPREAD_SCALE",
        "bench_d.py:8 carb.model.conformal.X",
        "bench_d.py:9 model.?",
    ]
    for i in range(MAX_SCRIPTS):
        (bench / f"bench_extra_{i}.py").write_text("import _common\n")
    assert len(too_many(bench)) == MAX_SCRIPTS + 5
