"""`policy.obs_norm`: the MLP policy's running input normaliser (HER's), fitted by the learner on the
batches it trains on, carried to actors with the weights."""

import numpy as np
import pytest
import torch

from policies import MLPPolicy
from policies.mlp import ObsNorm
from robo_async.transport.channels import WeightClient
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.weights import PushConfig
from robo_async.transport.wire import Weights
from tests.transport.test_weights import newest

LOW, HIGH = (-1.0,) * 4, (1.0,) * 4


def make(**kw):
    return MLPPolicy(("state", "goal"), (4, 3), LOW, HIGH, hidden=(32, 32), action_mode="absolute", **kw)


def data(rng, n):
    # inputs of very different sizes: positions near 1.3 m, velocities of a few mm
    return {
        "state": (rng.normal(1.3, 0.1, (n, 4)) * [1, 1, 0.01, 0.01]).astype(np.float32),
        "goal": rng.normal(0.0, 2.0, (n, 3)).astype(np.float32),
    }


def test_running_statistics_match_the_whole_data_and_skip_non_finite_rows():
    rng = np.random.default_rng(0)
    norm = ObsNorm(3)
    parts = [rng.normal([1.0, -2.0, 0.0], [0.1, 3.0, 0.001], (n, 3)) for n in (1, 7, 256, 40)]
    for p in parts:
        norm.update(torch.as_tensor(p, dtype=torch.float32))
    norm.update(torch.tensor([[np.nan, 0.0, 0.0], [np.inf, 1.0, 1.0]]))  # left out whole
    every = np.concatenate(parts).astype(np.float32).astype(np.float64)
    assert float(norm.count[0]) == len(every)
    np.testing.assert_allclose(norm.mean.numpy(), every.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(norm.std().numpy(), np.maximum(every.std(0), 1e-2), rtol=1e-5)


def test_inputs_are_the_identity_until_fitted_then_standardised_and_clipped():
    rng = np.random.default_rng(1)
    p = make(obs_norm=True)
    batch = data(rng, 512)
    raw = p.inputs(batch)
    np.testing.assert_array_equal(raw.numpy(), np.concatenate([batch["state"], batch["goal"]], 1))
    x = p.inputs(batch, fit=True)
    assert x.dtype == torch.float32
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-4)
    # the velocity columns' std (1.3 mm) is under eps (1 cm): scaled by 1/eps, not blown up to unit size
    np.testing.assert_allclose(x.std(0).numpy()[[0, 1, 4, 5, 6]], 1.0, rtol=1e-2)
    far = {"state": np.full((1, 4), 100.0, np.float32), "goal": np.zeros((1, 3), np.float32)}
    assert float(p.inputs(far).max()) == 5.0
    assert float(p.norm.count[0]) == 512  # reading does not fit
    assert "+norm" in p.architecture and "+norm" not in make().architecture


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_statistics_travel_with_the_weights_through_a_real_push(precision):
    rng = np.random.default_rng(2)
    learner, actor = make(obs_norm=True, deterministic=True), make(obs_norm=True, deterministic=True)
    learner.inputs(data(rng, 300), fit=True)
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=PushConfig(precision=precision))
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        pub.publish(Weights(3, learner.weights(), learner.architecture))
        got = newest(client, 3)
    finally:
        client.close()
        pub.close()
    assert client.weights_refused == 0
    actor.load_weights(got.version, got.arrays)
    assert float(actor.norm.count[0]) == 300
    one = {k: v[0] for k, v in data(rng, 1).items()}
    tol = 1e-6 if precision == "fp32" else 2e-2
    np.testing.assert_allclose(actor.predict_chunk(one).actions, learner.predict_chunk(one).actions, atol=tol)
    # the statistics are what make them agree: the same network without them acts otherwise
    unfitted = make(obs_norm=True, deterministic=True)
    unfitted.load_weights(4, {**got.arrays, "norm.count": np.zeros(1)})
    assert not np.allclose(unfitted.predict_chunk(one).actions, actor.predict_chunk(one).actions, atol=tol)


def test_sac_fits_the_normaliser_on_the_observations_it_trains_on_and_publishes_it():
    from dataclasses import replace

    from robo_async.learner.algorithms import build_algorithm, config_class
    from robo_async.learner.algorithms.base import PolicySpec

    spec = PolicySpec(
        "mlp", ("state",), (4,), LOW, HIGH, hidden=(16,), action_mode="absolute", options={"obs_norm": True}
    )
    algo = build_algorithm("sac", replace(config_class("sac")(), hidden=(16,)), spec)
    rng = np.random.default_rng(3)
    seen = []
    for _ in range(3):
        state = rng.normal(5.0, 0.5, (32, 4)).astype(np.float32)
        seen.append(state)
        algo.update(
            {
                "obs/state": state,
                "next_obs/state": state - 100.0,  # next observations are read, not fitted
                "action": rng.uniform(-1, 1, (32, 4)).astype(np.float32),
                "reward": np.zeros(32, np.float32),
                "terminated": np.zeros(32, bool),
            }
        )
    w = algo.policy_weights()
    assert float(w["norm.count"][0]) == 96
    np.testing.assert_allclose(w["norm.mean"], np.concatenate(seen).mean(0), rtol=1e-5)
    assert "actor.head.weight" in w  # the actor's network travels beside it
