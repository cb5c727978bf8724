"""`carb space list|show`: the built-in spaces and what a space holds.

A space's size is counted by listing its configs (its constraints and the configs its grids share leave fewer than
the grids' product): seconds for the layers space. `carb space list` keeps the counts of the built-in spaces in the
user's cache (``$CARB_CACHE_DIR``, else the platform's user cache folder), each under a key made of the space's TOML
text, carb's version and the code of :mod:`carb.families` that builds and admits its configs, so that a space or
code that changed is counted again (:func:`builtin_counts`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from importlib import resources
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ._app import console, space_app

#: the format of the kept counts (``space-counts.json`` in the user's cache)
COUNTS_FORMAT = "carb-space-counts/1"


@space_app.command("list")
def space_list(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the built-in spaces with their sizes and descriptions.

    Example: carb space list --json
    """
    from carb.families import space

    names = space.builtin_names()
    counts = builtin_counts(names)
    rows = [(n, counts[n], " ".join(space.load(n).description.split())) for n in names]
    if json_out:
        print(json.dumps([{"name": n, "count": c, "description": d} for n, c, d in rows], indent=2))
        return
    t = Table("space", "configs", "description")
    for n, c, d in rows:
        t.add_row(n, f"{c:,}", escape(d))
    console.print(t)


@space_app.command("show")
def space_show(
    name: str = typer.Argument(..., help="Built-in space name or TOML file."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (with `count`)."),
) -> None:
    """Show a space: its size and the values of each parameter.

    Example: carb space show paper
    """
    from carb.families import space

    s = space.load(name)
    listed = s.size_bound() <= space.MAX_CONFIGS  # a huge space is counted, never built
    values = s.values() if listed else _grid_values(s)
    if json_out:
        print(
            json.dumps(
                {
                    "name": s.name,
                    "source": s.source,
                    "count": len(s) if listed else None,
                    "count_bound": s.size_bound(),
                    "description": s.description,
                    "values": values,
                    "constraints": s.constraints,
                },
                indent=2,
            )
        )
        return
    size = (
        f"{len(s):,} configs"
        if listed
        else f"{s.size_text()} (counted from its grids; too many to list: sample it with --samples N --method uniform)"
    )
    console.print(f"[bold]{escape(s.name)}[/bold] ({escape(s.source)}): {size}", highlight=False)
    if s.description:
        console.print(s.description)
    t = Table("parameter", "values")
    for k, v in values.items():
        t.add_row(k, escape(", ".join(str(x) for x in v)))
    console.print(t)


def _grid_values(s) -> dict[str, list]:
    """Distinct values of each parameter as the grids give them (no config built)."""
    out: dict[str, set] = {}
    for g in s.grids:
        for k, vs in g.items():
            out.setdefault(k, set()).update(tuple(v) if isinstance(v, list) else v for v in vs)
    return {k: sorted(v, key=lambda x: (str(type(x)), x)) for k, v in out.items()}


def counts_file() -> Path:
    """Where `carb space list` keeps the counts: ``space-counts.json`` in the user's carb cache."""
    root = os.environ.get("CARB_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("carb")
    return Path(root) / "space-counts.json"


def _code_key() -> str:
    """sha256 of carb's version and of the code that builds and admits configs (every module of carb.families)."""
    from carb._version import __version__

    h = hashlib.sha256(__version__.encode())
    modules = sorted((f for f in resources.files("carb.families").iterdir() if f.name.endswith(".py")), key=str)
    for f in modules:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def builtin_counts(names: list[str]) -> dict[str, int]:
    """The number of configs of each named built-in space, counted once per version of the space and the code.

    A count kept in :func:`counts_file` serves while its key (the space's TOML text, carb's version and the code of
    carb.families) is the current one; the others are counted (the space listed) and kept. A kept file that cannot be
    read is counted over, and one that cannot be written only means counting again next time.
    """
    from carb._safeio import DocumentError, read_json, write_json
    from carb.families import space

    path = counts_file()
    try:
        doc = read_json(path)
        kept = doc["counts"] if isinstance(doc, dict) and doc.get("format") == COUNTS_FORMAT else {}
    except (OSError, DocumentError, KeyError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    code = _code_key()
    out: dict[str, int] = {}
    changed = False
    for n in names:
        text = resources.files("carb.spaces").joinpath(f"{n}.toml").read_text()
        key = hashlib.sha256(f"{code}\0{text}".encode()).hexdigest()
        entry = kept.get(n)
        count = entry.get("count") if isinstance(entry, dict) and entry.get("key") == key else None
        if type(count) is not int or count < 0:
            count = len(space.load(n))
            kept[n] = {"key": key, "count": count}
            changed = True
        out[n] = count
    if changed:
        with contextlib.suppress(OSError):
            write_json(path, {"format": COUNTS_FORMAT, "counts": {n: kept[n] for n in names}})
    return out
