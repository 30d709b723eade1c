"""gym_hil (LeRobot's HIL-SERL environments: a Franka Panda with a Robotiq gripper in MuJoCo) as
`task=gym_hil`: the Gymnasium adapter (`sim.gym_robot.GymRobot`) with defaults so that
`robo-async train task=gym_hil` needs no other key, and a scripted expert for demonstrations and
the virtual operator.

The default env is `gym_hil/PandaPickCube-v0`: actions are end-effector deltas and a gripper
command, `[dx, dy, dz, grip]`, dx..dz in [-1, 1] (x 2.5 cm per tick) and grip in [0, 2] (0 opens,
1 stays, 2 closes); its safety limits are that box (`task.action_low/high` narrow it). Observations:
`agent_pos` (joint positions and velocities, the gripper command, the pinch point; the `state`,
with the gripper command as a fraction closed, 0..1, where gym_hil gives the actuator's 0..255)
and `environment_state` (the cube's position), or with `task.image_obs=true` the `front` and `wrist`
cameras (128 x 128) and no object state. Success is gym_hil's `info["succeed"]`; episodes end at
100 ticks (10 Hz) with `truncated`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hal.ee_teleop import EndEffectorSpace
from hal.robot import RobotError
from hal.spec import Observation
from hal.units import Rescale
from sim.gym_robot import GymConfig, GymRobot

PICK_CUBE = "gym_hil/PandaPickCube-v0"
STEP_M = 0.025  # metres per unit of the xyz action (gym_hil's DEFAULT_EE_STEP_SIZE)
AGENT_POS_DIM = 18  # agent_pos: 7 joint positions, 7 joint velocities, the gripper command, the pinch point
GRIPPER_INDEX = 14
# PandaPickCube's cube: its fixed place (random_block_position=false) and the box it is drawn from otherwise (x, y, m)
FIXED_CUBE_XY = np.array([0.5, 0.0])
CUBE_BOX = (np.array([0.3, -0.15]), np.array([0.5, 0.15]))
MAX_GRIPPER_COMMAND = 255.0  # gym_hil's gripper actuator range
# the state's gripper command: gym_hil's agent_pos gives the actuator's 0..255, this task 0..1 (see
# `get_observation`); datasets recorded from the raw env (LeRobot's gym_manipulator) are converted on import
GRIPPER_STATE = Rescale("state", GRIPPER_INDEX, "gripper command", (0.0, MAX_GRIPPER_COMMAND), (0.0, 1.0))


@dataclass(frozen=True)
class GymHilConfig(GymConfig):
    """`task=gym_hil`: `GymConfig` with gym_hil's defaults. `kwargs` go to `gym.make` (gym_hil's
    `make_env` and the base env: `random_block_position`, `reward_type`, ...); `image_obs` asks for
    the cameras instead of the cube's position."""

    env_id: str = PICK_CUBE
    hz: float = 10.0  # gym_hil's control_dt is 0.1 s
    episode_ticks: int = 100  # gym_hil's time limit
    kwargs: tuple[tuple[str, object], ...] = (("random_block_position", True), ("reset_delay_seconds", 0.0))
    success_key: str | None = "succeed"
    expert: str | None = "sim.gym_hil:PickCubeExpert"
    image_obs: bool = False  # the front and wrist cameras instead of the cube's position
    image_size: int = 64  # camera frames are image_size x image_size (gym_hil's own default is 128)
    fast_render: bool = True  # no shadows, reflections, skybox or multisampling (6-8x faster on a CPU)


