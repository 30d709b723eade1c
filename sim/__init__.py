"""MuJoCo tasks exposed as `hal.Robot`s (`SimRobot`) and as Gymnasium envs."""

from sim.gym_robot import GymConfig, GymRobot
from sim.reach import ReachConfig, ReachExpert, ReachTask
from sim.sim_robot import SimImperfections, SimRobot

# name -> (class, config class). A task class is wrapped in `SimRobot`; a `hal.Robot` is used as is.
TASKS = {"reach": (ReachTask, ReachConfig), "gym": (GymRobot, GymConfig)}
EXPERTS = {"reach": ReachExpert}  # scripted experts by task name

__all__ = ["GymConfig", "GymRobot", "ReachConfig", "ReachExpert", "ReachTask", "SimImperfections", "SimRobot",
           "TASKS", "EXPERTS"]
