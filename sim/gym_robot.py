"""Any Gymnasium env with a Box action space as a `hal.Robot` (a sim resource): `task=gym
task.env_id=Pendulum-v1`.

Observations: a Box becomes `state`; a Dict gives `state` (its `state`/`observation`/`agent_pos`
entry, or all 1-D float entries concatenated), other 1-D float entries as features and uint8
H x W x 3 entries as camera images. Rewards and termination come from the env.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hal.robot import Robot, RobotError
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec

STATE_KEYS = ("state", "observation", "agent_pos")


@dataclass(frozen=True)
class GymConfig:
    """Which Gymnasium env backs the robot (`env_id`, extra `gym.make` kwargs), its nominal rate and episode
    length in ticks."""
    env_id: str = "Pendulum-v1"
    hz: float = 30.0  # nominal control rate (for real-time mode and chunk timing)
    episode_ticks: int = 200
    kwargs: tuple[tuple[str, object], ...] = ()  # extra gym.make arguments


class GymRobot(Robot):
    """A Gymnasium env with a Box action space as a `hal.Robot` (see the module's docstring); the env is made
    on `connect()`, its spec read from it."""

    def __init__(self, config: GymConfig = GymConfig()) -> None:
        self.config = config
        self._env: gym.Env | None = None
        self._spec: RobotSpec | None = None
        self._obs: object = None
        self._outcome = Outcome()

    def _make(self) -> gym.Env:
        try:
            return gym.make(self.config.env_id, **dict(self.config.kwargs))
        except gym.error.Error as e:
            raise RobotError(f"gym env '{self.config.env_id}' cannot be made: {e}") from None

    @property
    def spec(self) -> RobotSpec:
        if self._spec is None:
            env = self._env or self._make()
            try:
                self._spec = self._spec_of(env)
            finally:
                if env is not self._env:
                    env.close()
        return self._spec

    def _spec_of(self, env: gym.Env) -> RobotSpec:
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise RobotError(f"gym env '{self.config.env_id}' has action space {space}; a 1-D Box is needed")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise RobotError(f"gym env '{self.config.env_id}' has an unbounded action space; limits are needed")
        n = space.shape[0]
        feats, cams = [], []
        obs_space = env.observation_space
        state_size = int(np.prod(obs_space.shape)) if isinstance(obs_space, gym.spaces.Box) else None
        if isinstance(obs_space, gym.spaces.Dict):
            skey = self._state_key(obs_space)
            if skey is not None:
                state_size = int(np.prod(obs_space.spaces[skey].shape))
            for k, sp in obs_space.spaces.items():
                if k == skey or not isinstance(sp, gym.spaces.Box):
                    continue
                if sp.dtype == np.uint8 and len(sp.shape) == 3:
                    cams.append(CameraSpec(k, sp.shape[0], sp.shape[1]))
                elif len(sp.shape) == 1:
                    feats.append((k, sp.shape[0]))
            if skey is None:
                state_size = sum(d for _, d in feats)
        return RobotSpec(name=f"gym_{self.config.env_id}", joint_names=tuple(f"a{i}" for i in range(n)),
                         joint_low=tuple(float(x) for x in space.low), joint_high=tuple(float(x) for x in space.high),
                         hz=self.config.hz, cameras=tuple(cams), features=tuple(feats), control_mode="gym",
                         state_size=state_size)

    @staticmethod
    def _state_key(space: gym.spaces.Dict) -> str | None:
        return next((k for k in STATE_KEYS if k in space.spaces), None)

    def connect(self) -> None:
        if self._env is None:
            self._env = self._make()
            _ = self.spec

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _require(self) -> gym.Env:
        if self._env is None:
            raise RobotError(f"{self.spec.name} is not connected; call connect() first")
        return self._env

    def reset(self, *, seed: int | None = None) -> Observation:
        self._obs, _ = self._require().reset(seed=seed)
        self._outcome = Outcome()
        return self.get_observation()

    def get_observation(self) -> Observation:
        self._require()
        if self._obs is None:
            raise RobotError(f"{self.spec.name}: reset() before the first observation")
        o = self._obs
        spec = self.spec
        if not isinstance(o, dict):
            return Observation(time.monotonic(), np.asarray(o, np.float32).ravel())
        skey = next((k for k in STATE_KEYS if k in o), None)
        feats = {k: np.asarray(o[k], np.float32) for k, _ in spec.features}
        state = np.asarray(o[skey], np.float32).ravel() if skey else np.concatenate(list(feats.values()))
        return Observation(time.monotonic(), state, feats, {c.name: np.asarray(o[c.name]) for c in spec.cameras})

    def send_action(self, action: np.ndarray) -> np.ndarray:
        env = self._require()
        a = self.spec.check_action(action)
        self._obs, reward, terminated, truncated, info = env.step(a)
        success = bool(info.get("is_success", info.get("success", False)))
        self._outcome = Outcome(float(reward), success, bool(terminated))
        return a

    def outcome(self) -> Outcome:
        return self._outcome

    def render(self, size: int, camera: str | None = None) -> np.ndarray:
        """A frame for people (videos): a camera of the observation, else the env's own
        `render()` (envs made with `kwargs: [[render_mode, rgb_array]]`), resized to size x size."""
        import cv2

        env = self._require()
        cams = [c.name for c in self.spec.cameras]
        if cams and isinstance(self._obs, dict):
            frame = np.asarray(self._obs[camera or cams[0]])
        elif getattr(env, "render_mode", None) == "rgb_array":
            frame = np.asarray(env.render())
        else:
            raise RobotError(f"{self.spec.name} has no camera and was not made with render_mode=rgb_array; "
                             "add task.kwargs=[[render_mode,rgb_array]] for videos")
        return cv2.resize(np.ascontiguousarray(frame[..., :3]), (size, size), interpolation=cv2.INTER_AREA)
