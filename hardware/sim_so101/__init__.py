"""`SimSO101`: a LeRobot `Robot` whose motors are our MuJoCo SO-101 arm.

It speaks LeRobot's units exactly like `so101_follower` with `use_degrees=True`: joint positions
`<motor>.pos` in degrees, the gripper in 0..100, camera frames under their names. So the LeRobot
adapter in `hardware.lerobot_adapter` is tested end to end here without a physical arm. Beyond
LeRobot's API it offers `reset_episode(seed)` and `outcome()` from the task, which a real arm lacks.
"""

from __future__ import annotations

import numpy as np
from lerobot.robots.robot import Robot as LeRobotRobot
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from hal.spec import Outcome
from hardware._no_calibration import NoCalibration
from hardware.sim_so101.config import SimSO101Config
from sim.reach import ReachConfig, ReachTask

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def gripper_range(task: ReachTask) -> tuple[float, float]:
    spec = task.spec()
    return spec.joint_low[-1], spec.joint_high[-1]


class SimSO101(NoCalibration, LeRobotRobot):
    """The `sim_so101` LeRobot robot: our MuJoCo SO-101 arm in `so101_follower`'s units (see the module's
    docstring)."""

    config_class = SimSO101Config
    name = "sim_so101"

    def __init__(self, config: SimSO101Config) -> None:
        super().__init__(config)
        self.config = config
        if config.task != "reach":
            raise ValueError(f"sim_so101 is backed by task 'reach' only, not '{config.task}'")
        self.task = ReachTask(ReachConfig(hz=config.hz, cameras=tuple(config.cameras), image_size=config.image_size))
        self._connected = False
        self._rng = np.random.default_rng(0)
        self._outcome = Outcome()
        self._g_lo, self._g_hi = gripper_range(self.task)
        self._fk_data = None

    @property
    def observation_features(self) -> dict:
        return {
            **{f"{m}.pos": float for m in MOTORS},
            **{c: (self.config.image_size, self.config.image_size, 3) for c in self.config.cameras},
        }

    @property
    def action_features(self) -> dict:
        return {f"{m}.pos": float for m in MOTORS}

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        if self._connected:
            raise DeviceAlreadyConnectedError(f"{self} already connected")
        self.task.build()
        self.task.reset(self._rng)
        self._connected = True

    def _to_lerobot(self, q: np.ndarray) -> dict[str, float]:
        out = {f"{m}.pos": float(np.degrees(v)) for m, v in zip(MOTORS[:-1], q[:-1], strict=False)}
        out["gripper.pos"] = float(100 * (q[-1] - self._g_lo) / (self._g_hi - self._g_lo))
        return out

    def _from_lerobot(self, action: dict[str, float]) -> np.ndarray:
        q = [np.radians(action[f"{m}.pos"]) for m in MOTORS[:-1]]
        q.append(self._g_lo + action["gripper.pos"] / 100 * (self._g_hi - self._g_lo))
        return np.asarray(q, np.float32)

    def get_observation(self) -> dict:
        if not self._connected:
            raise DeviceNotConnectedError(f"{self} is not connected")
        return {**self._to_lerobot(self.task.state()), **self.task.images()}

    def send_action(self, action: dict) -> dict:
        if not self._connected:
            raise DeviceNotConnectedError(f"{self} is not connected")
        applied = self.task.step(self._from_lerobot(action))
        reward, success = self.task.reward_success()
        self._outcome = Outcome(reward, success, terminated=success)
        return self._to_lerobot(applied)

    def disconnect(self) -> None:
        if not self._connected:
            raise DeviceNotConnectedError(f"{self} is not connected")
        self.task.close()
        self._connected = False

    # --- beyond LeRobot's API: what only a simulator can do ---------------------------------
    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """Forward kinematics (joint positions, rad -> the end effector, m), from the arm's MJCF;
        a real arm's would come from its URDF."""
        import mujoco

        from sim.sim_robot import ee_fk

        if self._fk_data is None:
            self._fk_data = mujoco.MjData(self.task.model)
        return ee_fk(self.task.model, self._fk_data, q)

    def reset_episode(self, seed: int | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.task.reset(self._rng)
        self._outcome = Outcome()

    def outcome(self) -> Outcome:
        return self._outcome

    def features(self) -> dict[str, np.ndarray]:
        return self.task.features()

    @property
    def feature_spec(self) -> tuple[tuple[str, int], ...]:
        return self.task.spec().features

    @property
    def joint_limits_rad(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        spec = self.task.spec()
        return spec.joint_low, spec.joint_high


__all__ = ["SimSO101", "SimSO101Config"]
