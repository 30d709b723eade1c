"""Table-top tasks with a cube, on the same SO-101-like arm: `push` (slide the cube into a goal
region on the table) and `pick_lift` (grasp the cube and lift it).

The scene is the reach arm plus a 2.4 cm cube on a free joint; the hand and fingers collide with
the cube (not with the floor). Grasping is modelled, not contact-rich: when the gripper closes
(target below `grip_close`) with the cube between the fingers (end effector within `grip_radius`
of its centre), a weld holds it to the hand until the gripper opens. Start poses, cube and goal
positions are randomized per episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from hal.spec import CameraSpec, RobotSpec
from sim.reach import ASSET, ReachTask

CUBE_HALF = 0.012  # m
CUBE_LOW, CUBE_HIGH = np.array([0.15, -0.08]), np.array([0.22, 0.08])
GRIPPER_OPEN, GRIPPER_CLOSED = 1.2, 0.0  # rad


@dataclass(frozen=True)
class TableConfig:
    """The table-top tasks' settings: rate (Hz), substeps, episode length (ticks), success distance and lift
    height (m), grasp thresholds, cameras, start-pose noise (rad)."""

    hz: float = 30.0
    substeps: int = 10
    episode_ticks: int = 100
    success_radius: float = 0.03  # push: cube centre within this of the goal (m, in the table plane)
    lift_height: float = 0.04  # pick_lift: cube raised this far above the table (m)
    grip_close: float = 0.5  # gripper targets below this (rad) close the grip
    grip_radius: float = 0.025  # m, end effector to cube centre for a grasp to hold
    cameras: tuple[str, ...] = ()
    image_size: int = 128
    home_noise: float = 0.1
    # the cube's start (x, y, m) every episode, e.g. demonstrations recorded from one start; null: anywhere
    # in the task's range ([0.15, -0.08] to [0.22, 0.08]) per episode
    cube_xy: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        xy = self.cube_xy
        if xy is not None and (
            len(xy) != 2
            or not all(np.isfinite(float(v)) for v in xy)
            or not all(lo <= float(v) <= hi for v, lo, hi in zip(xy, CUBE_LOW, CUBE_HIGH, strict=True))
        ):
            raise ValueError(
                f"task.cube_xy must be [x, y] within the task's cube range {CUBE_LOW.tolist()} to "
                f"{CUBE_HIGH.tolist()} (m), not {list(xy)}"
            )


class TableTask(ReachTask):
    """Shared scene; `push` and `pick_lift` differ in goal, reward and success."""

    name = "table"

    def __init__(self, config: TableConfig = TableConfig()) -> None:
        super().__init__(config)  # type: ignore[arg-type]  (same fields the base class reads)
        self.grasped = False

    def _load_model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(ASSET))
        for name in ("hand", "jaw"):
            for g in spec.body(name).geoms:
                g.contype, g.conaffinity = 2, 2  # touch the cube, not the floor
                g.friction = [1.5, 0.02, 0.001]
        cube = spec.worldbody.add_body(name="cube", pos=[0.2, 0, CUBE_HALF])
        cube.add_freejoint()
        geom = cube.add_geom(
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[CUBE_HALF] * 3,
            mass=0.03,
            rgba=[0.1, 0.4, 0.9, 1],
            friction=[1.0, 0.02, 0.001],
        )
        geom.contype, geom.conaffinity = 1, 3
        weld = spec.add_equality(
            type=mujoco.mjtEq.mjEQ_WELD, name1="hand", name2="cube", objtype=mujoco.mjtObj.mjOBJ_BODY
        )
        weld.active = False
        return spec.compile()

    def spec(self) -> RobotSpec:
        base = super().spec()
        c = self.config
        return RobotSpec(
            name=f"sim_so101_{self.name}",
            joint_names=base.joint_names,
            joint_low=base.joint_low,
            joint_high=base.joint_high,
            hz=c.hz,
            cameras=tuple(CameraSpec(n, c.image_size, c.image_size) for n in c.cameras),
            features=(
                ("ee_pos", 3),
                ("target", 3),
                ("ee_to_target", 3),
                ("cube_pos", 3),
                ("ee_to_cube", 3),
                ("cube_to_target", 3),
            ),
        )

    def build(self) -> None:
        super().build()
        assert self.model is not None
        self._cube_body = self.model.body("cube").id
        self._cube_qpos = self.model.jnt_qposadr[self.model.body_jntadr[self._cube_body]]
        self._hand = self.model.body("hand").id

    def reset(self, rng: np.random.Generator) -> None:
        super().reset(rng)
        assert self.model is not None and self.data is not None
        xy = rng.uniform(CUBE_LOW, CUBE_HIGH)  # drawn either way: the goal's draw stays the same
        if self.config.cube_xy is not None:
            xy = np.asarray(self.config.cube_xy, dtype=float)
        a = self._cube_qpos
        self.data.qpos[a : a + 7] = [xy[0], xy[1], CUBE_HALF, 1, 0, 0, 0]
        self.data.eq_active[0] = 0
        self.grasped = False
        self.set_target(self._goal(rng, xy))
        mujoco.mj_forward(self.model, self.data)

    def _goal(self, rng: np.random.Generator, cube_xy: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def cube_pos(self) -> np.ndarray:
        assert self.data is not None
        return self.data.xpos[self._cube_body].copy()

    def step(self, action: np.ndarray) -> np.ndarray:
        applied = super().step(action)
        self._update_grasp(float(applied[-1]))
        return applied

    def _update_grasp(self, gripper: float) -> None:
        assert self.model is not None and self.data is not None
        closing = gripper < self.config.grip_close  # type: ignore[attr-defined]
        near = np.linalg.norm(self.ee_pos - self.cube_pos) <= self.config.grip_radius  # type: ignore[attr-defined]
        if closing and near and not self.grasped:
            # weld at the current relative pose: the cube stays where it is in the hand
            hp, hq = self.data.xpos[self._hand], self.data.xquat[self._hand]
            cp, cq = self.data.xpos[self._cube_body], self.data.xquat[self._cube_body]
            rot = np.zeros(9)
            mujoco.mju_quat2Mat(rot, hq)
            rel_pos = rot.reshape(3, 3).T @ (cp - hp)
            inv = np.zeros(4)
            mujoco.mju_negQuat(inv, hq)
            rel_q = np.zeros(4)
            mujoco.mju_mulQuat(rel_q, inv, cq)
            self.model.eq_data[0, :3] = 0  # anchor
            self.model.eq_data[0, 3:6] = rel_pos
            self.model.eq_data[0, 6:10] = rel_q
            self.model.eq_data[0, 10] = 1  # torque scale
            self.data.eq_active[0] = 1
            self.grasped = True
        elif not closing and self.grasped:
            self.data.eq_active[0] = 0
            self.grasped = False

    def features(self) -> dict[str, np.ndarray]:
        f = super().features()
        cube = self.cube_pos.astype(np.float32)
        return {**f, "cube_pos": cube, "ee_to_cube": cube - f["ee_pos"], "cube_to_target": f["target"] - cube}


class PushTask(TableTask):
    """`push`: slide the cube to a goal 6-12 cm away on the table; success when its centre is within
    `success_radius` of the goal."""

    name = "push"

    def _update_grasp(self, gripper: float) -> None:
        pass  # pushing only: the gripper never holds the cube

    def _goal(self, rng: np.random.Generator, cube_xy: np.ndarray) -> np.ndarray:
        while True:  # a goal 6-12 cm away from the cube, on the table
            g = rng.uniform(CUBE_LOW - 0.02, CUBE_HIGH + 0.02)
            if 0.06 <= np.linalg.norm(g - cube_xy) <= 0.12:
                return np.array([g[0], g[1], 0.002])

    def reward_success(self) -> tuple[float, bool]:
        d = float(np.linalg.norm((self.cube_pos - self.target)[:2]))
        success = d <= self.config.success_radius
        reach = float(np.linalg.norm(self.ee_pos - self.cube_pos))
        return (10.0 if success else -3.0 * reach - 10.0 * d), success


class PickLiftTask(TableTask):
    """`pick_lift`: grasp the cube and lift it `lift_height` above the table."""

    name = "pick_lift"

    def _goal(self, rng: np.random.Generator, cube_xy: np.ndarray) -> np.ndarray:
        return np.array([cube_xy[0], cube_xy[1], CUBE_HALF + self.config.lift_height])  # type: ignore[attr-defined]

    def reward_success(self) -> tuple[float, bool]:
        """Shaped, and never positive before success: reaching, grasping and lifting each cut a
        penalty, so holding the cube short of the goal never pays more than finishing (an earlier
        version paid +1 per tick for holding it, and RL learned to hold rather than lift)."""
        h = self.config.lift_height  # type: ignore[attr-defined]
        lifted = float(self.cube_pos[2] - CUBE_HALF)
        success = self.grasped and lifted >= h
        reach = float(np.linalg.norm(self.ee_pos - self.cube_pos))
        shaped = -3.0 * reach - 20.0 * max(h - max(lifted, 0.0), 0.0) - (0.0 if self.grasped else 1.0)
        return (10.0 if success else shaped), bool(success)


class _RateLimited:
    """With `max_step` (rad per tick) the arm's commanded targets move toward the expert's at most
    that far per tick (the gripper 4x as fast): smooth demonstrations a chunk policy can follow,
    like a human demonstrator's, instead of jumps to each IK solution."""

    def __init__(self, task: TableTask, max_step: float | None = None) -> None:
        self._task = task
        self.max_step = max_step
        self._last: np.ndarray | None = None

    def limit(self, q: np.ndarray) -> np.ndarray:
        if self.max_step is None:
            return q
        if self._last is None or self._task.tick == 0:
            self._last = self._task.state().astype(np.float32).copy()  # a new episode starts from the arm
        step = np.full(len(q), self.max_step, np.float32)
        step[-1] *= 4
        self._last = (self._last + np.clip(q - self._last, -step, step)).astype(np.float32)
        return self._last.copy()


