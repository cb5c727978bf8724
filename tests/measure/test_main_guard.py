"""A script that calls carb at its top level, without a ``__main__`` guard, gets one clear line before any
worker starts (each worker would import the script again and call carb in turn)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_an_unguarded_script_is_told_to_guard_its_calls(tmp_path) -> None:
    p = _run(
        tmp_path,
        """
        import torch, carb
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        print(carb.measure_cost(net, (1, 3, 16, 16)))
        """,
    )
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: ") and "user_script.py calls carb from its top level" in last, p.stderr
    assert 'if __name__ == "__main__":' in last
    assert "bootstrapping phase" not in p.stderr  # no worker was started


def test_a_guarded_script_and_a_module_pass_the_check(tmp_path) -> None:
    p = _run(
        tmp_path,
        """
        from carb.measure._common import unguarded_main_script

        if __name__ == "__main__":
            print(unguarded_main_script())
        """,
    )
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr
    (tmp_path / "as_module.py").write_text(
        "from carb.measure._common import unguarded_main_script\nprint(unguarded_main_script())\n"
    )
    m = subprocess.run([sys.executable, "-m", "as_module"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert m.returncode == 0 and m.stdout.strip() == "None", m.stderr
