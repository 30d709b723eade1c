"""MuJoCo tasks exposed as `hal.Robot`s (`SimRobot`) and as Gymnasium envs."""

from sim.gym_robot import GymConfig, GymRobot
from sim.reach import ReachConfig, ReachExpert, ReachTask
from sim.sim_robot import SimImperfections, SimRobot
from sim.table import PickLiftExpert, PickLiftMiss, PickLiftTask, PushExpert, PushTask, TableConfig

# name -> (class, config class). A task class is wrapped in `SimRobot`; a `hal.Robot` is used as is.
TASKS = {"reach": (ReachTask, ReachConfig), "push": (PushTask, TableConfig),
         "pick_lift": (PickLiftTask, TableConfig), "gym": (GymRobot, GymConfig)}
EXPERTS = {"reach": ReachExpert, "push": PushExpert, "pick_lift": PickLiftExpert}  # scripted experts
MISSES = {"pick_lift": PickLiftMiss}  # scripted near misses: labelled failure episodes (success classifiers)
# each sim task's language instruction (VLAs, the tiny VLA, tokenizers trained on them)
INSTRUCTIONS = {"reach": "reach the red target", "push": "push the cube into the square", "pick_lift": "lift the cube"}

__all__ = ["GymConfig", "GymRobot", "ReachConfig", "ReachExpert", "ReachTask", "SimImperfections", "SimRobot",
           "TASKS", "EXPERTS", "MISSES", "INSTRUCTIONS", "PushTask", "PickLiftTask", "TableConfig", "PushExpert", "PickLiftExpert",
           "PickLiftMiss"]
