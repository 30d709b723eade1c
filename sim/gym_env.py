"""The reach task as a Gymnasium env (dict observations, Box joint-target actions)."""

from __future__ import annotations

from typing import SupportsFloat

import gymnasium as gym
import numpy as np

from sim.reach import ReachConfig, ReachTask


class ReachEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """The reach task as a Gymnasium env: dict observations (`state`, `ee_pos`, `target`, `ee_to_target`; m
    and rad), Box joint-target actions (rad), episodes truncated after `episode_ticks`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, config: ReachConfig = ReachConfig(), render_mode: str | None = None) -> None:
        self.task = ReachTask(config)
        spec = self.task.spec()
        self.action_space = gym.spaces.Box(spec.low, spec.high, dtype=np.float32)
        spaces: dict[str, gym.Space] = {
            "state": gym.spaces.Box(spec.low, spec.high, dtype=np.float32),
            "ee_pos": gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
            "target": gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
            "ee_to_target": gym.spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32),
        }
        for cam in spec.cameras:
            spaces[cam.name] = gym.spaces.Box(0, 255, (cam.height, cam.width, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.render_mode = render_mode

    def _obs(self) -> dict[str, np.ndarray]:
        obs = {"state": self.task.state(), **self.task.features(), **self.task.images()}
        # Joint readings can overshoot the limits by a hair; keep them inside the declared box.
        obs["state"] = np.clip(obs["state"], self.action_space.low, self.action_space.high)
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        super().reset(seed=seed)
        self.task.build()
        self.task.reset(self.np_random)
        return self._obs(), {"distance": self.task.distance()}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], SupportsFloat, bool, bool, dict[str, object]]:
        self.task.step(np.asarray(action, dtype=np.float32))
        reward, success = self.task.reward_success()
        info = {"distance": self.task.distance(), "is_success": success}
        return self._obs(), reward, success, self.task.truncated and not success, info

    def render(self) -> np.ndarray:
        return self.task.render("front")

    def close(self) -> None:
        self.task.close()
