"""`Teleop`: a human input device (leader arm, gamepad, keyboard) that gives actions and events.

    teleop.connect()
    action = teleop.get_action()      # joint targets (rad) in the robot's action space, or None
    for event in teleop.events():     # since the last call
        if event.kind is TeleopEventKind.ESTOP: safe_robot.estop(...)
    teleop.close()
"""

from __future__ import annotations

import abc
import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hal.safety import SafeRobot


class TeleopEventKind(enum.Enum):
    INTERVENTION_ON = "intervention_on"  # the human takes over: their actions drive the robot
    INTERVENTION_OFF = "intervention_off"
    SUCCESS = "success"  # label the episode
    FAILURE = "failure"
    RERECORD = "rerecord"  # discard the episode and record it again
    ESTOP = "estop"  # stop the robot now (latched until cleared)


@dataclass(frozen=True)
class TeleopEvent:
    kind: TeleopEventKind
    timestamp: float = field(default_factory=time.monotonic)


class Teleop(abc.ABC):
    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def get_action(self) -> np.ndarray | None:
        """The operator's current command, or None when the device gives none."""

    @abc.abstractmethod
    def events(self) -> list[TeleopEvent]:
        """Events since the last call (never blocks)."""

    @abc.abstractmethod
    def close(self) -> None: ...


def poll_events(teleops: "list[Teleop] | tuple[Teleop, ...]", robot: "SafeRobot") -> list[TeleopEvent]:
    """Collect every teleop's events (never blocks); an ESTOP from any of them latches the
    robot's e-stop at once. Returns the events for the caller (labels, interventions)."""
    out = []
    for t in teleops:
        for e in t.events():
            if e.kind is TeleopEventKind.ESTOP:
                robot.estop(f"e-stop from {t.name}")
            out.append(e)
    return out

