"""Griffe extension: carb's docstrings made Markdown where they are written for Sphinx and doctest.

- carb's docstrings name other objects with Sphinx roles (``:func:`capture```,
  ``:mod:`~carb.graph.trace```). mkdocstrings renders Markdown, where a role would show as raw
  text; each role becomes inline code of the name it shows (``~`` keeps the last component, as
  Sphinx does).
- A doctest in a docstring's description (outside an ``Examples:`` section, which griffe
  reads itself) would render as nested block quotes; it is fenced as a ``pycon`` code block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|mod|class|meth|attr|data|obj|exc|const):`(~?)([^`]+)`")


def _shown(m: re.Match[str]) -> str:
    name = m.group(2).strip()
    if m.group(1):
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


def plain_roles(text: str) -> str:
    """The text with every Sphinx role replaced by inline code of its name."""
    return _ROLE.sub(_shown, text)


def fenced_doctests(text: str) -> str:
    """The text with each unindented doctest (``>>>`` lines and their output) in a code fence."""
    out: list[str] = []
    in_test = in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        starts = not in_fence and not in_test and line.startswith(">>>")
        if starts:
            out.append("```pycon")
            in_test = True
        elif in_test and not line.strip():
            out.append("```")
            in_test = False
        out.append(line)
    if in_test:
        out.append("```")
    return "\n".join(out)


class PlainRoles(griffe.Extension):
    """Make every loaded docstring Markdown: roles as inline code, doctests fenced."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring, if it has one."""
        if obj.docstring is not None:
            obj.docstring.value = fenced_doctests(plain_roles(obj.docstring.value))
