"""Any Gymnasium env with a Box action space as a `hal.Robot` (a sim resource): `task=gym
task.env_id=Pendulum-v1`.

Observations: a Box becomes `state`; a Dict gives `state` (its `state`/`observation`/`agent_pos`
entry, or all 1-D float entries concatenated), other 1-D float entries as features and uint8
H x W x 3 entries as camera images; a nested Dict (gym_hil's `pixels: {front, wrist}`) is read one
level down, its entries named by their own keys. Rewards, `terminated` and `truncated` come from the
env; success from `info[success_key]`, or else the first of `is_success`, `success`, `succeed`.
`action_low`/`action_high` narrow the env's action box (the safety layer clips to it).
`expert: module:callable` names an outside scripted policy (see `GymExpert`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hal.robot import Robot, RobotError
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec

STATE_KEYS = ("state", "observation", "agent_pos")
SUCCESS_KEYS = ("is_success", "success", "succeed")  # where environments report success, in this order


@dataclass(frozen=True)
class GymConfig:
    """Which Gymnasium env backs the robot (`env_id`, extra `gym.make` kwargs), its nominal rate and episode
    length in ticks."""

    env_id: str = "Pendulum-v1"
    hz: float = 30.0  # nominal control rate (for real-time mode and chunk timing)
    episode_ticks: int = 200
    kwargs: tuple[tuple[str, object], ...] = ()  # extra gym.make arguments
    success_key: str | None = None  # info key that says success; None: is_success, success or succeed
    # module:callable, a scripted policy of the env's observations (buffer demos, the virtual operator)
    expert: str | None = None
    action_low: tuple[float, ...] | None = None  # narrower action limits than the env's box (the safety layer's)
    action_high: tuple[float, ...] | None = None


class GymRobot(Robot):
    """A Gymnasium env with a Box action space as a `hal.Robot` (see the module's docstring); the env is made
    on `connect()`, its spec read from it."""

    def __init__(self, config: GymConfig = GymConfig()) -> None:
        self.config = config
        self._env: gym.Env | None = None
        self._spec: RobotSpec | None = None
        self._obs: object = None
        self._outcome = Outcome()
        self.tick, self.episode_return = 0, 0.0  # in the current episode (the virtual operator watches them)

    def _make(self) -> gym.Env:
        self._import_registry()
        try:
            return gym.make(self.config.env_id, **dict(self.config.kwargs))
        except gym.error.Error as e:
            raise RobotError(f"gym env '{self.config.env_id}' cannot be made: {e}") from None
        except TypeError as e:  # a kwarg the env does not take
            raise RobotError(
                f"gym env '{self.config.env_id}' refused task.kwargs {dict(self.config.kwargs)}: {e}"
            ) from None

    def _import_registry(self) -> None:
        """Import the package that registers `namespace/...` ids (gym_hil, Meta-World, ...)."""
        ns = self.config.env_id.split("/")[0] if "/" in self.config.env_id else None
        module = {"gym_hil": "gym_hil", "Meta-World": "metaworld"}.get(ns or "", ns)
        if module:
            import importlib

            try:
                importlib.import_module(module)
            except ImportError:
                pass  # gym.make names the missing namespace

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
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        for name, given in (("action_low", self.config.action_low), ("action_high", self.config.action_high)):
            if given is not None and len(given) != n:
                raise RobotError(
                    f"task.{name} has {len(given)} values; gym env '{self.config.env_id}' takes {n} actions"
                )
        if self.config.action_low is not None:
            low = np.maximum(low, self.config.action_low)
        if self.config.action_high is not None:
            high = np.minimum(high, self.config.action_high)
        if np.any(low >= high):
            raise RobotError(f"task.action_low/high leave no action range inside {space}")
        feats, cams = [], []
        obs_space = env.observation_space
        state_size = int(np.prod(obs_space.shape)) if isinstance(obs_space, gym.spaces.Box) else None
        if isinstance(obs_space, gym.spaces.Dict):
            skey = self._state_key(obs_space)
            if skey is not None:
                state_size = int(np.prod(obs_space.spaces[skey].shape))
            for k, sp in _flat(obs_space.spaces).items():
                if k == skey or not isinstance(sp, gym.spaces.Box):
                    continue
                if sp.dtype == np.uint8 and len(sp.shape) == 3:
                    cams.append(CameraSpec(k, sp.shape[0], sp.shape[1]))
                elif len(sp.shape) == 1:
                    feats.append((k, sp.shape[0]))
            if skey is None:
                state_size = sum(d for _, d in feats)
        return RobotSpec(
            name=f"gym_{self.config.env_id.replace('/', '_')}",
            joint_names=tuple(f"a{i}" for i in range(n)),
            joint_low=tuple(float(x) for x in low),
            joint_high=tuple(float(x) for x in high),
            hz=self.config.hz,
            cameras=tuple(cams),
            features=tuple(feats),
            control_mode="gym",
            state_size=state_size,
        )

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
        env = self._require()
        if seed is None:
            self._obs, _ = env.reset()
        else:  # envs that draw from numpy's global generator (gym_hil's cube) are seeded too, then it is put back
            saved = np.random.get_state()
            np.random.seed(seed % 2**32)
            try:
                self._obs, _ = env.reset(seed=seed)
            finally:
                np.random.set_state(saved)
        self._outcome = Outcome()
        self.tick, self.episode_return = 0, 0.0
        return self.get_observation()

    def goal_reward(self) -> float:
        """The distance threshold of the env's sparse goal reward (Gymnasium-Robotics' goal API),
        checked on random goals: its `compute_reward` must be `-(|achieved - desired| > threshold)`,
        the rule hindsight relabelling recomputes (`algo.her`). One RobotError line otherwise."""
        env = self._env or self._make()
        try:
            u, name = env.unwrapped, self.config.env_id
            thr, fn = getattr(u, "distance_threshold", None), getattr(u, "compute_reward", None)
            dims = self.spec.feature_dims()
            if thr is None or not callable(fn) or dims.get("achieved_goal") != dims.get("desired_goal"):
                raise RobotError(
                    f"gym env '{name}' has no goal API (achieved_goal, desired_goal, compute_reward, "
                    "distance_threshold) for algo.her; set algo.her_threshold if its reward is -(distance > threshold)"
                )
            rng = np.random.default_rng(0)
            achieved = rng.normal(size=(64, dims["achieved_goal"])) * float(thr)
            desired = np.zeros_like(achieved)
            want = -(np.linalg.norm(achieved - desired, axis=-1) > float(thr)).astype(np.float64)
            got = np.asarray(fn(achieved, desired, [{}] * len(achieved)), np.float64)
            if got.shape != want.shape or not np.allclose(got, want):
                raise RobotError(
                    f"gym env '{name}': its compute_reward is not the sparse -(distance > {thr}) that algo.her "
                    "recomputes (a dense reward_type?)"
                )
            return float(thr)
        finally:
            if env is not self._env:
                env.close()

    def expert_callable(self):
        """The outside scripted policy this env's task names (`config.expert`), or None."""
        return load_callable(self.config.expert) if self.config.expert else None

    @property
    def raw_observation(self) -> object:
        """The env's last observation as it gave it (what an outside scripted policy reads)."""
        return self._obs

    def get_observation(self) -> Observation:
        self._require()
        if self._obs is None:
            raise RobotError(f"{self.spec.name}: reset() before the first observation")
        o = self._obs
        spec = self.spec
        if not isinstance(o, dict):
            return Observation(time.monotonic(), np.asarray(o, np.float32).ravel())
        o = _flat(o)
        skey = next((k for k in STATE_KEYS if k in o), None)
        feats = {k: np.asarray(o[k], np.float32) for k, _ in spec.features}
        state = np.asarray(o[skey], np.float32).ravel() if skey else np.concatenate(list(feats.values()))
        return Observation(time.monotonic(), state, feats, {c.name: np.asarray(o[c.name]) for c in spec.cameras})

    def send_action(self, action: np.ndarray) -> np.ndarray:
        env = self._require()
        a = self.spec.check_action(action)
        self._obs, reward, terminated, truncated, info = env.step(a)
        self._outcome = Outcome(float(reward), self._success(info), bool(terminated), bool(truncated))
        self.tick += 1
        self.episode_return += float(reward)
        return a

    def _success(self, info: dict) -> bool:
        key = self.config.success_key
        if key is not None:
            if key not in info:
                raise RobotError(
                    f"gym env '{self.config.env_id}' has no info['{key}'] (task.success_key); "
                    f"its info keys: {sorted(info)}"
                )
            return bool(info[key])
        return bool(next((info[k] for k in SUCCESS_KEYS if k in info), False))

    def outcome(self) -> Outcome:
        return self._outcome

    def render(self, size: int, camera: str | None = None) -> np.ndarray:
        """A frame for people (videos): a camera of the observation, else the env's own
        `render()` (envs made with `kwargs: [[render_mode, rgb_array]]`), resized to size x size."""
        import cv2

        env = self._require()
        cams = [c.name for c in self.spec.cameras]
        if cams and isinstance(self._obs, dict):
            frame = np.asarray(_flat(self._obs)[camera or cams[0]])
        elif getattr(env, "render_mode", None) == "rgb_array":
            frame = np.asarray(env.render())
        else:
            raise RobotError(
                f"{self.spec.name} has no camera and was not made with render_mode=rgb_array; "
                "add task.kwargs=[[render_mode,rgb_array]] for videos"
            )
        return cv2.resize(np.ascontiguousarray(frame[..., :3]), (size, size), interpolation=cv2.INTER_AREA)


