"""`task=fetch`: Gymnasium-Robotics' goal-conditioned Fetch tasks as sim resources, their goal API
read for hindsight relabelling (threshold checked against the env's own reward), the scripted
pusher, and `algo.her` refused where it cannot apply."""

import pytest

from hal.conformance import check_robot
from hal.robot import RobotError
from hal.safety import SafeRobot
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.launch.experts import EpisodeCollector, expert_policy
from robo_async.launch.tasks import make_robot
from sim import FetchConfig, FetchRobot, GymConfig, GymRobot


def _targs(*keys):
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args

    return task_args(compose_config(["task=fetch", *keys]).task)


def test_fetch_push_is_a_goal_conditioned_sim_resource_whose_expert_pushes():
    targs = _targs()
    assert targs.resource_need == "sim:fetch"
    robot = SafeRobot(make_robot(targs))
    spec = robot.spec
    assert spec.name == "gym_FetchPush-v4" and spec.action_dim == 4 and spec.state_dim == 25
    assert dict(spec.features) == {"achieved_goal": 3, "desired_goal": 3} and spec.hz == 25.0
    sink = EpisodeCollector()
    robot.connect()
    try:
        ControlLoop(
            robot,
            expert_policy(targs, robot),
            LoopConfig(episode_ticks=50, max_episodes=4, seed=3, inference="inline", eval_every=1),
            sink=sink,
        ).run()
    finally:
        robot.close()
    assert sum(sink.successes) >= 3, sink.successes  # the scripted pusher, through the safety layer


def test_the_goal_threshold_is_read_from_the_env_and_checked_against_its_reward():
    assert FetchRobot(FetchConfig()).goal_reward() == 0.05
    dense = FetchRobot(FetchConfig(kwargs=(("reward_type", "dense"),)))
    with pytest.raises(RobotError, match="not the sparse"):
        dense.goal_reward()
    with pytest.raises(RobotError, match="no goal API"):
        GymRobot(GymConfig(env_id="Pendulum-v1")).goal_reward()
    with pytest.raises(RobotError, match="not a Fetch task"):
        FetchRobot(FetchConfig(env_name="FetchPsh-v4"))


def test_her_resolves_the_threshold_at_plan_time_and_is_refused_where_it_cannot_apply(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan
    from robo_async.launch.mirrors import ConfigError

    plan = build_plan(compose_config(["task=fetch", "algo=sac", "algo.her=future"]), tmp_path / "a")
    ac = plan.learner.algo_config
    assert (ac.her, ac.her_threshold) == ("future", 0.05)
    assert plan.learner.algo_config.relabelling().column == "next_obs/achieved_goal"
    assert list(plan.policy.obs_keys) == ["state", "desired_goal"]  # the goal is an input by default
    given = build_plan(compose_config(["task=fetch", "algo.her=final", "algo.her_threshold=0.1"]), tmp_path / "b")
    assert given.learner.algo_config.her_threshold == 0.1
    for keys, match in (
        (["task=reach", "algo.her=future"], "goal-conditioned task"),
        (["task=fetch", "algo.her=future", "policy.obs_keys=[state]"], "leaves out"),
        (["task=fetch", "algo.her=future", "algo.her_ratio=0"], "algo.her_ratio"),
        (["task=fetch", "algo.her=future", "task.kwargs=[[reward_type,dense]]"], "not the sparse"),
    ):
        with pytest.raises(ConfigError, match=match):
            build_plan(compose_config(keys), tmp_path / "c")
    assert build_plan(compose_config(["task=fetch"]), tmp_path / "d").learner.algo_config.relabelling() is None


@pytest.mark.e2e
def test_fetch_passes_the_conformance_suite():
    check_robot(lambda: FetchRobot(FetchConfig(env_name="FetchReach-v4")), ticks=3)
