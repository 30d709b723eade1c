"""`actor.inference=sync_bounded` (a one-step policy's default where ticks keep wall-clock time):
each tick's action is computed from that tick's own observation; a policy slower than the bound
leaves the tick holding instead of waiting, and its late answer starts when it lands."""

import threading

import numpy as np
import pytest

from policies.base import ActionChunk
from robo_async.actor.inference import AsyncChunkRunner, InferenceEngine
from robo_async.launch.policy_args import PolicyArgs
from tests.actor.test_inference import SPEC, A, Policy, obs, wait_idle

pytestmark = pytest.mark.timeout(120)  # an unbounded wait hangs the test instead of failing an assert


class Echo(Policy):
    """A one-step policy whose action is its observation's state (what it was asked about);
    `gate` holds an inference until the test releases it."""

    architecture = "echo"
    horizon = 1

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()
        self.forwarded = []

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None):
        self.forwarded.append(forwarded_state)
        self.gate.wait()
        return ActionChunk(np.asarray(obs["state"], np.float32)[None].copy(), SPEC.dt, self.version)

    def module(self):
        import torch

        return torch.nn.Linear(1, 1)


def state(t: int) -> np.ndarray:
    return np.full(A, 0.01 * (t + 1), np.float32)


def test_each_tick_acts_on_its_own_observation(monkeypatch):
    import robo_async.actor.inference as inference

    monkeypatch.setattr(inference, "SYNC_BOUND", 1e6)  # however slow this machine is, no tick misses the bound
    policy = Echo()
    engine = InferenceEngine(policy, A, 1)
    runner = AsyncChunkRunner(engine, SPEC, mode="sync_bounded", forward=False)
    for t in range(10):
        a = runner.tick(t, obs(state(t)))
        np.testing.assert_array_equal(a, state(t))  # not the last tick's state, not a hold
    assert runner.holds == 0 and runner.late == 0
    assert all(f is None for f in policy.forwarded)  # asked about the observation itself, not a forwarded state
    engine.close()


def test_a_policy_slower_than_the_bound_leaves_the_tick_holding_and_its_answer_lands_late():
    policy = Echo()
    engine = InferenceEngine(policy, A, 1, timeout_s=60)
    runner = AsyncChunkRunner(engine, SPEC, mode="sync_bounded", forward=False)
    first = runner.tick(0, obs(state(0)))
    policy.gate.clear()  # the next inference will not finish until released
    held = runner.tick(1, obs(state(1)))  # returns once the bound is out, with the policy still thinking
    assert engine.in_flight == 1 and runner.late == 1 and runner.holds == 1
    np.testing.assert_array_equal(held, first)  # held the last action
    policy.gate.set()
    wait_idle(engine)
    # the late answer (about tick 1) runs at tick 2, when it landed; tick 3 is asked about itself again
    np.testing.assert_array_equal(runner.tick(2, obs(state(2))), state(1))
    np.testing.assert_array_equal(runner.tick(3, obs(state(3))), state(3))
    assert runner.late == 1 and runner.holds == 1
    engine.close()


def test_a_one_step_policy_is_known_from_the_config():
    assert PolicyArgs.from_config({"name": "mlp", "obs_keys": ["state"]}).horizon == 1
    assert PolicyArgs.from_config({"name": "flow", "obs_keys": ["state"], "horizon": 8}).horizon == 8
    assert PolicyArgs.from_config({"name": "act", "obs_keys": ["state"]}).horizon is None  # the policy's own


def test_training_a_one_step_policy_in_real_time_asks_about_each_tick_a_chunk_policy_ahead(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    def mode(*keys: str) -> str:
        plan = build_plan(compose_config(["task=pick_lift", *keys]), tmp_path / "-".join(keys))
        return str(plan.actors[0].loop.inference)

    assert mode("task.realtime=true", "policy=mlp", "algo=sac") == "sync_bounded"
    assert mode("task.realtime=true", "policy=flow", "algo=qc") == "async_forward"
    assert mode("policy=mlp", "algo=sac") == "inline"  # as fast as the simulator goes
    assert mode("task.realtime=true", "policy=mlp", "algo=sac", "actor.inference=async_forward") == "async_forward"
