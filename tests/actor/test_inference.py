"""Async chunk inference: forwarding, a loop that never waits, RTC prefixes, bad policies, hot swap."""

import threading
import time

import numpy as np
import pytest
import torch

from policies.base import ActionChunk, Policy
from policies.flow import FlowChunkPolicy
from robo_async.actor.inference import (AsyncChunkRunner, ChunkSchedule, InferenceEngine, LatencyTracker,
                                        forward_state)
from sim import ReachTask

SPEC = ReachTask().spec()
A = SPEC.action_dim


class Scripted(Policy):
    """Chunks whose values encode the forwarded state and prefix; `gate` holds an inference
    until the test releases it (a slow policy without timing)."""

    architecture = "scripted"

    def __init__(self, horizon=8, output=None):
        self.horizon, self.output = horizon, output
        self.gate = threading.Event()
        self.gate.set()
        self.calls = []

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None):
        self.calls.append((None if forwarded_state is None else forwarded_state.copy(),
                           None if prefix is None else np.array(prefix)))
        self.gate.wait()
        if self.output is not None:
            return ActionChunk(self.output, 1 / 30, self.version)
        acts = np.tile(np.arange(self.horizon, dtype=np.float32)[:, None] * 0.01, (1, A))
        if prefix is not None and len(prefix):
            acts[: len(prefix)] = prefix
        return ActionChunk(acts, 1 / 30, self.version)

    def module(self):
        return torch.nn.Linear(1, 1)


def obs(state=None):
    return {"state": np.zeros(A, np.float32) if state is None else state}


def wait_idle(engine):
    deadline = time.monotonic() + 10
    while engine.busy and time.monotonic() < deadline:
        time.sleep(0.001)


def test_forwarded_state_is_the_last_committed_target():
    committed = np.array([[0.1] * A, [0.2] * A, [0.3] * A], np.float32)
    np.testing.assert_array_equal(forward_state(np.zeros(A), committed, SPEC), committed[-1])
    np.testing.assert_array_equal(forward_state(np.ones(A), committed[:0], SPEC), np.ones(A))


def test_the_loop_keeps_ticking_while_a_slow_policy_thinks():
    policy = Scripted()
    engine = InferenceEngine(policy, A, 8, timeout_s=60)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    policy.gate.clear()  # the first inference will not finish until released
    ticks_while_busy = 0
    for t in range(20):
        a = runner.tick(t, obs())
        assert a.shape == (A,)
        ticks_while_busy += engine.busy
    assert ticks_while_busy == 20 and runner.holds == 20  # every tick got an action, none waited
    policy.gate.set()
    wait_idle(engine)
    runner.tick(20, obs())
    assert runner.holds == 21 and len(runner.versions) == 1  # the late chunk's ticks were stale
    engine.close()


class FixedLatency(LatencyTracker):
    def __init__(self, ticks):
        super().__init__(initial_s=ticks / 30)

    def add(self, seconds):
        pass  # as if every inference took `ticks` ticks


def test_rtc_keeps_the_committed_prefix_and_forwards_the_state():
    policy = Scripted(horizon=8)
    engine = InferenceEngine(policy, A, 8)
    engine.latency = FixedLatency(3)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    first = None
    for t in range(5):
        runner.tick(t, obs())
        wait_idle(engine)
        if t == 0:
            first = np.tile(np.arange(8, dtype=np.float32)[:, None] * 0.01, (1, A))
    # at tick 4 four actions were left (<= 3 ticks of latency + 1 margin): the next inference was
    # asked to keep ticks 4..6 fixed and about the state after them
    fstate, prefix = policy.calls[-1]
    np.testing.assert_array_equal(prefix, first[4:7])
    np.testing.assert_array_equal(fstate, first[6])
    for t, want in ((5, first[5]), (6, first[6])):  # the committed prefix runs exactly as planned
        np.testing.assert_array_equal(runner.tick(t, obs()), want)
    np.testing.assert_array_equal(runner.tick(7, obs()), np.full(A, 0.03, np.float32))  # new chunk, index 3
    engine.close()


