"""The safety layer: every action passes through here before it reaches a robot."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from hal.robot import Robot
from hal.spec import Observation, Outcome, RobotSpec, SpecMismatch

log = logging.getLogger(__name__)


@dataclass
class SafetyStats:
    """Counters reported in metrics under `safety/`."""

    actions: int = 0
    clipped: int = 0  # actions where any joint was clipped (limit or max step)
    rejected: int = 0  # NaN/Inf or wrong-shape actions replaced by holding position


class SafeRobot(Robot):
    """Wraps a robot: rejects non-finite or wrong-shape actions (holds the last target instead),
    clips to joint limits and to `spec.max_step_rad` change per tick."""

    def __init__(self, robot: Robot) -> None:
        self._robot = robot
        self._last: np.ndarray | None = None
        self.stats = SafetyStats()

    @property
    def spec(self) -> RobotSpec:
        return self._robot.spec

    @property
    def inner(self) -> Robot:
        return self._robot

    def connect(self) -> None:
        self._robot.connect()

    def close(self) -> None:
        self._robot.close()

    def get_observation(self) -> Observation:
        return self._robot.get_observation()

    def reset(self, *, seed: int | None = None) -> Observation:
        obs = self._robot.reset(seed=seed)
        self._last = np.asarray(obs.state, dtype=np.float32).copy()
        return obs

    def outcome(self) -> Outcome:
        return self._robot.outcome()

    def filter(self, action: np.ndarray) -> np.ndarray:
        """The action that may be sent: finite, in limits, within the per-tick step."""
        spec = self.spec
        self.stats.actions += 1
        if self._last is None:
            self._last = np.asarray(self._robot.get_observation().state, dtype=np.float32).copy()
        try:
            a = spec.check_action(action)
        except SpecMismatch as e:
            self.stats.rejected += 1
            log.warning("safety: %s; holding position", e)
            return self._last.copy()
        safe = np.clip(a, spec.low, spec.high)
        if np.isfinite(spec.max_step_rad):
            safe = np.clip(safe, self._last - spec.max_step_rad, self._last + spec.max_step_rad)
        if not np.array_equal(safe, a):
            self.stats.clipped += 1
        return safe.astype(np.float32)

    def send_action(self, action: np.ndarray) -> np.ndarray:
        safe = self.filter(action)
        applied = self._robot.send_action(safe)
        self._last = np.asarray(applied, dtype=np.float32).copy()
        return applied
