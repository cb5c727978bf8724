"""Generate the results page, the README's headline table and every figure quoted in the docs
from the benchmarks' JSON, so that no measured figure is ever typed by hand.

    python scripts/results_page.py           # write docs/results.md, README.md's table, figure markers
    python scripts/results_page.py --check   # exit 1 when a page is stale, 2 when a cited JSON is missing

The figures, their sources and the page's sections are declared in ``benchmarks/results.toml``:

- a **source** names one JSON file under the repository, the command that writes it, the
  machine kind it was measured on (``machine``; ``kind``, a short form for the tables) and the
  date (the date the JSON records, in ``provenance.utc``, ``date_utc`` or ``date``, wins over
  the declared one);
- a **figure** picks one number out of a source with a path of keys, where a table (an
  inline TOML table) in the path picks the one list element whose fields equal it, and formats
  it with a Python format spec (``.1%``, ``.3f``, ``,d``);
- a **section** is one table of the page: each row a figure of CARB beside its anchor (a
  published figure, quoted as text, or another figure such as a baseline's).

Anywhere in README.md and docs/ (outside the generated page), ``<!--fig:KEY-->...<!--/fig-->``
is replaced by figure KEY, and the block between ``<!--results:headline-->`` and
``<!--/results:headline-->`` by the table of the rows marked ``headline = true``.
Nothing here runs code from the files it reads: TOML and JSON only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "results.toml"
PAGE = ROOT / "docs" / "results.md"
MARKER = re.compile(r"<!--fig:(?P<key>[A-Za-z0-9_.\-]+)-->(?P<text>.*?)<!--/fig-->", re.S)
HEADLINE = re.compile(r"(<!--results:headline-->\n)(?P<body>.*?)(<!--/results:headline-->)", re.S)


class ResultsError(Exception):
    """A cited JSON is missing, or a figure's path does not lead to exactly one number."""


@dataclass(frozen=True)
class Source:
    """One JSON file of measured results and how it was made."""

    id: str
    json: str
    command: str
    machine: str
    date: str
    data: Any
    kind: str = ""


def _load_sources(spec: dict, root: Path) -> dict[str, Source]:
    out = {}
    for s in spec.get("source", []):
        path = root / s["json"]
        if not path.is_file():
            raise ResultsError(f"source {s['id']!r}: cited JSON {s['json']} is missing")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ResultsError(f"source {s['id']!r}: {s['json']} is not readable JSON ({e})") from e
        date = s.get("date", "")
        if isinstance(data, dict):
            prov = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
            recorded = prov.get("utc") or data.get("date_utc") or data.get("date")
            if isinstance(recorded, str) and recorded[:4].isdigit():
                date = recorded[:10]
        out[s["id"]] = Source(s["id"], s["json"], s["command"], s["machine"], date, data, s.get("kind", s["machine"]))
    return out


def _pick(data: Any, path: list, where: str) -> Any:
    """Follow ``path`` into ``data``: a string or int indexes, a table selects the one matching element."""
    cur = data
    for step in path:
        if isinstance(step, dict):
            if not isinstance(cur, list):
                raise ResultsError(f"{where}: {step} selects from a list, found {type(cur).__name__}")
            hits = [e for e in cur if isinstance(e, dict) and all(e.get(k) == v for k, v in step.items())]
            if len(hits) != 1:
                raise ResultsError(f"{where}: {step} matches {len(hits)} elements, not one")
            cur = hits[0]
        else:
            try:
                cur = cur[step]
            except (KeyError, IndexError, TypeError) as e:
                raise ResultsError(f"{where}: no {step!r} in the JSON") from e
    if isinstance(cur, bool) or not isinstance(cur, (int, float)):
        raise ResultsError(f"{where}: leads to {cur!r}, not a number")
    return cur


def figures(spec: dict, sources: dict[str, Source]) -> dict[str, str]:
    """Every declared figure, formatted: ``{key: text}``."""
    out = {}
    for f in spec.get("figure", []):
        where = f"figure {f['key']!r}"
        if f["source"] not in sources:
            raise ResultsError(f"{where}: unknown source {f['source']!r}")
        value = _pick(sources[f["source"]].data, f["path"], where) * f.get("scale", 1)
        fmt = f.get("format", "")
        if fmt.endswith("d"):
            value = int(round(value))
        out[f["key"]] = f"{f.get('prefix', '')}{format(value, fmt)}{f.get('suffix', '')}"
    return out


