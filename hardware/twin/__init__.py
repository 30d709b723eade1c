"""A protocol-level twin of an SO-101's motor bus: Feetech STS3215 servos answering LeRobot's
`FeetechMotorsBus` on a pseudo-terminal, each backed by a joint of our MuJoCo SO-101 model, so that
LeRobot's own `so101_follower` and `so101_leader` run unchanged against it (see `server.py`)."""

from hardware.twin.arm import MOTORS, TwinArm
from hardware.twin.client import TwinControl
from hardware.twin.server import Twin

__all__ = ["MOTORS", "Twin", "TwinArm", "TwinControl"]
