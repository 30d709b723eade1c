"""Hardware abstraction layer: the interfaces every robot and simulator implements."""

from hal.robot import Robot, RobotError
from hal.safety import SafeRobot, SafetyStats
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec, SpecMismatch

__all__ = [
    "CameraSpec",
    "Observation",
    "Outcome",
    "Robot",
    "RobotError",
    "RobotSpec",
    "SafeRobot",
    "SafetyStats",
    "SpecMismatch",
]
