"""LeRobot teleoperators through our adapter, and the e-stop path from a teleop to the robot."""

import numpy as np

from hal.safety import SafeRobot
from hal.teleop import TeleopEventKind, poll_events
from hardware.lerobot_teleop import LeRobotTeleop, make_lerobot_teleop_device
from sim import ReachTask, SimRobot


def test_leader_actions_in_radians_and_events_mapped():
    t = LeRobotTeleop(
        make_lerobot_teleop_device(
            {"type": "sim_leader", "id": "t", "events": {2: "is_intervention", 3: "success", 5: "is_intervention"}}
        )
    )
    t.connect()
    kinds = []
    for _ in range(6):
        a = t.get_action()
        assert a.shape == (6,) and np.all(np.abs(a[:5]) < 2.0)  # degrees became radians
        kinds += [e.kind for e in t.events()]
    assert kinds == [TeleopEventKind.INTERVENTION_ON, TeleopEventKind.SUCCESS, TeleopEventKind.INTERVENTION_OFF]
    t.close()


def test_a_buttons_only_device_gives_events_and_no_joint_targets():
    t = LeRobotTeleop(
        make_lerobot_teleop_device(
            {"type": "sim_leader", "id": "b", "buttons_only": True, "events": {2: "is_intervention", 3: "success"}}
        )
    )
    t.connect()
    assert t.action_dim is None and t.get_action() is None  # a takeover hands control to a leader arm
    kinds = [e.kind for _ in range(3) for e in t.events()]
    assert kinds == [TeleopEventKind.INTERVENTION_ON, TeleopEventKind.SUCCESS]
    t.close()


def test_an_estop_from_a_teleop_holds_the_robot():
    t = LeRobotTeleop(make_lerobot_teleop_device({"type": "sim_leader", "id": "t", "events": {3: "estop"}}))
    t.connect()
    robot = SafeRobot(SimRobot(ReachTask()))
    robot.connect()
    start = robot.reset(seed=0).state.copy()
    for _ in range(5):
        t.get_action()
        poll_events([t], robot)
        applied = robot.send_action(start + 0.05)
    assert robot.estopped and robot.stats.estopped >= 2
    np.testing.assert_allclose(applied, robot.get_observation().state, atol=0.02)  # holding still
    robot.close()
