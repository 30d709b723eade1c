"""Rooms point one way (DESIGN.md, "Rooms" and "Imports point one way"). Every import in the
source packages is read with `ast`, at module level and inside functions, and checked against
the room order:

    entry modules (cli, config, commands/<verb>, bench/)
      -> launch -> actor | learner | serve | dashboard -> buffer -> transport       (robo_async)
    robo_async -> hardware -> sim -> hal;  robo_async -> policies -> hal

A room may import itself and any room below it, never one above it or beside it (`actor`,
`learner`, `serve` and `dashboard` share a floor and never import each other). Entry modules are
imported by nothing, apart from the allowances in ENTRY_ALLOWED, each with its reason. Each
command in `robo_async/commands/` (one module per verb) is an entry module of its own.

Nor do modules import in circles: in the graph of module-level imports (those a module runs when
it is imported, `if TYPE_CHECKING:` blocks included; imports inside functions left out) no module
reaches itself. A type two modules share lives on a floor below both (`launch/plan.py`,
`launch/options.py`, `learner/config.py`), not behind a `TYPE_CHECKING` guard.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("robo_async", "hal", "policies", "sim", "hardware")
OUTER = ("policies", "hardware", "sim", "hal")  # the packages beside robo_async

# room -> the rooms it may import (besides itself). The order of DESIGN.md, "Imports point one way".
BELOW: dict[str, set[str]] = {
    "hal": set(),
    "sim": {"hal"},
    "hardware": {"hal", "sim"},
    "policies": {"hal"},
    "transport": set(OUTER),
    "buffer": {"transport", *OUTER},
    "actor": {"buffer", "transport", *OUTER},
    "learner": {"buffer", "transport", *OUTER},
    "serve": {"buffer", "transport", *OUTER},
    "dashboard": {"buffer", "transport", *OUTER},  # imports no runtime (actor, learner, serve, launch)
    "launch": {"actor", "learner", "serve", "dashboard", "buffer", "transport", *OUTER},
}
BELOW["entry"] = {*BELOW["launch"], "launch"}
ROBO_ROOMS = ("transport", "buffer", "actor", "learner", "serve", "dashboard", "launch")
# third-party packages a room must not import
BANNED = {"hal": {"torch"}}

# (importing entry module, imported entry module) -> why it is allowed. An entry module is a
# top-level module of robo_async (`robo_async.cli`), a command (`robo_async.commands.train`) or
# the `robo_async.bench` package.
ENTRY_ALLOWED: dict[tuple[str, str], str] = {
    ("robo_async.cli", "*"): "cli.py dispatches each command to its module",
    ("*", "robo_async.config"): "config.py is the top floor's own helper (compose_config, UserError); "
    "it imports no other entry module (checked below)",
    ("robo_async.commands.*", "robo_async.commands.args"): "args.py is the commands' one parser of key=value "
    "arguments and the help of the Hydra ones; it imports no other entry module but config (checked below)",
    ("robo_async.commands.bench", "robo_async.bench"): "the bench command runs the registered benchmarks",
    ("robo_async.bench", "robo_async.commands.train"): "bench learn-reach runs the train command's plan end to end",
    ("robo_async.bench", "robo_async.commands.bc"): "bench remote-inference trains its policy with the bc command",
    ("robo_async.bench", "robo_async.commands.args"): "each benchmark declares its keys with the commands' one "
    "key=value parser (`arg`), which parses them",
}
# Known breaks still being mended (issue 25): (file, imported module) -> why. Keep this empty:
# an entry whose import is gone fails test_known_breaks_are_still_there, so it goes too.
KNOWN_BREAKS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    file: str  # relative to the repository root
    line: int
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.module} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def import_nodes(node: ast.AST, functions: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under `node`; inside function bodies too where `functions`."""
    out: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            out.append(child)
        elif functions or not isinstance(child, FUNCTIONS):
            out += import_nodes(child, functions)
    return out


