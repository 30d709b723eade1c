"""SAC's BC term on demonstrations with the Q filter (`algo.demo_bc_weight`, Nair et al. 2018): the
actor is pulled toward a demonstrated action only where the critics rate it above its own."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from robo_async.buffer.layout import TABLES
from robo_async.learner.algorithms import build_algorithm, config_class
from robo_async.learner.algorithms.base import PolicySpec

LOW, HIGH = (-1.9,) * 3, (1.9,) * 3
DEMO_ACTION = 1.2


def batch(n, rng, demo_reward):
    """Half demonstrations (action 1.2, reward `demo_reward`), half online rows (random actions, reward 0)."""
    state = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    demo = np.arange(n) < n // 2
    action = np.where(demo[:, None], DEMO_ACTION, rng.uniform(-1.9, 1.9, (n, 3))).astype(np.float32)
    return {
        "obs/state": state,
        "next_obs/state": state,
        "action": action,
        "reward": np.where(demo, demo_reward, 0.0).astype(np.float32),
        "terminated": np.ones(n, bool),  # one-step: Q is the reward
        "truncated": np.zeros(n, bool),
        "success": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
        "table": np.where(demo, TABLES.index("demos"), TABLES.index("online")).astype(np.int8),
    }


def train(weight, demo_reward, updates=200):
    torch.manual_seed(0)
    spec = PolicySpec("mlp", ("state",), (3,), LOW, HIGH, hidden=(32, 32), action_mode="absolute")
    cfg = replace(config_class("sac")(), batch_size=64, demo_bc_weight=weight, hidden=(32, 32), init_alpha=0.01)
    algo = build_algorithm("sac", cfg, spec)
    rng = np.random.default_rng(0)
    probe = rng.uniform(-1, 1, (64, 3)).astype(np.float32)
    target = algo.policy.to_normalized(np.full((64, 3), DEMO_ACTION, np.float32), probe)

    def gap():
        with torch.no_grad():
            return float(np.abs(torch.tanh(algo.actor(torch.as_tensor(probe))[0]).numpy() - target).mean())

    before, kept = gap(), []
    for _ in range(updates):
        m = algo.update(batch(64, rng, demo_reward))
        kept.append(m.get("losses/demo_kept"))
    return before, gap(), kept, m


@pytest.mark.parametrize("demo_reward", [1.0, -1.0])
def test_the_q_filter_clones_demonstrations_only_where_they_are_better(demo_reward):
    before, after, kept, m = train(5.0, demo_reward)
    assert "losses/demo_bc_loss" in m
    late = float(np.mean(kept[-50:]))
    if demo_reward > 0:  # the demonstrated action earns more: cloned
        assert late > 0.5 and after < 0.5 * before
    else:  # it earns less: filtered out, never pulled toward
        assert late < 0.2 and after > 0.7 * before


def test_without_the_weight_there_is_no_demo_term():
    _, _, kept, m = train(0.0, 1.0, updates=5)
    assert "losses/demo_bc_loss" not in m and kept == [None] * 5
