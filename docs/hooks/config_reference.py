"""MkDocs hook: reference pages generated from the code, so they cannot drift from it.

- `<!-- config-reference -->` becomes every config key with its type, default and meaning, walked
  from the typed schema (`robo_async.launch.schema`): the root `TrainSchema` (nested dataclasses
  become dotted keys) and, per group (task, policy, algo, buffer, launcher), one table per choice
  from `schema.group_schemas()` (group -> choice -> dataclass). The meaning is the field's
  `metadata["help"]` if set, else the comment on the field's line in the dataclass source, else an
  attribute docstring, else the comment block right above it; a field without any shows an empty
  meaning (nothing is invented here).
- `<!-- wire-kinds -->`: every message kind's fields, the transition columns and the limits, from
  `robo_async/transport/` (`messages.py`, `checks.py`, `kind_checks.py`, `limits.py`, `wire.py`).
- `<!-- store-format -->`: the replay store's layout, from `lmdb_store.py` and `codec.py`.
- `<!-- cli-usage -->` and `<!-- buffer-usage -->` become what `robo-async --help` and `robo-async
  buffer --help` print (`robo_async.cli.help_text`, from the registry of commands and benchmarks).
- `<!-- bench-list -->` becomes the registered benchmark names.
"""

from __future__ import annotations

import ast
import enum
import functools
import inspect
import io
import textwrap
import tokenize
import types
import typing
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

MARKERS = (
    "<!-- config-reference -->",
    "<!-- cli-usage -->",
    "<!-- buffer-usage -->",
    "<!-- bench-list -->",
    "<!-- wire-kinds -->",
    "<!-- store-format -->",
)
GROUPS = ("task", "policy", "algo", "buffer", "launcher")


def on_page_markdown(markdown: str, page: object, config: object, files: object) -> str:
    if "<!-- config-reference -->" in markdown:
        markdown = markdown.replace("<!-- config-reference -->", config_reference())
    if "<!-- cli-usage -->" in markdown:
        from robo_async.cli import help_text

        markdown = markdown.replace("<!-- cli-usage -->", f"```text\n{help_text().strip()}\n```")
    if "<!-- buffer-usage -->" in markdown:
        from robo_async.commands.buffer import help_all

        markdown = markdown.replace("<!-- buffer-usage -->", f"```text\n{help_all().strip()}\n```")
    if "<!-- bench-list -->" in markdown:
        markdown = markdown.replace("<!-- bench-list -->", ", ".join(f"`{n}`" for n in bench_names()))
    if "<!-- wire-kinds -->" in markdown:
        markdown = markdown.replace("<!-- wire-kinds -->", wire_kinds())
    if "<!-- store-format -->" in markdown:
        markdown = markdown.replace("<!-- store-format -->", store_format())
    return markdown


def _transport_attrs() -> dict[str, Any]:
    """Public constants of the transport modules that define messages and their checks
    (`wire.py`, and `messages.py`, `checks.py`, `kind_checks.py`, `weight_checks.py`, `limits.py` where the code
    has them)."""
    import importlib

    found: dict[str, Any] = {}
    for name in ("wire", "messages", "checks", "kind_checks", "weight_checks", "limits"):
        try:
            module = importlib.import_module(f"robo_async.transport.{name}")
        except ImportError:
            continue
        for attr, v in vars(module).items():
            found.setdefault(attr, v)
    return found


