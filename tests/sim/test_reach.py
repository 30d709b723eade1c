import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from hal import RobotError, SafeRobot
from sim import ReachConfig, ReachExpert, ReachTask, SimRobot
from sim.gym_env import ReachEnv


def test_check_env_state_only():
    env = ReachEnv()
    check_env(env, skip_render_check=True)
    env.close()


def test_check_env_with_cameras():
    env = ReachEnv(ReachConfig(cameras=("front", "wrist")), render_mode="rgb_array")
    check_env(env)
    obs, _ = env.reset(seed=0)
    assert obs["front"].shape == (128, 128, 3) and obs["front"].dtype == np.uint8
    assert obs["wrist"].shape == (128, 128, 3)
    assert obs["front"].std() > 0  # a real rendering, not a blank frame
    env.close()


def test_scripted_expert_solves_reach():
    task = ReachTask()
    task.build()
    expert = ReachExpert(task)
    rng = np.random.default_rng(123)
    successes = 0
    for _ in range(20):
        task.reset(rng)
        while not task.truncated:
            task.step(expert.act())
            if task.reward_success()[1]:
                successes += 1
                break
    assert successes == 20


def test_spec_readable_before_connect_and_connect_required():
    robot = SimRobot(ReachTask())
    spec = robot.spec
    assert spec.action_dim == 6 and spec.hz == 30.0
    assert dict(spec.features)["target"] == 3
    with pytest.raises(RobotError, match="not connected"):
        robot.get_observation()


def test_send_action_returns_applied_within_limits_and_seeded_reset():
    robot = SafeRobot(SimRobot(ReachTask()))
    robot.connect()
    try:
        a = robot.reset(seed=7)
        b = robot.reset(seed=7)
        np.testing.assert_array_equal(a.features["target"], b.features["target"])
        applied = robot.send_action(np.full(6, 10.0, dtype=np.float32))
        assert np.all(applied <= robot.spec.high) and np.all(applied >= robot.spec.low)
        assert robot.stats.clipped == 1
    finally:
        robot.close()


def test_physics_reaches_commanded_target():
    task = ReachTask()
    task.build()
    task.reset(np.random.default_rng(0))
    goal = np.array([0.3, 0.5, 0.8, 0.4, 0.0, 0.0], dtype=np.float32)
    for _ in range(30):
        task.step(goal)
    np.testing.assert_allclose(task.state(), goal, atol=0.02)


def test_pick_lift_pays_nothing_for_holding_short_of_the_goal():
    """Before success every tick's reward is <= 0 and grows with progress; success pays +10, so
    an RL policy gains nothing by holding the cube below the goal (it once learned to)."""
    from sim.table import PickLiftExpert, PickLiftTask, TableConfig

    task = PickLiftTask(TableConfig())
    task.build()
    task.reset(np.random.default_rng(3))
    expert = PickLiftExpert(task)
    rewards, grasped_at = [], None
    for t in range(100):
        task.step(expert.act())
        r, success = task.reward_success()
        rewards.append(r)
        if task.grasped and grasped_at is None:
            grasped_at = t
        if success:
            break
    assert success and rewards[-1] == 10.0
    assert max(rewards[:-1]) <= 0.0 and grasped_at is not None
    assert rewards[-2] > rewards[0]  # shaped: closer to done pays less penalty


def test_the_pick_lift_near_miss_closes_beside_the_cube_and_rises_empty():
    """Failure episodes for a success classifier: the expert's lift, without the cube."""
    from sim.table import GRIPPER_CLOSED, PickLiftMiss, PickLiftTask, TableConfig

    for seed in range(3):
        task = PickLiftTask(TableConfig())
        task.build()
        task.reset(np.random.default_rng(seed))
        miss = PickLiftMiss(task, max_step=0.05)
        cube0 = task.cube_pos.copy()
        closest = 1.0
        for _ in range(100):
            q = miss.act()
            task.step(q)
            closest = min(closest, float(np.linalg.norm(task.ee_pos - task.cube_pos)))
            _, success = task.reward_success()
            assert not success and not task.grasped
        assert q[-1] == np.float32(GRIPPER_CLOSED)
        assert task.ee_pos[2] > cube0[2] + TableConfig().lift_height  # up where a lifted cube would be
        assert abs(task.cube_pos[2] - cube0[2]) < 0.01  # the cube stayed on the table
        assert closest < 0.06  # it went down beside the cube, not anywhere


def test_task_cube_xy_puts_the_cube_at_one_start_and_the_default_spreads_it():
    """Demonstrations from one start (`task.cube_xy`) against a task that puts the cube anywhere."""
    from sim.table import PickLiftTask, TableConfig

    def starts(config):
        task = PickLiftTask(config)
        task.build()
        out = []
        for seed in range(4):
            task.reset(np.random.default_rng(seed))
            out.append(tuple(np.round(task.cube_pos[:2], 4)))
        return out

    assert set(starts(TableConfig(cube_xy=(0.2, 0.05)))) == {(0.2, 0.05)}
    assert len(set(starts(TableConfig()))) == 4


@pytest.mark.parametrize("xy", [(0.5, 0.0), (0.2, float("nan")), (0.2,)])
def test_a_cube_start_off_the_tasks_range_is_named(xy):
    from sim.table import TableConfig

    with pytest.raises(ValueError, match="task.cube_xy"):
        TableConfig(cube_xy=xy)
