"""robo_async as a package: a wheel built from the sources and installed (not editable) runs
`robo-async train` from any directory, its configs shipped inside it; the top-level names it
installs belong to no other installed distribution and to no standard-library module."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".venv", ".git", "runs", "build", "site", "outputs", "bench_results", "__pycache__", ".pytest_cache"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of the working tree, built in a copy (the checkout gets no build/ or egg-info)."""
    src, out = tmp_path_factory.mktemp("src") / "robo_async", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, src, ignore=lambda d, names: [n for n in names if n in SKIP or n.endswith(".egg-info")])
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (whl,) = out.glob("robo_async-*.whl")
    return whl


def test_the_wheel_carries_every_config_and_asset(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"robo_async/configs/{p.relative_to(ROOT / 'configs')}" for p in (ROOT / "configs").rglob("*.yaml")}
    assert configs and configs <= names, sorted(configs - names)
    assert {"sim/assets/so101_reach.xml", "robo_async/dashboard/page.html"} <= names


@pytest.mark.e2e
def test_an_installed_wheel_trains_from_any_directory(wheel: Path, tmp_path: Path):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # ahead of the checkout's editable install
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import robo_async, robo_async.config as c; print(robo_async.__file__); print(c.CONFIG_DIR)",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [Path(p).is_relative_to(site) for p in where] == [True, True], where
    run = subprocess.run(
        [
            str(site / "bin" / "robo-async"),
            "train",
            "budget.env_steps=300",
            "eval_episodes=0",
            "dashboard.port=null",
            "policy.hidden=[32]",
            "algo.hidden=[32]",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (run_dir,) = (elsewhere / "runs").iterdir()
    assert (run_dir / "config.yaml").is_file() and (run_dir / "replay").is_dir()
    assert "env-step budget of 300 reached" in run.stdout


def test_our_top_level_names_are_ours_alone(wheel: Path):
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist() if "/" in n and ".dist-info" not in n}
    assert tops == {"robo_async", "hal", "sim", "policies", "hardware"}
    owners = importlib.metadata.packages_distributions()
    clashes = {t: sorted(set(owners.get(t, [])) - {"robo_async"}) for t in tops}
    assert not any(clashes.values()), f"installed distributions that also provide our top-level names: {clashes}"
    assert not tops & set(sys.stdlib_module_names)
