"""Every robot and simulator in the project passes the same conformance suite."""

import numpy as np
import pytest

from hal.conformance import ConformanceError, check_robot
from hal.robot import RobotError
from sim import GymConfig, GymRobot, ReachConfig, ReachTask, SimImperfections, SimRobot


def test_sim_reach_state_only():
    check_robot(lambda: SimRobot(ReachTask()))


def test_sim_reach_with_cameras_latency_and_noise():
    check_robot(
        lambda: SimRobot(
            ReachTask(ReachConfig(cameras=("front", "wrist"), image_size=32)),
            imperfections=SimImperfections(2, 1, 0.01, 0.01),
        ),
        ticks=8,
    )


def test_gym_adapter_box_observation():
    check_robot(lambda: GymRobot(GymConfig("Pendulum-v1")))


def test_lerobot_adapter_on_the_sim_backed_so101():
    from hardware.lerobot_adapter import LeRobotRobot, make_lerobot_device

    check_robot(lambda: LeRobotRobot(make_lerobot_device({"type": "sim_so101", "id": "conf"})))


def test_a_robot_that_breaks_the_contract_is_named():
    class Broken(SimRobot):
        def send_action(self, action):
            super().send_action(action)
            return np.full(7, np.nan, np.float32)

    with pytest.raises(ConformanceError, match="send_action must return a finite"):
        check_robot(lambda: Broken(ReachTask()))


def test_gym_adapter_refuses_unbounded_or_discrete_actions():
    with pytest.raises(RobotError, match="1-D Box is needed"):
        _ = GymRobot(GymConfig("CartPole-v1")).spec
    with pytest.raises(RobotError, match="cannot be made"):
        _ = GymRobot(GymConfig("NoSuchEnv-v0")).spec


def test_sim_latency_delays_observations_and_actions_by_whole_ticks():
    lag = SimRobot(ReachTask(), imperfections=SimImperfections(obs_latency_ticks=2))
    ref = SimRobot(ReachTask())
    states_lag, states_ref = [], []
    for r, out in ((lag, states_lag), (ref, states_ref)):
        r.connect()
        s0 = r.reset(seed=3).state.copy()
        for t in range(6):  # the same commands for both
            r.send_action(s0 + 0.1 * (t % 2))
            obs = r.get_observation()
            out.append(obs.state.copy())
        r.close()
    np.testing.assert_allclose(states_lag[4], states_ref[2], atol=1e-6)  # two ticks old
    act = SimRobot(ReachTask(), imperfections=SimImperfections(action_latency_ticks=2))
    act.connect()
    s0 = act.reset(seed=3).state.copy()
    first = act.send_action(s0 + 0.2)  # nothing due yet: the arm holds
    second = act.send_action(s0 + 0.2)
    third = act.send_action(s0 + 0.2)  # the first command arrives now
    np.testing.assert_allclose(first, s0, atol=1e-6)
    np.testing.assert_allclose(second, s0, atol=1e-6)
    np.testing.assert_allclose(third, np.clip(s0 + 0.2, act.spec.low, act.spec.high), atol=1e-6)
    act.close()


@pytest.mark.parametrize("name", ["push", "pick_lift"])
def test_table_tasks_conform_and_their_experts_succeed(name):
    from sim import EXPERTS, TASKS

    cls, cfg = TASKS[name]
    check_robot(lambda: SimRobot(cls(cfg(cameras=("front",), image_size=32))), ticks=10)
    task = cls(cfg())
    task.build()
    expert = EXPERTS[name](task)
    wins, starts = 0, set()
    for ep in range(10):
        task.reset(np.random.default_rng(ep))
        starts.add(tuple(task.cube_pos.round(3)))
        for _ in range(task.config.episode_ticks):
            task.step(expert.act())
            _, success = task.reward_success()
            if success:
                break
        wins += success
    assert wins >= 8, f"{name} expert solved {wins}/10"
    assert len(starts) == 10  # randomized resets


def test_pick_lift_holds_the_cube_only_while_the_gripper_is_closed():
    from sim import PickLiftExpert, PickLiftTask, TableConfig

    task = PickLiftTask(TableConfig())
    task.build()
    task.reset(np.random.default_rng(0))
    expert = PickLiftExpert(task)
    for _ in range(30):
        task.step(expert.act())
    assert task.grasped and task.cube_pos[2] > 0.04
    q = task.state().copy()
    q[-1] = 1.2  # open
    for _ in range(15):
        task.step(q)
    assert not task.grasped and task.cube_pos[2] < 0.02  # it fell back to the table
