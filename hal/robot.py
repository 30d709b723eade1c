"""The `Robot` interface every device and simulator implements.

The actor drives it like this (one control tick every `spec.dt` seconds)::

    robot.connect()
    obs = robot.reset(seed=0)
    while running:
        action = next_action(obs)           # from the current action chunk
        applied = robot.send_action(action) # after safety clipping; what the robot will do
        obs = robot.get_observation()
        outcome = robot.outcome()           # reward / success / terminated, if the robot knows
    robot.close()
"""

from __future__ import annotations

import abc

import numpy as np

from hal.spec import Observation, Outcome, RobotSpec


class RobotError(RuntimeError):
    """A robot failed (disconnected, not connected, hardware fault)."""


class RobotFault(RobotError):
    """The robot reported a fault of its own (a servo overloaded or overheated): it must stop, and
    the reason is in the message."""


class Robot(abc.ABC):
    """A robot or simulator. Constructors do no I/O; `connect()` does."""

    @property
    @abc.abstractmethod
    def spec(self) -> RobotSpec:
        """Static description, available before `connect()`."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the device (or build the simulation). Idempotent."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device. Idempotent; safe to call after a failed connect."""

    @abc.abstractmethod
    def get_observation(self) -> Observation:
        """Read the current state (and camera frames)."""

    @abc.abstractmethod
    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Command joint targets (rad); returns the action actually applied after clipping."""

    def send_checked_action(self, action: np.ndarray) -> np.ndarray:
        """`send_action` for an action the safety layer has already validated (float32, shape
        (action_dim,), finite, within limits): robots that check their input may skip it here."""
        return self.send_action(action)

    def disable_torque(self) -> None:  # noqa: B027 - optional: a no-op where there is no torque to cut
        """Let the motors go limp (the safety layer's last resort when holding is not enough).
        Simulators and robots without motor torque control do nothing."""

    def reset(self, *, seed: int | None = None) -> Observation:
        """Start an episode. Real robots have no reset of their own: they report where they are."""
        del seed
        return self.get_observation()

    def set_start_range(self, fraction: float) -> None:
        """Draw the next resets' random scene start (an object's place) from `fraction` (0, 1] of
        its range around the task's nominal start (the start-range curriculum, `actor.start_range`).
        Robots whose scene they do not place themselves (real arms, fixed-start tasks) refuse it."""
        raise RobotError(
            f"{self.spec.name} has no random start to narrow (actor.start_range): its scene is reset "
            "as it is; leave actor.start_range unset"
        )

    def outcome(self) -> Outcome:
        """Reward and success for the last tick; robots without a task signal report nothing."""
        return Outcome()

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def innermost(robot: object) -> object:
    """The robot inside any wrappers that expose `inner` (`SafeRobot`, a learned reward): where a
    simulator's or an env's own parts (its task, its expert, its kinematics) are found."""
    while getattr(robot, "inner", None) is not None and robot.inner is not robot:  # type: ignore[attr-defined]
        robot = robot.inner  # type: ignore[attr-defined]
    return robot
