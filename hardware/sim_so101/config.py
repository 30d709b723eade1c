"""Config of the sim-backed SO-101 follower, registered with LeRobot as `sim_so101`."""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.robots.config import RobotConfig


@RobotConfig.register_subclass("sim_so101")
@dataclass(kw_only=True)
class SimSO101Config(RobotConfig):
    """Which MuJoCo task backs the arm, its cameras, frame size (px) and control rate (Hz)."""

    task: str = "reach"  # which of our MuJoCo tasks backs the arm
    cameras: list[str] = field(default_factory=list)  # any of front, wrist
    image_size: int = 128
    hz: float = 30.0