def wire_kinds() -> str:
    """Each message kind's header fields, the transition columns, the limits and the heartbeat's
    figures, from the code in `robo_async/transport/`."""
    t = _transport_attrs()
    out = [f"Wire schema `{t['SCHEMA']}`. Array dtypes: {', '.join(f'`{d}`' for d in sorted(t['DTYPES']))}.", ""]
    messages = sorted(
        {
            v
            for v in t.values()
            if isinstance(v, type) and is_dataclass(v) and isinstance(getattr(v, "kind", None), str)
        },
        key=_source_line,
    )
    for cls in messages:
        out += [
            f"### `{cls.kind}`",
            "",
            f"`{cls.__module__}.{cls.__qualname__}`"
            + (
                f": {' '.join(cls.__doc__.split())}"
                if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(")
                else ""
            ),
            "",
        ]
        out += table(rows(cls, ""), "field")
        out.append("")
    kinds = t.get("KIND_FIELDS")
    if kinds and not messages:
        common = ", ".join(f"`{k}`" for k in sorted(t.get("_HEADER", ())))
        out += [
            f"Every header has {common}; each kind adds its own fields, and no others:",
            "",
            "| kind | header fields |",
            "|---|---|",
        ]
        out += [f"| `{kind}` | {', '.join(f'`{f}`' for f in sorted(fs))} |" for kind, fs in kinds.items()]
        out.append("")
    columns = t.get("COLUMN_DTYPES")
    if columns:
        out += [
            "Transition columns and their dtypes (plus `obs/<key>`, `next_obs/<key>`, `final_obs/<key>`):",
            "",
            "| column | dtype |",
            "|---|---|",
        ]
        out += [f"| `{c}` | `{d}` |" for c, d in sorted(columns.items())]
        out.append("")
    limits = sorted((n, v) for n, v in t.items() if n.startswith("MAX_") and isinstance(v, (int, float, dict)))
    if limits:
        out += ["Limits:", "", "| name | value |", "|---|---|"]
        out += [f"| `{n}` | {_cell(value(v))} |" for n, v in limits]
        out.append("")
    if not any(f.name == "stats" for m in messages for f in fields(m)):
        try:
            from robo_async.transport.stats import ActorStats
        except ImportError:
            return "\n".join(out)
        out += ["Heartbeat figures (`robo_async.transport.stats.ActorStats`):", ""]
        out += table(rows(ActorStats, ""), "field")
    return "\n".join(out)


def _source_line(cls: type) -> tuple[str, int]:
    try:
        return cls.__module__, inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return cls.__module__, 0


def store_format() -> str:
    """The layout as the store's own modules describe it (`layout.py` where the code has it,
    `lmdb_store.py`, `codec.py`)."""
    import importlib

    from robo_async.buffer import codec

    tables = getattr(importlib.import_module("robo_async.buffer.lmdb_store"), "TABLES", ())
    out = [
        (
            f"Store schema `{codec.STORE_SCHEMA}` (other versions are refused with what to do). "
            f"Tables: {', '.join(f'`{t}`' for t in tables)}. Image codecs: {', '.join(f'`{c}`' for c in codec.CODECS)}."
        ),
        "",
    ]
    for name in ("layout", "lmdb_store", "codec"):
        try:
            module = importlib.import_module(f"robo_async.buffer.{name}")
        except ImportError:
            continue
        if module.__doc__:
            out += [f"From `robo_async/buffer/{name}.py`:", "", "```text", inspect.cleandoc(module.__doc__), "```", ""]
    return "\n".join(out)


def bench_names() -> list[str]:
    from robo_async import bench

    return sorted(bench.load_all())


# -- the schema ---------------------------------------------------------------------------------


def config_reference() -> str:
    from robo_async.launch import schema

    groups = schema.group_schemas()  # group -> choice -> dataclass
    root = schema.TrainSchema
    out = ["## Run keys", "", f"`configs/train.yaml`, checked against `{root.__module__}.{root.__qualname__}`.", ""]
    out += table(rows(root, "", skip=set(GROUPS) | set(groups)))
    for group in (*GROUPS, *sorted(set(groups) - set(GROUPS))):
        out += ["", f"## {group}", ""]
        choices = groups.get(group, {})
        if not choices:
            out += [f"No typed schema: the keys are those of `configs/{group}/<name>.yaml`.", ""]
            continue
        out += [f"Choose with `{group}=<name>`: {', '.join(f'`{c}`' for c in sorted(choices))}.", ""]
        for choice in sorted(choices):
            cls = choices[choice]
            out += [f"### {group}={choice}", "", _defined_by(cls), ""]
            out += table(rows(cls, f"{group}.", skip={"name"}))
            out.append("")
    out += ["", "*Generated from the dataclasses (`robo_async.launch.schema.group_schemas()`) when the site is built.*"]
    return "\n".join(out)


def _defined_by(cls: type) -> str:
    """Where a choice's keys are written: the class, or, for a class the schema composes from
    others (no source of its own), those classes."""
    try:
        inspect.getsource(cls)
        parts = [cls]
    except (OSError, TypeError):
        parts = [
            b
            for b in cls.__mro__[1:]
            if is_dataclass(b)
            and {f.name for f in fields(b)} - {"name"}
            and not any(issubclass(o, b) for o in cls.__mro__[1:] if o is not b and is_dataclass(o))
        ]
        parts = parts or [cls]
    return "Defined by " + ", ".join(f"`{c.__module__}.{c.__qualname__}`" for c in parts) + "."


Row = tuple[str, str, str, str]


def rows(cls: type, prefix: str, skip: set[str] = frozenset(), instance: object = None) -> list[Row]:  # type: ignore[assignment]
    """One row per key of dataclass `cls`; nested dataclasses become dotted keys. `instance`: the
    default object of a nested field (its values are the defaults, e.g. a policy's own `bc`)."""
    hints = _hints(cls)
    meanings = field_comments(cls)
    out: list[Row] = []
    for f in fields(cls):
        if f.name in skip or f.name.startswith("_"):
            continue
        hint = hints.get(f.name, f.type)
        default = getattr(instance, f.name) if instance is not None else _default(f)
        is_instance = is_dataclass(default) and not isinstance(default, type)
        nested = hint if isinstance(hint, type) and is_dataclass(hint) else (type(default) if is_instance else None)
        if nested is not None:
            out += rows(nested, f"{prefix}{f.name}.", instance=default if is_instance else None)
            continue
        meaning = f.metadata.get("help") or meanings.get(f.name, "")
        shown = hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else f.type  # a choice: its values
        out.append((prefix + f.name, type_name(shown), "required" if default is MISSING else value(default), meaning))
    return out


def table(rs: list[Row], first: str = "key") -> list[str]:
    lines = [f"| {first} | type | default | meaning |", "|---|---|---|---|"]
    for key, typ, default, meaning in rs:
        lines.append(f"| `{key}` | {_code(typ)} | {_code(default)} | {_cell(meaning)} |")
    return lines


def _code(text: str) -> str:
    return f"<code>{_cell(text)}</code>"


def _cell(text: str) -> str:
    """Table-safe: pipes and angle brackets escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  (a forward reference the module cannot resolve: the raw annotations)
        return {}


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def type_name(t: Any) -> str:
    """`float | None`, `tuple[int, ...]`, `dict[str, float]`: as a user reads it."""
    if isinstance(t, str):
        return t.replace("typing.", "")
    if t is type(None):
        return "None"
    if t is Any:
        return "Any"
    if isinstance(t, type) and issubclass(t, enum.Enum):  # a choice: its values
        return " | ".join(str(m.value) for m in t)
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(t))
    if origin is not None:
        args = ", ".join("..." if a is Ellipsis else type_name(a) for a in typing.get_args(t))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(t, "__name__", str(t))


def value(v: Any) -> str:
    """A default as it is written in an override (`null`, `true`, `[256, 256]`, `{online: 0.5}`)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, enum.Enum):
        return str(v.value)
    if isinstance(v, str):
        return v if v else '""'
    return repr(v) if isinstance(v, float) else str(v)


# -- meanings from the source --------------------------------------------------------------------


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment, the most derived class's first (an override without a comment
    keeps its base's)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not is_dataclass(klass):
            continue
        for name, text in _class_comments(klass).items():
            if text or name not in out:
                out[name] = text
    return out


@functools.cache
def _class_comments(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):  # made by make_dataclass, or no source file
        return {}
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, trails code)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            comments[tok.start[0]] = (text, bool(tok.line[: tok.start[1]].strip()))
    tree = ast.parse(source)
    classdef = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    out: dict[str, str] = {}
    body = classdef.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        end = node.end_lineno or node.lineno
        trailing = [comments[n][0] for n in range(node.lineno, end + 1) if n in comments and comments[n][1]]
        text = " ".join(trailing)
        if not text:  # an attribute docstring right after the field
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                text = " ".join(nxt.value.value.split())
        if not text:  # the comment block right above the field
            block, n = [], node.lineno - 1
            while n in comments and not comments[n][1]:
                block.insert(0, comments[n][0])
                n -= 1
            text = " ".join(block)
        out[node.target.id] = text
    return out
