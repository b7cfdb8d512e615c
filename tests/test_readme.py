"""The README's example is real: run it as a user would."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_readme_starts_with_the_two_commands(repo: Path) -> None:
    head = "\n".join((repo / "README.md").read_text().splitlines()[:10])
    assert "make demo" in head and "make test" in head


def test_readme_python_example_runs(repo: Path, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (repo / "README.md").read_text(), re.DOTALL)
    assert blocks, "README.md has no python example"
    assert len(blocks[0].splitlines()) <= 20
    out = subprocess.run(
        [sys.executable, "-c", blocks[0]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[b'greeting', b'hello 0']",
        "[b'greeting', b'hello 1']",
        "[b'greeting', b'hello 2']",
    ]
