"""`SimRobot`: a MuJoCo task behind the `hal.Robot` interface."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import mujoco
import numpy as np

from hal.robot import Robot, RobotError
from hal.spec import Observation, Outcome, RobotSpec
from sim.reach import ReachTask


@dataclass(frozen=True)
class SimImperfections:
    """Make the simulator behave like hardware: delays in whole control ticks, Gaussian noise."""

    obs_latency_ticks: int = 0  # observations are this many ticks old
    action_latency_ticks: int = 0  # commands take effect this many ticks after they are sent
    obs_noise_std: float = 0.0  # rad, added to the joint state
    action_noise_std: float = 0.0  # rad, added to the joint targets the motors receive
    disconnect_after_ticks: int | None = None  # fault injection: the robot "unplugs" at this tick


class SimRobot(Robot):
    """A simulated robot. Each `send_action` advances the simulation by one control tick.

    With `realtime=True` a tick also takes one control period of wall-clock time (the call
    sleeps until the tick's deadline), so the sim behaves like hardware; otherwise it runs as
    fast as the caller drives it.
    """

    def __init__(
        self, task: ReachTask, *, realtime: bool = False, imperfections: SimImperfections = SimImperfections()
    ) -> None:
        self._task = task
        self._imp = imperfections
        self._obs_queue: deque[Observation] = deque()
        self._act_queue: deque[np.ndarray] = deque()
        self._fk_data: mujoco.MjData | None = None
        self._ticks = 0
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
        self._obs_queue.clear()
        self._act_queue.clear()
        return self.get_observation()

    def get_observation(self) -> Observation:
        self._require()
        t = self._task
        state = t.state()
        if self._imp.obs_noise_std > 0:
            state = (state + self._rng.normal(0, self._imp.obs_noise_std, state.shape)).astype(np.float32)
        obs = Observation(time.monotonic(), state, t.features(), t.images())
        if self._imp.obs_latency_ticks <= 0:
            return obs
        self._obs_queue.append(obs)  # one observation per tick; hand out the one from k ticks ago
        while len(self._obs_queue) > self._imp.obs_latency_ticks + 1:
            self._obs_queue.popleft()
        return self._obs_queue[0]

    def send_action(self, action: np.ndarray) -> np.ndarray:
        return self.send_checked_action(self._spec.check_action(action))

    def send_checked_action(self, a: np.ndarray) -> np.ndarray:
        self._require()
        self._ticks += 1
        if self._imp.disconnect_after_ticks is not None and self._ticks > self._imp.disconnect_after_ticks:
            self._connected = False
            raise RobotError(
                f"{self._spec.name} disconnected (injected fault after {self._imp.disconnect_after_ticks} ticks)"
            )
        if self._imp.action_latency_ticks > 0:
            self._act_queue.append(a)
            a = (
                self._act_queue.popleft()
                if len(self._act_queue) > self._imp.action_latency_ticks
                else self._task.state()[: len(a)]
            )  # nothing due yet: keep where it is
        if self._imp.action_noise_std > 0:
            a = np.clip(
                a + self._rng.normal(0, self._imp.action_noise_std, a.shape), self._spec.low, self._spec.high
            ).astype(np.float32)
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

    def render(self, size: int, camera: str | None = None) -> np.ndarray:
        """A frame for people (videos): `camera` (default: the task's first camera, else 'front')
        at size x size pixels, independent of the policy cameras' resolution."""
        self._require()
        cams = self._task.config.cameras
        return self._task.render(camera or (cams[0] if cams else "front"), size)

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """Forward kinematics: end-effector position (m) for joint positions `q` (for safety and
        end-effector teleoperation)."""
        self._require()
        if self._fk_data is None:
            self._fk_data = mujoco.MjData(self._task.model)
        return ee_fk(self._task.model, self._fk_data, q)

    @property
    def truncated(self) -> bool:
        return self._task.truncated


def ee_fk(model: mujoco.MjModel, scratch: mujoco.MjData, q: np.ndarray) -> np.ndarray:
    """The `ee` site's position (m) for joint positions `q` (rad), computed in `scratch` (not the
    simulation's own data): forward kinematics of our arm's MJCF."""
    scratch.qpos[: len(q)] = q
    mujoco.mj_kinematics(model, scratch)
    return scratch.site_xpos[model.site("ee").id].copy()


def ee_jacobian(model: mujoco.MjModel, scratch: mujoco.MjData, q: np.ndarray) -> np.ndarray:
    """d(`ee` site position, m)/d(joint position, rad) at `q`: `[3, len(q)]`, MuJoCo's analytic
    Jacobian (`mj_jacSite`), computed in `scratch`. Column j is joint j's (the model's hinges
    in order, one dof each, as in our arm MJCFs)."""
    scratch.qpos[: len(q)] = q
    mujoco.mj_kinematics(model, scratch)
    mujoco.mj_comPos(model, scratch)  # the dofs' motion axes (cdof), which mj_jac reads
    jacp = np.zeros((3, model.nv))
    mujoco.mj_jacSite(model, scratch, jacp, None, model.site("ee").id)
    return jacp[:, : len(q)].copy()
