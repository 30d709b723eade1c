"""The one control loop: safety on every action, sinks, episodes, lateness, the allowance."""

import threading

import numpy as np
import pytest
import torch

from hal.safety import SafeRobot
from policies.base import ActionChunk, Policy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.records import EpisodeLog
from robo_async.transport.wire import LearnerStatus
from sim import ReachTask, SimRobot


class NaNEvery(Policy):
    """Every `k`-th action is NaN; otherwise hold."""

    architecture = "nan-test"
    version = 0

    def __init__(self, k):
        self.k, self.calls = k, 0

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
        self.calls += 1
        a = np.asarray(obs["state"], np.float32).copy()
        if self.calls % self.k == 0:
            a[0] = np.nan
        return ActionChunk(a[None], 1 / 30, 0)

    def module(self):
        return torch.nn.Identity()


def test_loop_refuses_a_robot_without_the_safety_layer():
    with pytest.raises(TypeError, match="SafeRobot"):
        ControlLoop(SimRobot(ReachTask()), NaNEvery(2), LoopConfig())


def test_every_action_goes_through_safety_and_episodes_reach_the_sink():
    robot = SafeRobot(SimRobot(ReachTask()))
    sink = EpisodeLog()
    robot.connect()
    try:
        res = ControlLoop(
            robot, NaNEvery(5), LoopConfig(episode_ticks=20, max_episodes=3, eval_every=1), sink=sink
        ).run()
    finally:
        robot.close()
    assert res.ticks == 60 and len(sink.episodes) == 3
    assert robot.stats.rejected == 12  # every 5th of 60 actions was NaN: held, never sent
    assert [e.episode for e in sink.episodes] == [0, 1, 2] and all(e.evaluation for e in sink.episodes)


def test_realtime_loop_counts_a_tick_that_waited():
    class Slow(NaNEvery):
        def predict_chunk(self, obs, **kw):
            self.calls += 1
            if self.calls == 10:
                threading.Event().wait(0.1)  # three periods at 30 Hz, on the control thread
            return ActionChunk(np.asarray(obs["state"], np.float32)[None], 1 / 30, 0)

    robot = SafeRobot(SimRobot(ReachTask()))
    robot.connect()
    try:
        res = ControlLoop(robot, Slow(1), LoopConfig(realtime=True, max_steps=20, inference="inline")).run()
    finally:
        robot.close()
    assert res.missed_ticks >= 1 and res.lateness_max_ms > 50  # the waited tick is seen


def test_allowance_counts_what_the_actor_produced_not_what_arrived():
    actor = Actor(SafeRobot(SimRobot(ReachTask())), NaNEvery(2), ActorConfig(3, "", ""))
    st = LearnerStatus(0, 0, env_steps=1000, allowed_env_steps=1500, acked=((3, 400),), actors=2)
    # headroom 500 split over 2 actors: this actor may run to seq 400 + 250, counting what is in flight
    assert actor._produce_limit(st, 3) == 650  # seq 649 may be produced, 650 not


def test_inline_executes_each_chunk_whole_and_starts_a_new_one_each_episode():
    from robo_async.launch.builders import TaskArgs, make_safe_robot

    class Counting(Policy):
        """Chunk k holds the value k in every entry; counts its calls."""

        architecture = "counting"
        horizon = 4
        version = 0

        def __init__(self) -> None:
            self.calls = 0

        def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
            self.calls += 1
            return ActionChunk(np.full((4, len(obs["state"])), 0.01 * self.calls, np.float32), 1 / 30, self.calls)

        def module(self):
            return torch.nn.Identity()

    class Sink:
        def __init__(self) -> None:
            self.versions = []

        def add(self, obs, action, reward, next_obs, terminated, truncated, policy_version, success=False, **_):
            self.versions.append(policy_version)

        def send_episode(self, stats) -> None:
            self.versions.append("end")

        def send_heartbeat(self, beat) -> None:
            pass

        def flush(self) -> None:
            pass

    robot = make_safe_robot(TaskArgs("reach", {"episode_ticks": 6}))
    robot.connect()
    policy, sink = Counting(), Sink()
    try:
        ControlLoop(
            robot, policy, LoopConfig(episode_ticks=6, max_episodes=2, inference="inline", eval_every=0), sink=sink
        ).run()
    finally:
        robot.close()
    # 6-tick episodes: a chunk of 4, then a fresh chunk cut short by the episode end
    assert sink.versions == [1, 1, 1, 1, 2, 2, "end", 3, 3, 3, 3, 4, 4, "end"]


