"""The safety layer: every action passes through here before it reaches a robot.

- NaN/Inf or wrong-shape actions: hold the last target (counted as `rejected`);
- joint limits and `spec.max_step_rad` per tick: clip (counted as `clipped`);
- workspace: a check on the joint target (e.g. end effector inside a box, via the robot's forward
  kinematics): hold if outside (counted as `workspace`);
- e-stop (from any teleop device or the operator): latched, every action becomes a hold until
  `clear_estop()`;
- watchdog: with `watchdog_s`, a thread re-commands the last target when the control loop sends
  nothing for that long (a hung policy or loop), so the robot holds still.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
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
    workspace: int = 0  # targets outside the workspace replaced by holding position
    estopped: int = 0  # actions replaced by holding position while the e-stop was latched
    watchdog_holds: int = 0  # holds commanded because no action arrived in time


WorkspaceCheck = Callable[[np.ndarray], str | None]  # joint target -> None, or why it is outside


class WorkspaceBox:
    """End effector inside an axis-aligned box (m), using the robot's forward kinematics."""

    def __init__(self, fk: Callable[[np.ndarray], np.ndarray], low: tuple[float, float, float],
                 high: tuple[float, float, float]) -> None:
        self._fk, self.low, self.high = fk, np.asarray(low), np.asarray(high)

    def __call__(self, q: np.ndarray) -> str | None:
        p = self._fk(q)
        if np.all(p >= self.low) and np.all(p <= self.high):
            return None
        return f"end effector would be at {np.round(p, 3).tolist()}, outside {self.low.tolist()}..{self.high.tolist()}"


class SafeRobot(Robot):
    """Wraps a robot: rejects non-finite or wrong-shape actions (holds the last target instead),
    clips to joint limits and to `spec.max_step_rad` change per tick."""

    def __init__(self, robot: Robot, *, workspace: WorkspaceCheck | None = None,
                 watchdog_s: float | None = None) -> None:
        self._robot = robot
        spec = robot.spec  # static: the limits are read once, not per tick
        self._low, self._high = spec.low, spec.high
        self._max_step = np.float32(spec.max_step_rad)
        self._step_finite = bool(np.isfinite(spec.max_step_rad))
        self._shape = (spec.action_dim,)
        self._last: np.ndarray | None = None
        self.stats = SafetyStats()
        self._workspace = workspace
        self._watchdog_s = watchdog_s
        self._estop: str | None = None
        self._lock = threading.RLock()  # the watchdog and the control loop share the robot
        self._last_send = time.monotonic()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # --- e-stop and watchdog -----------------------------------------------------------------
    def estop(self, reason: str = "e-stop") -> None:
        """Latch the e-stop: from now on every action holds position."""
        if self._estop is None:
            log.error("safety: E-STOP (%s): holding position until cleared", reason)
        self._estop = reason

    def clear_estop(self) -> None:
        self._estop = None

    @property
    def estopped(self) -> bool:
        return self._estop is not None

    def _watch(self) -> None:
        assert self._watchdog_s is not None
        while not self._stop.wait(self._watchdog_s / 4):
            if time.monotonic() - self._last_send > self._watchdog_s and self._last is not None:
                with self._lock:
                    if time.monotonic() - self._last_send > self._watchdog_s:
                        self._robot.send_action(self._last.copy())
                        self._last_send = time.monotonic()
                        self.stats.watchdog_holds += 1

    @property
    def spec(self) -> RobotSpec:
        return self._robot.spec

    @property
    def inner(self) -> Robot:
        return self._robot

    def connect(self) -> None:
        self._robot.connect()
        self._last_send = time.monotonic()
        if self._watchdog_s is not None and self._watchdog is None:
            self._stop.clear()
            self._watchdog = threading.Thread(target=self._watch, name="safety-watchdog", daemon=True)
            self._watchdog.start()

    def close(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=2)
            self._watchdog = None
        self._robot.close()

    def get_observation(self) -> Observation:
        with self._lock:
            return self._robot.get_observation()

    def reset(self, *, seed: int | None = None) -> Observation:
        with self._lock:
            obs = self._robot.reset(seed=seed)
            self._last = self.spec.hold_action(obs.state)
            self._last_send = time.monotonic()
        return obs

    def outcome(self) -> Outcome:
        return self._robot.outcome()

    def filter(self, action: np.ndarray) -> np.ndarray:
        """The action that may be sent: finite, in limits, within the per-tick step."""
        self.stats.actions += 1
        if self._last is None:
            self._last = self.spec.hold_action(self._robot.get_observation().state)
        a = np.asarray(action, dtype=np.float32)
        # fast path, once per tick: one reduction finds any NaN/Inf; check_action names the fault
        if a.shape != self._shape or not np.isfinite(np.add.reduce(a)):
            try:
                a = self.spec.check_action(a)
            except SpecMismatch as e:
                self.stats.rejected += 1
                log.warning("safety: %s; holding position", e)
                return self._last.copy()
        if self._estop is not None:
            self.stats.estopped += 1
            return self._last.copy()
        if self._step_finite:  # joint limits and the per-tick step in one pass
            last = self._last
            safe = np.minimum(np.maximum(a, np.maximum(self._low, last - self._max_step)),
                              np.minimum(self._high, last + self._max_step))
        else:
            safe = np.minimum(np.maximum(a, self._low), self._high)
        if self._workspace is not None:
            why = self._workspace(safe)
            if why is not None:
                self.stats.workspace += 1
                if self.stats.workspace <= 10:
                    log.warning("safety: %s; holding position", why)
                return self._last.copy()
        if np.logical_or.reduce(safe != a):
            self.stats.clipped += 1
        return safe

    def send_action(self, action: np.ndarray) -> np.ndarray:
        with self._lock:
            safe = self.filter(action)
            applied = self._robot.send_checked_action(safe)
            self._last = np.array(applied, dtype=np.float32)
            self._last_send = time.monotonic()
        return applied
