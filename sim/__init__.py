"""MuJoCo tasks exposed as `hal.Robot`s (`SimRobot`) and as Gymnasium envs."""

from sim.fetch import FetchConfig, FetchRobot
from sim.gym_hil import GymHilConfig, GymHilRobot
from sim.gym_hil import policy_defaults as gym_hil_policy
from sim.gym_robot import GymConfig, GymRobot
from sim.meta_world import MetaWorldConfig, MetaWorldRobot
from sim.reach import ReachConfig, ReachExpert, ReachTask
from sim.sim_robot import SimImperfections, SimRobot
from sim.table import PickLiftExpert, PickLiftMiss, PickLiftTask, PushExpert, PushTask, TableConfig

# name -> (class, config class). A task class is wrapped in `SimRobot`; a `hal.Robot` is used as is.
TASKS = {
    "reach": (ReachTask, ReachConfig),
    "push": (PushTask, TableConfig),
    "pick_lift": (PickLiftTask, TableConfig),
    "gym": (GymRobot, GymConfig),
    "gym_hil": (GymHilRobot, GymHilConfig),
    "metaworld": (MetaWorldRobot, MetaWorldConfig),
    "fetch": (FetchRobot, FetchConfig),
}
# policy keys a run of the task starts from, for the policies that have them (the user's overrides win):
# an outside env's actions are its own (not joint targets) and its observations are named its way; a
# function of the task's config where they depend on it
POLICY_DEFAULTS: dict[str, object] = {
    "gym": {"obs_keys": ["state"], "action_mode": "absolute"},
    "gym_hil": gym_hil_policy,
    "metaworld": {"obs_keys": ["state"], "action_mode": "absolute"},
    # a goal-conditioned task: the goal is an input (hindsight relabelling rewrites it)
    "fetch": {"obs_keys": ["state", "desired_goal"], "action_mode": "absolute"},
}
EXPERTS = {"reach": ReachExpert, "push": PushExpert, "pick_lift": PickLiftExpert}  # scripted experts
MISSES = {"pick_lift": PickLiftMiss}  # scripted near misses: labelled failure episodes (success classifiers)
# each sim task's language instruction (VLAs, the tiny VLA, tokenizers trained on them)
INSTRUCTIONS = {"reach": "reach the red target", "push": "push the cube into the square", "pick_lift": "lift the cube"}

__all__ = [
    "FetchConfig",
    "FetchRobot",
    "GymConfig",
    "GymRobot",
    "GymHilConfig",
    "GymHilRobot",
    "MetaWorldConfig",
    "MetaWorldRobot",
    "ReachConfig",
    "ReachExpert",
    "ReachTask",
    "SimImperfections",
    "SimRobot",
    "TASKS",
    "POLICY_DEFAULTS",
    "EXPERTS",
    "MISSES",
    "INSTRUCTIONS",
    "PushTask",
    "PickLiftTask",
    "TableConfig",
    "PushExpert",
    "PickLiftExpert",
    "PickLiftMiss",
]
