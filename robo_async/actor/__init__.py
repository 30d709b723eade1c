"""Edge actor: control loop, adder. Names are imported on first use, so a process that needs only
the transport (`actor.uplink=process`: uplink.py, ring.py) starts without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robo_async.actor.actor import Actor, ActorConfig, LearnerUnavailable
    from robo_async.actor.adder import Adder

__all__ = ["Actor", "ActorConfig", "Adder", "LearnerUnavailable"]


def __getattr__(name: str) -> Any:
    if name in ("Actor", "ActorConfig", "LearnerUnavailable"):
        from robo_async.actor import actor

        return getattr(actor, name)
    if name == "Adder":
        from robo_async.actor.adder import Adder

        return Adder
    raise AttributeError(f"module 'robo_async.actor' has no attribute {name!r}")