def imports_of(path: Path, source: str | None = None, functions: bool = True) -> list[Import]:
    """Every `import x` and `from x import y` in the file (or in `source`, as if it were that
    file), wherever it stands (with `functions=False`: those at module level, in class bodies and
    under `if`, `TYPE_CHECKING` blocks included, not inside functions); `from pkg import mod`
    counts as importing `pkg.mod`. Relative imports are resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    file = str(path.relative_to(ROOT))
    found = []
    for node in import_nodes(ast.parse(path.read_text() if source is None else source, str(path)), functions):
        if isinstance(node, ast.Import):
            found += [Import(file, node.lineno, module, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append(Import(file, node.lineno, module, sub if is_module(sub) else base))
    return found


def source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def all_imports(functions: bool = True) -> list[Import]:
    return [i for f in source_files() for i in imports_of(f, functions=functions)]


def room_of(module: str) -> str | None:
    """The room of one of our modules; None for a third-party module or the bare `robo_async` package."""
    parts = module.split(".")
    if parts[0] in OUTER:
        return parts[0]
    if parts[0] != "robo_async" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in ROBO_ROOMS else "entry"


def entry_unit(module: str) -> str:
    """An entry module: a top-level module of robo_async, a command (`robo_async.commands.<verb>`),
    or the bench package as one."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["commands"] else parts[:2])


def _matches(pattern: str, unit: str) -> bool:
    return pattern == "*" or pattern == unit or (pattern.endswith(".*") and unit.startswith(pattern[:-1]))


def why_allowed(imp: Import) -> str | None:
    src, dst = entry_unit(imp.module), entry_unit(imp.target)
    if src == dst:
        return "within one entry module"
    for (a, b), why in ENTRY_ALLOWED.items():
        if _matches(a, src) and _matches(b, dst):
            return why
    return None


def breaks(imports: list[Import]) -> list[str]:
    """Every import that points the wrong way, as 'file:line: module imports target (why wrong)'."""
    out = []
    for imp in imports:
        src, dst = room_of(imp.module), room_of(imp.target)
        if (imp.file, imp.target) in KNOWN_BREAKS:
            continue
        if src is None:
            continue
        if dst is None:
            banned = BANNED.get(src, set())
            if imp.target.split(".")[0] in banned:
                out.append(f"{imp} ({src} must not import {imp.target.split('.')[0]})")
            continue
        if src == dst == "entry":
            if why_allowed(imp) is None:
                out.append(
                    f"{imp} (entry modules are imported by nothing: move the shared helper down "
                    f"to a room, or list the pair in ENTRY_ALLOWED with its reason)"
                )
            continue
        if src != dst and dst not in BELOW[src]:
            out.append(f"{imp} ({src} may import only {sorted(BELOW[src]) or 'nothing of ours'})")
    return list(dict.fromkeys(out))  # `from m import a, b` names m once


def test_rooms_point_one_way() -> None:
    imports = all_imports()
    assert len(imports) > 100  # the walk found the code
    wrong = breaks(imports)
    assert not wrong, "imports against the room order (DESIGN.md, Imports point one way):\n" + "\n".join(wrong)


def test_config_imports_no_entry_module() -> None:
    """config.py may be imported by every entry module because it imports none of them (it may
    import rooms below, e.g. the schemas it registers)."""
    wrong = [
        str(i)
        for i in imports_of(ROOT / "robo_async" / "config.py")
        if room_of(i.target) == "entry" and entry_unit(i.target) != "robo_async.config"
    ]
    assert not wrong, "\n".join(wrong)


def test_the_commands_parser_imports_no_entry_module_but_config() -> None:
    """Every command may import args.py because it imports no command (nor cli, nor bench)."""
    wrong = [
        str(i)
        for i in imports_of(ROOT / "robo_async" / "commands" / "args.py")
        if room_of(i.target) == "entry"
        and entry_unit(i.target) not in ("robo_async.config", "robo_async.commands.args")
    ]
    assert not wrong, "\n".join(wrong)


def test_known_breaks_are_still_there() -> None:
    """An allow-list entry whose import is gone must go too."""
    seen = {(i.file, i.target) for i in all_imports()}
    stale = [k for k in KNOWN_BREAKS if k not in seen]
    assert not stale, f"these imports are gone: remove them from KNOWN_BREAKS in tests/test_rooms.py: {stale}"