def test_schedule_merge_modes():
    s = ChunkSchedule("drop_stale")
    s.merge(np.ones((4, A)), start_tick=0, now=0)
    s.merge(np.full((4, A), 2.0), start_tick=1, now=2)  # tick 1 is already past
    assert s.stale_dropped == 1 and s.pop(2)[0] == 2.0
    b = ChunkSchedule("blend")
    b.merge(np.ones((4, A)), 0, 0)
    b.merge(np.full((4, A), 3.0), 2, 0)
    assert b.pop(2)[0] == 2.0 and b.pop(5)[0] == 3.0
    with pytest.raises(ValueError, match="unknown chunk merge mode"):
        ChunkSchedule("nope")


@pytest.mark.parametrize("bad", [np.full((8, A), np.nan, np.float32), np.zeros((8, A + 1), np.float32)])
def test_a_bad_chunk_is_dropped_and_the_loop_holds(bad):
    engine = InferenceEngine(Scripted(output=bad), A, 8)
    runner = AsyncChunkRunner(engine, SPEC, mode="drop_stale")
    start = np.full(A, 0.3, np.float32)
    for t in range(5):
        a = runner.tick(t, obs(start))
        wait_idle(engine)
        np.testing.assert_array_equal(a, start)  # holding
    assert engine.bad_chunks >= 2
    engine.close()


def test_a_hung_inference_is_reported_and_the_loop_goes_on():
    policy = Scripted()
    policy.gate.clear()
    engine = InferenceEngine(policy, A, 8, timeout_s=0.01)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    runner.tick(0, obs())
    deadline = time.monotonic() + 10
    while engine.hung_reports == 0 and time.monotonic() < deadline:
        runner.tick(1, obs())
    assert engine.hung_reports == 1 and runner.holds >= 2
    policy.gate.set()
    engine.close()


def test_hot_swap_changes_the_version_between_chunks_without_a_missed_tick():
    policy = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=4, steps=2, hidden=(16,))
    engine = InferenceEngine(policy, A, 4)
    runner = AsyncChunkRunner(engine, SPEC, mode="rtc")
    other = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=4, steps=2, hidden=(16,), seed=1)
    for t in range(40):
        if t == 10:
            engine.swap_weights(7, other.weights())
        assert runner.tick(t, obs()).shape == (A,)
        wait_idle(engine)
    assert runner.versions[0] == -1 and runner.versions[-1] == 7
    engine.swap_weights(8, {"nope": np.zeros(1)})  # another architecture: refused, v7 kept
    runner.tick(40, obs())
    wait_idle(engine)
    time.sleep(0.1)
    assert policy.version == 7
    engine.close()


def test_flow_policy_rtc_prefix_is_exact_and_bc_learns():
    torch.manual_seed(0)
    p = FlowChunkPolicy(("state",), (A,), SPEC.joint_low, SPEC.joint_high, horizon=6, steps=4, hidden=(64, 64))
    prefix = np.tile(np.linspace(-0.5, 0.5, A, dtype=np.float32), (2, 1))
    chunk = p.predict_chunk(obs(), prefix=prefix)
    np.testing.assert_array_equal(chunk.actions[:2], prefix)
    assert chunk.actions.shape == (6, A)
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (512, A)).astype(np.float32)
    targets = np.clip(states[:, None, :] * 0.5 + np.linspace(0, 0.3, 6)[None, :, None], SPEC.low, SPEC.high)
    cond = torch.as_tensor(p.condition({"state": states}))
    x1 = torch.as_tensor(p.normalize(targets.astype(np.float32)))
    opt = torch.optim.Adam(p.net.parameters(), lr=1e-3)
    losses = []
    for step in range(300):
        idx = torch.as_tensor(rng.integers(0, 512, 64))
        loss = p.bc_loss(cond[idx], x1[idx], torch.as_tensor(rng.integers(0, 3, 64)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-30:]) < 0.5 * np.mean(losses[:30])
