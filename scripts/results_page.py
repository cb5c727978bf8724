"""Generate the results page, the README's headline table and every figure quoted in the docs
from the benchmarks' JSON, so that no measured figure is ever typed by hand.

    python scripts/results_page.py                    # write docs/results.md, README.md's table, figure markers
    python scripts/results_page.py --check            # exit 1 when a page is stale, 2 when a cited JSON is refused
    python scripts/results_page.py --rerun [--quick]  # rerun the data-only figures; exit 1 on a changed digit
    python scripts/results_page.py --rerun --only h200

The figures, their sources and the page's sections are declared in ``benchmarks/results.toml``:

- a **source** names one JSON file under the repository, the command that writes it, the
  machine kind it was measured on (``machine``; ``kind``, a short form for the tables) and the
  date (the date the JSON records, in ``provenance.utc``, ``date_utc`` or ``date``, wins over
  the declared one). A source is **data only** (computed from shipped data: its command reruns
  anywhere and gives the same digits on a machine of the same kind) unless it says
  ``timing = true`` (measured on hardware: it moves with the machine and its load).
  ``quick = true`` puts a data-only source in ``--rerun --quick``; ``needs`` names the modules
  its command imports beyond carb's own (``--rerun`` skips it, saying so, where one is missing);
  ``also`` lists JSONs the same command wrote on other machine kinds (floating point in the
  learners and BLAS differs by CPU kind): a rerun compares with the one of its own kind, the
  page prints from ``json``;
- a **figure** picks one number out of a source with a path of keys, where a table (an
  inline TOML table) in the path picks the one list element whose fields equal it, and formats
  it with a Python format spec (``.1%``, ``.3f``, ``,d``); ``reduce`` (``min``, ``max``,
  ``len``) turns a list of numbers into one;
- a **section** is one table of the page, under an intro: each row a figure of CARB beside its
  anchor (a published figure, quoted as text, or another figure such as a baseline's); ``{KEY}``
  in a row or an intro is figure KEY;
- a **study** anchor is a figure of the CARB paper: its value, setup and where its protocol
  differs from ours; a cell quotes it as ``{study:KEY}``.

Provenance or no figure: every cited JSON, data-only or measured on hardware, records in
``provenance`` the commit it was computed at from a clean tree (``git.commit``, ``git.dirty``
false), the machine's fingerprint (``machine.fingerprint``) and the library versions
(``versions``), as ``benchmarks/_common.py`` writes them; a JSON without them is refused, one line
per file. A timing source's page entry also gives its date and machine kind and says it was not
rerun at HEAD.

Anywhere in README.md and docs/ (outside the generated page), ``<!--fig:KEY-->...<!--/fig-->``
is replaced by figure KEY, and the block between ``<!--results:headline-->`` and
``<!--/results:headline-->`` by the table of the rows marked ``headline = true``.
Nothing here runs code from the files it reads: TOML and JSON only; ``--rerun`` runs the
commands ``benchmarks/results.toml`` declares, as a shell would.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "benchmarks" / "results.toml"
PAGE = ROOT / "docs" / "results.md"
MARKER = re.compile(r"<!--fig:(?P<key>[A-Za-z0-9_.\-]+)-->(?P<text>.*?)<!--/fig-->", re.S)
HEADLINE = re.compile(r"(<!--results:headline-->\n)(?P<body>.*?)(<!--/results:headline-->)", re.S)
PLACEHOLDER = re.compile(r"\{(study:)?([A-Za-z0-9_.\-]+)\}")
COMMIT = re.compile(r"[0-9a-f]{40}")
REDUCERS = {"min": min, "max": max, "len": len}


class ResultsError(Exception):
    """A cited JSON is missing or refused, or a figure's path does not lead to exactly one number."""


