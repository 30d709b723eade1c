"""gym_hil's start range (the start-range curriculum's robot side): the cube drawn part of the way
from its fixed place toward the task's own draw, the whole draw at 1, refused where it cannot apply."""

import numpy as np
import pytest

from hal.robot import RobotError
from sim import GymHilConfig, GymHilRobot
from sim.gym_hil import CUBE_BOX, FIXED_CUBE_XY


def cubes(robot: GymHilRobot, seeds=range(12)) -> np.ndarray:
    out = []
    for s in seeds:
        obs = robot.reset(seed=s)
        xy = np.asarray(obs.features["environment_state"][:2], np.float64)
        # the observation and the simulator agree (the env's observation was recomputed after the move)
        np.testing.assert_allclose(xy, robot.raw_observation["environment_state"][:2], atol=1e-6)
        out.append(xy)
    return np.asarray(out)


def test_the_cube_starts_within_the_range_and_the_whole_range_is_the_tasks_own_draw():
    robot = GymHilRobot(GymHilConfig())
    robot.connect()
    try:
        whole = cubes(robot)
        robot.set_start_range(0.1)
        narrow = cubes(robot)
        robot.set_start_range(1.0)
        again = cubes(robot)
    finally:
        robot.close()
    reach = np.linalg.norm(np.maximum(np.abs(CUBE_BOX[0] - FIXED_CUBE_XY), np.abs(CUBE_BOX[1] - FIXED_CUBE_XY)))
    near = np.linalg.norm(narrow - FIXED_CUBE_XY, axis=1)
    assert near.max() <= 0.1 * reach + 1e-6  # a tenth of the way from the fixed place at most
    assert np.linalg.norm(whole - FIXED_CUBE_XY, axis=1).max() > 3 * near.max()  # the task's draw goes wider
    assert len({tuple(np.round(c, 4)) for c in narrow}) == len(narrow)  # still drawn, not one place
    np.testing.assert_allclose(again, whole)  # back at 1: gym_hil's own draw, seed for seed
    assert (whole >= CUBE_BOX[0] - 1e-6).all() and (whole <= CUBE_BOX[1] + 1e-6).all()


def test_a_fixed_cube_or_a_range_outside_zero_to_one_is_refused():
    fixed = GymHilRobot(GymHilConfig(kwargs=(("random_block_position", False),)))
    with pytest.raises(RobotError, match="random_block_position"):
        fixed.set_start_range(0.5)
    robot = GymHilRobot(GymHilConfig())
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(RobotError, match="fraction in"):
            robot.set_start_range(bad)