def _fast_renderer(env, size: int, fast: bool) -> None:
    """gym_hil's offscreen renderer at `size` and, with `fast`, without the effects that cost a
    CPU renderer most (shadows, reflections, skybox, fog, haze, multisampling): measured here, one
    128 x 128 camera frame 37 ms -> 24 ms, a camera step 2.6 -> 22 steps/s."""
    import mujoco

    u = env.unwrapped
    if getattr(u, "_viewer", None) is None:
        return
    if fast:
        u._model.vis.quality.offsamples = 0
        u._model.vis.quality.shadowsize = 0
    u._model.vis.global_.offwidth = max(u._model.vis.global_.offwidth, size)
    u._model.vis.global_.offheight = max(u._model.vis.global_.offheight, size)
    u._viewer.close()
    u._viewer = mujoco.Renderer(u._model, height=size, width=size)

    u._render_specs = replace(u._render_specs, height=size, width=size)
    if fast:
        for flag in ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX", "mjRND_FOG", "mjRND_HAZE"):
            u._viewer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = False


class GymHilRobot(GymRobot):
    """A gym_hil env (see the module's docstring). Its actions are end-effector deltas, so
    LeRobot's gamepad and keyboard_ee drive it directly (`ee_action_space`: their gripper's close
    is gym_hil's 2)."""

    config: GymHilConfig
    ee_action_space = EndEffectorSpace(scale=1.0, grip_close=2.0, grip_stay=1.0, grip_open=0.0)
    dataset_rescales = (GRIPPER_STATE,)  # entries the raw env reports in another range (dataset imports)

    def __init__(self, config: GymHilConfig = GymHilConfig()) -> None:
        if config.image_obs and "image_obs" not in dict(config.kwargs):
            config = replace(config, kwargs=(*config.kwargs, ("image_obs", True)))
        super().__init__(config)
        self._start_range = 1.0  # the start-range curriculum's fraction (set_start_range)

    def _make(self):
        env = super()._make()
        if self.config.image_obs:
            _fast_renderer(env, self.config.image_size, self.config.fast_render)
            size = self.config.image_size  # the observation space says what frames now come
            pixels = env.observation_space["pixels"]
            for cam in list(pixels.spaces):
                pixels.spaces[cam] = type(pixels.spaces[cam])(0, 255, (size, size, 3), np.uint8)
        return env

    def set_start_range(self, fraction: float) -> None:
        """The next resets place the cube at `fraction` of the way from gym_hil's fixed place (where
        one-start demonstrations are recorded) to a uniform draw over its random box (1: the task's
        own draw). Only for `random_block_position` (the task's default)."""
        if not dict(self.config.kwargs).get("random_block_position"):
            raise RobotError(
                f"{self.spec.name}: actor.start_range needs task.kwargs' random_block_position (the cube "
                "starts at one place here)"
            )
        if not (0.0 < fraction <= 1.0):
            raise RobotError(f"{self.spec.name}: the start range is a fraction in (0, 1], not {fraction}")
        self._start_range = float(fraction)

    def reset(self, *, seed: int | None = None) -> Observation:
        """gym_hil's reset; under a start-range curriculum (`set_start_range` < 1) the cube is then
        moved toward its fixed place, drawn from a generator of `seed`."""
        obs = super().reset(seed=seed)
        fraction = self._start_range
        if fraction >= 1.0:
            return obs
        import mujoco

        env = self._require().unwrapped
        data, model = env._data, env._model
        u = np.random.default_rng(seed).uniform(*CUBE_BOX)
        xy = FIXED_CUBE_XY + fraction * (u - FIXED_CUBE_XY)
        data.jnt("block").qpos[:2] = xy
        mujoco.mj_forward(model, data)
        env._z_init = data.sensor("block_pos").data[2]
        env._z_success = env._z_init + 0.1
        self._obs = env._compute_observation()
        return self.get_observation()

    def get_observation(self) -> Observation:
        """gym_hil's observation, `state` being its `agent_pos` with the gripper's command (the
        actuator's 0..255) as a fraction closed, 0..1, like every other entry about unit size: an
        MLP policy fed 0..255 beside joint angles learned nothing (SAC on PandaPickCube from 20
        demonstrations: 0% after 400 s; with the fraction, 55% at 212 s)."""
        obs = super().get_observation()
        if len(obs.state) == AGENT_POS_DIM:
            state = obs.state.copy()
            state[GRIPPER_INDEX] /= MAX_GRIPPER_COMMAND
            obs = replace(obs, state=state)
        return obs

    def operator_progress(self) -> float:
        """What a person watching the scene judges progress by (the virtual operator's view, never
        the policy's): -10 x the pinch point's distance to the cube (m) + 10 x the lift's fraction of
        gym_hil's success height, the scale of our own tasks' shaped rewards, so the operator's
        `stray` (1.0: 10 cm worse than the episode's best) and `min_gain` mean the same here."""
        env = self._require().unwrapped
        data = getattr(env, "_data", None)
        if data is None:
            return self.episode_return
        cube = np.asarray(data.sensor("block_pos").data, np.float64)
        tcp = np.asarray(data.sensor("2f85/pinch_pos").data, np.float64)
        z0, z1 = float(getattr(env, "_z_init", cube[2])), float(getattr(env, "_z_success", cube[2] + 0.1))
        lift = float(np.clip((cube[2] - z0) / max(z1 - z0, 1e-6), 0.0, 1.0))
        return float(-10.0 * np.linalg.norm(cube - tcp) + 10.0 * lift)

    @property
    def raw_observation(self) -> object:
        """The env's observation, for the scripted expert: from cameras it has no cube position,
        so the simulator's is added here (the expert's privilege; the policy never sees it)."""
        obs = self._obs
        if isinstance(obs, dict) and "environment_state" not in obs and self._env is not None:
            data = getattr(self._env.unwrapped, "_data", None)
            if data is not None:
                obs = {**obs, "environment_state": np.asarray(data.sensor("block_pos").data, np.float32).copy()}
        return obs


