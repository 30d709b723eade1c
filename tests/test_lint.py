"""Ruff over the whole tree, as configured in pyproject.toml ([tool.ruff]): lint rules and the
formatter's check. A failure names each file and rule; `ruff check --fix . && ruff format .` mends most."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


@pytest.mark.parametrize(
    "command", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]], ids=["lint", "format"]
)
def test_ruff(command):
    assert RUFF, "ruff not found: it comes with the test extra (pip install -e '.[test]')"
    res = subprocess.run([RUFF, *command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
