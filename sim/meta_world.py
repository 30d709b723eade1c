"""Meta-World (v3 tasks, Sawyer arm, MuJoCo) as `task=metaworld task.env_name=pick-place-v3`: the
Gymnasium adapter (`sim.gym_robot.GymRobot`) on Meta-World's `Meta-World/MT1` env, with its own
scripted policy of that task as the expert (`buffer demos`, the virtual operator).

Actions: `[dx, dy, dz, grip]` in [-1, 1] (end-effector deltas and the gripper; the safety layer
clips to that box, `task.action_low/high` narrow it). Observation: the 39-value vector Meta-World
gives (hand, gripper, object poses, goal) as `state`. Success: `info["success"]`; episodes end on
success (`terminate_on_success`) or after `episode_ticks` (truncated). 80 Hz (Meta-World's dt).
Each reset draws one of the task's 50 object/goal layouts (seeded by the episode's seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym

from hal.robot import RobotError
from sim.gym_robot import GymConfig, GymRobot


@dataclass(frozen=True)
class MetaWorldConfig(GymConfig):
    """`task=metaworld`: which Meta-World v3 task (`env_name`), and `GymConfig`'s keys."""

    env_name: str = "pick-place-v3"  # any Meta-World v3 task name
    env_id: str = "Meta-World/MT1"
    hz: float = 80.0  # Meta-World's dt: 5 physics steps of 2.5 ms
    episode_ticks: int = 200
    kwargs: tuple[tuple[str, object], ...] = (("terminate_on_success", True),)
    success_key: str | None = "success"


class MetaWorldRobot(GymRobot):
    """A Meta-World task (see the module's docstring)."""

    config: MetaWorldConfig

    def __init__(self, config: MetaWorldConfig = MetaWorldConfig()) -> None:
        super().__init__(config)

    def _make(self) -> gym.Env:
        import metaworld

        if self.config.env_name not in metaworld.MT1.ENV_NAMES:
            near = sorted(n for n in metaworld.MT1.ENV_NAMES if n.split("-")[0] == self.config.env_name.split("-")[0])
            raise RobotError(
                f"Meta-World has no task '{self.config.env_name}'"
                + (f"; did you mean {near}?" if near else f"; tasks: {sorted(metaworld.MT1.ENV_NAMES)[:8]} ...")
            )
        kwargs = {"max_episode_steps": self.config.episode_ticks, **dict(self.config.kwargs)}
        return gym.make(self.config.env_id, env_name=self.config.env_name, **kwargs)

    @property
    def spec(self):
        from dataclasses import replace

        base = super().spec
        name = f"metaworld_{self.config.env_name}"
        if base.name != name:
            self._spec = replace(base, name=name)
        return self._spec

    def expert_callable(self):
        """`task.expert` when given, else Meta-World's own scripted policy of this task."""
        if self.config.expert:
            return super().expert_callable()
        from metaworld.policies import ENV_POLICY_MAP

        if self.config.env_name not in ENV_POLICY_MAP:
            return None
        return ENV_POLICY_MAP[self.config.env_name]().get_action
