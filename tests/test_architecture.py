"""The import structure: no module-level import cycle anywhere in carb, few import levels,
and the layers contract of pyproject.toml kept (the same check `lint-imports` runs in CI).

grimp (import-linter's graph builder) reads imports statically, those inside functions too,
so a lazy import that goes upward or closes a cycle fails here as well.
"""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")

MAX_LEVELS = 7


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("carb")


def _sccs(graph) -> list[list[str]]:
    """Strongly connected components (iterative Tarjan), so deep graphs need no recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def test_no_import_cycle(graph) -> None:
    cycles = [sorted(c) for c in _sccs(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_sccs_finds_a_cycle() -> None:
    # the checker itself must be able to fail: a synthetic two-module cycle
    class G:
        modules = {"a", "b", "c"}

        @staticmethod
        def find_modules_directly_imported_by(m):
            return {"a": {"b"}, "b": {"a"}, "c": {"a"}}[m]

    assert sorted(map(sorted, _sccs(G))) == [["a", "b"], ["c"]]


def _contract() -> dict:
    import tomllib
    from pathlib import Path

    doc = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    (contract,) = [c for c in doc["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return contract


def test_every_module_sits_in_one_of_at_most_seven_layers(graph) -> None:
    """The layers contract covers every top-level module or package of carb (a module left
    out would escape the check), each once, in at most seven layers."""
    layers = [[m.strip() for m in layer.replace("|", ":").split(":")] for layer in _contract()["layers"]]
    assert len(layers) <= MAX_LEVELS
    placed = [m for layer in layers for m in layer]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    tops = {".".join(m.split(".")[:2]) for m in graph.modules} - {"carb", "carb.spaces", "carb.data"}
    assert tops - set(placed) == set(), "modules outside the layers contract"


def test_layers_contract_kept() -> None:
    lint = pytest.importorskip("importlinter.cli")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert lint.lint_imports(config_filename=str(root / "pyproject.toml")) == 0
