"""The house's rule on private modules: a ``_private`` module is private to its room.

A room is a top-level subpackage or module of carb (``carb.model``, ``carb._safeio``). A module
with a segment starting with ``_`` below its room (``carb.model._bundle``, or deeper) is private
to that room: only modules of the same room import it, and no test does. Each room exports what
others need from its ``__init__`` or a public module.

:class:`PrivateToRoomContract` holds the rule for carb itself: it is the custom contract type
``private_to_room`` of ``lint-imports`` (pyproject.toml ``[tool.importlinter]``; lint-imports puts
the directory it runs from, the repository root, on ``sys.path``, so ``tests._house`` imports).
``tests/test_architecture.py`` holds it for the tests with :func:`private_room`.
"""

from __future__ import annotations

from importlinter import Contract, ContractCheck, output


def room_of(module: str) -> str:
    """The room of a carb module: ``carb.model._bundle`` -> ``carb.model`` (``carb`` for the package itself)."""
    return ".".join(module.split(".")[:2])


def private_room(module: str) -> str | None:
    """The room that ``module`` is private to, or ``None`` for a public module (or one outside carb)."""
    parts = module.split(".")
    if parts[0] != "carb" or len(parts) < 3:
        return None
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[2:]):
        return room_of(module)
    return None


class PrivateToRoomContract(Contract):
    """No module of carb imports a private module of another room (directly: each import is checked)."""

    def check(self, graph, verbose: bool) -> ContractCheck:
        """The imports of a private module from outside its room, with their line numbers."""
        broken = []
        for imported in sorted(m for m in graph.modules if private_room(m)):
            for importer in sorted(graph.find_modules_that_directly_import(imported)):
                if importer.split(".")[0] == "carb" and room_of(importer) != private_room(imported):
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = sorted({d["line_number"] for d in details})
                    broken.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """One line per import: importer -> private module (line numbers)."""
        output.print_error("A private module is imported from outside its room:", bold=False)
        output.new_line()
        for b in check.metadata["broken"]:
            lines = ", ".join(map(str, b["lines"]))
            output.print_error(f"- {b['importer']} -> {b['imported']} (l.{lines})", bold=False)
        output.new_line()
        output.print_error(
            "Export the name from the room's __init__ (or a public module of the room) and import it from there.",
            bold=False,
        )
