"""Every file the package needs at run time is in the wheel: each tracked non-Python file
under carb/ matches a pattern of [tool.setuptools.package-data] (globbed as setuptools
does: relative to the package, ``*`` never crossing a directory)."""

from __future__ import annotations

import glob
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "carb"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.split() if not f.endswith(".py") and "__pycache__" not in f]


def test_package_data_covers_every_shipped_file() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["carb"]
    packaged = {
        str(Path(p).relative_to(ROOT))
        for pat in patterns
        for p in glob.glob(str(ROOT / "carb" / pat))
        if Path(p).is_file()
    }
    tracked = _tracked()
    assert any(".netmodel/" in f for f in tracked)  # the directory-shaped data this test was written for
    missing = [f for f in tracked if f not in packaged]
    assert not missing, f"not in the wheel (add to package-data in pyproject.toml): {missing}"
