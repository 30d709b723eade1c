"""The one parser of `key=value` commands, and the help of the Hydra ones.

A key=value command declares its keys as a frozen, keyword-only dataclass: each field is a key,
its annotation the type, its default the default (none: required) and `help` its one-line meaning
(`arg(...)`). `parse` reads the command line against it, `usage` and `help_text` are written from
the same dataclass, so the help cannot drift from what is accepted:

    @dataclass(frozen=True, kw_only=True)
    class KeysArgs:
        dir: Path = arg(help="where the key files go")
        actors: int = arg(1, help="actor ids 0..N-1")

    opts = parse(KeysArgs, ["dir=k", "actors=2"], "keys")    # KeysArgs(dir=Path('k'), actors=2)
    parse(KeysArgs, ["dri=k"], "keys")   # UserError: keys: unknown key dri=; keys: dir=, actors= (...)

Types: str, int, float, bool (true/false, yes/no, 1/0), Path, Literal[...] (one of the choices),
tuple[X, ...] (`a,b` or `[a,b]`) and `X | None` (`null` or empty: None). A field with
`positional=True` takes a bare word (`buffer inspect <dir>`) instead of `key=value`.

Hydra commands (train, bc, serve, teleop's overrides) take Hydra's overrides; `hydra_help` is
their `--help`: usage, the config groups and their choices as Hydra finds them in the config
directory it composes from, and where every key is listed.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from robo_async.config import CONFIG_DIR, UserError

HELP = ("-h", "--help")


def arg(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    positional: bool = False,
    key: str = "",
    metavar: str = "",
) -> Any:
    """A key of a command: its default (none: required) and one-line meaning; `key`: the word on
    the command line where it is not the field's name (`from=`, a Python keyword); `metavar`: what
    the usage line shows for its value (default: its type)."""
    meta = {"help": help, "positional": positional, "key": key, "metavar": metavar}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple default: the dataclass is frozen")
    return dataclasses.field(default=default, metadata=meta)


def wants_help(argv: Sequence[str]) -> bool:
    """`-h` or `--help` anywhere: the command prints its help and starts nothing."""
    return any(a in HELP for a in argv)


def split_pairs(argv: Sequence[str], command: str) -> dict[str, str]:
    """`key=value` words as a dict, the last of a repeated key winning; anything else is refused."""
    out: dict[str, str] = {}
    for a in argv:
        key, eq, value = a.partition("=")
        if not eq or not key:
            raise UserError(f"{command}: expected key=value, got '{a}' (robo-async {command} --help)")
        out[key] = value
    return out


def parse[T](cls: type[T], argv: Sequence[str], command: str) -> T:
    """`argv` read against `cls`; an unknown key, a bad value or a missing key is one UserError line."""
    return parse_known(cls, argv, command, strict=True)[0]


def refuse(cls: type, words: Sequence[str], command: str) -> None:
    """One UserError line naming `words` (if any) as unknown, with the keys `cls` knows."""
    if words:
        unknown = [a.partition("=")[0] + "=" if "=" in a else a for a in words]
        raise UserError(
            f"{command}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"keys: {', '.join(_key_names(cls))} (robo-async {command} --help)"
        )


def parse_known[T](cls: type[T], argv: Sequence[str], command: str, strict: bool = False) -> tuple[T, list[str]]:
    """As `parse`, but words that are not `cls`'s keys come back, in order, for someone else (e.g.
    Hydra overrides beside teleop's own keys), instead of being refused (`strict`: refused, first)."""
    fields = {key_of(f): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    positional = [f for f in fields.values() if f.metadata.get("positional")]
    hints = typing.get_type_hints(cls)
    raw: dict[str, str] = {}
    rest: list[str] = []
    for a in argv:
        key, eq, value = a.partition("=")
        if eq and key in fields and not fields[key].metadata.get("positional"):
            raw[key] = value
        elif not eq and positional and not a.startswith("-"):
            raw[key_of(positional.pop(0))] = a
        else:
            rest.append(a)
    if strict:
        refuse(cls, rest, command)
    values = {}
    for key, f in fields.items():
        if key in raw:
            values[f.name] = convert(hints[f.name], raw[key], f"{command}: {key}={raw[key]!r}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            shown = f.metadata.get("metavar") or (key if f.metadata.get("positional") else type_name(hints[f.name]))
            what = f"<{shown}>" if f.metadata.get("positional") else f"{key}=<{shown}>"
            raise UserError(f"{command} needs {what}: {f.metadata.get('help', '')} (robo-async {command} --help)")
    return cls(**values), rest


def convert(hint: Any, text: str, where: str) -> Any:
    """`text` as a value of type `hint`; `where` names it in the error."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.strip().lower() in ("", "null", "none"):
            return None
        inner = [a for a in args if a is not type(None)]
        return convert(inner[0] if len(inner) == 1 else str, text, where)
    if origin is Literal:
        if text not in args:
            raise UserError(f"{where}: give one of {', '.join(map(str, args))}")
        return text
    if origin is tuple:
        items = [x.strip() for x in text.strip().removeprefix("[").removesuffix("]").split(",") if x.strip()]
        return tuple(convert(args[0], x, where) for x in items)
    if hint is bool:
        low = text.strip().lower()
        if low not in ("true", "false", "yes", "no", "1", "0"):
            raise UserError(f"{where}: give true or false")
        return low in ("true", "yes", "1")
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise UserError(f"{where}: give {'an integer' if hint is int else 'a number'}") from None
    if hint is Path:
        return Path(text)
    return text


def type_name(hint: Any) -> str:
    """A type as the help writes it: `int`, `path`, `a|b`, `int,...` (`float | None`: `float`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return "|".join(type_name(a) for a in args if a is not type(None))
    if origin is Literal:
        return "|".join(map(str, args))
    if origin is tuple:
        return f"{type_name(args[0])},..."
    if hint is Path:
        return "path"
    return getattr(hint, "__name__", str(hint))


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_show(v) for v in value)
    return str(value)


def key_of(f: dataclasses.Field) -> str:
    """The word a field is given by on the command line."""
    return f.metadata.get("key") or f.name


def _key_names(cls: type) -> list[str]:
    return [f"<{f.name}>" if f.metadata.get("positional") else f"{key_of(f)}=" for f in dataclasses.fields(cls)]


def usage(cls: type, command: str) -> str:
    """One line: `robo-async <command> <positional> key=<type> [key=default] ...`."""
    hints = typing.get_type_hints(cls)
    words = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING
        shown = f"<{f.metadata.get('metavar') or type_name(hints[f.name])}>"
        if f.metadata.get("positional"):
            choices = typing.get_args(hints[f.name]) if typing.get_origin(hints[f.name]) is Literal else ()
            shown = "|".join(choices) or f"<{f.metadata.get('metavar') or f.name}>"
            words.append(shown if required else f"[{shown}]")
        elif required:
            words.append(f"{key_of(f)}={shown}")
        elif f.default is None or f.default == ():  # no value of its own: what to give
            words.append(f"[{key_of(f)}={shown}]")
        else:
            words.append(f"[{key_of(f)}={_show(f.default)}]")
    return " ".join([f"robo-async {command}", *words])


def help_text(cls: type, command: str, about: str | None, extra: str = "", tail: str = "") -> str:
    """`--help` of a key=value command: usage, what it does (`about`: the command module's
    docstring), then each key with its type, default and meaning, all from `cls`; `tail` ends the
    usage line (e.g. `[overrides]`), `extra` ends the help."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        name = f"<{f.metadata.get('metavar') or f.name}>" if f.metadata.get("positional") else key_of(f)
        default = "required" if f.default is dataclasses.MISSING else _show(f.default) or "none"
        rows.append((name, type_name(hints[f.name]), default, f.metadata.get("help", "")))
    width = [max(len(r[i]) for r in rows) for i in range(3)] if rows else [0, 0, 0]
    lines = [
        f"usage: {usage(cls, command)}{' ' + tail if tail else ''}",
        "",
        (about or "").strip(),
        "",
        "keys:" if rows else "keys: none",
    ]
    for name, typ, default, meaning in rows:
        lines.append(f"  {name:<{width[0]}}  {typ:<{width[1]}}  {default:<{width[2]}}  {meaning}")
    return "\n".join(lines + ([f"\n{extra.strip()}"] if extra.strip() else []))


# -- Hydra commands ---------------------------------------------------------------------------


def config_groups() -> dict[str, tuple[str, list[str]]]:
    """group -> (its default choice, every choice), as Hydra's config loader finds them in
    `configs/` (the directory `compose_config` composes from); the defaults from `train.yaml`."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    defaults: dict[str, str] = {}
    for entry in OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "train.yaml")).get("defaults", []):
        if isinstance(entry, dict):
            defaults.update({str(k): str(v) for k, v in entry.items()})
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        groups = [g for g in sorted(loader.list_groups("")) if g not in ("hydra", "schema")]
        return {g: (defaults.get(g, ""), sorted(loader.get_group_options(g))) for g in groups}


def hydra_help(usage_lines: str, about: str | None) -> str:
    """`--help` of a command that takes Hydra overrides: its usage, what it does (`about`), the
    config groups with their choices and where every key is listed (`groups_help`)."""
    return "\n".join([usage_lines.strip(), "", (about or "").strip(), "", groups_help()])


def groups_help() -> str:
    """The config groups with their choices (the default marked *), and where every key is listed."""
    lines = ["config groups (choose with <group>=<choice>; * the default):"]
    for group, (default, choices) in config_groups().items():
        lines.append(f"  {group:<9} " + ", ".join(f"{c}*" if c == default else c for c in choices))
    lines += [
        "",
        "Any config key is an override: key=value, e.g. actors=2 task.cameras=[front] budget.seconds=120.",
        "Every key, resolved with its value: robo-async train --cfg job [overrides];",
        "with types, defaults and meanings: docs/reference/config.md.",
    ]
    return "\n".join(lines)
