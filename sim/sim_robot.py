"""`SimRobot`: a MuJoCo task behind the `hal.Robot` interface."""

from __future__ import annotations

import time

import numpy as np

from hal.robot import Robot, RobotError
from hal.spec import Observation, Outcome, RobotSpec
from sim.reach import ReachTask


class SimRobot(Robot):
    """A simulated robot. Each `send_action` advances the simulation by one control tick.

    With `realtime=True` a tick also takes one control period of wall-clock time (the call
    sleeps until the tick's deadline), so the sim behaves like hardware; otherwise it runs as
    fast as the caller drives it.
    """

    def __init__(self, task: ReachTask, *, realtime: bool = False) -> None:
        self._task = task
        self._spec = task.spec()
        self._realtime = realtime
        self._rng = np.random.default_rng()
        self._next_deadline = 0.0
        self._connected = False
        self._outcome = Outcome()

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    @property
    def task(self) -> ReachTask:
        return self._task

    def connect(self) -> None:
        self._task.build()
        self._connected = True
        self._next_deadline = time.monotonic()

    def close(self) -> None:
        self._task.close()
        self._connected = False

    def _require(self) -> None:
        if not self._connected:
            raise RobotError(f"{self._spec.name} is not connected; call connect() first")

    def reset(self, *, seed: int | None = None) -> Observation:
        self._require()
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._task.reset(self._rng)
        self._outcome = Outcome()
        self._next_deadline = time.monotonic()
        return self.get_observation()

    def get_observation(self) -> Observation:
        self._require()
        t = self._task
        return Observation(time.monotonic(), t.state(), t.features(), t.images())

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self._require()
        a = self._spec.check_action(action)
        applied = self._task.step(a)
        reward, success = self._task.reward_success()
        self._outcome = Outcome(reward, success, terminated=success)
        if self._realtime:
            self._next_deadline += self._spec.dt
            delay = self._next_deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                self._next_deadline = time.monotonic()
        return applied

    def outcome(self) -> Outcome:
        return self._outcome

    @property
    def truncated(self) -> bool:
        return self._task.truncated
