"""The documentation site: it builds under --strict, every page renders, the references are complete.

The site is built once per module with the installed ``mkdocs`` (``mkdocs build --strict``) into a
temporary folder. Its pages are then read as files and opened in headless Chromium (skipped without
it), as the report's browser test does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests._helpers import chromium, chromium_dump_dom

ROOT = Path(__file__).resolve().parents[2]


def _mkdocs() -> str | None:
    here = Path(sys.executable).parent / "mkdocs"
    return str(here) if here.exists() else shutil.which("mkdocs")


pytestmark = pytest.mark.skipif(_mkdocs() is None, reason="mkdocs not installed (pip install -e '.[docs]')")


def _nav_pages() -> list[str]:
    """Every Markdown page the nav of mkdocs.yml names, in order."""
    import yaml  # PyYAML comes with mkdocs

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages: list[str] = []

    def walk(item: object) -> None:
        if isinstance(item, str):
            pages.append(item)
        elif isinstance(item, list):
            for x in item:
                walk(x)
        elif isinstance(item, dict):
            for x in item.values():
                walk(x)

    walk(nav)
    return pages


def _html(page: str) -> str:
    return re.sub(r"\.md$", ".html", page)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [_mkdocs(), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return out


class _Page(HTMLParser):
    """The ids, the links (href/src) and the h1 text of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.h1 = ""
        self._in_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "link", "script", "img"):
                self.links.append(a[key])
        self._in_h1 = self._in_h1 or tag == "h1"

    def handle_endtag(self, tag: str) -> None:
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._in_h1:
            self.h1 += data


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_every_page_of_the_nav_is_built_with_its_title(site):
    pages = _nav_pages()
    assert "results.md" in pages and "reference/cli.md" in pages
    for page in pages:
        path = site / _html(page)
        assert path.is_file(), page
        assert _parse(path).h1.strip(), f"{page}: no <h1>"


def test_every_shipped_dataset_card_is_a_page(site):
    cards = [p.stem for p in (ROOT / "carb" / "data").glob("*.md")] + ["help-fbnet"]
    assert len(cards) >= 5
    for name in cards:
        path = site / "datasets" / f"{name}.html"
        assert path.is_file(), f"the card of {name} is not on the site"
        assert name in _parse(path).h1, f"{name}: the page's title is not its card's"


def test_the_quickstart_commands_are_the_readme_s():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^## Quickstart\n.*?```bash\n(.*?)```", readme, re.S | re.M)
    assert block, "README.md has no Quickstart section with a bash block"
    commands = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2
    for page in ("index.md", "getting-started.md"):
        text = (ROOT / "docs" / page).read_text()
        for command in commands:
            assert command in text, f"docs/{page} lacks the README's quickstart command: {command}"


def _visible(group, ctx):
    cmds = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            cmds[name] = cmd
    return cmds


def test_the_cli_reference_has_every_command_and_option_of_carb(site):
    import typer

    import carb.cli

    group = typer.main.get_command(carb.cli.app)
    ctx = group.context_class(group, info_name="carb")
    page = site / "reference" / "cli.html"
    parsed = _parse(page)
    text = page.read_text(encoding="utf-8")
    commands = _visible(group, ctx)
    assert len(commands) >= 10
    for name, cmd in commands.items():
        assert f"carb-{name}" in parsed.ids, f"carb {name} has no section in the CLI reference"
        sub_ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
        subs = _visible(cmd, sub_ctx) if hasattr(cmd, "list_commands") else {}
        for sub in subs:
            assert f"carb-{name}-{sub}" in parsed.ids, f"carb {name} {sub} has no section"
        for p in cmd.get_params(sub_ctx):
            if getattr(p, "hidden", False) or p.param_type_name == "argument":
                continue
            for opt in p.opts:
                assert f"<code>{opt}" in text, f"carb {name}: option {opt} is missing from the CLI reference"


def test_the_api_reference_shows_every_public_name_of_carb(site):
    import carb

    parsed = _parse(site / "reference" / "api" / "carb.html")
    for name, (module, attr) in carb._FRONT_DOOR.items():
        assert f"{module}.{attr}" in parsed.ids, f"carb.{name} ({module}.{attr}) is not documented"
    assert set(carb.__all__) - {"__version__"} == set(carb._FRONT_DOOR)


def test_the_search_index_covers_the_guides_and_the_references(site):
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {d["location"].split("#")[0] for d in index["docs"]}
    for page in ("index.html", "guides/screen.html", "reference/cli.html", "reference/api/carb.html"):
        assert page in locations, page
    assert any("accept" in d["text"] for d in index["docs"] if d["location"].startswith("guides/screen.html"))


def test_every_internal_link_resolves(site):
    broken = []
    parsed: dict[Path, _Page] = {}
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        parsed[page] = _parse(page)
    for page in pages:
        for link in parsed[page].links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external: not this site's to check
            path = unquote(parts.path)
            # an absolute link (the 404 page's) is served from the site's root
            base = site if path.startswith("/") else page.parent
            target = (base / path.lstrip("/")).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed.get(target) or _parse(target)
                if unquote(parts.fragment) not in ids.ids:
                    broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:20])


_HARNESS = """<!doctype html><html><body data-done="0"><pre id="out"></pre><script>
const pages = %s;
const out = {};
function next(i) {
  if (i >= pages.length) {
    document.getElementById("out").textContent = JSON.stringify(out);
    document.body.dataset.done = "1";
    return;
  }
  const f = document.createElement("iframe");
  f.onload = () => {
    let r = {};
    try {
      const d = f.contentDocument;
      const h1 = d.querySelector("article h1, h1");
      r = {h1: h1 ? h1.textContent.trim() : "", title: d.title, nav: d.querySelectorAll("nav a").length};
    } catch (e) { r = {error: String(e)}; }
    out[pages[i]] = r;
    f.remove();
    next(i + 1);
  };
  f.src = pages[i];
  document.body.appendChild(f);
}
next(0);
</script></body></html>
"""


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_every_page_of_the_nav_renders_in_headless_chromium(site, tmp_path):
    pages = [_html(p) for p in _nav_pages()]
    harness = site / "_render_check.html"
    harness.write_text(_HARNESS % json.dumps(pages))
    try:
        p = chromium_dump_dom(
            harness.as_uri(),
            tmp_path / "profile",
            budget_ms=30000,
            extra=("--allow-file-access-from-files",),
            timeout=180,
        )
    finally:
        harness.unlink()
    assert p.returncode == 0, p.stderr[-2000:]
    assert 'data-done="1"' in p.stdout, "the pages did not all load"
    m = re.search(r'<pre id="out">(.*?)</pre>', p.stdout, re.S)
    rendered = json.loads(unescape(m.group(1)))
    for page in pages:
        r = rendered.get(page)
        assert r and not r.get("error"), f"{page}: {r}"
        assert r["h1"] and "404" not in r["title"], f"{page}: {r}"
        assert r["nav"] > 10, f"{page}: the site's navigation is missing"