@dataclass(frozen=True)
class Source:
    """One JSON file of results and how it was made."""

    id: str
    json: str
    command: str
    machine: str
    date: str
    data: Any
    kind: str = ""
    timing: bool = False
    also: dict[str, Any] = field(default_factory=dict)

    @property
    def provenance(self) -> dict:
        """The JSON's ``provenance`` (empty where it records none)."""
        prov = self.data.get("provenance") if isinstance(self.data, dict) else None
        return prov if isinstance(prov, dict) else {}

    @property
    def commit(self) -> str | None:
        """The commit the JSON records it was written at, if any."""
        git = self.provenance.get("git")
        commit = git.get("commit") if isinstance(git, dict) else None
        return commit if isinstance(commit, str) and COMMIT.fullmatch(commit) else None


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
        also = {}
        for other in s.get("also", []):
            try:
                also[other] = json.loads((root / other).read_text())
            except (OSError, ValueError) as e:
                raise ResultsError(f"source {s['id']!r}: {other} (also) is missing or not readable JSON ({e})") from e
        out[s["id"]] = Source(
            s["id"],
            s["json"],
            s["command"],
            s["machine"],
            date,
            data,
            s.get("kind", s["machine"]),
            bool(s.get("timing", False)),
            also,
        )
    return out


def reference(source: Source, new_data: Any) -> Source:
    """What a rerun on ``new_data``'s machine kind compares with: the JSON of that kind (``also``), else the source."""
    kind = _machine_kind(new_data)
    for path, data in source.also.items():
        if kind is not None and _machine_kind(data) == kind:
            return replace(source, json=path, data=data)
    return source


def provenance_problem(data: Any) -> str | None:
    """What a result JSON's provenance lacks for a published data-only figure (``None``: nothing).

    It must record the commit, that the tree was clean, the machine's fingerprint and the versions.
    """
    prov = data.get("provenance") if isinstance(data, dict) else None
    if not isinstance(prov, dict):
        return "records no provenance (commit, clean tree, machine fingerprint, versions)"
    git = prov.get("git") if isinstance(prov.get("git"), dict) else {}
    machine = prov.get("machine") if isinstance(prov.get("machine"), dict) else {}
    missing = []
    commit = git.get("commit")
    if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
        missing.append("commit")
    if not isinstance(git.get("dirty"), bool):
        missing.append("clean-tree flag")
    if not (isinstance(machine.get("fingerprint"), dict) and machine["fingerprint"]):
        missing.append("machine fingerprint")
    if not (isinstance(prov.get("versions"), dict) and prov["versions"]):
        missing.append("versions")
    if missing:
        return "records no " + ", ".join(missing)
    if git["dirty"]:
        return f"was written from a dirty tree (uncommitted changes on {commit[:7]}): not publishable"
    return None


def refused(spec: dict, sources: dict[str, Source]) -> list[str]:
    """One line per cited JSON that may not be published: one without full provenance, measured or data-only."""
    lines = []
    for s in sources.values():
        for path, data in {s.json: s.data, **s.also}.items():
            problem = provenance_problem(data)
            if problem:
                lines.append(f"source {s.id!r}: {path} {problem}")
    return lines


def _pick(data: Any, path: list, where: str, reduce: str | None = None) -> Any:
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
    if reduce is not None:
        if reduce not in REDUCERS:
            raise ResultsError(f"{where}: reduce {reduce!r} is none of {', '.join(REDUCERS)}")
        if not isinstance(cur, list) or not cur or not all(_is_number(v) for v in cur):
            raise ResultsError(f"{where}: reduce {reduce!r} needs a list of numbers, found {cur!r}")
        cur = REDUCERS[reduce](cur)
    if not _is_number(cur):
        raise ResultsError(f"{where}: leads to {cur!r}, not a number")
    return cur


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _figure_text(f: dict, data: Any) -> str:
    """Figure ``f`` of ``data``, formatted as the page prints it."""
    value = _pick(data, f["path"], f"figure {f['key']!r}", f.get("reduce")) * f.get("scale", 1)
    fmt = f.get("format", "")
    if fmt.endswith("d"):
        value = int(round(value))
    return f"{f.get('prefix', '')}{format(value, fmt)}{f.get('suffix', '')}"


def figures(spec: dict, sources: dict[str, Source]) -> dict[str, str]:
    """Every declared figure, formatted: ``{key: text}``."""
    out = {}
    for f in spec.get("figure", []):
        if f["source"] not in sources:
            raise ResultsError(f"figure {f['key']!r}: unknown source {f['source']!r}")
        out[f["key"]] = _figure_text(f, sources[f["source"]].data)
    return out


def _study(spec: dict) -> dict[str, dict]:
    return {a["key"]: a for a in spec.get("study", [])}


