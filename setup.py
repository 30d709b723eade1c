"""Packaging beyond what pyproject.toml can say: the repository's top-level `configs/` (Hydra's
config directory, its groups as subfolders) ships inside the package as `robo_async.configs`, so an
installed robo_async finds its configs from any directory (robo_async/config.py)."""

from pathlib import Path

from setuptools import find_packages, setup

GROUPS = sorted(p.name for p in Path(__file__).parent.joinpath("configs").iterdir() if p.is_dir())

setup(
    packages=[
        *find_packages(include=["robo_async*", "hal*", "policies*", "sim*", "hardware*"]),
        "sim.assets",
        "robo_async.configs",
        *(f"robo_async.configs.{g}" for g in GROUPS),
    ],
    package_dir={"robo_async.configs": "configs"},
    package_data={
        "sim.assets": ["*.xml"],
        "robo_async": ["dashboard/*.html"],
        "robo_async.configs": ["*.yaml"],
        **{f"robo_async.configs.{g}": ["*.yaml"] for g in GROUPS},
    },
)
