"""A servo status read is trusted only when a second read confirms it: a stale or torn reply (a late
answer to an earlier read on a loaded machine, parsed as this one) once stopped a training run on
the twin with "overheating ... 0 degC"; a real fault persists and still stops the arm."""

from __future__ import annotations

import pytest

from hal.robot import RobotFault
from hardware.lerobot_adapter import LeRobotRobot


class _Serial:
    def __init__(self) -> None:
        self.resets = 0

    def reset_input_buffer(self) -> None:
        self.resets += 1


class _Port:
    def __init__(self) -> None:
        self.ser = _Serial()


class _Bus:
    """Answers each `Status` read from a script (then all clear), temperatures at 30 degC."""

    def __init__(self, statuses: list[dict[str, int]]) -> None:
        self.statuses = list(statuses)
        self.port_handler = _Port()

    def sync_read(self, register: str, normalize: bool = True) -> dict[str, int]:
        if register == "Status":
            return self.statuses.pop(0) if self.statuses else {"shoulder_pan": 0, "elbow_flex": 0}
        return {"shoulder_pan": 30, "elbow_flex": 30}


class _Device:
    name = "so_follower"
    action_features = {"shoulder_pan.pos": float, "elbow_flex.pos": float}
    observation_features = {"shoulder_pan.pos": float, "elbow_flex.pos": float}
    is_connected = True

    def __init__(self, bus: _Bus) -> None:
        self.bus = bus


def _robot(statuses: list[dict[str, int]]) -> LeRobotRobot:
    return LeRobotRobot(_Device(_Bus(statuses)), joint_low=(-1.0, -1.0), joint_high=(1.0, 1.0))


def test_a_fault_one_read_shows_and_the_next_does_not_is_counted_not_raised():
    robot = _robot([{"shoulder_pan": 0xF6, "elbow_flex": 0}])
    robot.check_health()
    assert robot.status_glitches == 1
    assert robot.device.bus.port_handler.ser.resets == 1  # the stale bytes were dropped before reading again


def test_a_fault_both_reads_show_stops_the_arm_naming_the_servo():
    robot = _robot([{"shoulder_pan": 0, "elbow_flex": 0x20}, {"shoulder_pan": 0, "elbow_flex": 0x20}])
    with pytest.raises(RobotFault, match="elbow_flex.*overload.*30 degC"):
        robot.check_health()
    assert robot.status_glitches == 0


def test_a_second_read_naming_another_servo_does_not_confirm_the_first():
    robot = _robot([{"shoulder_pan": 0x04, "elbow_flex": 0}, {"shoulder_pan": 0, "elbow_flex": 0x04}])
    robot.check_health()
    assert robot.status_glitches == 1