def _cell(text: str, figs: dict[str, str], where: str, study: dict[str, dict] | None = None, page: str = "") -> str:
    """A row cell: ``{key}`` placeholders become figures, ``{study:key}`` the study's anchor; the rest is text."""
    study = study or {}

    def sub(m: re.Match) -> str:
        key = m.group(2)
        if m.group(1):
            if key not in study:
                raise ResultsError(f"{where}: unknown study anchor {key!r}")
            return f"[study]({page}#study): {study[key]['figure']}"
        if key not in figs:
            raise ResultsError(f"{where}: unknown figure {key!r}")
        return figs[key]

    return PLACEHOLDER.sub(sub, text)


def _when(src: Source) -> str:
    """The table's machine-and-date cell: where a data-only figure was computed and at which commit,
    or that a timing figure was not rerun at HEAD."""
    if src.timing:
        return f"{src.kind}, {src.date}, not rerun at HEAD"
    machine = src.provenance.get("machine") if isinstance(src.provenance.get("machine"), dict) else {}
    fp = machine.get("fingerprint") if isinstance(machine.get("fingerprint"), dict) else {}
    on = f" (on {fp.get('name') or 'an unknown machine'}, {fp.get('kernels') or '?'})" if fp else ""
    return f"{src.kind}{on}, {src.date}, at {src.commit[:7]}" if src.commit else f"{src.kind}, {src.date}"


def _table(rows: list[dict], figs: dict[str, str], sources: dict[str, Source], where: str, study: dict) -> list[str]:
    lines = ["| What | CARB | Anchor or baseline | Machine, date | Source |", "|---|---|---|---|---|"]
    for r in rows:
        src = sources[r["source"]]
        cells = [_cell(r.get(c, "—"), figs, where, study) for c in ("what", "carb", "anchor")]
        lines.append("| " + " | ".join(cells) + f" | {_when(src)} | [{src.id}](#{src.id}) |")
    return lines


def _recorded(src: Source) -> str:
    """Where a source's JSON says it was written: commit, clean tree, machine, key versions."""
    prov = src.provenance
    git = prov.get("git") if isinstance(prov.get("git"), dict) else {}
    machine = prov.get("machine") if isinstance(prov.get("machine"), dict) else {}
    fp = machine.get("fingerprint") if isinstance(machine.get("fingerprint"), dict) else {}
    tree = "a dirty tree" if git.get("dirty") else "a clean tree"
    parts = [f"Written at commit `{src.commit[:12]}` from {tree}"]
    if fp:
        parts.append(f"on {fp.get('name') or 'an unknown machine'} ({fp.get('kernels') or '?'} kernels)")
    versions = prov.get("versions") if isinstance(prov.get("versions"), dict) else {}
    libs = ", ".join(f"{k} {versions[k]}" for k in ("python", "torch", "numpy", "scikit-learn") if k in versions)
    text = " ".join(parts) + (f"; {libs}" if libs else "") + "."
    if src.timing:
        text += " Measured on hardware: not rerun at HEAD."
    return text


