"""`transport:` config section: where the learner binds and how its links are secured. Also the
helpers every section's choices use (`as_choices`, `as_enum`, `choices`): this is the floor below all of them."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from enum import StrEnum


def choices(enum: type[StrEnum]) -> str:
    """`a, b or c`: an enum's values as an error message lists them."""
    values = [m.value for m in enum]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def as_enum(obj: object, name: str, enum: type[StrEnum], section: str) -> None:
    """`obj.name` (a frozen dataclass's field) as a member of `enum`: a string given in code becomes
    one; a value not in it is a ValueError naming the key (`section.name`) and the choices."""
    value = getattr(obj, name)
    if isinstance(value, enum):
        return
    try:
        object.__setattr__(obj, name, enum(value))
    except ValueError:
        raise ValueError(f"{section}.{name} must be {choices(enum)}, not {value!r}") from None


_CHOICE_FIELDS: dict[type, tuple[tuple[str, type[StrEnum]], ...]] = {}  # per class: its StrEnum-typed fields


def _choice_fields(cls: type) -> tuple[tuple[str, type[StrEnum]], ...]:
    if cls not in _CHOICE_FIELDS:
        hints = typing.get_type_hints(cls)
        _CHOICE_FIELDS[cls] = tuple(
            (f.name, t) for f in fields(cls) if isinstance(t := hints[f.name], type) and issubclass(t, StrEnum)
        )
    return _CHOICE_FIELDS[cls]


def as_choices(obj: object, section: str) -> None:
    """Every field of a frozen dataclass typed as a `StrEnum` made a member of it (`as_enum`): the
    annotation is the one list of its choices."""
    for name, enum in _choice_fields(type(obj)):
        as_enum(obj, name, enum, section)


class Curve(StrEnum):
    """`transport.curve`: whether links are encrypted (CURVE)."""

    auto = "auto"  # on with keys; a host beyond loopback without keys is refused
    on = "on"
    off = "off"  # opt out (unsafe)


@dataclass(frozen=True)
class TransportOptions:
    """`transport`: the learner's ZMQ endpoints, CURVE keys and message limits."""

    host: str = "127.0.0.1"  # the learner binds here (0.0.0.0 for actors on other machines: needs keys)
    data_port: int = 0  # 0: any free port
    weights_port: int = 0  # 0: any free port
    keys: str | None = None  # CURVE keys dir from `robo-async keys` (encrypted links; only listed actor keys connect)
    # auto: on with keys; a host beyond loopback without keys is refused | on | off (opt out, unsafe)
    curve: Curve = Curve.auto
    max_message_mb: float = 64.0  # the learner refuses larger frames from actors (ZMQ disconnects the sender)
    queue_mb: float = 64.0  # ZMQ queues per peer sized in bytes (high-water marks from the expected message size)
    # the data and weights addresses actors dial, when they reach the learner through a NAT, a tunnel (ssh -L) or a
    # proxy, e.g. [tcp://gateway:7001, tcp://gateway:7002]; default: the addresses the learner binds
    advertise: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        as_choices(self, "transport")
