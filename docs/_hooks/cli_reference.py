"""MkDocs hook: the CLI reference, generated from the ``carb`` Typer app at build time.

A page holding the marker ``<!-- carb-cli-reference -->`` gets, in its place, one section per
command of ``carb`` (groups' subcommands one level below): its help text, its usage line and a
table of its arguments and options as ``carb <command> --help`` shows them. Hidden commands and
options are left out. Nothing on the page is typed by hand, so the reference cannot fall behind
the code.
"""

from __future__ import annotations

import re
from typing import Any

import typer

MARKER = "<!-- carb-cli-reference -->"


def carb_command() -> Any:
    """The command group behind ``carb`` (Typer's own click), with every command registered."""
    import carb.cli  # importing it registers every command on the app

    return typer.main.get_command(carb.cli.app)


def _context(cmd: Any, name: str, parent: Any = None) -> Any:
    # Typer vendors click (typer._click): contexts come from the command's own class
    return cmd.context_class(cmd, info_name=name, parent=parent)


def _plain(text: str) -> str:
    # Typer's rich markup escapes brackets (carb\[ray]); the plain text has none
    return text.replace("\\[", "[")


def _text(text: str) -> str:
    # help text is prose: brackets such as results[model][target] must not read as Markdown links,
    # nor cpu-<T>t as an HTML tag
    text = _plain(" ".join(text.split())).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("[", "\\[").replace("]", "\\]")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _help_blocks(text: str) -> list[str]:
    """The command's help as Markdown: paragraphs, and its ``Example:`` lines as a shell block."""
    out: list[str] = []
    for para in _plain(text or "").split("\n\n"):
        para = para.strip()
        if not para:
            continue
        m = re.match(r"Examples?:\s*(.*)", para, re.S)
        if m:
            lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
            out.append("Example:\n\n```bash\n" + "\n".join(lines) + "\n```")
        else:
            out.append(_text(para))
    return out


def _params_table(cmd: Any, ctx: Any) -> list[str]:
    rows = []
    for p in cmd.get_params(ctx):
        if getattr(p, "hidden", False):
            continue
        record = p.get_help_record(ctx)
        if record is None:  # a plain click argument has no help record
            record = (p.make_metavar(ctx), getattr(p, "help", "") or "")
        name, help_text = record
        name = _plain(" ".join(name.split())).replace("|", "\\|")
        rows.append(f"| `{name}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| Argument or option | Description |", "| --- | --- |", *rows]


def _section(cmd: Any, ctx: Any, level: int) -> list[str]:
    path = ctx.command_path
    out = [f"{'#' * level} {path}", ""]
    for block in _help_blocks(cmd.help or ""):
        out += [block, ""]
    usage = " ".join([path, *cmd.collect_usage_pieces(ctx)])
    out += ["```text", f"Usage: {usage}", "```", ""]
    table = _params_table(cmd, ctx)
    if table:
        out += [*table, ""]
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            out += _section(sub, _context(sub, name, ctx), level + 1)
    return out


def reference() -> str:
    """The whole CLI reference as Markdown: every visible command, its usage and options."""
    group = carb_command()
    ctx = _context(group, "carb")
    out = _section(group, ctx, 2)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker of the CLI reference page with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
