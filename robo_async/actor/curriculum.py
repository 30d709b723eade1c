"""Curricula of the control loop that advance with training success: `SuccessGate` (the last
`window` training episodes succeeded at least `threshold` of the time) drives JSRL's hand-over
(actor/guide.py) and the start-range curriculum here.

The start range (`actor.start_range`): a task whose scene starts at random (gym_hil's cube
anywhere in its box) starts training episodes from `fraction` of that range around the task's
nominal start (where one-start demonstrations were recorded: the cube at gym_hil's fixed place),
widening by `step` each time the gate opens, up to the whole range. It is what the person resetting
a real scene does (the cube near where it was demonstrated first, then anywhere) and what lets a
policy whose 20 demonstrations all start from one place learn the whole task without an operator.
Evaluation episodes always start from the whole range, so success is judged on the task itself.

    curriculum = StartCurriculum.of(StartRangeConfig(start=0.1, step=0.1), robots)
    curriculum.place(robot, evaluation)   # before each reset: Robot.set_start_range
    curriculum.episode_ended(success)     # training episodes
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hal.robot import Robot
from robo_async.actor.options import ActorOptions


class SuccessGate:
    """Opens once the last `window` training episodes succeeded at least `threshold` of the time,
    then counts afresh (every window is judged on its own episodes)."""

    def __init__(self, window: int, threshold: float) -> None:
        self.window, self.threshold = window, threshold
        self._results: list[bool] = []  # episodes since the last judgement (never more than `window`)

    def passed(self, success: bool) -> bool:
        """Record one training episode's outcome; True when this completes a window that passed."""
        self._results.append(bool(success))
        if len(self._results) < self.window:
            return False
        rate = sum(self._results) / len(self._results)
        self._results = []
        return rate >= self.threshold


@dataclass(frozen=True)
class StartRangeConfig:
    """The start-range curriculum (see the module's docstring): `actor.start_range*`."""

    start: float  # fraction of the task's start range at first, (0, 1]
    step: float = ActorOptions.start_range_step
    window: int = ActorOptions.start_range_window
    threshold: float = ActorOptions.start_range_threshold

    @classmethod
    def from_options(cls, options: ActorOptions) -> StartRangeConfig | None:
        """`actor.start_range*` (checked by `ActorOptions`); None where `actor.start_range` is unset."""
        if options.start_range is None:
            return None
        return cls(
            float(options.start_range),
            float(options.start_range_step),
            int(options.start_range_window),
            float(options.start_range_threshold),
        )


class StartCurriculum:
    """The fraction of the start range training episodes draw from now (see the module's docstring)."""

    def __init__(self, config: StartRangeConfig) -> None:
        self.config = config
        self.fraction = config.start
        self._gate = SuccessGate(config.window, config.threshold)

    @classmethod
    def of(cls, config: StartRangeConfig | None, robots: Sequence[Robot]) -> StartCurriculum | None:
        """The curriculum of `config` (None: none) for `robots`, each told its first range now: a
        robot without a random start raises its RobotError before the first tick."""
        if config is None:
            return None
        curriculum = cls(config)
        for robot in robots:
            robot.set_start_range(curriculum.fraction)
        return curriculum

    def place(self, robot: Robot, evaluation: bool) -> None:
        """Before `robot`'s next reset: the range of the episode it starts (evaluation: all of it)."""
        robot.set_start_range(self.range_for(evaluation))

    def range_for(self, evaluation: bool) -> float:
        """The fraction of the start range the next episode draws from (evaluation: all of it)."""
        return 1.0 if evaluation else self.fraction

    def episode_ended(self, success: bool) -> None:
        """A training episode's outcome: widen the range once the recent ones succeed enough."""
        if self._gate.passed(success):
            self.fraction = min(1.0, round(self.fraction + self.config.step, 6))
