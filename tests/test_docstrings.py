"""Docstrings where a newcomer looks first: on every public class, and on the public functions and
methods of the rooms others build on (hal/, policies/, robo_async/buffer/, robo_async/transport/).
Read from the source (ast). A method overriding a documented method of one of our own base
classes (`Robot.connect`, `Policy.predict_chunk`, ...) is documented there."""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("robo_async", "hal", "policies", "sim", "hardware")  # public classes documented everywhere
FUNCTION_ROOMS = ("hal", "policies", "robo_async/buffer", "robo_async/transport")  # and functions here

Def = ast.FunctionDef | ast.AsyncFunctionDef


def _public(name: str) -> bool:
    return not name.startswith("_")


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _classes(body: list[ast.stmt]) -> Iterator[ast.ClassDef]:
    """Classes of a module, and the classes nested in them."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield node
            yield from _classes(node.body)


def _base_names(cls: ast.ClassDef) -> list[str]:
    out = []
    for b in cls.bases:
        b = b.value if isinstance(b, ast.Subscript) else b  # Generic[T], Protocol[...]
        if isinstance(b, ast.Name):
            out.append(b.id)
        elif isinstance(b, ast.Attribute):
            out.append(b.attr)
    return out


def _methods(cls: ast.ClassDef) -> dict[str, Def]:
    """Methods by name; of a property's getter and setter, the documented one (the getter's doc is the property's)."""
    out: dict[str, Def] = {}
    for n in cls.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            kept = out.get(n.name)
            if kept is None or not ast.get_docstring(kept):
                out[n.name] = n
    return out


def missing(parsed: list[tuple[str, ast.Module]] | None = None) -> list[str]:
    """`path:line kind name` for each public class, function and method that needs a docstring and
    has none, in `parsed` ((path, module) pairs; default: our source)."""
    parsed = list(_sources()) if parsed is None else parsed
    by_name: dict[str, list[ast.ClassDef]] = {}
    for _, tree in parsed:
        for cls in _classes(tree.body):
            by_name.setdefault(cls.name, []).append(cls)

    def documented_in_base(cls: ast.ClassDef, method: str, seen: frozenset[str] = frozenset()) -> bool:
        for base in _base_names(cls):
            for b in by_name.get(base, []) if base not in seen else []:
                m = _methods(b).get(method)
                if m is not None and ast.get_docstring(m):
                    return True
                if documented_in_base(b, method, seen | {base}):
                    return True
        return False

    out = []
    for path, tree in parsed:
        functions = any(path == r or path.startswith(r + "/") for r in FUNCTION_ROOMS)
        for cls in _classes(tree.body):
            if _public(cls.name) and not ast.get_docstring(cls):
                out.append(f"{path}:{cls.lineno} class {cls.name}")
            if not functions or not _public(cls.name):
                continue
            for name, fn in _methods(cls).items():
                if _public(name) and not ast.get_docstring(fn) and not documented_in_base(cls, name):
                    out.append(f"{path}:{fn.lineno} method {cls.name}.{name}")
        if functions:
            for node in tree.body:
                if (
                    isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    and _public(node.name)
                    and not ast.get_docstring(node)
                ):
                    out.append(f"{path}:{node.lineno} function {node.name}")
    return out


def test_the_scan_flags_what_it_should_and_nothing_else():
    hal = ast.parse('''
class Robot:
    """Doc."""
    def connect(self):
        """Doc."""
    @property
    def speed(self):
        """Doc."""
    @speed.setter
    def speed(self, v): ...
class Arm(Robot):
    """Doc."""
    def connect(self): ...
    def grip(self): ...
    def _private(self): ...
    def __len__(self): ...
def helper(): ...
def _helper(): ...
''')
    sim = ast.parse("class Task:\n    def step(self): ...\ndef make(): ...\nclass _Hidden: ...\n")
    assert missing([("hal/arm.py", hal), ("sim/task.py", sim)]) == [
        "hal/arm.py:14 method Arm.grip",
        "hal/arm.py:17 function helper",
        "sim/task.py:1 class Task",
    ]


def test_public_classes_functions_and_methods_have_docstrings():
    gaps = missing()
    assert not gaps, f"{len(gaps)} public definitions without a docstring:\n" + "\n".join(gaps)
