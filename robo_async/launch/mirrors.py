"""A frozen dataclass as the schema Hydra and OmegaConf check: its mirror (a mutable dataclass with
the same fields, defaults and, where OmegaConf can check them, types; nested dataclasses mirrored
too) and values checked against a mirror and built back into the dataclass. What does not fit is
one `ConfigError` line naming the key. `schema.py` says which dataclasses are the run's schema and
registers their mirrors in Hydra's ConfigStore.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from dataclasses import MISSING, field, fields, is_dataclass, make_dataclass
from typing import Any, Optional, Union

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from robo_async.transport.options import choices


class ConfigError(ValueError):
    """A config the run cannot start with, said in one line naming the key."""


def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _omegaconf_type(t: Any) -> Any:
    """`t` where OmegaConf can check it; `Any` where it cannot (e.g. a number or a pair)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if is_dataclass(t):
        return mirror(t)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _omegaconf_type(rest[0])
            return Any if inner is Any else Optional[inner]  # noqa: UP045 (OmegaConf reads typing.Optional)
        return Any
    if origin is tuple:
        t = list[_omegaconf_type(args[0])] if len(args) == 2 and args[1] is Ellipsis else list[Any]
    elif origin is dict:
        t = dict[args[0], _omegaconf_type(args[1])]
    elif t is object or t is dict:
        return Any
    try:
        OmegaConf.structured(make_dataclass("_Probe", [("x", Optional[t], field(default=None))]))  # noqa: UP045
        return t
    except (OmegaConfBaseException, TypeError, ValueError):
        return Any


def _plain(value: object) -> object:
    """A default as OmegaConf takes it: dataclass instances as their mirrors, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return mirror(type(value))(**{f.name: _plain(getattr(value, f.name)) for f in fields(value)})
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def mirror(cls: type, loose: frozenset[str] = frozenset()) -> type:
    """A mutable dataclass with `cls`'s fields, defaults and (OmegaConf-checkable) types; `loose`
    fields are `Any` (groups filled in by their choice)."""
    hints = type_hints(cls)
    specs = []
    for f in fields(cls):
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if f.name in loose:
            specs.append((f.name, Any, field(default=None)))
            continue
        specs.append(
            (
                f.name,
                _omegaconf_type(hints[f.name]),
                field(default_factory=functools.partial(copy.deepcopy, _plain(default))),
            )
        )
    return make_dataclass(f"{cls.__name__}Node", specs)


def open_maps(node: type) -> DictConfig:
    """The mirror as a config whose map fields (`dict[str, float]`, ...) take new keys, so an override
    may replace a whole map (`policy.obs_scale={state:1.0}`) or add to it without `+`."""
    cfg = OmegaConf.structured(node)
    for f in fields(node):
        if typing.get_origin(f.type) is dict and isinstance(cfg.get(f.name), DictConfig):
            OmegaConf.set_struct(cfg[f.name], False)
    return cfg


def check(values: dict, schema: type, where: str, loose: frozenset[str] = frozenset()) -> dict:
    """`values` checked against `schema`'s mirror (types, unknown keys; `loose` keys untyped); returns
    them typed (ints as ints, lists as lists), defaults filled in. Raises ConfigError with one line
    naming the key."""
    node = mirror(schema, loose)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(node), values)
        return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]
    except (ValidationError, ConfigKeyError) as e:
        full = getattr(e, "full_key", None)
        key = (full if where == "config" else f"{where}.{full}") if full else where
        value = getattr(e, "value", None)
        line = str(e).splitlines()[0]
        if isinstance(e, ConfigKeyError):
            known = sorted(f.name for f in fields(node))
            raise ConfigError(f"unknown key {key}; {where} has {', '.join(known)}") from None
        raise ConfigError(choice_line(e, key) or f"{key}: {value!r} is not valid ({line})") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{where}: {str(e).splitlines()[0]}") from None


def choice_line(e: ValidationError, key: str) -> str | None:
    """The one line for a value that is not one of a key's choices (an Enum field: `actor.replan
    'x' unknown: actor.replan must be auto, due, end or continuous`); None for other errors."""
    enum = getattr(getattr(e, "child_node", None), "enum_type", None)
    if enum is None:
        return None
    return f"{key} {getattr(e, 'value', None)!r} unknown: {key} must be {choices(enum)}"


def _coerce(t: Any, v: object, where: str) -> object:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return v if v is None or len(rest) != 1 else _coerce(rest[0], v, where)
    if is_dataclass(t) and isinstance(v, dict):
        return build(t, v, where)
    if origin is tuple and isinstance(v, list | tuple):
        inner = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        return tuple(_coerce(inner, x, where) for x in v)
    return v


def build(cls: type, values: dict, where: str) -> Any:
    """An instance of `cls` from checked `values` (nested dataclasses built, lists as tuples where
    `cls` says tuple); its own checks (`__post_init__`) become one ConfigError line."""
    hints = type_hints(cls)
    try:
        return cls(**{k: _coerce(hints[k], v, f"{where}.{k}") for k, v in values.items()})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def checked(values: dict, cls: type, where: str) -> Any:
    """`values` checked against `cls` and built into one."""
    return build(cls, check(values, cls, where), where)


def as_dict(section: object) -> dict:
    """A typed section back as plain values (tuples as lists), e.g. for code that takes a mapping."""
    return typing.cast(dict, _listed(dataclasses.asdict(section)))  # type: ignore[call-overload]


def _listed(v: object) -> object:
    if isinstance(v, tuple | list):
        return [_listed(x) for x in v]
    if isinstance(v, dict):
        return {k: _listed(x) for k, x in v.items()}
    return v
