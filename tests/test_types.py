"""A type checker (mypy, basic mode: pyproject.toml [tool.mypy]) passes over the rooms whose
interfaces others build on: hal/, robo_async/transport/ and robo_async/buffer/."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["hal", "robo_async/transport", "robo_async/buffer"]


def test_mypy_finds_no_errors_in_hal_transport_and_buffer():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *CHECKED], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"mypy {' '.join(CHECKED)} (exit {done.returncode}):\n{done.stdout}{done.stderr}"
