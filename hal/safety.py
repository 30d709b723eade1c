"""The safety layer: every action passes through here before it reaches a robot.

A joint-limits filter in the spirit of ros2_control's joint_limits and libfranka's reflexes; every
change it makes to an action is counted in `SafetyStats` (metrics under `safety/`, `stats_dict()`):

- NaN/Inf or wrong-shape actions: hold the last target (`rejected`);
- joint limits (`clipped_position`), and on the change of the target per tick (rad): at most
  `spec.max_step_rad` (`clipped_step`) and `spec.max_velocity_rad_s * dt` (`clipped_velocity`);
  the change may grow by at most `spec.max_accel_rad_s2 * dt^2` per tick (`clipped_accel`), so a
  far target is approached along a ramp; it may shrink at once (slowing down, stopping is never
  limited). `clipped` counts actions with any clip;
- workspace: a check on the joint target (e.g. end effector inside a box, via the robot's forward
  kinematics, workspace.py): hold if outside (`workspace`);
- e-stop (from any teleop device or the operator): latched, every action becomes a hold until
  `clear_estop()` (`estopped`); `stop()` also holds the measured position at once (`stops`);
- watchdog: with `watchdog_s`, a thread re-commands the last target when the control loop sends
  nothing for that long (a hung policy or loop), so the robot holds still (`watchdog_holds`); with
  `torque_off_s` as well, after that long without an action it turns the torque off and latches the
  e-stop (`torque_offs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import operator
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from hal.robot import Robot, RobotError, innermost
from hal.spec import Observation, Outcome, RobotSpec, SpecMismatch
from hal.workspace import WorkspaceCheck

log = logging.getLogger(__name__)

# why a joint was clipped, as bits of one action's clip mask
_POSITION, _STEP, _VELOCITY, _ACCEL = 1, 2, 4, 8


@dataclass
class SafetyStats:
    """Counters reported in metrics under `safety/` (see `SafeRobot.stats_dict`)."""

    actions: int = 0
    clipped: int = 0  # actions where any joint was clipped (any of the four below)
    clipped_position: int = 0  # actions with a joint target clipped to the joint limits
    clipped_step: int = 0  # ... with a change per tick clipped to spec.max_step_rad
    clipped_velocity: int = 0  # ... clipped to spec.max_velocity_rad_s * dt
    clipped_accel: int = 0  # ... whose change per tick grew by more than spec.max_accel_rad_s2 * dt^2
    max_step_seen: float = 0.0  # largest change of a joint target in one tick the filter let through, rad
    rejected: int = 0  # NaN/Inf or wrong-shape actions replaced by holding position
    workspace: int = 0  # targets outside the workspace replaced by holding position
    estopped: int = 0  # actions replaced by holding position while the e-stop was latched
    stops: int = 0  # stop() calls: e-stop latched and the measured position held at once
    watchdog_holds: int = 0  # holds commanded because no action arrived in time
    torque_offs: int = 0  # torque turned off (no action for torque_off_s, or disable_torque())


class SafeRobot(Robot):
    """Wraps a robot: rejects non-finite or wrong-shape actions (holds the last target instead),
    clips to the joint limits and the motion limits of its spec, and guards it with an e-stop and
    an optional two-stage watchdog (see the module docstring).

    `watchdog_s`: hold the last target when nothing was commanded for this long (s; None: no
    watchdog). `torque_off_s`: turn the torque off and latch the e-stop when no action arrived for
    this long (s, more than `watchdog_s`; None: never). `clock`: seconds, for the watchdog."""

    def __init__(
        self,
        robot: Robot,
        *,
        workspace: WorkspaceCheck | None = None,
        watchdog_s: float | None = None,
        torque_off_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if torque_off_s is not None and (watchdog_s is None or not torque_off_s > watchdog_s):
            raise ValueError(f"torque_off_s ({torque_off_s}) needs a watchdog_s below it, got {watchdog_s}")
        self._robot = robot
        spec = robot.spec  # static: the limits are read once, not per tick
        self._low, self._high = spec.low, spec.high
        # the per-tick filter works on Python floats: for a handful of joints that is several
        # times faster than numpy's per-call overhead, and bit-identical (float32 inputs; the
        # sums are exact in float64 and rounded once to float32, as numpy's float32 ops do)
        self._low_l, self._high_l = spec.low.tolist(), spec.high.tolist()
        # per joint: the largest change per tick (rad; float32 like the targets), which limit
        # sets it, and how much the change may grow per tick (rad)
        step = float(np.float32(spec.max_step_rad))
        by_velocity = [float(np.float32(v * spec.dt)) for v in spec.velocity_limits()]
        self._cap_l = [min(step, v) for v in by_velocity]
        self._cap_why = [_VELOCITY if v < step else _STEP for v in by_velocity]
        self._acc_l = [a * spec.dt * spec.dt for a in spec.accel_limits()]
        self._accel_limited = any(math.isfinite(a) for a in self._acc_l)
        self._shape = (spec.action_dim,)
        self._zeros = [0.0] * spec.action_dim  # shared, never changed in place
        self._last: np.ndarray | None = None
        self._last_l: list[float] = []
        self._prev_l: list[float] = self._zeros  # the last tick's change of each target, rad
        self.stats = SafetyStats()
        self._workspace = workspace
        self._watchdog_s, self._torque_off_s, self._clock = watchdog_s, torque_off_s, clock
        self._estop: str | None = None
        self._torque_off = False  # latched with the e-stop: nothing reaches the robot until cleared
        # the watchdog and the control loop share the robot; without a watchdog only the
        # control loop drives it and no lock is taken per tick
        self._lock = threading.RLock() if watchdog_s is not None else contextlib.nullcontext()
        self._last_send = self._last_action = clock()  # last command of any kind, last action
        self._closing = threading.Event()
        self._watchdog: threading.Thread | None = None

    # --- e-stop, stop and watchdog --------------------------------------------------------------
    def estop(self, reason: str = "e-stop") -> None:
        """Latch the e-stop: from now on every action holds position."""
        if self._estop is None:
            log.error("safety: E-STOP (%s): holding position until cleared", reason)
        self._estop = reason

    def stop(self, reason: str = "stop") -> np.ndarray:
        """Stop within one tick: latch the e-stop and command the measured position at once (the
        arm stops where it is instead of finishing its way to the last target). Slowing down is
        never limited, so this may be a jump of the target. Returns the target held."""
        with self._lock:
            self.stats.stops += 1
            self.estop(reason)
            hold = np.clip(self.spec.hold_action(self._robot.get_observation().state), self._low, self._high)
            if not self._torque_off:  # with the torque off nothing is sent (see send_action)
                hold = self._robot.send_checked_action(hold)
                self._last_send = self._clock()
            self._set_last(hold)
            return hold.copy()

    def disable_torque(self) -> None:
        """Turn the robot's torque off now and latch the e-stop (counted in `torque_offs`)."""
        with self._lock:
            self._turn_torque_off("torque turned off on request")

    def clear_estop(self) -> None:
        """Release the latched e-stop: actions reach the robot again. After the torque was turned
        off the targets start again from the measured position (the arm may have moved)."""
        with self._lock:
            if self._torque_off:
                self._set_last(self.spec.hold_action(self._robot.get_observation().state))
                self._torque_off = False
                self._last_send = self._last_action = self._clock()
            self._estop = None

    @property
    def estopped(self) -> bool:
        """Whether the e-stop is latched (every action holds position)."""
        return self._estop is not None

    def _turn_torque_off(self, reason: str) -> None:
        self.stats.torque_offs += 1
        self._torque_off, self._estop = True, reason  # the e-stop latched, with this reason
        disable = getattr(innermost(self._robot), "disable_torque", None)
        log.error(
            "safety: E-STOP (%s): turning the torque off%s; nothing moves until cleared",
            reason,
            "" if disable is not None else f" (robot {self.spec.name} has no disable_torque)",
        )
        if disable is not None:
            try:
                disable()
            except Exception:  # the e-stop stays latched; the watchdog thread must live on
                log.exception("safety: turning the torque off of robot %s failed", self.spec.name)

    def check_watchdog(self, now: float | None = None) -> None:
        """One look by the watchdog at `now` (`clock` seconds; its thread calls this every
        `watchdog_s / 4`): turn the torque off when no action arrived for `torque_off_s`, else hold
        the last target when nothing was commanded for `watchdog_s`. Starts with the first target."""
        if self._watchdog_s is None or self._last is None or self._torque_off:
            return
        with self._lock:
            now = self._clock() if now is None else now
            quiet = now - self._last_action
            if self._torque_off_s is not None and quiet > self._torque_off_s and not self._torque_off:
                self._turn_torque_off(f"watchdog: no action for {quiet:.2f} s")
            elif now - self._last_send > self._watchdog_s and not self._torque_off:
                self._robot.send_action(self._last.copy())
                self._last_send, self._prev_l = now, self._zeros
                self.stats.watchdog_holds += 1

    def _watch(self) -> None:
        assert self._watchdog_s is not None
        while not self._closing.wait(self._watchdog_s / 4):
            self.check_watchdog()

    # --- the Robot interface --------------------------------------------------------------------
    @property
    def spec(self) -> RobotSpec:
        return self._robot.spec

    @property
    def inner(self) -> Robot:
        """The wrapped robot."""
        return self._robot

    def connect(self) -> None:
        self._robot.connect()
        self._last_send = self._last_action = self._clock()
        if self._watchdog_s is not None and self._watchdog is None:
            self._closing.clear()
            self._watchdog = threading.Thread(target=self._watch, name="safety-watchdog", daemon=True)
            self._watchdog.start()

    def close(self) -> None:
        self._closing.set()
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
            self._last_send = self._last_action = self._clock()
        return obs

    def outcome(self) -> Outcome:
        return self._robot.outcome()

    def stats_dict(self) -> dict[str, float]:
        """The counters as a flat dict for metrics and dashboards: `safety/<counter>`."""
        return {f"safety/{f.name}": getattr(self.stats, f.name) for f in dataclasses.fields(self.stats)}

    def _set_last(self, target: np.ndarray, moved: bool = False) -> None:
        """The new last target; `moved`: sent as a step from the previous one (else a hold: the
        arm is taken to be at rest, so the next step starts its ramp from zero)."""
        old = self._last_l
        self._last = np.array(target, dtype=np.float32)
        self._last_l = self._last.tolist()
        # the change the robot took (it may clip, too), for the acceleration limit's next tick
        if moved and old and self._accel_limited:
            self._prev_l = list(map(operator.sub, self._last_l, old))
        else:
            self._prev_l = self._zeros

    def filter(self, action: np.ndarray) -> np.ndarray:
        """The action that may be sent: finite, in limits, within the motion limits per tick."""
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
        why = 0  # _POSITION | _STEP | ... of the joints clipped
        top = self.stats.max_step_seen  # over the change of every target this tick, too
        cap_why = self._cap_why
        if not self._accel_limited:
            # joint limits and the change per tick in one pass (an infinite cap leaves the
            # limits); where they cross, the upper bound wins
            for i, (v, low, high, last, cap) in enumerate(
                zip(values, self._low_l, self._high_l, self._last_l, self._cap_l, strict=False)
            ):
                lo, hi = last - cap, last + cap
                lo, hi = (low if low > lo else lo), (high if high < hi else hi)
                if v < lo:
                    values[i] = v = lo
                    why |= _POSITION if lo == low else cap_why[i]
                if v > hi:
                    values[i] = v = hi
                    why |= _POSITION if hi == high else cap_why[i]
                d = v - last if v > last else last - v
                if d > top:
                    top = d
        else:
            for i, (v, low, high, last, cap, acc, prev) in enumerate(
                zip(
                    values,
                    self._low_l,
                    self._high_l,
                    self._last_l,
                    self._cap_l,
                    self._acc_l,
                    self._prev_l,
                    strict=False,
                )
            ):
                # this tick's change: beyond the last tick's, away from zero, by at most `acc`
                # (toward zero and past it to -acc, i.e. slowing down or stopping, is free)
                dlo, dhi = (prev if prev < 0.0 else 0.0) - acc, (prev if prev > 0.0 else 0.0) + acc
                dlo, dhi = (-cap if dlo < -cap else dlo), (cap if dhi > cap else dhi)
                lo, hi = last + dlo, last + dhi
                lo, hi = (low if low > lo else lo), (high if high < hi else hi)
                if v < lo:
                    values[i] = v = lo
                    why |= _POSITION if lo == low else (_ACCEL if dlo > -cap else cap_why[i])
                if v > hi:
                    values[i] = v = hi
                    why |= _POSITION if hi == high else (_ACCEL if dhi < cap else cap_why[i])
                d = v - last if v > last else last - v
                if d > top:
                    top = d
        safe = np.array(values, dtype=np.float32)
        if self._workspace is not None:
            reason = self._workspace(safe)
            if reason is not None:
                self.stats.workspace += 1
                if self.stats.workspace <= 10:
                    log.warning("safety: %s; holding position", reason)
                return self._last.copy()
        if why:
            self._count_clips(why)
        self.stats.max_step_seen = top
        return safe

    def _count_clips(self, why: int) -> None:
        st = self.stats
        st.clipped += 1
        if why & _POSITION:
            st.clipped_position += 1
        if why & _STEP:
            st.clipped_step += 1
        if why & _VELOCITY:
            st.clipped_velocity += 1
        if why & _ACCEL:
            st.clipped_accel += 1

    def send_action(self, action: np.ndarray) -> np.ndarray:
        with self._lock:
            safe = self.filter(action)
            self._last_action = self._clock()
            if self._torque_off:  # nothing reaches a robot whose torque was turned off (e-stop latched)
                return safe
            applied = self._robot.send_checked_action(safe)
            self._set_last(applied, moved=True)
            self._last_send = self._last_action
        return applied

    # --- a capped path ----------------------------------------------------------------------------
    def approach(self, target: np.ndarray) -> Iterator[np.ndarray]:
        """Per-tick joint targets from the last target to `target` (clipped to the joint limits)
        within the motion limits, also slowing down within the acceleration limit so the arm
        arrives without a jolt; the last one is `target` (none when already there). Each joint
        moves on its own profile. For a return home between episodes::

            for q in robot.approach(home):
                robot.send_action(q)

        Raises RobotError when the e-stop is latched (the path stops there)."""
        goal = np.clip(self.spec.check_action(target), self._low, self._high).tolist()
        with self._lock:
            if self._last is None:
                self._set_last(self.spec.hold_action(self._robot.get_observation().state))
            pos, prev = list(self._last_l), list(self._prev_l)
        while pos != goal:
            if self._estop is not None:
                raise RobotError(f"e-stop latched ({self._estop}): the path to {goal} stopped at {pos}")
            for i, (q, g, p, cap, acc) in enumerate(zip(pos, goal, prev, self._cap_l, self._acc_l, strict=False)):
                sign = 1.0 if g > q else -1.0
                left = abs(g - q)
                # the fastest change that can still slow to a stop by `acc` a tick before the goal:
                # v + (v - acc) + (v - 2 acc) + ... <= left, i.e. v^2 / (2 acc) + v / 2 <= left
                brake = (math.sqrt(acc * acc + 8 * acc * left) - acc) / 2 if math.isfinite(acc) else left
                v = min(left, cap, max(p * sign, 0.0) + acc, brake)
                # float32 targets as the filter sees them, never past its bounds by a rounding
                new = np.float32(q + sign * v)
                if abs(float(new) - q) > v:
                    new = np.nextafter(new, np.float32(q))
                if float(new) == q and left > 0:  # a change below float32 resolution: still move
                    new = np.nextafter(np.float32(q), np.float32(g))
                prev[i], pos[i] = float(new) - q, float(new)
            yield np.array(pos, dtype=np.float32)
