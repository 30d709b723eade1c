"""End-effector teleoperation: a device that gives end-effector deltas (LeRobot's `gamepad`,
`keyboard_ee`: `delta_x`, `delta_y`, `delta_z` in [-1, 1] and a gripper command, 0 close, 1 stay,
2 open) drives any robot, whatever its action space:

- a joint-space arm (`control_mode` joint_position, with forward kinematics `fk(q) -> xyz`):
  through inverse kinematics, damped least squares on the Jacobian of `fk` toward a goal the
  operator moves (closed loop, so lines stay straight), the joint step capped at
  `max_joint_step` per tick; the gripper joint (the last, when named `gripper`) moves
  `gripper_step` per tick toward its open (upper) or closed (lower) limit. The Jacobian is the
  kinematics' own where it has one (`fk.jacobian(q) -> [3, n]`: a real SO-100/SO-101's
  `hardware.lerobot_adapter.ArmKinematics`, MuJoCo's analytic `mj_jacSite` on the arm's MJCF),
  else finite differences of `fk` (so any robot with forward kinematics works: MuJoCo models,
  the sim SO-101 twin);
- an end-effector action space (gym_hil's `[dx, dy, dz, grip]`, `EndEffectorSpace`): the deltas
  scaled to it, the gripper command mapped to its convention.

The target is integrated from the last command, which starts, at each takeover, from the robot's
measured state: taking over moves the arm by at most one step, and handing back leaves it where
the operator left it (the control loop holds the operator's last target until the policy's next
chunk). Events (takeover, success, failure, re-record, e-stop) pass through from the device.

Why not an IK library: `mink` (differential IK on MuJoCo) needs mujoco>=3.3.6 from its 1.0 on
(we pin mujoco==3.3.0), and its 0.0.x line would add a QP solver (qpsolvers, daqp) for what is
a 3 x 5 position-only problem; MuJoCo's Jacobian with damped least squares, capped per tick,
is that problem's standard solution, and the safety layer still enforces every joint limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from hal.robot import RobotError
from hal.spec import RobotSpec
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind

GRIP_CLOSE, GRIP_STAY, GRIP_OPEN = 0.0, 1.0, 2.0  # LeRobot's end-effector teleoperators' gripper command


class EndEffectorDevice(Teleop):
    """A teleop whose actions are end-effector deltas: `get_ee()` -> `[dx, dy, dz, grip]` (dx..dz in
    [-1, 1], grip 0 close / 1 stay / 2 open) or None when it gives none."""

    def get_ee(self) -> np.ndarray | None:
        """This tick's `[dx, dy, dz, grip]`, or None."""
        raise NotImplementedError

    def get_action(self) -> np.ndarray | None:
        return self.get_ee()


@dataclass(frozen=True)
class EndEffectorSpace:
    """An env whose actions are end-effector deltas: `[dx, dy, dz, grip]`, each delta unit
    `scale` of the action's, and the gripper's values for close / stay / open."""

    scale: float = 1.0
    grip_close: float = 2.0
    grip_stay: float = 1.0
    grip_open: float = 0.0


