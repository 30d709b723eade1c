"""Gymnasium-Robotics' Fetch tasks (a 7-DoF Fetch arm, MuJoCo) as `task=fetch task.env_name=FetchPush-v4`:
the Gymnasium adapter (`sim.gym_robot.GymRobot`) on the goal-conditioned env, with a scripted
pusher as the expert (`buffer demos`, the virtual operator).

Actions: `[dx, dy, dz, grip]` in [-1, 1] (the env moves the gripper 5 cm per unit). Observation:
the env's 25-value `observation` as `state`, and its goal API's `achieved_goal` (the object's
position) and `desired_goal` (where it must go) as features; the policy reads `state` and
`desired_goal` by default (`sim.POLICY_DEFAULTS`). Rewards are the env's sparse -1 / 0; success is
`info["is_success"]` (the object within 5 cm of the goal). 25 Hz (the env's dt), 50 ticks an
episode (the env's time limit); episodes never end on success, as in the HER papers.

The goal API is what hindsight relabelling (`algo.her=future|final`, `robo_async.buffer.her`)
needs: `GymRobot.goal_reward()` reads the env's distance threshold and checks that its
`compute_reward` is the sparse rule the learner recomputes.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hal.robot import RobotError
from sim.gym_robot import GymConfig, GymRobot

FETCH_TASKS = ("FetchReach-v4", "FetchPush-v4", "FetchSlide-v4", "FetchPickAndPlace-v4")


@dataclass(frozen=True)
class FetchConfig(GymConfig):
    """`task=fetch`: which Fetch task (`env_name`), and `GymConfig`'s keys."""

    env_name: str = "FetchPush-v4"  # FetchReach-v4, FetchPush-v4, FetchSlide-v4 or FetchPickAndPlace-v4
    env_id: str = "FetchPush-v4"  # set from env_name
    hz: float = 25.0  # the env's dt: 20 physics steps of 2 ms
    episode_ticks: int = 50  # the env's own time limit
    success_key: str | None = "is_success"


class FetchRobot(GymRobot):
    """A Gymnasium-Robotics Fetch task (see the module's docstring)."""

    config: FetchConfig

    def __init__(self, config: FetchConfig = FetchConfig()) -> None:
        from dataclasses import replace

        if config.env_name not in FETCH_TASKS:
            raise RobotError(f"task.env_name '{config.env_name}' is not a Fetch task; one of {list(FETCH_TASKS)}")
        super().__init__(replace(config, env_id=config.env_name))

    def _make(self) -> gym.Env:
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # its import prints a notice about other envs
                import gymnasium_robotics
        except ImportError as e:
            raise RobotError(f"task=fetch needs gymnasium-robotics (pip install gymnasium-robotics): {e}") from None
        gym.register_envs(gymnasium_robotics)
        kwargs = {"max_episode_steps": self.config.episode_ticks, **dict(self.config.kwargs)}
        return gym.make(self.config.env_id, **kwargs)

    def expert_callable(self):
        """`task.expert` when given, else the scripted pusher for FetchPush (None for the others)."""
        if self.config.expert:
            return super().expert_callable()
        return push_expert if self.config.env_name == "FetchPush-v4" else None


# the scripted pusher's geometry (m): the object is a 5 cm cube
BEHIND = 0.06  # where the gripper lines up behind the object, away from the goal
HOVER = 0.06  # height above the object while it gets there
LINED_UP = 0.012  # how far off the push line (and off the object's height) still counts as lined up
PUSH_GAIN = 4.0  # pushing speed per metre still to go (action units)
GAIN = 10.0  # proportional gain: action units per metre of error (1 unit moves 5 cm)


def push_expert(obs: dict[str, np.ndarray]) -> np.ndarray:
    """A scripted FetchPush policy of the env's raw observation: go behind the object (seen from
    the goal) above it, come down, then push along the line to the goal; gripper closed."""
    o = np.asarray(obs["observation"], np.float64)
    grip, obj, goal = o[0:3], o[3:6], np.asarray(obs["desired_goal"], np.float64)
    to_goal = goal[:2] - obj[:2]
    dist = float(np.linalg.norm(to_goal))
    if dist < 0.015:  # there: hold still
        return np.array([0.0, 0.0, 0.0, -1.0], np.float32)
    u = to_goal / dist
    rel = grip[:2] - obj[:2]
    along = float(rel @ u)  # < 0: behind the object
    across = float(abs(rel[0] * u[1] - rel[1] * u[0]))
    low = abs(grip[2] - obj[2]) < LINED_UP
    if along < -0.02 and across < 2 * LINED_UP and low:
        # push toward the goal, slower as it nears (a pushed cube slides on)
        step = np.clip(dist * PUSH_GAIN, 0.15, 0.8)
        correct = np.clip((obj[:2] - u * 0.035 - grip[:2]) * GAIN, -0.3, 0.3)  # stay on the line
        sideways = correct - (correct @ u) * u
        return np.array([*(u * step + sideways), (obj[2] - grip[2]) * GAIN, -1.0], np.float32)
    else:
        behind = obj[:2] - u * BEHIND
        near = float(np.linalg.norm(grip[:2] - behind)) < LINED_UP
        # over the push point first; down only once above it (never through the object)
        target = np.array([*behind, obj[2] if near else obj[2] + HOVER])
        if not near and grip[2] < obj[2] + HOVER / 2 and float(np.linalg.norm(rel)) < BEHIND:
            target = np.array([*grip[:2], obj[2] + HOVER])  # too close and too low: up first
    move = np.clip((target - grip) * GAIN, -1.0, 1.0)
    return np.array([*move, -1.0], np.float32)