class PushExpert(_RateLimited):
    """Goes behind the cube (seen from the goal) above it, comes down to table height, pushes
    through; starts over if the cube slips off the line."""

    def __init__(self, task: PushTask, max_step: float | None = None) -> None:
        super().__init__(task, max_step)
        self._phase = "above"

    def act(self) -> np.ndarray:
        t = self._task
        if t.tick == 0:
            self._phase = "above"
        cube, goal, ee = t.cube_pos, t.target, t.ee_pos
        d = (goal - cube)[:2]
        d = d / max(np.linalg.norm(d), 1e-6)
        behind = np.array([cube[0] - d[0] * 0.035, cube[1] - d[1] * 0.035, 0.018])
        rel = (ee - cube)[:2]
        lateral = abs(rel[0] * d[1] - rel[1] * d[0])
        if self._phase == "push" and (lateral > 0.02 or float(np.dot(rel, d)) > 0.01):
            self._phase = "above"  # lost the cube: go round again
        if self._phase == "above":
            aim = behind + [0, 0, 0.05]
            if np.linalg.norm(ee - aim) < 0.015:
                self._phase = "down"
        if self._phase == "down":
            aim = behind
            if np.linalg.norm(ee - behind) < 0.01:
                self._phase = "push"
        if self._phase == "push":
            aim = np.array([cube[0] + d[0] * 0.03, cube[1] + d[1] * 0.03, 0.018])
        q = t.solve_ik(aim)
        q[-1] = GRIPPER_CLOSED
        return self.limit(q)


