"""`carb space list|show`: the built-in spaces and what a space holds."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from ._app import console, space_app


@space_app.command("list")
def space_list(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the built-in spaces with their sizes and descriptions.

    Example: carb space list --json
    """
    from carb.families import space

    rows = [(n, len(s), " ".join(s.description.split())) for n in space.builtin_names() for s in [space.load(n)]]
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
