"""Every third-party package the code imports is declared in pyproject.toml: a fresh install from
it has what each module needs. Imports are read from the source (ast), so lazy imports inside
functions count too; modules map to distributions through the installed metadata."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("robo_async", "hal", "policies", "sim", "hardware")
OWN = {*ROOMS, "tests"}
# Imports that need not be declared, each with why. (Keep it short: a package the code needs to
# run belongs in pyproject.toml.) Nothing needs it today: optional hardware goes through lerobot.
ALLOWED: dict[str, str] = {}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("lerobot[dataset]>=0.6" -> "lerobot")."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert m, f"pyproject.toml: cannot read requirement {requirement!r}"
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def declared() -> set[str]:
    """Distributions in pyproject.toml's dependencies and optional dependencies (the extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {_name(r) for r in reqs}


def imported() -> dict[str, set[str]]:
    """Top-level third-party module -> the source files importing it (stdlib and our own skipped)."""
    out: dict[str, set[str]] = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in OWN:
                        out.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return out


def test_the_import_scan_sees_our_third_party_imports():
    found = imported()
    assert {"numpy", "zmq", "lmdb", "torch", "mujoco", "aiohttp"} <= set(found)
    assert not set(found) & (OWN | {"os", "json", "typing"})


def test_every_imported_package_is_declared_in_pyproject():
    dists = importlib.metadata.packages_distributions()
    have = declared()
    problems = []
    for module, files in sorted(imported().items()):
        if module in ALLOWED:
            continue
        where = ", ".join(sorted(files)[:3]) + (" ..." if len(files) > 3 else "")
        names = dists.get(module)
        if not names:
            problems.append(f"{module}: imported by {where}, but no installed distribution provides it")
            continue
        if not {_name(n) for n in names} & have:
            problems.append(
                f"{module}: imported by {where}; declare {' or '.join(sorted(set(names)))} in pyproject.toml"
            )
    assert not problems, "undeclared imports:\n" + "\n".join(problems)