def policy_defaults(task: dict) -> dict:
    """Policy keys a run of this task starts from (the user's overrides win): actions taken as the
    env's (not joint targets); from state, the cube's position scaled to about unit size; from
    cameras (`image_obs`), the front and wrist cameras and the robot's own state."""
    if task.get("image_obs"):
        return {"obs_keys": ["state"], "cameras": ["front", "wrist"], "action_mode": "absolute"}
    return {
        "obs_keys": ["state", "environment_state"],
        "action_mode": "absolute",
        "obs_scale": {"environment_state": 5.0},
    }


class PickCubeExpert:
    """A scripted PandaPickCube policy of the env's observation: over the cube, down, close, lift.
    It reads the pinch point (`agent_pos[-3:]`) and the cube (`environment_state`), so it runs from
    the state observations (`image_obs=false`)."""

    def __init__(self) -> None:
        self._closing = 0  # ticks since the gripper was told to close

    def __call__(self, obs: dict) -> np.ndarray:
        if "environment_state" not in obs:
            raise ValueError(
                "PickCubeExpert needs the cube's position (environment_state): run it with image_obs=false"
            )
        agent = np.asarray(obs["agent_pos"], np.float64)
        tcp, cube = agent[-3:], np.asarray(obs["environment_state"], np.float64)
        closed = agent[GRIPPER_INDEX] / MAX_GRIPPER_COMMAND > 0.5
        if not closed:
            self._closing = 0
        d = cube - tcp
        if closed:
            self._closing += 1
            if self._closing < 4:  # let the fingers close before lifting
                return np.array([0, 0, 0, 2.0], np.float32)
            return np.array([*np.clip(d[:2] / STEP_M, -1, 1), 1.0, 2.0], np.float32)  # lift, centred
        if np.linalg.norm(d[:2]) > 0.012:  # over the cube first, 5 cm above it
            target = cube + np.array([0, 0, 0.05])
            return np.array([*np.clip((target - tcp) / STEP_M, -1, 1), 0.0], np.float32)
        if abs(d[2]) > 0.008:  # down to it
            return np.array([*np.clip(d / STEP_M, -1, 1), 0.0], np.float32)
        return np.array([0, 0, 0, 2.0], np.float32)  # close
