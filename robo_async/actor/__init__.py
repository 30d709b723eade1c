"""Edge actor: control loop, adder."""

from robo_async.actor.actor import Actor, ActorConfig, LearnerUnavailable
from robo_async.actor.adder import Adder

__all__ = ["Actor", "ActorConfig", "Adder", "LearnerUnavailable"]
