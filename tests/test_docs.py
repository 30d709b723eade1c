"""The docs site builds offline with warnings as errors, README stays short, and the config
reference generated from the dataclasses lists the keys with their defaults."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_docs_build_strict(site: Path) -> None:
    for page in (
        "index.html",
        "reference/config/index.html",
        "reference/cli/index.html",
        "benchmarks/index.html",
        "architecture/index.html",
        "guides/sim-training/index.html",
    ):
        assert (site / page).is_file(), page


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the docs site (docs/) carries the rest"


def _rows(page: Path) -> dict[tuple[str, str], str]:
    """(section heading, key) -> default, from the generated tables of the config page."""
    text = page.read_text()
    rows: dict[tuple[str, str], str] = {}
    section = ""
    for m in re.finditer(
        r"<h[23][^>]*>(.*?)</h[23]>|<tr>\s*<td><code>([^<]+)</code></td>\s*<td><code>[^<]*</code></td>"
        r"\s*<td><code>([^<]*)</code></td>",
        text,
        re.DOTALL,
    ):
        if m.group(1) is not None:
            section = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip().rstrip("¶").strip()
        else:
            rows[(section, m.group(2))] = html.unescape(m.group(3))
    return rows


def test_config_reference_lists_keys_with_defaults(site: Path) -> None:
    rows = _rows(site / "reference/config/index.html")
    by_key = {key: default for (_, key), default in rows.items()}
    assert by_key.get("actor.inference") == "auto", sorted(by_key)[:20]
    assert by_key.get("learner.publish_every") == "10"
    assert by_key.get("buffer.commit_every") == "512"
    assert by_key.get("budget.seconds") == "600"
    assert rows.get(("algo=qc", "algo.gamma")) == "0.97"
    assert rows.get(("algo=sac", "algo.gamma")) == "0.9"
    assert rows.get(("task=reach", "task.success_radius")) == "0.02"


def test_config_reference_meaning_is_the_source_comment() -> None:
    """The meaning column is the field's own comment, nothing invented."""
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs/hooks/config_reference.py")
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    from robo_async.learner.algorithms import config_class

    rows = {key: (typ, default, meaning) for key, typ, default, meaning in hook.rows(config_class("qc"), "algo.")}
    assert rows["algo.gamma"] == (
        "float",
        "0.97",
        "discount per control tick (a chunk of H ticks is discounted by gamma^H)",
    )
    assert rows["algo.max_version_lag"][:2] == ("int | None", "null")
    assert rows["algo.critic_hidden"] == ("tuple[int, ...]", "[256, 256, 256]", "")
