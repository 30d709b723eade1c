"""The scripted experts of the sim tasks, built for a running task: for demonstrations, JSRL
guides, the virtual operator and tests. Each reads the simulator's state, so it runs only beside
its own `SimRobot`; a Gymnasium env's expert is the outside policy its task names
(`task.expert: module:callable`, `sim.gym_robot.GymExpert`)."""

from __future__ import annotations

import inspect
from typing import Protocol

import numpy as np

from hal.robot import Robot, innermost
from sim import EXPERTS, MISSES
from sim.gym_robot import GymExpert, GymRobot


class NoExpert(ValueError):
    """The task has no scripted expert (the message lists the tasks that have one)."""


class Expert(Protocol):
    """A task's scripted expert: `act()` each tick gives joint targets (rad) for the task's current state (for
    demos, JSRL guidance and the virtual operator)."""

    def act(self) -> np.ndarray:
        """The joint targets (rad) for the task's current state."""
        ...


def make_expert(task_name: str, robot: Robot, max_step: float | None = None, miss: bool = False) -> Expert:
    """The scripted expert of `task_name` for the task inside `robot` (a `SimRobot`, possibly
    behind `SafeRobot` or other wrappers exposing `inner`); `max_step` (rad per tick) limits how
    fast it moves its joint targets, for experts that take it. `miss`: the task's scripted near
    miss instead (the expert's motions, failing: labelled failure episodes)."""
    inner = innermost(robot)
    if isinstance(inner, GymRobot):  # an outside env: its scripted policy is named in the task config
        try:
            fn = None if miss else inner.expert_callable()
        except ValueError as e:
            raise NoExpert(str(e)) from None
        if fn is None:
            raise NoExpert(
                f"task '{task_name}' has no scripted {'near miss' if miss else 'expert'}"
                + (
                    ""
                    if miss
                    else "; name one with task.expert=module:callable (a function of "
                    "the env's observation returning an action)"
                )
            )
        return GymExpert(inner, fn)
    table = MISSES if miss else EXPERTS
    if task_name not in table:
        raise NoExpert(
            f"task '{task_name}' has no scripted {'near miss' if miss else 'expert'}; "
            f"{'near misses' if miss else 'experts'}: {sorted(table)}"
        )
    cls = table[task_name]
    task = getattr(robot, "inner", robot).task
    return (
        cls(task, max_step) if max_step is not None and "max_step" in inspect.signature(cls).parameters else cls(task)
    )
