"""A vectorized actor (`actor.envs=N`): one control loop steps N simulators with one batched policy
call per tick; each simulator's episodes and transitions are a stream of their own (seeds,
safety, storage), into the learner's store through the real launchers."""

import subprocess
import sys

import numpy as np
import pytest

from hal.safety import SafeRobot
from policies.base import ActionChunk, ChunkRequest, Policy
from policies.mlp import MLPPolicy
from robo_async.actor.actor import Actor, ActorConfig, lane_actor_id
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.records import EpisodeLog
from robo_async.transport.curve import LANE_STRIDE, owns
from sim import ReachTask, SimRobot

EXE = [sys.executable, "-m", "robo_async.cli"]


class Rows(EpisodeLog):
    """One simulator's sink: its transitions (state before, state after) and episode summaries."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def add(self, obs, action, reward, next_obs, terminated, truncated, version, success=False, **kw):
        self.rows.append((obs["state"].copy(), next_obs["state"].copy(), terminated or truncated))


class Batched(Policy):
    """Holds each robot where it is; records the size and mode of every call it gets."""

    horizon = 1
    architecture = "batched"

    def __init__(self, spec):
        self.spec, self.calls, self.version = spec, [], 0

    def predict_chunk(self, obs, **kw):
        self.calls.append((1, self.deterministic))
        return ActionChunk(np.asarray(obs["state"], np.float32)[None], self.spec.dt, self.version)

    def predict_chunks(self, requests):
        self.calls.append((len(requests), self.deterministic))
        return [ActionChunk(np.asarray(r.obs["state"], np.float32)[None], self.spec.dt, self.version) for r in requests]

    def module(self):
        import torch

        return torch.nn.Linear(1, 1)


def robots(n):
    out = [SafeRobot(SimRobot(ReachTask())) for _ in range(n)]
    for r in out:
        r.connect()
    return out


def test_one_batched_call_per_tick_and_each_simulator_its_own_episodes():
    rs = robots(3)
    policy = Batched(rs[0].spec)
    sinks = [Rows() for _ in rs]
    loop = ControlLoop(
        rs, policy, LoopConfig(episode_ticks=10, max_steps=3 * 40, inference="inline", eval_every=2, seed=5), sink=sinks
    )
    res = loop.run()
    for r in rs:
        r.close()
    assert res.ticks == 120 and loop.tick == 40
    # every tick one call per kind of episode (training, evaluation), together covering the 3 simulators
    # (numbered 0, 1, 2, then 3, 4, 5, ...: each tick one training and one evaluation group)
    assert len(policy.calls) == 2 * 40 and sum(n for n, _ in policy.calls) == 120
    for sink in sinks:  # each sink: one simulator's consecutive ticks, episode after episode
        assert len(sink.rows) == 40 and len(sink.episodes) == 4
        for (_, after, end), (before, _, _) in zip(sink.rows, sink.rows[1:], strict=False):
            if not end:
                np.testing.assert_array_equal(after, before)
    numbers = sorted(e.episode for s in sinks for e in s.episodes)
    assert numbers == list(range(12))  # every episode its own number (its reset's seed)
    firsts = [s.rows[0][0] for s in sinks]
    assert not np.allclose(firsts[0], firsts[1])  # ... so the simulators start apart
    for s in sinks:  # evaluation episodes are the odd-numbered ones, asked for deterministically
        assert all(e.evaluation == (e.episode % 2 == 1) for e in s.episodes)
    assert {d for n, d in policy.calls} == {False, True}


def test_training_simulators_share_one_call_per_tick():
    rs = robots(4)
    policy = Batched(rs[0].spec)
    ControlLoop(
        rs,
        policy,
        LoopConfig(episode_ticks=10, max_steps=4 * 25, inference="inline", eval_every=0),
        sink=[EpisodeLog() for _ in rs],
    ).run()
    for r in rs:
        r.close()
    assert policy.calls == [(4, False)] * 25


def test_a_batched_mlp_gives_each_simulator_the_action_it_would_get_alone():
    spec = ReachTask().spec()
    p = MLPPolicy(("state",), (spec.state_dim,), spec.joint_low, spec.joint_high, hidden=(16,))
    p.deterministic = True
    rng = np.random.default_rng(0)
    reqs = [ChunkRequest({"state": rng.uniform(-1, 1, spec.state_dim).astype(np.float32)}) for _ in range(5)]
    batched = p.predict_chunks(reqs)
    for r, b in zip(reqs, batched, strict=False):
        np.testing.assert_allclose(b.actions, p.predict_chunk(r.obs).actions, atol=1e-6)


def test_what_a_vectorized_loop_cannot_do_is_refused_in_one_line():
    rs = [SafeRobot(SimRobot(ReachTask())) for _ in range(2)]
    policy = Batched(rs[0].spec)
    for cfg in (LoopConfig(inference="async_forward"), LoopConfig(realtime=True)):
        with pytest.raises(ValueError, match="2 simulators in one loop"):
            ControlLoop(rs, policy, cfg, sink=[EpisodeLog(), EpisodeLog()])
    with pytest.raises(ValueError, match="one sink per robot: 2 robots, 1 sinks"):
        ControlLoop(rs, policy, LoopConfig(), sink=[EpisodeLog()])
    with pytest.raises(ValueError, match="an actor drives 1 to 64 robots"):
        Actor([SafeRobot(SimRobot(ReachTask())) for _ in range(65)], policy, ActorConfig(0, "", ""))


def test_a_vectorized_actors_streams_and_keys():
    assert [lane_actor_id(3, j) for j in range(3)] == [3, 3 + LANE_STRIDE, 3 + 2 * LANE_STRIDE]
    # under CURVE an actor's key may send its own robots' streams, no other actor's
    assert owns((3, 2), 3) and owns((3, 2), 3 + LANE_STRIDE) and not owns((3, 2), 4 + LANE_STRIDE)
    assert not owns((4, 1), 3) and not owns((3, 1), 3 + LANE_STRIDE)  # exactly the lanes it was issued for
    assert not owns((3, 2), 3 + 2 * LANE_STRIDE) and not owns((3, 2), 3 - LANE_STRIDE)
    assert owns((2000, 1), 2000) and not owns((2000, 2), 2000 + LANE_STRIDE)
    assert not owns(None, 3) and not owns((3, 1), None)


def store_streams(run_dir):
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    store = PersistentReplayStore(run_dir / "replay").open(readonly=True)
    try:
        seqs = {}
        for _, a, s, _ in store.records("online"):
            seqs.setdefault(a, []).append(s)
        return seqs
    finally:
        store.close()


@pytest.mark.parametrize("launcher", ["serial", "local"])
@pytest.mark.e2e
def test_vectorized_actors_train_and_resume_with_every_simulators_stream_whole(tmp_path, launcher):
    run_dir = tmp_path / "vec"
    actors = 1 if launcher == "serial" else 2  # (serial runs one actor)
    tiny = [
        "task=reach",
        f"launcher={launcher}",
        f"actors={actors}",
        "actor.envs=3",
        "algo.warmup_steps=200",
        "algo.batch_size=32",
        "policy.hidden=[32,32]",
        "algo.hidden=[32,32]",
        "stop_at_success=null",
        "eval_episodes=0",
        "learner.log_every_s=0.5",
        "dashboard.port=null",
    ]
    res = subprocess.run(
        EXE + ["train", f"run_dir={run_dir}", "budget.env_steps=1800", *tiny],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    first = store_streams(run_dir)
    ids = {lane_actor_id(a, j) for a in range(actors) for j in range(3)}
    assert set(first) == ids  # a stream per simulator
    res = subprocess.run(
        EXE + ["train", f"resume={run_dir}", "budget.env_steps=3000"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    after = store_streams(run_dir)
    for a, seqs in after.items():  # each stream 0..n-1, once each: nothing lost or doubled across the resume
        assert sorted(seqs) == list(range(len(seqs))), a
        assert len(seqs) > len(first[a])
    assert sum(len(s) for s in after.values()) >= 3000
    if launcher == "local":  # each simulator's journal beside actor 0's
        assert (run_dir / "actors" / "0" / "journal-lane2").is_dir()


@pytest.mark.e2e
def test_actor_envs_that_cannot_step_as_one_are_refused_at_plan_time():
    for extra, why in (
        (["task.realtime=true"], "task.realtime=true"),
        (["teleop=virtual"], "a teleop"),
        (["actor.inference=async_forward"], "actor.inference=async_forward"),
    ):
        res = subprocess.run(
            EXE + ["train", "task=reach", "actor.envs=4", *extra], capture_output=True, text=True, timeout=120
        )
        assert res.returncode != 0 and f"actor 0 has {why}" in res.stderr, res.stderr[-2000:]
    res = subprocess.run(EXE + ["train", "task=reach", "actor.envs=65"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "actor.envs must be 1 to 64" in res.stderr


def test_a_batch_of_rl_trained_chunk_policies_acts_as_each_one_alone():
    """The one-step actor (qc) and the noise-steered prior (dsrl) act through their own networks in a
    batch too (the flow prior's batched sampler stood in for them before)."""
    import torch

    from policies.onestep import NoiseSteeredPolicy, OneStepChunkPolicy

    spec = ReachTask().spec()
    kw = dict(
        obs_keys=("state",),
        obs_dims=(spec.state_dim,),
        action_low=spec.joint_low,
        action_high=spec.joint_high,
        horizon=4,
        hidden=(32, 32),
    )
    rng = np.random.default_rng(1)
    reqs = [ChunkRequest({"state": rng.uniform(-1, 1, spec.state_dim).astype(np.float32)}) for _ in range(3)]
    for cls in (OneStepChunkPolicy, NoiseSteeredPolicy):
        p = cls(**kw)
        with torch.no_grad():
            for m in p.module().modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.normal_(0, 0.3)
        p.deterministic = True
        for r, b in zip(reqs, p.predict_chunks(reqs), strict=False):
            np.testing.assert_allclose(b.actions, p.predict_chunk(r.obs).actions, atol=1e-5)


def test_a_vectorized_actors_streams_share_one_uplink_thread():
    """Three simulators, three streams, one thread delivering them (not one thread each), and
    every transition acked by a real receiving process."""
    import threading

    from robo_async.bench.ingest import IngestProcess

    seen = []

    def observe(info):
        if info.tick == 20 and info.lane == 0:
            # this actor's uplink threads (by its streams' ids; another test's may still be ending)
            seen.extend(t.name for t in threading.enumerate() if t.name in ("uplink-5", "uplink-1029", "uplink-2053"))

    sims = [SafeRobot(SimRobot(ReachTask())) for _ in range(3)]
    ingest = IngestProcess()
    with ingest as (data, weights):
        actor = Actor(
            sims,
            Batched(sims[0].spec),
            ActorConfig(5, data, weights, LoopConfig(max_steps=300, eval_every=0)),
            observer=observe,
        )
        result = actor.run(threading.Event())
    assert result is not None and result.ticks == 300
    assert seen == ["uplink-5"]
    assert ingest.received == 300  # every stream delivered and acked
