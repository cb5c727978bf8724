"""MkDocs hook: the cards of the shipped datasets, published as pages at build time.

Every card ``carb/data/<name>.md`` (shipped beside the data it describes) becomes the page
``datasets/<name>.md``, with the figures it shows (``carb/data/*.png``); the card of HELP's
FBNet data, ``carb/data/help_fbnet/README.md``, becomes ``datasets/help-fbnet.md``. The cards
are written when a dataset ships; the site shows them as they are, so no figure of theirs is
copied by hand. A card the nav of ``mkdocs.yml`` does not list yet is added to its "Dataset
cards" section, so shipping a dataset needs no edit of the site.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

#: where the shipped datasets and their cards live, relative to the repository root
DATA = Path(__file__).resolve().parents[2] / "carb" / "data"


def cards() -> dict[str, Path]:
    """The shipped dataset cards: page name (``<dataset>.md``) -> card file, sorted by name."""
    found = {p.name: p for p in DATA.glob("*.md")}
    help_card = DATA / "help_fbnet" / "README.md"
    if help_card.is_file():
        found["help-fbnet.md"] = help_card
    return dict(sorted(found.items()))


def _cards_section(nav: Any) -> list | None:
    """The list under the nav's "Dataset cards" entry, wherever it sits."""
    if isinstance(nav, list):
        for item in nav:
            found = _cards_section(item)
            if found is not None:
                return found
    elif isinstance(nav, dict):
        for key, value in nav.items():
            if key == "Dataset cards" and isinstance(value, list):
                return value
            found = _cards_section(value)
            if found is not None:
                return found
    return None


def on_config(config: Any) -> Any:
    """Add every shipped card the nav's "Dataset cards" section does not list yet."""
    section = _cards_section(config["nav"])
    if section is not None:
        listed = {v for item in section for v in (item.values() if isinstance(item, dict) else [item])}
        for name in cards():
            if f"datasets/{name}" not in listed:
                section.append({name.removesuffix(".md"): f"datasets/{name}"})
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add each card as ``datasets/<name>.md`` and each card figure as ``datasets/<name>.png``."""
    pages = {**cards(), **{p.name: p for p in sorted(DATA.glob("*.png"))}}
    for name, path in pages.items():
        uri = f"datasets/{name}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
