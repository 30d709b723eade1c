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

import contextlib
import logging
import math
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
        # the per-tick filter works on Python floats: for a handful of joints that is several
        # times faster than numpy's per-call overhead, and bit-identical (float32 inputs; the
        # sums are exact in float64 and rounded once to float32, as numpy's float32 ops do)
        self._low_l, self._high_l = spec.low.tolist(), spec.high.tolist()
        self._max_step = float(np.float32(spec.max_step_rad))
        self._shape = (spec.action_dim,)
        self._last: np.ndarray | None = None
        self._last_l: list[float] = []
        self.stats = SafetyStats()
        self._workspace = workspace
        self._watchdog_s = watchdog_s
        self._estop: str | None = None
        # the watchdog and the control loop share the robot; without a watchdog only the
        # control loop drives it and no lock is taken per tick
        self._lock = threading.RLock() if watchdog_s is not None else contextlib.nullcontext()
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
        """Release the latched e-stop: actions reach the robot again."""
        self._estop = None

    @property
    def estopped(self) -> bool:
        """Whether the e-stop is latched (every action holds position)."""
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
        """The wrapped robot."""
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
            self._set_last(self.spec.hold_action(obs.state))
            self._last_send = time.monotonic()
        return obs

    def outcome(self) -> Outcome:
        return self._robot.outcome()

    def _set_last(self, target: np.ndarray) -> None:
        self._last = np.array(target, dtype=np.float32)
        self._last_l = self._last.tolist()

    def filter(self, action: np.ndarray) -> np.ndarray:
        """The action that may be sent: finite, in limits, within the per-tick step."""
        self.stats.actions += 1
        if self._last is None:
            self._set_last(self.spec.hold_action(self._robot.get_observation().state))
        assert self._last is not None
        a = np.asarray(action, dtype=np.float32)
        values = a.tolist() if a.shape == self._shape else None
        if values is None or not math.isfinite(sum(values)):
            try:  # names the fault (shape, NaN/Inf) for the log
                self.spec.check_action(a)
                raise SpecMismatch(f"action {values} is not finite")
            except SpecMismatch as e:
                self.stats.rejected += 1
                log.warning("safety: %s; holding position", e)
                return self._last.copy()
        if self._estop is not None:
            self.stats.estopped += 1
            return self._last.copy()
        clipped = False
        step = self._max_step
        # joint limits and the per-tick step in one pass (an infinite step leaves the limits);
        # where they cross, the upper bound wins
        for i, (v, low, high, last) in enumerate(zip(values, self._low_l, self._high_l, self._last_l)):
            lo, hi = last - step, last + step
            lo, hi = (low if low > lo else lo), (high if high < hi else hi)
            if v < lo:
                values[i] = v = lo
                clipped = True
            if v > hi:
                values[i] = hi
                clipped = True
        safe = np.array(values, dtype=np.float32)
        if self._workspace is not None:
            why = self._workspace(safe)
            if why is not None:
                self.stats.workspace += 1
                if self.stats.workspace <= 10:
                    log.warning("safety: %s; holding position", why)
                return self._last.copy()
        if clipped:
            self.stats.clipped += 1
        return safe

    def send_action(self, action: np.ndarray) -> np.ndarray:
        with self._lock:
            safe = self.filter(action)
            applied = self._robot.send_checked_action(safe)
            self._set_last(applied)
            self._last_send = time.monotonic()
        return applied
