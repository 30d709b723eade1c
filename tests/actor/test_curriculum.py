"""The start-range curriculum (actor/curriculum.py): training episodes start from a range that widens
with their success, evaluation episodes from the whole range; robots without a random start refuse it."""

import numpy as np
import pytest
import torch

from hal.robot import RobotError
from hal.safety import SafeRobot
from hal.spec import Outcome
from policies.base import ActionChunk, Policy
from robo_async.actor.curriculum import StartCurriculum, StartRangeConfig, SuccessGate
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.options import ActorOptions
from sim import ReachTask, SimRobot


class Hold(Policy):
    architecture = "hold"
    version = 3  # weights loaded: evaluation episodes run

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
        return ActionChunk(np.asarray(obs["state"], np.float32)[None], 1 / 30, self.version)

    def module(self):
        return torch.nn.Identity()


class Ranged(SimRobot):
    """A reach robot with a start range: it records each range it is given before a reset and
    succeeds in the episodes `succeeds(range)` says."""

    def __init__(self, succeeds) -> None:
        super().__init__(ReachTask())
        self.succeeds, self.range, self.resets = succeeds, 1.0, []

    def set_start_range(self, fraction: float) -> None:
        self.range = fraction

    def reset(self, *, seed=None):
        self.resets.append(self.range)
        return super().reset(seed=seed)

    def outcome(self) -> Outcome:
        return Outcome(0.0, success=self.succeeds(self.range))


def run(succeeds, schedule: StartRangeConfig, episodes: int = 6) -> tuple[Ranged, ControlLoop]:
    inner = Ranged(succeeds)
    robot = SafeRobot(inner)
    robot.connect()
    cfg = LoopConfig(episode_ticks=4, max_episodes=episodes, inference="inline", eval_every=3, start_schedule=schedule)
    loop = ControlLoop(robot, Hold(), cfg)
    try:
        loop.run()
    finally:
        robot.close()
    return inner, loop


def test_training_episodes_widen_with_success_and_evaluation_episodes_start_from_the_whole_range():
    inner, loop = run(lambda r: True, StartRangeConfig(start=0.2, step=0.3, window=1, threshold=0.5))
    # episodes 0, 1, 3, 4 train (every 3rd evaluates): 0.2, then 0.3 wider after each success, capped at 1
    assert inner.resets == [0.2, 0.5, 1.0, 0.8, 1.0, 1.0]
    assert loop.stats()["start_range"] == 1.0


def test_only_training_episodes_move_the_range():
    # only the whole range's episodes (the evaluations) succeed: the training ones fail, the range stays
    inner, loop = run(lambda r: r == 1.0, StartRangeConfig(start=0.2, step=0.3, window=1, threshold=0.5))
    assert inner.resets == [0.2, 0.2, 1.0, 0.2, 0.2, 1.0]
    assert loop.stats()["start_range"] == 0.2


def test_a_robot_without_a_random_start_refuses_the_curriculum_before_the_first_tick():
    robot = SafeRobot(SimRobot(ReachTask()))
    with pytest.raises(RobotError, match="actor.start_range"):
        ControlLoop(robot, Hold(), LoopConfig(inference="inline", start_schedule=StartRangeConfig(start=0.5)))


def test_the_gate_judges_each_window_on_its_own_episodes():
    gate = SuccessGate(window=3, threshold=2 / 3)
    assert [gate.passed(s) for s in (True, False, True)] == [False, False, True]
    assert [gate.passed(s) for s in (True, False, False)] == [False, False, False]  # the last window is forgotten
    cur = StartCurriculum(StartRangeConfig(start=0.9, step=0.3, window=1, threshold=1.0))
    assert cur.range_for(evaluation=True) == 1.0 and cur.range_for(evaluation=False) == 0.9
    cur.episode_ended(False)
    assert cur.fraction == 0.9
    cur.episode_ended(True)
    assert cur.fraction == 1.0


@pytest.mark.parametrize(
    "key,value",
    [
        ("start_range", 0.0),
        ("start_range", 1.5),
        ("start_range", float("nan")),
        ("start_range_step", 0.0),
        ("start_range_window", 0),
        ("start_range_threshold", 1.2),
    ],
)
def test_start_range_keys_out_of_range_are_refused_by_name(key, value):
    with pytest.raises(ValueError, match=f"actor.{key} must be"):
        ActorOptions(**{key: value})