def test_jsrl_guide_acts_first_in_training_episodes_and_hands_over_earlier_as_success_comes():
    from robo_async.actor.guide import GuideConfig
    from robo_async.actor.loop_config import TickInfo
    from robo_async.launch.builders import TaskArgs, make_safe_robot

    class Const(Policy):
        architecture = "const"
        horizon = 3

        def __init__(self, value: float) -> None:
            self.value, self.version = value, 5

        def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
            return ActionChunk(np.full((3, len(obs["state"])), self.value, np.float32), 1 / 30, self.version)

        def module(self):
            return torch.nn.Identity()

    ticks: list[TickInfo] = []
    robot = make_safe_robot(TaskArgs("reach", {"episode_ticks": 8}))
    robot.connect()
    policy, guide = Const(0.1), Const(0.2)
    # every training episode "succeeds" (threshold 0): the guide hands over 3 ticks earlier each time
    cfg = LoopConfig(
        episode_ticks=8,
        max_episodes=6,
        inference="inline",
        eval_every=3,
        guide_schedule=GuideConfig(ticks=7, step=3, window=1, threshold=0.0),
    )
    loop = ControlLoop(robot, policy, cfg, observer=ticks.append, guide=guide)
    try:
        loop.run()
    finally:
        robot.close()
    guided = {}
    for t in ticks:
        guided.setdefault(t.episode, []).append(bool(t.action[0] == np.float32(0.2)))
    # episodes 0, 1, 3, 4 train (every 3rd evaluates): guided for 7, 4, 1, 0 ticks; evaluations never
    assert [sum(guided[e]) for e in range(6)] == [7, 4, 0, 1, 0, 0]
    assert all(g == sorted(g, reverse=True) for g in guided.values())  # the guide always starts the episode
    assert loop.stats()["guide_ticks"] == 0


def test_a_non_finite_reading_or_reward_ends_the_episode_and_nothing_non_finite_is_sent():
    """A robot's NaN (a sensor, a reward) and a policy's NaN are never sent to the learner (which
    refuses such a batch): the row is not kept, the episode ends there, `nonfinite` counts it."""
    from policies.scripted import HoldPolicy
    from robo_async.actor.adder import Adder
    from robo_async.transport.wire import TransitionBatch, decode, encode

    class FaultyReach(SimRobot):
        def __init__(self) -> None:
            super().__init__(ReachTask())
            self.steps, self.faulted = 0, False

        def get_observation(self):
            obs = super().get_observation()
            if self.steps == 4 and not self.faulted:  # the reading after the 4th action: a NaN in the state
                import dataclasses

                state = np.array(obs.state, copy=True)  # (the sim's own joints stay as they are)
                state[1] = np.nan
                obs = dataclasses.replace(obs, state=state)
                self.faulted = True
            return obs

        def send_checked_action(self, action):
            self.steps += 1
            return super().send_checked_action(action)

    class Outlet:
        def __init__(self) -> None:
            self.sent = []

        def put(self, msg) -> None:
            self.sent.append(decode([bytes(f) for f in encode(msg)]))  # as the learner checks it

    robot = SafeRobot(FaultyReach())
    robot.connect()
    outlet = Outlet()
    loop = ControlLoop(
        robot,
        HoldPolicy(robot.spec),
        LoopConfig(episode_ticks=10, max_episodes=2, inference="inline", eval_every=0),
        sink=Adder(0, outlet, flush_every=4),
    )
    try:
        result = loop.run()
    finally:
        robot.close()
    assert loop.nonfinite == 1 and loop.actor_stats().nonfinite == 1
    assert [e.length for e in result.episodes] == [4, 10]  # the first ended at the NaN, the second ran whole
    rows = [b for b in outlet.sent if isinstance(b, TransitionBatch)]
    assert sum(b.count for b in rows) == 3 + 10  # the NaN's row was not kept
    assert all(np.all(np.isfinite(a)) for b in rows for a in b.arrays.values() if a.dtype.kind == "f")
