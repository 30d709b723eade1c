"""The algorithm registry: every folder under learner/algorithms registers itself, found by discovery."""

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import robo_async.learner.algorithms as package
from robo_async.learner.algorithms import base


def test_every_algorithm_folder_is_found_without_a_list():
    folders = sorted(p.parent.name for p in Path(package.__path__[0]).glob("*/__init__.py"))
    assert {"bc", "qc", "sac"} <= set(folders)
    # a fresh interpreter: nothing imported the folders but the registry's own discovery
    code = "import json; from robo_async.learner.algorithms import algorithms; print(json.dumps(algorithms()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == folders
    loader = inspect.getsource(base._load)
    assert not [name for name in folders if re.search(rf"\b{name}\b", loader)], loader  # no hand-kept list