def page(spec: dict, sources: dict[str, Source], figs: dict[str, str]) -> str:
    """The whole results page as Markdown."""
    study = _study(spec)
    out = [
        "# Results",
        "",
        spec["page"]["intro"].strip(),
        "",
        "<!-- generated by `python scripts/results_page.py` from benchmarks/results.toml; do not edit -->",
    ]
    for sec in spec.get("section", []):
        where = f"section {sec['title']!r}"
        out += ["", f"## {sec['title']}", "", _cell(sec["intro"].strip(), figs, where, study), ""]
        out += _table(sec["rows"], figs, sources, where, study)
    if study:
        about = spec.get("study_page", {})
        out += ["", '<a id="study"></a>', "", "## The study's anchors", "", about.get("intro", "").strip(), ""]
        out += [
            "| Anchor | The study's figure | Its setup | Where its protocol differs from ours |",
            "|---|---|---|---|",
        ]
        for a in study.values():
            out.append(f"| {a['what']} | {a['figure']} | {a['setup']} | {a['differs']} |")
    out += [
        "",
        "## Sources",
        "",
        "Each figure above comes from one of these files. Rerun the command from the repository's root "
        "on a machine of the kind named. A data-only figure reruns to its printed digit on a machine of the "
        "same kind (`python scripts/results_page.py --rerun --only ID` checks it); a figure measured on "
        "hardware moves with the machine and its load, and keeps the date and machine it was measured on.",
        "",
    ]
    for s in sources.values():
        figures_are = "measured on hardware" if s.timing else "data only"
        out += [
            f'<a id="{s.id}"></a>',
            f"**{s.id}** ({figures_are}): `{s.json}` — {s.machine}, {s.date}. {_recorded(s)}",
            "",
            "```bash",
            s.command,
            "```",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def headline(spec: dict, sources: dict[str, Source], figs: dict[str, str]) -> str:
    """The README's table: the rows marked ``headline``, linked to the results page."""
    study = _study(spec)
    rows = [r for sec in spec.get("section", []) for r in sec["rows"] if r.get("headline")]
    lines = ["| What | CARB | Anchor or baseline |", "|---|---|---|"]
    for r in rows:
        cells = [_cell(r.get(c, "—"), figs, "headline", study, "docs/results.md") for c in ("what", "carb", "anchor")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _quoting_files(root: Path) -> list[Path]:
    docs = sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return [
        p
        for p in [root / "README.md", *docs]
        if p.is_file() and p.resolve() != (root / "docs" / "results.md").resolve()
    ]


def _spec(root: Path, spec_path: Path | None) -> dict:
    return tomllib.loads((spec_path or root / "benchmarks" / "results.toml").read_text())


def render(root: Path = ROOT, spec_path: Path | None = None) -> dict[Path, str]:
    """Every file this script writes, with its generated text: ``{path: text}``.

    Raises:
        ResultsError: a cited JSON is missing or refused (one line per refused file), or a
            figure or placeholder does not resolve.
    """
    spec = _spec(root, spec_path)
    sources = _load_sources(spec, root)
    bad = refused(spec, sources)
    if bad:
        raise ResultsError("\n".join(bad))
    figs = figures(spec, sources)
    out = {root / "docs" / "results.md": page(spec, sources, figs)}
    table = headline(spec, sources, figs)
    on_page = {
        m.group(2)
        for sec in spec.get("section", [])
        for text in [sec.get("intro", ""), *(r.get(c, "") for r in sec["rows"] for c in ("what", "carb", "anchor"))]
        for m in PLACEHOLDER.finditer(text)
        if not m.group(1)
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


# -- rerunning the data-only figures ---------------------------------------------------------------


def _digits(text: str) -> tuple[int, int] | None:
    """A printed figure as (its digits as one integer, decimals): ``"0.988"`` -> ``(988, 3)``; else ``None``."""
    found = re.findall(r"-?[\d,]*\.?\d+", text)
    if len(found) != 1:
        return None
    num = found[0].replace(",", "")
    decimals = len(num.split(".")[1]) if "." in num else 0
    return int(num.replace(".", "")), decimals


def last_digit_only(old: str, new: str) -> bool:
    """Whether two printed figures differ by one unit of their last printed digit, and nothing else."""
    a, b = _digits(old), _digits(new)
    same_frame = re.sub(r"[\d.,-]", "", old) == re.sub(r"[\d.,-]", "", new)
    return a is not None and b is not None and a[1] == b[1] and abs(a[0] - b[0]) == 1 and same_frame


def _machine_kind(data: Any) -> str | None:
    machine = data.get("provenance", {}).get("machine") if isinstance(data, dict) else None
    return machine.get("kind") if isinstance(machine, dict) else None


def compare(spec: dict, source: Source, new_data: Any) -> tuple[list[str], list[str]]:
    """The figures of ``source`` printed from its committed JSON against ``new_data``'s.

    Returns:
        ``(changed, moved)``: one line per figure whose printed digits changed, and one per
        figure that moved by one unit of its last digit on a machine of another kind than the
        committed JSON's (the page allows that; on the same kind it is a change).
    """
    old_kind, new_kind = _machine_kind(source.data), _machine_kind(new_data)
    other_kind = old_kind is not None and new_kind is not None and old_kind != new_kind
    changed, moved = [], []
    for f in spec.get("figure", []):
        if f["source"] != source.id:
            continue
        old = _figure_text(f, source.data)
        try:
            new = _figure_text(f, new_data)
        except ResultsError as e:
            changed.append(f"changed: {source.id} {f['key']}: {old} -> none ({e})")
            continue
        if new == old:
            continue
        if other_kind and last_digit_only(old, new):
            moved.append(
                f"last digit: {source.id} {f['key']}: {old} -> {new} "
                f"(machine kind {new_kind} here, {old_kind} in the JSON)"
            )
        else:
            changed.append(f"changed: {source.id} {f['key']}: {old} -> {new}")
    return changed, moved


def _missing_module(s: dict) -> str | None:
    for name in s.get("needs", []):
        if importlib.util.find_spec(name) is None:
            return name
    return None


def rerun(
    root: Path = ROOT,
    spec_path: Path | None = None,
    quick: bool = False,
    only: list[str] | None = None,
    out=sys.stdout,
) -> int:
    """Rerun the data-only sources' commands, each writing to a temporary JSON, and compare every figure's digits.

    Args:
        root: the repository the commands run in.
        spec_path: ``benchmarks/results.toml`` of another tree.
        quick: only the sources marked ``quick``.
        only: only these source ids.
        out: where the report's lines go.

    Returns:
        0 when every figure reprints the same digits, 1 when one changed (or a command failed),
        2 when the selection names an unknown or timing source.
    """
    spec = _spec(root, spec_path)
    declared = {s["id"]: s for s in spec.get("source", [])}
    unknown = [i for i in only or [] if i not in declared]
    timing = [i for i in only or [] if i in declared and declared[i].get("timing")]
    if unknown or timing:
        for i in unknown:
            print(f"error: no source {i!r} in {spec_path or 'benchmarks/results.toml'}", file=out)
        for i in timing:
            print(f"error: source {i!r} is a timing source: measured on hardware, never rerun here", file=out)
        return 2
    sources = _load_sources(spec, root)
    todo = [
        s
        for s in declared.values()
        if not s.get("timing") and (not quick or s.get("quick")) and (not only or s["id"] in only)
    ]
    failed = changed = 0
    t_all = time.perf_counter()
    for s in todo:
        missing = _missing_module(s)
        if missing:
            print(f"skipped: {s['id']} (needs {missing}, not importable here)", file=out, flush=True)
            continue
        if s["json"] not in s["command"]:
            print(f"failed: {s['id']}: its command does not name its JSON {s['json']}", file=out, flush=True)
            failed += 1
            continue
        with tempfile.TemporaryDirectory(prefix="rerun-") as tmp:
            target = Path(tmp) / Path(s["json"]).name
            t0 = time.perf_counter()
            p = subprocess.run(
                ["bash", "-c", s["command"].replace(s["json"], str(target))],
                cwd=root,
                capture_output=True,
                text=True,
                env=os.environ.copy(),
            )
            took = time.perf_counter() - t0
            if p.returncode != 0 or not target.is_file():
                tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
                print(f"failed: {s['id']} (exit {p.returncode}, {took:.0f} s): {tail[0]}", file=out, flush=True)
                failed += 1
                continue
            new_data = json.loads(target.read_text())
        ref = reference(sources[s["id"]], new_data)
        lines, moved = compare(spec, ref, new_data)
        if ref.json != s["json"]:
            print(f"compared with {ref.json}: written on this machine kind", file=out, flush=True)
        for line in lines + moved:
            print(line, file=out, flush=True)
        n = sum(1 for f in spec.get("figure", []) if f["source"] == s["id"])
        status = "CHANGED" if lines else "same digits"
        print(f"{status}: {s['id']}, {n - len(lines)} of {n} figures ({took:.0f} s)", file=out, flush=True)
        changed += bool(lines)
    print(
        f"reran {len(todo)} data-only sources in {time.perf_counter() - t_all:.0f} s: "
        f"{changed} changed, {failed} failed",
        file=out,
    )
    return 1 if changed or failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    ap.add_argument(
        "--rerun", action="store_true", help="rerun the data-only figures' commands; exit 1 on a changed digit"
    )
    ap.add_argument("--quick", action="store_true", help="with --rerun: only the sources marked quick")
    ap.add_argument("--only", action="append", metavar="ID", help="with --rerun: only this source (repeatable)")
    args = ap.parse_args(argv)
    try:
        if args.rerun:
            return rerun(quick=args.quick, only=args.only)
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
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