class EndEffectorTeleop(Teleop):
    """`device` (end-effector deltas) driving a robot with `spec` (see the module's docstring).
    `fk`: forward kinematics (joint positions -> end-effector position, m), for joint-space arms;
    `jacobian`: its Jacobian (joint positions -> `[3, n]`, m/rad, n >= the arm's joints), default
    `fk.jacobian` where `fk` has one, else finite differences of `fk`; `ee_space`: for robots whose
    actions are end-effector deltas. `step_m`: metres per unit of delta per tick."""

    def __init__(
        self,
        device: EndEffectorDevice,
        spec: RobotSpec,
        *,
        fk: Callable[[np.ndarray], np.ndarray] | None = None,
        jacobian: Callable[[np.ndarray], np.ndarray] | None = None,
        ee_space: EndEffectorSpace | None = None,
        step_m: float = 0.01,
        max_joint_step: float = 0.05,
        gripper_step: float = 0.2,
        damping: float = 0.02,
    ) -> None:
        if ee_space is None and fk is None:
            raise RobotError(
                f"{device.name} gives end-effector deltas; {spec.name} takes joint targets and has no "
                "forward kinematics to turn them into joints"
            )
        if ee_space is not None and spec.action_dim != 4:
            raise RobotError(f"{device.name} gives [dx, dy, dz, grip]; {spec.name} takes {spec.action_dim} actions")
        self.device, self.spec, self.fk, self.ee_space = device, spec, fk, ee_space
        self.jacobian = jacobian if jacobian is not None else getattr(fk, "jacobian", None)
        self.step_m, self.max_joint_step, self.gripper_step, self.damping = (
            step_m,
            max_joint_step,
            gripper_step,
            damping,
        )
        n = spec.action_dim
        self._grip = n - 1 if spec.joint_names and spec.joint_names[-1] == "gripper" else None
        self._arm = np.arange(n if self._grip is None else n - 1)
        self._state: np.ndarray | None = None
        self._target: np.ndarray | None = None
        self._goal: np.ndarray | None = None  # where the operator has moved the end effector to (m)

    @property
    def name(self) -> str:
        return self.device.name

    @property
    def action_dim(self) -> int | None:
        return self.spec.action_dim

    def connect(self) -> None:
        self.device.connect()

    def close(self) -> None:
        self.device.close()

    def observe(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> None:
        self._state = np.asarray(obs["state"], np.float64)[: self.spec.action_dim].copy()
        self.device.observe(obs, evaluation)

    def events(self) -> list[TeleopEvent]:
        out = self.device.events()
        if any(e.kind in (TeleopEventKind.INTERVENTION_ON, TeleopEventKind.INTERVENTION_OFF) for e in out):
            self._target = self._goal = None  # each takeover starts from where the robot is
        return out

    def get_action(self) -> np.ndarray | None:
        ee = self.device.get_ee()
        if ee is None:
            return None
        ee = np.asarray(ee, np.float64)
        if ee.shape != (4,) or not np.all(np.isfinite(ee)):
            raise RobotError(f"teleop {self.name} gave {ee.tolist()}; [dx, dy, dz, grip] expected")
        d, grip = np.clip(ee[:3], -1.0, 1.0), float(ee[3])
        if self.ee_space is not None:
            s = self.ee_space
            g = s.grip_close if grip < 0.5 else s.grip_open if grip > 1.5 else s.grip_stay
            return np.clip(np.array([*(d * s.scale), g], np.float32), self.spec.low, self.spec.high)
        return self._joint_targets(d, grip)

    def _joint_targets(self, d: np.ndarray, grip: float) -> np.ndarray:
        if self._target is None:
            if self._state is None:
                raise RobotError(f"teleop {self.name}: no observation yet (observe() comes first each tick)")
            self._target = self._state.copy()
        q = self._target.copy()
        if np.any(d):
            q[self._arm] += self._ik_step(q, d * self.step_m)
        else:
            self._goal = None  # let go: the next move starts from where the target is
        if self._grip is not None and grip != GRIP_STAY:
            goal = (
                self.spec.low[self._grip] if grip < 0.5 else self.spec.high[self._grip] if grip > 1.5 else q[self._grip]
            )
            q[self._grip] += np.clip(goal - q[self._grip], -self.gripper_step, self.gripper_step)
        self._target = np.clip(q, self.spec.low, self.spec.high)
        return self._target.astype(np.float32)

    def _ik_step(self, q: np.ndarray, dx: np.ndarray) -> np.ndarray:
        """Joint step from `q` toward the end-effector goal moved by `dx` (m) this tick: damped least
        squares on the Jacobian at `q`, on the goal's error (closed loop: on the SO-101 a line of 10-20
        cm stays within 0.5 mm of straight, where summed open-loop steps drift 2-6 mm off it), scaled
        down so no joint moves more than `max_joint_step`. The goal stays at most one step ahead of
        where `q` puts the end effector along the motion, so an arm slowed by the cap, a joint limit
        or a singularity does not wind it up (the arm stops when the operator lets go)."""
        assert self.fk is not None  # (a joint-space arm: the constructor refused one without)
        x = np.asarray(self.fk(q.astype(np.float32)), np.float64)
        behind = np.zeros(3) if self._goal is None else self._goal - x  # what the last ticks left undone
        u = dx / np.linalg.norm(dx)
        along = float(behind @ u)  # lag along this tick's motion, at most one step (off the line: all of it)
        behind += (min(along, self.step_m) - along) * u
        reach = float(np.linalg.norm(behind))
        if reach > 2 * self.step_m:  # (the direction changed while behind, a limit holds the arm)
            behind *= 2 * self.step_m / reach
        self._goal = x + behind + dx
        jac = self._arm_jacobian(q, x)
        lam2 = self.damping**2
        dq = jac.T @ np.linalg.solve(jac @ jac.T + lam2 * np.eye(3), behind + dx)
        biggest = float(np.max(np.abs(dq))) if len(dq) else 0.0
        return dq * (self.max_joint_step / biggest) if biggest > self.max_joint_step else dq

    def _arm_jacobian(self, q: np.ndarray, x0: np.ndarray) -> np.ndarray:
        """`[3, arm joints]` at `q` (rad, where the end effector is at `x0`, m): the kinematics'
        own, else forward differences of `fk`."""
        n = len(self._arm)
        if self.jacobian is not None:
            jac = np.asarray(self.jacobian(q), np.float64)
            if jac.ndim != 2 or jac.shape[0] != 3 or jac.shape[1] < n or not np.all(np.isfinite(jac)):
                raise RobotError(
                    f"teleop {self.name}: the Jacobian of {self.spec.name}'s kinematics is {jac.shape}; "
                    f"[3, >= {n}] finite expected"
                )
            return jac[:, self._arm]
        assert self.fk is not None
        eps = 1e-4
        jac = np.zeros((3, n))
        for c, j in enumerate(self._arm):
            qq = q.copy()
            qq[j] += eps
            jac[:, c] = (np.asarray(self.fk(qq.astype(np.float32)), np.float64) - x0) / eps
        return jac
