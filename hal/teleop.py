"""`Teleop`: a human input device (leader arm, gamepad, keyboard) that gives actions and events.

    teleop.connect()
    teleop.observe(obs, evaluation)   # each tick: what the robot sees (a virtual operator decides on it)
    for event in teleop.events():     # since the last call (one poll per control tick)
        if event.kind is TeleopEventKind.ESTOP: safe_robot.estop(...)
    action = teleop.get_action()      # while it has control: joint targets (rad) in the robot's action space
    teleop.close()

The control loop does this every tick (`robo_async.actor.loop`); a teleop that raises `RobotError`
(unplugged mid-session) is dropped from the session and control returns to the policy.
"""

from __future__ import annotations

import abc
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hal.robot import RobotError

if TYPE_CHECKING:
    from hal.safety import SafeRobot


log = logging.getLogger(__name__)


class TeleopEventKind(enum.Enum):
    """What an operator signals: take over or hand back, label the episode, re-record it, or stop the robot."""

    INTERVENTION_ON = "intervention_on"  # the human takes over: their actions drive the robot
    INTERVENTION_OFF = "intervention_off"
    SUCCESS = "success"  # label the episode
    FAILURE = "failure"
    RERECORD = "rerecord"  # discard the episode and record it again
    ESTOP = "estop"  # stop the robot now (latched until cleared)
    READY = "ready"  # the scene is reset (between episodes on a real arm): start the next episode


@dataclass(frozen=True)
class TeleopEvent:
    """One operator signal and when it came (time.monotonic(), s)."""

    kind: TeleopEventKind
    timestamp: float = field(default_factory=time.monotonic)


class Teleop(abc.ABC):
    """An operator's device (leader arm, gamepad, keyboard, virtual operator): each tick the loop calls
    `observe()`, `events()` and, while the operator drives, `get_action()`. `connect()` before, `close()`
    after."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """A name for logs and the dashboard."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the device; raises if it is not there."""

    @property
    def action_dim(self) -> int | None:
        """Size of the actions it gives (None: it gives events only: gamepad or keyboard)."""
        return None

    @abc.abstractmethod
    def get_action(self) -> np.ndarray | None:
        """The operator's current command, or None when the device gives none."""

    def observe(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> None:
        """Each tick, before `events()`: the robot's observation and whether the episode is an
        evaluation one. Human devices ignore it; a virtual operator decides on it."""
        return None

    @abc.abstractmethod
    def events(self) -> list[TeleopEvent]:
        """Events since the last call (never blocks)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device (idempotent)."""


def poll_events(
    teleops: list[Teleop] | tuple[Teleop, ...],
    robot: SafeRobot,
    on_lost: Callable[[Teleop, RobotError], None] | None = None,
) -> list[tuple[Teleop, TeleopEvent]]:
    """Collect every teleop's events (never blocks); an ESTOP from any of them latches the
    robot's e-stop at once and wins the tick: the other events of that tick are dropped (logged).
    A teleop that raises RobotError goes to `on_lost` (without it, the error propagates).
    Returns (teleop, event) pairs for the caller (labels, takeovers)."""
    out = []
    for t in list(teleops):
        try:
            out += [(t, e) for e in t.events()]
        except RobotError as e:
            if on_lost is None:
                raise
            on_lost(t, e)
    stops = [t.name for t, e in out if e.kind is TeleopEventKind.ESTOP]
    if stops:
        # stop within this tick: latch and command the measured position now (a SafeRobot); a
        # button held down (or a key repeating) is one stop, not a new hold measured every tick
        if not getattr(robot, "estopped", False):
            getattr(robot, "stop", robot.estop)(f"e-stop from {stops[0]}")
        dropped = [e.kind.value for _, e in out if e.kind is not TeleopEventKind.ESTOP]
        if dropped:
            log.warning("e-stop from %s wins the tick; ignored %s", stops[0], dropped)
        return [(t, e) for t, e in out if e.kind is TeleopEventKind.ESTOP]
    return out
