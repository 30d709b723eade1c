"""An SO-101 arm of six STS3215 servos, each backed by a joint of our MuJoCo SO-101 model.

Each servo behaves as its firmware does where LeRobot can see it:

- `Present_Position = Actual - Homing_Offset` (mod 4096), where `Actual` is the magnetic encoder's
  reading: the joint angle from the simulation, offset by where the horn was fitted at assembly
  (`zero_ticks`, different per servo: an uncalibrated arm reads nonsense, as a real one does);
- `Goal_Position` (+ `Homing_Offset`, clamped to `Min/Max_Position_Limit`) becomes the joint's
  position-servo target; `Torque_Enable` 0 makes the joint limp (no actuator force);
- `Present_Velocity`, `Present_Load` (sign-magnitude), `Moving`, `Present_Voltage`,
  `Present_Temperature`, `Status` (bit 5 overload, bit 2 overheating) and the status packets'
  error byte follow the simulation and the injected faults; an overloaded or overheated servo
  unloads (torque off) as the STS firmware does.

The physics runs in real time on its own thread (`start()`); a leader arm is moved by a hand
(`hand(q)`: the joints follow `q` at up to `hand_speed` rad/s, torque or not).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from pathlib import Path

import mujoco
import numpy as np

from hardware.twin.protocol import (
    ERR_OVERHEAT,
    ERR_OVERLOAD,
    REG,
    RESOLUTION,
    ServoRegisters,
    decode_sign_magnitude,
    encode_sign_magnitude,
)

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
TICKS_PER_RAD = RESOLUTION / (2 * math.pi)
STATUS_OVERHEAT, STATUS_OVERLOAD = 1 << 2, 1 << 5
_GOAL, _TORQUE, _PRESENT = REG["Goal_Position"][0], REG["Torque_Enable"][0], REG["Present_Position"][0]
READINGS_KEPT = 20_000  # the last whole-arm position readings the bus served (`readings`)


def _model_xml() -> Path:
    import sim

    return Path(sim.__file__).resolve().parent / "assets" / "so101_reach.xml"


class TwinArm:
    """Six servos (ids 1..6, `MOTORS`) on a simulated SO-101 (see the module's docstring).
    `seed` picks the horns' assembly offsets; `calibrated=True` starts with the EEPROM holding
    `calibration()` (as after `lerobot-calibrate`), else with the factory's zeros."""

    def __init__(self, *, seed: int = 0, calibrated: bool = True, hand_speed: float = 3.0) -> None:
        self.model = mujoco.MjModel.from_xml_path(str(_model_xml()))
        self.data = mujoco.MjData(self.model)
        rng = np.random.default_rng(seed)
        self.zero_ticks = (2048 + rng.integers(-400, 400, len(MOTORS))).astype(np.int64)
        self.low = self.model.jnt_range[: len(MOTORS), 0].copy()
        self.high = self.model.jnt_range[: len(MOTORS), 1].copy()
        self._gain = self.model.actuator_gainprm[:, 0].copy()
        self._bias = self.model.actuator_biasprm[:, :3].copy()
        self.lock = threading.RLock()
        self.servos = [ServoRegisters(i + 1) for i in range(len(MOTORS))]
        for i, s in enumerate(self.servos):
            s.on_write = lambda addr, n, i=i: self._written(i, addr, n)
            s.on_read = lambda i=i: self._sample(i)
        self.torque = np.zeros(len(MOTORS), bool)
        self.data.ctrl[:] = 0.0
        self._apply_torque()
        mujoco.mj_forward(self.model, self.data)
        self.hand_speed = hand_speed
        self._hand: np.ndarray | None = None
        self.goal_writes = 0
        self.max_goal_step = np.zeros(len(MOTORS))  # the largest change between two goals per servo, rad
        self._last_goal = np.full(len(MOTORS), np.nan)  # per servo, since its torque came on
        self.torque_off_events = 0
        # what the host was told: the joint angle (rad) each servo's last Present_Position reading
        # stands for, and every SYNC READ of all six positions as one vector (bounded)
        self._read_q = np.full(len(MOTORS), np.nan)
        self.readings: deque[tuple[float, ...]] = deque(maxlen=READINGS_KEPT)
        self.readings_total = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if calibrated:
            for i, cal in enumerate(self.calibration().values()):
                s = self.servos[i]
                s.set("Homing_Offset", encode_sign_magnitude(cal["homing_offset"], 11))
                s.set("Min_Position_Limit", cal["range_min"])
                s.set("Max_Position_Limit", cal["range_max"])

    # --- geometry ---------------------------------------------------------------------------
    def actual_ticks(self, i: int, q: float) -> int:
        """The encoder's reading (0..4095) of servo `i` at joint angle `q` (rad)."""
        return int(round(self.zero_ticks[i] + q * TICKS_PER_RAD)) % RESOLUTION

    def _angle(self, i: int, actual: float) -> float:
        d = (actual - self.zero_ticks[i] + RESOLUTION / 2) % RESOLUTION - RESOLUTION / 2
        return float(d / TICKS_PER_RAD)

    def _homing(self, i: int) -> int:
        return decode_sign_magnitude(self.servos[i].get("Homing_Offset"), 11)

    def calibration(self) -> dict[str, dict[str, int]]:
        """What `lerobot-calibrate` records on this arm, in LeRobot's calibration-file fields: the
        homing offset that reads 2047 at the middle pose (every joint at 0 rad), and each joint's
        range of motion in present-position ticks (wrist_roll: the full turn, as LeRobot does)."""
        out = {}
        for i, motor in enumerate(MOTORS):
            homing = self.actual_ticks(i, 0.0) - (RESOLUTION - 1) // 2
            if motor == "wrist_roll":
                lo, hi = 0, RESOLUTION - 1
            else:
                lo = self.actual_ticks(i, float(self.low[i])) - homing
                hi = self.actual_ticks(i, float(self.high[i])) - homing
            out[motor] = {
                "id": i + 1,
                "drive_mode": 0,
                "homing_offset": int(homing),
                "range_min": int(lo),
                "range_max": int(hi),
            }
        return out

    # --- the servos' firmware ----------------------------------------------------------------
    def _written(self, i: int, addr: int, n: int) -> None:
        with self.lock:
            if addr <= _TORQUE < addr + n:
                on = self.servos[i].get("Torque_Enable") != 0
                if on and self.servos[i].error:  # a faulted servo refuses torque until cleared
                    self.servos[i].set("Torque_Enable", 0)
                    on = False
                if on and not self.torque[i]:  # torque on: hold where it is (the goal follows)
                    self.data.ctrl[i] = self.data.qpos[i]
                    self._last_goal[i] = self.data.qpos[i]
                if not on and self.torque[i]:
                    self.torque_off_events += 1
                self.torque[i] = on
                self._apply_torque()
            if addr <= _GOAL + 1 and _GOAL < addr + n:
                s = self.servos[i]
                goal = decode_sign_magnitude(s.get("Goal_Position"), 15)
                lo, hi = s.get("Min_Position_Limit"), s.get("Max_Position_Limit")
                if lo < hi:
                    goal = min(max(goal, lo), hi)
                q = self._angle(i, goal + self._homing(i))
                q = float(np.clip(q, self.low[i], self.high[i]))
                self.data.ctrl[i] = q
                self._note_goal(i, q)

    def _note_goal(self, i: int, q: float) -> None:
        step = abs(q - self._last_goal[i])
        if step > self.max_goal_step[i]:  # (a first goal before any torque-on: nan, not counted)
            self.max_goal_step[i] = step
        self._last_goal[i] = q
        self.goal_writes += 1

    def _sample(self, i: int) -> None:
        with self.lock:
            s = self.servos[i]
            q, v = float(self.data.qpos[i]), float(self.data.qvel[i])
            present = (self.actual_ticks(i, q) - self._homing(i)) % RESOLUTION
            s.set("Present_Position", encode_sign_magnitude(present, 15))
            self._read_q[i] = self._angle(i, present + self._homing(i))
            s.set("Present_Velocity", encode_sign_magnitude(int(round(v * TICKS_PER_RAD)), 15))
            rng = self.model.actuator_forcerange[i]
            load = int(round(1000 * float(self.data.actuator_force[i]) / max(abs(rng[1]), 1e-9)))
            s.set("Present_Load", encode_sign_magnitude(max(-1000, min(1000, load)), 10))
            s.set("Moving", int(abs(v) > 0.05))

    def note_sync_read(self, addr: int, n: int, ids: list[int]) -> None:
        """After a SYNC READ (`ServoBus.on_sync_read`): one of all six positions is kept in
        `readings`, as the angles the host's ticks stand for (quantized, not the physics' truth)."""
        if addr <= _PRESENT < addr + n and sorted(ids) == list(range(1, len(MOTORS) + 1)):
            with self.lock:
                self.readings.append(tuple(float(x) for x in self._read_q))
                self.readings_total += 1

    def _apply_torque(self) -> None:
        on = self.torque.astype(float)
        self.model.actuator_gainprm[:, 0] = self._gain * on
        self.model.actuator_biasprm[:, :3] = self._bias * on[:, None]

    # --- faults ------------------------------------------------------------------------------
    def fault(self, motor: str, kind: str) -> None:
        """Inject a fault on `motor`: `overload` or `overheat` (the servo unloads and reports it in
        `Status` and every status packet), or `clear` (power-cycled: the fault is gone)."""
        i = MOTORS.index(motor)
        s = self.servos[i]
        with self.lock:
            if kind == "clear":
                s.error = 0
                s.set("Status", 0)
                s.set("Present_Temperature", 30)
                return
            if kind == "overload":
                s.error |= ERR_OVERLOAD
                s.set("Status", s.get("Status") | STATUS_OVERLOAD)
            elif kind == "overheat":
                s.error |= ERR_OVERHEAT
                s.set("Status", s.get("Status") | STATUS_OVERHEAT)
                s.set("Present_Temperature", s.get("Max_Temperature_Limit") + 5)
            else:
                raise ValueError(f"unknown fault '{kind}'; known: overload, overheat, clear")
            s.set("Torque_Enable", 0)
            if self.torque[i]:
                self.torque_off_events += 1
            self.torque[i] = False
            self._apply_torque()

    # --- physics -----------------------------------------------------------------------------
    def hand(self, q: np.ndarray | None) -> None:
        """A hand moves the joints toward `q` (rad) at up to `hand_speed`; None lets go."""
        with self.lock:
            self._hand = None if q is None else np.clip(np.asarray(q, float), self.low, self.high)

    def joints(self) -> np.ndarray:
        """The joint angles (rad): the simulation's truth, not a servo's reading."""
        with self.lock:
            return self.data.qpos[: len(MOTORS)].copy()

    def set_joints(self, q: np.ndarray) -> None:
        """Place the arm at `q` (rad) at rest (goals follow where torque is on)."""
        with self.lock:
            self.data.qpos[: len(MOTORS)] = np.clip(q, self.low, self.high)
            self.data.qvel[:] = 0
            self.data.ctrl[:] = self.data.qpos[: len(MOTORS)]
            mujoco.mj_forward(self.model, self.data)

    def step(self, seconds: float) -> None:
        """Advance the physics by `seconds` (the hand included)."""
        dt = self.model.opt.timestep
        for _ in range(max(1, int(round(seconds / dt)))):
            with self.lock:  # per physics step: a bus request waits for one step at most
                if self._hand is not None:
                    d = np.clip(self._hand - self.data.qpos[: len(MOTORS)], -self.hand_speed * dt, self.hand_speed * dt)
                    self.data.qpos[: len(MOTORS)] += d
                    self.data.qvel[: len(MOTORS)] = d / dt
                    mujoco.mj_forward(self.model, self.data)
                else:
                    mujoco.mj_step(self.model, self.data)

    def start(self) -> None:
        """Run the physics in real time on a thread until `stop()`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="twin-physics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        dt = self.model.opt.timestep
        t_sim = time.monotonic()
        while not self._stop.wait(0.002):
            now = time.monotonic()
            n = int((now - t_sim) / dt)
            if n > 0:
                self.step(min(n, 100) * dt)
                t_sim = now if n > 100 else t_sim + n * dt  # fell behind: do not try to catch up

    def stop(self) -> None:
        """Stop the physics thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
