"""LeRobot's arm units (degrees, gripper 0..100) <-> ours (rad, gripper in its joint range), both ways,
one reading and arrays; and a task's declared `Rescale`."""

import numpy as np
import pytest

from hal.units import LeRobotUnits, Rescale, is_gripper, joint_of

KEYS = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos"]
LOW = (-1.92, -1.75, -1.69, -1.66, -2.74, -0.17)  # rad, the SO-101's limits (gripper last)
HIGH = (1.92, 1.75, 1.69, 1.66, 2.84, 1.75)


def test_arm_joints_are_degrees_and_the_gripper_spans_its_joint_range():
    u = LeRobotUnits(KEYS, LOW, HIGH)
    q = u.to_hal({**dict.fromkeys(KEYS[:5], 90.0), "gripper.pos": 0.0, "shoulder_pan.vel": 5.0})
    assert q.dtype == np.float32 and q.shape == (6,)
    np.testing.assert_allclose(q[:5], np.pi / 2, rtol=1e-6)
    assert q[5] == pytest.approx(LOW[5])  # gripper 0 is the joint's low end, not 0 rad
    assert u.to_hal({**dict.fromkeys(KEYS, 0.0), "gripper.pos": 100.0})[5] == pytest.approx(HIGH[5])
    assert u.to_hal({**dict.fromkeys(KEYS, 0.0), "gripper.pos": 50.0})[5] == pytest.approx((LOW[5] + HIGH[5]) / 2)


def test_round_trips_both_ways_for_readings_and_arrays():
    u = LeRobotUnits(KEYS, LOW, HIGH)
    rng = np.random.default_rng(0)
    q = rng.uniform(LOW, HIGH, size=(8, 6))  # a chunk [H, A] in rad
    lr = u.to_lerobot_array(q)
    assert lr.shape == (8, 6) and lr.dtype == np.float32
    np.testing.assert_allclose(lr[:, :5], np.rad2deg(q[:, :5]), rtol=1e-5)
    np.testing.assert_allclose(lr[:, 5], (q[:, 5] - LOW[5]) / (HIGH[5] - LOW[5]) * 100, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(u.to_hal_array(lr), q, atol=1e-5)  # rad -> LeRobot -> rad
    values = rng.uniform([-170, -100, -90, -95, -150, 0], [170, 100, 90, 95, 160, 100], size=(3, 4, 6))
    np.testing.assert_allclose(
        u.to_lerobot_array(u.to_hal_array(values)), values, atol=1e-3
    )  # LeRobot -> rad -> LeRobot
    for row in q:  # the dict forms agree with the array forms
        d = u.to_lerobot(row)
        assert list(d) == KEYS
        np.testing.assert_allclose(list(d.values()), u.to_lerobot_array(row), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(u.to_hal(d), row, atol=1e-6)


def test_gripper_is_found_by_name_and_shapes_are_checked():
    assert is_gripper("gripper.pos") and is_gripper("gripper_left") and not is_gripper("wrist_roll.pos")
    assert joint_of("elbow_flex.pos") == "elbow_flex"
    u = LeRobotUnits(["gripper.pos", "elbow_flex.pos"], (0.0, -1.0), (1.0, 1.0))  # any position
    np.testing.assert_allclose(u.to_hal_array(np.array([100.0, 180.0])), [1.0, np.pi], rtol=1e-6)
    with pytest.raises(ValueError, match="last axis must hold the 2 joints"):
        u.to_hal_array(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="2 keys"):
        LeRobotUnits(["a.pos", "gripper.pos"], (0.0,), (1.0,))


def test_rescale_maps_the_source_range_onto_the_target():
    r = Rescale("state", 2, "gripper command", (0.0, 255.0), (0.0, 1.0))
    v = np.array([[5.0, 6.0, 255.0], [5.0, 6.0, 51.0]], np.float32)
    out = r.apply(v)
    np.testing.assert_allclose(out[:, 2], [1.0, 0.2], rtol=1e-6)
    np.testing.assert_array_equal(out[:, :2], v[:, :2])
    assert v[0, 2] == 255.0 and out.dtype == np.float32  # a copy
    with pytest.raises(ValueError, match="'state' or 'action'"):
        Rescale("obs", 0, "x", (0, 1), (0, 2))
