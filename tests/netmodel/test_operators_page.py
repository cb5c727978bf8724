"""The supported-operators page is generated from the code and the shipped data, and up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operators_page_is_generated_and_current() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "operators_page.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    page = (ROOT / "docs" / "guides" / "operators.md").read_text()
    from carb.graph import KNOWN_OPS

    table = page.split("<!--operators:table-->")[1].split("<!--/operators:table-->")[0]
    # every op capture reads has its row, with how each shipped model prices it
    for op in KNOWN_OPS:
        assert op == "view" or f"| {op}" in table, op
    assert "fallback: movement" in table and "own model (conv_dw" in table
