"""`VirtualOperator`: a simulated person at the teleop, for human-in-the-loop sessions in sim and
for `robo-async bench hil`. It watches the policy through the task's shaped reward and takes over
with the task's scripted expert when the policy

- strays: the shaped reward falls more than `stray` below the best it reached this episode, or
- stalls: the shaped reward gains less than `min_gain` over `stall_ticks` ticks,

then hands control back after `hold_ticks` (or at once when the task succeeds). It never takes
over in evaluation episodes, so the success the learner reports is the policy's own. It is a
`hal.Teleop` like a leader arm: the control loop sees the same events and actions.

    teleop=virtual [teleop.stall_ticks=40] [teleop.hold_ticks=30] [teleop.stray=1.0]

With `always=True` it drives every tick (a scripted demonstrator for `robo-async teleop` in sim).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hal.teleop import Teleop, TeleopEvent, TeleopEventKind


@dataclass(frozen=True)
class OperatorConfig:
    """When the virtual operator takes over and how it drives (`teleop.*` keys; ticks, rad per tick)."""

    stray: float = 1.0  # take over when the shaped reward falls this far below the episode's best
    stall_ticks: int = 40  # ... or gains less than min_gain for this many ticks
    min_gain: float = 0.05
    hold_ticks: int = 30  # then drive this many ticks and hand back
    max_step: float = 0.05  # the expert's commanded targets move at most this far per tick (rad)
    always: bool = False  # drive every tick of every episode (a scripted demonstrator: robo-async teleop)

    def __post_init__(self) -> None:
        if self.stall_ticks < 1 or self.hold_ticks < 1 or self.stray <= 0 or self.max_step <= 0:
            raise ValueError(
                f"virtual operator: stall_ticks and hold_ticks must be >= 1, stray and max_step > 0 ({self})"
            )


class VirtualOperator(Teleop):
    """A simulated person at the teleop (see the module's docstring): watches the task's shaped reward through
    `observe()`, takes over with `expert` when the policy strays or stalls, hands back after `hold_ticks`."""

    def __init__(self, task, expert, config: OperatorConfig = OperatorConfig()) -> None:
        self.task, self.expert, self.config = task, expert, config
        self._dim = int(task.spec().action_dim)
        self._pending: list[TeleopEvent] = []
        self._control = False
        self._left = 0
        self._best = -math.inf
        self._since = 0
        self._last_tick = -1
        self._action: np.ndarray | None = None
        self.takeovers = 0

    @property
    def name(self) -> str:
        return "virtual_operator"

    @property
    def action_dim(self) -> int:
        return self._dim

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def _hand_back(self) -> None:
        self._control = False
        self._pending.append(TeleopEvent(TeleopEventKind.INTERVENTION_OFF))

    def observe(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> None:
        t, c = self.task, self.config
        if t.tick <= self._last_tick:  # a new episode
            if self._control:
                self._hand_back()
            self._best, self._since = -math.inf, 0
        self._last_tick = t.tick
        reward, success = t.reward_success()
        if c.always:
            if t.tick == 0:
                self.expert._last = t.state().astype(np.float32).copy()
            self._action = self.expert.act()
            return
        if self._control:
            self._left -= 1
            if self._left <= 0 or success:
                self._hand_back()
                self._best, self._since = reward, 0  # the policy gets stall_ticks to make progress
            else:
                self._action = self.expert.act()
            return
        if evaluation or success:
            return
        if reward > self._best + c.min_gain:
            self._best, self._since = reward, 0
        else:
            self._since += 1
        if self._since >= c.stall_ticks or reward < self._best - c.stray:
            self._control, self._left = True, c.hold_ticks
            self.takeovers += 1
            self.expert._last = t.state().astype(np.float32).copy()  # its rate limit starts at the arm
            self._action = self.expert.act()
            self._pending.append(TeleopEvent(TeleopEventKind.INTERVENTION_ON))

    def events(self) -> list[TeleopEvent]:
        out, self._pending = self._pending, []
        return out

    def get_action(self) -> np.ndarray | None:
        return None if self._action is None else self._action.copy()


class GymTaskView:
    """A Gymnasium env (`sim.gym_robot.GymRobot`) as the virtual operator watches a task: the tick
    in the episode, and as its progress what the env's adapter says a person watching would judge
    (`operator_progress()`: gym_hil's gripper-to-cube distance and lift), else the episode's return
    so far (an env with a sparse reward shows none until it succeeds, so the operator takes over
    after `stall_ticks`)."""

    def __init__(self, robot) -> None:
        self.robot = robot

    @property
    def tick(self) -> int:
        return self.robot.tick

    def reward_success(self) -> tuple[float, bool]:
        judge = getattr(self.robot, "operator_progress", None)
        progress = judge() if judge is not None else self.robot.episode_return
        return progress, self.robot.outcome().success

    def state(self) -> np.ndarray:
        return self.robot.get_observation().state

    def spec(self):
        return self.robot.spec


def make_virtual_operator(robot, task_name: str, options: Mapping[str, object]) -> VirtualOperator:
    """The virtual operator of a simulated robot (`robot`: a SimRobot or a Gymnasium env with an
    expert, `task.expert=` or its own, possibly behind SafeRobot)."""
    from sim import EXPERTS
    from sim.experts import NoExpert, make_expert
    from sim.gym_robot import GymRobot

    inner = getattr(robot, "inner", robot)
    config = OperatorConfig(**{k: v for k, v in options.items() if k != "type"})
    if isinstance(inner, GymRobot):
        try:
            return VirtualOperator(GymTaskView(inner), make_expert(task_name, inner), config)
        except NoExpert as e:
            raise ValueError(f"teleop=virtual drives the task's scripted expert: {e}") from None
    task = getattr(inner, "task", None)
    if task is None or task_name not in EXPERTS:
        raise ValueError(
            f"teleop=virtual drives a simulated task's scripted expert; task '{task_name}' has none "
            f"(tasks with experts: {sorted(EXPERTS)})"
        )
    return VirtualOperator(task, EXPERTS[task_name](task, config.max_step), config)