class PickLiftMiss(_RateLimited):
    """A near miss, for labelled failure episodes: the expert's motions (hover, descend, close,
    lift) aimed `offset` metres beside the cube, so the gripper closes on air and rises empty. Each
    phase ends when its aim is reached or after a few ticks (an aim beside the cube may be blocked)."""

    def __init__(self, task: PickLiftTask, max_step: float | None = None, offset: float = 0.035) -> None:
        super().__init__(task, max_step)
        self.offset = offset
        self._phase, self._since = "hover", 0
        self._side = np.zeros(3)

    def act(self) -> np.ndarray:
        t = self._task
        if t.tick == 0 or not self._side.any():  # a new episode: a side of the cube, fixed for it
            ang = float(
                np.random.default_rng(int(1e4 * abs(float(t.cube_pos[0]) + float(t.cube_pos[1])))).uniform(0, 2 * np.pi)
            )
            self._side = np.array([np.cos(ang), np.sin(ang), 0.0]) * self.offset
            self._phase, self._since = "hover", 0
        spot, ee = t.cube_pos + self._side, t.ee_pos
        self._since += 1
        aims = {
            "hover": spot + [0, 0, 0.05],
            "descend": spot.copy(),
            "close": spot.copy(),
            "lift": spot + [0, 0, t.config.lift_height + 0.03],
        }
        nxt = {"hover": ("descend", 30), "descend": ("close", 20), "close": ("lift", 8)}
        if self._phase in nxt:
            near = np.linalg.norm(ee - aims[self._phase]) < 0.01 and self._phase != "close"
            if near or self._since >= nxt[self._phase][1]:
                self._phase, self._since = nxt[self._phase][0], 0
        q = t.solve_ik(aims[self._phase])
        q[-1] = GRIPPER_CLOSED if self._phase in ("close", "lift") else GRIPPER_OPEN
        return self.limit(q)


class PickLiftExpert(_RateLimited):
    """Opens, hovers over the cube, descends, closes, lifts."""

    def __init__(self, task: PickLiftTask, max_step: float | None = None) -> None:
        super().__init__(task, max_step)

    def act(self) -> np.ndarray:
        t = self._task
        cube, ee = t.cube_pos, t.ee_pos
        gripper = GRIPPER_OPEN
        if t.grasped:
            aim, gripper = np.array([cube[0], cube[1], CUBE_HALF + t.config.lift_height + 0.03]), GRIPPER_CLOSED
        elif np.linalg.norm((ee - cube)[:2]) > 0.01:
            aim = cube + [0, 0, 0.05]
        elif np.linalg.norm(ee - cube) > 0.01:
            aim = cube.copy()
        else:
            aim, gripper = cube.copy(), GRIPPER_CLOSED
        q = t.solve_ik(aim)
        q[-1] = gripper
        return self.limit(q)