@pytest.mark.parametrize(
    "file, source, expected",
    [
        ("robo_async/actor/probe.py", "from robo_async.launch.builders import make_robot\n", "actor may import only"),
        ("robo_async/actor/probe.py", "def f():\n    from robo_async.serve import server\n", "actor may import only"),
        ("robo_async/launch/probe.py", "import robo_async.commands.teleop\n", "launch may import only"),
        ("robo_async/buffer/probe.py", "from robo_async.commands.args import parse\n", "buffer may import only"),
        (
            "robo_async/commands/teleop.py",
            "def f():\n    from robo_async.commands import eval\n",
            "entry modules are imported by nothing",
        ),
        (
            "robo_async/commands/args.py",
            "from robo_async.commands.train import typed\n",
            "entry modules are imported by nothing",
        ),
        ("robo_async/transport/probe.py", "from .. import buffer\n", "transport may import only"),
        ("sim/probe.py", "from policies.scripted import ScriptedPolicy\n", "sim may import only"),
        ("hal/probe.py", "import torch.nn\n", "hal must not import torch"),
    ],
)
def test_a_wrong_import_is_named(file: str, source: str, expected: str) -> None:
    """The check itself: a wrong import, at module level or in a function, is named with its line."""
    wrong = breaks(imports_of(ROOT / file, "\n" + source))
    assert len(wrong) == 1 and expected in wrong[0] and wrong[0].startswith(f"{file}:"), wrong


# -- no circles -----------------------------------------------------------------------------------


def cycles(imports: list[Import]) -> list[str]:
    """Every group of our modules that import one another in a circle (a strongly connected
    component of the import graph), each as its modules and one circle through them, import by
    import ('file:line: module imports target')."""
    ours = {module_name(f) for f in source_files()}
    graph: dict[str, dict[str, Import]] = {m: {} for m in ours}
    for imp in imports:
        if imp.target in ours and imp.target != imp.module:
            graph.setdefault(imp.module, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    out = []
    for group in sorted(groups):
        members, start = set(group), group[0]
        came: dict[str, str] = {}  # the shortest circle from the group's first module back to it
        frontier = [start]
        while frontier and start not in came:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in came:
                        came[w] = v
                        nxt.append(w)
            frontier = nxt
        path, v = [], start
        while True:
            path.append(graph[came[v]][v])
            v = came[v]
            if v == start:
                break
        lines = "\n".join(f"    {imp}" for imp in reversed(path))
        out.append(f"a circle among {', '.join(group)}; one of them:\n{lines}")
    return out


def test_no_import_cycles() -> None:
    imports = all_imports(functions=False)
    assert len(imports) > 100  # the walk found the code
    found = cycles(imports)
    assert not found, (
        "modules that import each other in a circle (module level, TYPE_CHECKING blocks included): move "
        "what they share to a module below both\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "file, source, cycle",
    [
        ("robo_async/launch/plan.py", "from robo_async.launch.builders import build_plan\n", True),
        (
            "robo_async/launch/plan.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from robo_async.launch.supervisor import Supervisor\n",
            True,
        ),
        ("robo_async/learner/config.py", "class C:\n    from robo_async.learner import learner\n", True),
        ("robo_async/launch/plan.py", "def f():\n    from robo_async.launch.builders import build_plan\n", False),
        ("robo_async/launch/plan.py", "from robo_async.launch.schema import ConfigError\n", False),
    ],
)
def test_a_cycle_is_named(file: str, source: str, cycle: bool) -> None:
    """The check itself: an import that closes a circle at module level (under TYPE_CHECKING or in
    a class body too) is named with its line; one inside a function, or one that closes none, is not."""
    extra = imports_of(ROOT / file, "\n" + source, functions=False)
    found = cycles(all_imports(functions=False) + extra)
    module = module_name(ROOT / file)
    if cycle:
        members = found[0].splitlines()[0].removeprefix("a circle among ").partition(";")[0].split(", ")
        assert len(found) == 1 and module in members, found
        assert any(f"{file}:{i.line}: " in found[0] for i in extra if i.target != "typing"), found
    else:
        assert not found, found