def test_the_options_make_the_loops_schedule():
    assert StartRangeConfig.from_options(ActorOptions()) is None
    got = StartRangeConfig.from_options(ActorOptions(start_range=0.25, start_range_window=4))
    assert got == StartRangeConfig(
        start=0.25, step=ActorOptions.start_range_step, window=4, threshold=ActorOptions.start_range_threshold
    )
    assert LoopConfig.from_options(
        ActorOptions(start_range=0.25), inference="inline", replan="due"
    ).start_schedule == StartRangeConfig(start=0.25)


def test_the_learner_reports_the_narrowest_range_of_its_actors():
    from robo_async.learner.figures import actor_figures
    from robo_async.transport.stats import ActorStats

    assert actor_figures([ActorStats(start_range=0.5), ActorStats(start_range=0.3)])["actors/start_range"] == 0.3
    assert "actors/start_range" not in actor_figures([ActorStats(clipped=1)])


@pytest.mark.parametrize(
    "overrides, want",
    [
        (["task=reach", "actor.start_range=0.5"], "has no random start to narrow (actor.start_range)"),
        (
            ["task=gym_hil", "task.kwargs=[[random_block_position,false]]", "actor.start_range=0.5"],
            "actor.start_range needs task.kwargs' random_block_position",
        ),
        (["task=gym_hil", "actor.start_range=1.5"], "actor.start_range must be in (0, 1] or null, not 1.5"),
        (
            ["robot=so101", "policy.obs_keys=[state]", "actor.start_range=0.5"],
            "drives a real robot, whose scene is reset as it is",
        ),
    ],
)
def test_train_refuses_a_start_range_its_robots_cannot_follow_in_one_line_before_anything_runs(
    tmp_path, overrides, want
):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan
    from robo_async.launch.mirrors import ConfigError

    with pytest.raises(ConfigError) as err:
        build_plan(compose_config(overrides), tmp_path / "run")
    assert want in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_train_plans_gym_hils_actors_with_the_curriculum(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    plan = build_plan(compose_config(["task=gym_hil", "actor.start_range=0.2"]), tmp_path / "run")
    assert [a.loop.start_schedule for a in plan.actors] == [StartRangeConfig(start=0.2)]


def test_a_resumed_run_goes_on_from_where_each_actors_curriculum_stood(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    cfg = compose_config(["task=gym_hil", "actor.start_range=0.1", "actors=2"])
    meta = {"start_ranges": {"0": 0.6, "1": 0.05}}  # actor 1's record is narrower than asked: the key wins
    plan = build_plan(cfg, tmp_path / "run", resume_meta=meta)
    assert [a.loop.start_schedule.start for a in plan.actors] == [0.6, 0.1]
    assert build_plan(cfg, tmp_path / "r2", resume_meta={"start_ranges": {"0": 7.0}}).actors[0].loop.start_schedule == (
        StartRangeConfig(start=1.0)
    )
    off = compose_config(["task=gym_hil"])  # no curriculum asked for: none, whatever the checkpoint says
    assert build_plan(off, tmp_path / "r3", resume_meta=meta).actors[0].loop.start_schedule is None


def test_the_learners_checkpoint_keeps_each_actors_start_range_across_a_resume(tmp_path):
    import time

    import zmq

    from robo_async.learner.algorithms import PolicySpec
    from robo_async.learner.algorithms.sac import SACConfig
    from robo_async.learner.config import LearnerConfig
    from robo_async.learner.learner import Learner
    from robo_async.learner.options import LearnerOptions
    from robo_async.transport.stats import ActorStats
    from robo_async.transport.wire import Heartbeat, encode

    def learner() -> Learner:
        return Learner(
            LearnerConfig(
                str(tmp_path),
                "tcp://127.0.0.1:0",
                "tcp://127.0.0.1:0",
                PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6, hidden=(32, 32)),
                algo_config=SACConfig(batch_size=16, warmup_steps=32, hidden=(32, 32)),
                tensorboard=False,
                stop_at_success=None,
                options=LearnerOptions(checkpoint_every_s=3600.0),
            )
        )

    first = learner()
    first.open()
    push = zmq.Context.instance().socket(zmq.PUSH)
    try:
        push.connect(first.addresses[0])
        deadline = time.monotonic() + 120  # a hang guard only: the loop ends when the heartbeat is in
        while 0 not in first.heartbeats and time.monotonic() < deadline:
            push.send_multipart([bytes(f) for f in encode(Heartbeat(0, 100, 0, ActorStats(start_range=0.4)))])
            first.step()
        assert first.counters()["start_ranges"] == {"0": 0.4}
        path = first.save()
    finally:
        push.close(linger=0)
        first.close()
    second = learner()
    second.open()
    try:
        second.restore(path)
        assert second.counters()["start_ranges"] == {"0": 0.4}  # no heartbeat yet: kept for the next checkpoint
    finally:
        second.close()