def _cell(text: str, figs: dict[str, str], where: str) -> str:
    """A row cell: ``{key}`` placeholders become figures; the rest is quoted text."""

    def sub(m: re.Match) -> str:
        if m.group(1) not in figs:
            raise ResultsError(f"{where}: unknown figure {m.group(1)!r}")
        return figs[m.group(1)]

    return re.sub(r"\{([A-Za-z0-9_.\-]+)\}", sub, text)


def _table(rows: list[dict], figs: dict[str, str], sources: dict[str, Source], where: str) -> list[str]:
    lines = ["| What | CARB | Anchor or baseline | Machine, date | Source |", "|---|---|---|---|---|"]
    for r in rows:
        src = sources[r["source"]]
        cells = [_cell(r.get(c, "—"), figs, where) for c in ("what", "carb", "anchor")]
        lines.append("| " + " | ".join(cells) + f" | {src.kind}, {src.date} | [{src.id}](#{src.id}) |")
    return lines


def page(spec: dict, sources: dict[str, Source], figs: dict[str, str]) -> str:
    """The whole results page as Markdown."""
    out = [
        "# Results",
        "",
        spec["page"]["intro"].strip(),
        "",
        "<!-- generated by `python scripts/results_page.py` from benchmarks/results.toml; do not edit -->",
    ]
    for sec in spec.get("section", []):
        out += ["", f"## {sec['title']}", "", sec["intro"].strip(), ""]
        out += _table(sec["rows"], figs, sources, f"section {sec['title']!r}")
    out += [
        "",
        "## Sources",
        "",
        "Each figure above comes from one of these files. Rerun the command from the repository's root "
        "on a machine of the kind named; figures measured on hardware move with the machine and its load, "
        "figures computed from shipped data reproduce to the digit on a machine of the same kind.",
        "",
    ]
    for s in sources.values():
        out += [
            f'<a id="{s.id}"></a>',
            f"**{s.id}**: `{s.json}` — {s.machine}, {s.date}",
            "",
            "```bash",
            s.command,
            "```",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def headline(spec: dict, sources: dict[str, Source], figs: dict[str, str]) -> str:
    """The README's table: the rows marked ``headline``, linked to the results page."""
    rows = [r for sec in spec.get("section", []) for r in sec["rows"] if r.get("headline")]
    lines = ["| What | CARB | Anchor or baseline |", "|---|---|---|"]
    for r in rows:
        cells = [_cell(r.get(c, "—"), figs, "headline") for c in ("what", "carb", "anchor")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _quoting_files(root: Path) -> list[Path]:
    docs = sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return [
        p
        for p in [root / "README.md", *docs]
        if p.is_file() and p.resolve() != (root / "docs" / "results.md").resolve()
    ]


def render(root: Path = ROOT, spec_path: Path | None = None) -> dict[Path, str]:
    """Every file this script writes, with its generated text: ``{path: text}``."""
    spec = tomllib.loads((spec_path or root / "benchmarks" / "results.toml").read_text())
    sources = _load_sources(spec, root)
    figs = figures(spec, sources)
    out = {root / "docs" / "results.md": page(spec, sources, figs)}
    table = headline(spec, sources, figs)
    on_page = {
        k
        for sec in spec.get("section", [])
        for r in sec["rows"]
        for c in ("what", "carb", "anchor")
        for k in re.findall(r"\{([A-Za-z0-9_.\-]+)\}", r.get(c, ""))
    }
    for p in _quoting_files(root):
        text = p.read_text()

        def fill(m: re.Match, p: Path = p) -> str:
            if m.group("key") not in figs:
                raise ResultsError(f"{p.relative_to(root)}: unknown figure {m.group('key')!r}")
            if m.group("key") not in on_page:
                raise ResultsError(
                    f"{p.relative_to(root)}: figure {m.group('key')!r} is quoted but not on the results page"
                )
            return f"<!--fig:{m.group('key')}-->{figs[m.group('key')]}<!--/fig-->"

        new = MARKER.sub(fill, text)
        new = HEADLINE.sub(lambda m: m.group(1) + table + m.group(3), new)
        if new != text:
            out[p] = new
    return out


def stale(root: Path = ROOT, spec_path: Path | None = None) -> list[Path]:
    """The files whose text differs from what the JSON gives today."""
    return [p for p, text in render(root, spec_path).items() if not p.is_file() or p.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    args = ap.parse_args(argv)
    try:
        if args.check:
            old = stale()
            for p in old:
                print(f"stale: {p.relative_to(ROOT)} (run python scripts/results_page.py)", file=sys.stderr)
            return 1 if old else 0
        for p, text in render().items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            print(f"wrote {p.relative_to(ROOT)}")
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
