"""`carb space list|show`: the built-in spaces and what a space holds."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from ._app import console, space_app


@space_app.command("list")
def space_list(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the built-in spaces with their sizes."""
    from carb import space

    rows = [(n, len(s), s.description.split("\n")[0]) for n in space.builtin_names() for s in [space.load(n)]]
    if json_out:
        print(json.dumps([{"name": n, "count": c, "description": d} for n, c, d in rows], indent=2))
        return
    t = Table("space", "configs", "description")
    for n, c, d in rows:
        t.add_row(n, f"{c:,}", d)
    console.print(t)


@space_app.command("show")
def space_show(name: str = typer.Argument(..., help="Built-in space name or TOML file."),
               json_out: bool = typer.Option(False, "--json", help="Print JSON (with `count`).")) -> None:
    """Show a space: its size and the values of each parameter."""
    from carb import space

    s = space.load(name)
    values = s.values()
    if json_out:
        print(json.dumps({"name": s.name, "source": s.source, "count": len(s), "description": s.description,
                          "values": values, "constraints": s.constraints}, indent=2))
        return
    console.print(f"[bold]{s.name}[/bold] ({s.source}): {len(s):,} configs")
    if s.description:
        console.print(s.description)
    t = Table("parameter", "values")
    for k, v in values.items():
        t.add_row(k, ", ".join(str(x) for x in v))
    console.print(t)