def _flat(obs: Mapping) -> dict:
    """One level of nesting read through, for observations and their spaces alike:
    {pixels: {front: ...}} -> {front: ...} (a top-level key wins)."""
    out: dict = {}
    for v in obs.values():
        nested = v.spaces if isinstance(v, gym.spaces.Dict) else v
        if isinstance(nested, Mapping):
            for k2, v2 in nested.items():
                out.setdefault(k2, v2)
    out.update({k: v for k, v in obs.items() if not isinstance(v, (Mapping, gym.spaces.Dict))})
    return out


class GymExpert:
    """An outside scripted policy driving a `GymRobot` (`task.expert: module:callable`): `callable`
    is a function of the env's raw observation returning an action, or a class made with no
    arguments whose instances are such functions or have `get_action(obs)` (Meta-World's scripted
    policies) or `act(obs)`. `act()` gives the action for the env's current observation."""

    def __init__(self, robot: GymRobot, fn) -> None:
        self.robot, self._fn = robot, fn

    def act(self) -> np.ndarray:
        a = np.asarray(self._fn(self.robot.raw_observation), np.float32).ravel()
        spec = self.robot.spec
        if a.shape != (spec.action_dim,):
            raise RobotError(
                f"expert {self.robot.config.expert} returned an action of shape {a.shape}; "
                f"{spec.name} takes {spec.action_dim}"
            )
        return np.clip(a, spec.low, spec.high)


def load_callable(target: str):
    """`module:name` -> a function of one observation (a class is instantiated with no arguments
    and its `get_action`/`act`/`__call__` used). One ValueError line naming what is wrong."""
    import importlib
    import inspect

    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"expert '{target}' is not module:callable (e.g. mypkg.experts:pick)")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"expert '{target}': module {module} cannot be imported: {e}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"expert '{target}': {module} has no {name}")
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as e:
            raise ValueError(f"expert '{target}': the class must be made with no arguments: {e}") from None
    for attr in ("get_action", "act"):
        if callable(getattr(obj, attr, None)):
            return getattr(obj, attr)
    if not callable(obj):
        raise ValueError(f"expert '{target}' is not callable")
    return obj
