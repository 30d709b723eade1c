"""MuJoCo tasks exposed as `hal.Robot`s (`SimRobot`) and as Gymnasium envs."""

from sim.reach import ReachConfig, ReachExpert, ReachTask
from sim.sim_robot import SimRobot

TASKS = {"reach": (ReachTask, ReachConfig)}
EXPERTS = {"reach": ReachExpert}  # scripted experts by task name

__all__ = ["ReachConfig", "ReachExpert", "ReachTask", "SimRobot", "TASKS", "EXPERTS"]
