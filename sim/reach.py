"""The `reach` task: move the end effector of an SO-101-like arm to within 2 cm of a target.

Control runs at `hz` (30 by default) with `substeps` physics steps per tick. Actions are absolute
joint-position targets in rad for the six actuators (five arm joints plus the gripper).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering; must be set before mujoco loads

import mujoco
import numpy as np

from hal.spec import CameraSpec, RobotSpec

ASSET = Path(__file__).parent / "assets" / "so101_reach.xml"
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
HOME = np.array([0.0, 0.2, 1.3, 0.9, 0.0, 0.0])
# Target workspace (m, world frame): in front of the arm, inside its reach.
TARGET_LOW = np.array([0.12, -0.15, 0.05])
TARGET_HIGH = np.array([0.28, 0.15, 0.25])


@dataclass(frozen=True)
class ReachConfig:
    """The reach task's settings: control rate (Hz), physics substeps, episode length (ticks), success radius
    (m), cameras, start-pose noise (rad) and target moves."""

    hz: float = 30.0  # control ticks per second
    substeps: int = 10  # physics steps per tick (timestep = 1 / (hz * substeps))
    episode_ticks: int = 50  # truncation after this many ticks
    success_radius: float = 0.02  # m
    cameras: tuple[str, ...] = ()  # subset of ("front", "wrist")
    image_size: int = 128  # square camera frames, pixels
    home_noise: float = 0.1  # rad, uniform noise on the start pose
    target_moves: int = 0  # the target jumps to a new place this many times per episode, at random ticks
    move_gap: int = 20  # ticks at least between two moves (and before the first)


class ReachTask:
    """The physics and task logic shared by `SimRobot` and the Gymnasium env. No I/O until `build()`."""

    name = "reach"

    def __init__(self, config: ReachConfig = ReachConfig()) -> None:
        unknown = set(config.cameras) - {"front", "wrist"}
        if unknown:
            raise ValueError(f"reach has cameras 'front' and 'wrist', not {sorted(unknown)}")
        self.config = config
        self.model: mujoco.MjModel | None = None
        self.data: mujoco.MjData | None = None
        self._renderer: mujoco.Renderer | None = None
        self._extra_renderers: dict[int, mujoco.Renderer] = {}  # by size: videos at a watchable size
        self._ik_data: mujoco.MjData | None = None
        self.tick = 0

    def spec(self) -> RobotSpec:
        c = self.config
        return RobotSpec(
            name="sim_so101_reach",
            joint_names=JOINTS,
            joint_low=(-1.92, -1.75, -1.69, -1.66, -2.74, -0.17),
            joint_high=(1.92, 1.75, 1.69, 1.66, 2.84, 1.75),
            hz=c.hz,
            cameras=tuple(CameraSpec(n, c.image_size, c.image_size) for n in c.cameras),
            features=(("ee_pos", 3), ("target", 3), ("ee_to_target", 3)),
        )

    # --- lifecycle -------------------------------------------------------------------------
    def build(self) -> None:
        if self.model is not None:
            return
        model = self._load_model()
        model.opt.timestep = 1.0 / (self.config.hz * self.config.substeps)
        self.model, self.data = model, mujoco.MjData(model)
        self._ik_data = mujoco.MjData(model)
        self._ee = model.site("ee").id
        self._target_mocap = model.body("target").mocapid[0]
        self._ctrl_lo = model.actuator_ctrlrange[:, 0].copy()  # read once: step runs per tick
        self._ctrl_hi = model.actuator_ctrlrange[:, 1].copy()
        if self.config.cameras:
            self._renderer = mujoco.Renderer(model, self.config.image_size, self.config.image_size)

    def _load_model(self) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_path(str(ASSET))

    def close(self) -> None:
        for r in [self._renderer, *self._extra_renderers.values()]:
            if r is not None:
                r.close()
        self._renderer = None
        self._extra_renderers = {}
        self.model = self.data = self._ik_data = None

    # --- episode ---------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator) -> None:
        assert self.model is not None and self.data is not None, "call build() first"
        mujoco.mj_resetData(self.model, self.data)
        q = HOME + rng.uniform(-self.config.home_noise, self.config.home_noise, size=HOME.shape)
        self.data.qpos[: len(JOINTS)] = q
        self.data.ctrl[:] = q
        self.set_target(rng.uniform(TARGET_LOW, TARGET_HIGH))
        mujoco.mj_forward(self.model, self.data)
        self.tick = 0
        c = self.config
        self._rng = rng
        self.move_ticks: list[int] = []  # ticks at which the target jumps this episode
        t = 0
        for _ in range(getattr(c, "target_moves", 0)):
            t += c.move_gap + int(rng.integers(0, c.move_gap))
            self.move_ticks.append(t)
        self.moves_done = 0

    def set_target(self, pos: np.ndarray) -> None:
        assert self.data is not None
        self.data.mocap_pos[self._target_mocap] = pos

    def step(self, action: np.ndarray) -> np.ndarray:
        """Apply joint targets (clipped to limits) for one tick; returns what was applied."""
        assert self.model is not None and self.data is not None, "call build() first"
        applied = np.minimum(np.maximum(action, self._ctrl_lo), self._ctrl_hi)  # np.clip's cost, a third
        self.data.ctrl[:] = applied
        mujoco.mj_step(self.model, self.data, nstep=self.config.substeps)
        self.tick += 1
        if self.moves_done < len(getattr(self, "move_ticks", ())) and self.tick >= self.move_ticks[self.moves_done]:
            self.moves_done += 1  # the target jumps: a moment the policy must react to
            self.set_target(self._rng.uniform(TARGET_LOW, TARGET_HIGH))
        return applied.astype(np.float32)

    # --- readings --------------------------------------------------------------------------
    @property
    def target(self) -> np.ndarray:
        assert self.data is not None
        return self.data.mocap_pos[self._target_mocap].copy()

    @property
    def ee_pos(self) -> np.ndarray:
        assert self.data is not None
        return self.data.site_xpos[self._ee].copy()

    def distance(self) -> float:
        """End effector to target (m), read in place (per tick: no copies, no numpy reduction)."""
        assert self.data is not None
        x, y, z = (self.data.mocap_pos[self._target_mocap] - self.data.site_xpos[self._ee]).tolist()
        return math.sqrt(x * x + y * y + z * z)

    def state(self) -> np.ndarray:
        assert self.data is not None
        return self.data.qpos[: len(JOINTS)].astype(np.float32)

    def features(self) -> dict[str, np.ndarray]:
        assert self.data is not None
        ee, target = self.data.site_xpos[self._ee], self.data.mocap_pos[self._target_mocap]  # views, cast once
        return {
            "ee_pos": ee.astype(np.float32),
            "target": target.astype(np.float32),
            "ee_to_target": (target - ee).astype(np.float32),
        }

    def render(self, camera: str, size: int | None = None) -> np.ndarray:
        """An RGB frame (uint8, size x size x 3; default the policy cameras' `image_size`). Works
        without configured cameras (builds a renderer); other sizes (videos) get their own."""
        assert self.model is not None and self.data is not None
        if size is not None and size != self.config.image_size:
            r = self._extra_renderers.get(size)
            if r is None:
                g = self.model.vis.global_  # the offscreen framebuffer must hold the frame
                g.offwidth, g.offheight = max(g.offwidth, size), max(g.offheight, size)
                r = self._extra_renderers[size] = mujoco.Renderer(self.model, size, size)
            r.update_scene(self.data, camera=camera)
            return r.render()
        if self._renderer is None:
            size = self.config.image_size
            self._renderer = mujoco.Renderer(self.model, size, size)
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render()

    def images(self) -> dict[str, np.ndarray]:
        return {name: self.render(name) for name in self.config.cameras}

    def reward_success(self) -> tuple[float, bool]:
        """Dense reward: -10 x distance (m); +10 and success once within `success_radius`."""
        d = self.distance()
        success = d <= self.config.success_radius and self.moves_done >= len(getattr(self, "move_ticks", ()))
        return (10.0 if success else -10.0 * d), success

    @property
    def truncated(self) -> bool:
        return self.tick >= self.config.episode_ticks

    # --- expert ----------------------------------------------------------------------------
    def solve_ik(self, target: np.ndarray, iters: int = 60, damping: float = 1e-3) -> np.ndarray:
        """Joint targets putting the end effector on `target`, by damped least squares from the
        current pose (arm joints only; wrist roll and gripper keep their values)."""
        assert self.model is not None and self.data is not None and self._ik_data is not None
        m, d = self.model, self._ik_data
        d.qpos[:] = self.data.qpos
        lo, hi = m.jnt_range[:4, 0], m.jnt_range[:4, 1]
        jacp = np.zeros((3, m.nv))
        for _ in range(iters):
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            err = target - d.site_xpos[self._ee]
            if np.linalg.norm(err) < 1e-4:
                break
            mujoco.mj_jacSite(m, d, jacp, None, self._ee)
            j = jacp[:, :4]
            dq = j.T @ np.linalg.solve(j @ j.T + damping * np.eye(3), err)
            d.qpos[:4] = np.clip(d.qpos[:4] + dq, lo, hi)
        return d.qpos[: len(JOINTS)].astype(np.float32).copy()


class ReachExpert:
    """Scripted expert: solves IK for the current target and commands it, every tick.

    With `max_step` (rad per tick) the commanded joint targets move toward the IK solution at
    most that far per tick: smooth trajectories like a human demonstrator's, along which the robot
    only moves while it is commanded (a robot waiting for its policy stands still)."""

    def __init__(self, task: ReachTask, max_step: float | None = None) -> None:
        self._task = task
        self.max_step = max_step
        self._last: np.ndarray | None = None
        self._tick = -1

    def act(self) -> np.ndarray:
        goal = self._task.solve_ik(self._task.target)
        if self.max_step is None:
            return goal
        if self._last is None or self._task.tick < self._tick or self._task.tick == 0:
            self._last = self._task.state().copy()  # a new episode starts from where the arm is
        self._tick = self._task.tick
        self._last = (self._last + np.clip(goal - self._last, -self.max_step, self.max_step)).astype(np.float32)
        return self._last.copy()
