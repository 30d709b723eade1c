"""The chunk policies' normalisation fitted on demonstrations (`ChunkNorm`): inputs standardised, each
action dimension's demonstrated range mapped to [-1, 1] (nothing the demonstrations did is clipped),
the gripper snapped to its two demonstrated levels; fitted once by BC, carried with the weights, and
handed from a BC prior to the policy QC publishes."""

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from policies.flow import FlowChunkPolicy
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.offline import clone, spec_of
from robo_async.learner.algorithms.qc.config import QCConfig

LOW, HIGH = (-2.0, -2.0, 0.0), (2.0, 2.0, 1.2)  # two arm joints and a gripper (the last joint)
H = 4


def make(**kw):
    return FlowChunkPolicy(
        ("state", "cube"),
        (3, 2),
        LOW,
        HIGH,
        horizon=H,
        steps=2,
        hidden=(32,),
        action_mode="delta",
        delta_range=0.3,
        **kw,
    )


def demos(n=4, ticks=40, seed=0):
    """An arm creeping 0.02 rad per tick toward a cube far away (metres, large offset); the gripper opens
    (1.2) then shuts (0.0) in two ticks halfway: inside one chunk, further than delta_range."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = np.zeros((ticks, 3), np.float32)
        q[:, 0] = np.arange(ticks) * 0.02
        q[:, 2] = np.where(np.arange(ticks) < ticks // 2, 1.2, 0.0)
        q[ticks // 2, 2] = 0.6
        cube = np.tile(rng.uniform(5.0, 5.1, 2).astype(np.float32), (ticks, 1))
        state = np.vstack([q[:1], q[:-1]])  # the state follows the targets one tick later
        out.append({"obs/state": state, "obs/cube": cube, "action": q})
    return out


def fitted(**kw):
    p = make(**kw)
    clone(p, demos(), 1, BCConfig(batch_size=32, max_delay=2), spec=spec_of(p))
    return p


def test_identity_until_fitted_then_the_demonstrated_range_round_trips():
    p = make(gripper="continuous")
    ref = np.array([0.0, 0.0, 0.6], np.float32)  # inside the joint limits either way
    shut = np.zeros((H, 3), np.float32)
    start = np.array([0.0, 0.0, 1.2], np.float32)
    # unfitted: the coarse space; the gripper's 1.2 rad step is beyond delta_range and gets clipped
    np.testing.assert_allclose(p.normalize(shut, start)[:, 2], -4.0)
    assert p.denormalize(p.normalize(shut, start), start)[0, 2] == pytest.approx(0.9)
    q = fitted(gripper="continuous")
    x = q.normalize(shut, start)
    assert np.all(np.abs(x) <= 1.0)
    np.testing.assert_allclose(q.denormalize(x, start), shut, atol=1e-5)  # nothing clipped
    np.testing.assert_allclose(q.normalize(q.denormalize(x * 0.2, ref), ref), x * 0.2, atol=1e-5)


def test_inputs_are_standardised_on_the_demonstrations():
    p = fitted()
    eps = demos()
    cond = np.concatenate([p.condition({"state": e["obs/state"], "cube": e["obs/cube"]}) for e in eps])
    f = p.net.features(torch.as_tensor(cond)).numpy()
    assert np.all(np.abs(f.mean(0)) < 0.5)
    assert np.all(f[:, [0, 2, 3, 4]].std(0) > 0.5) and np.all(f.std(0) < 2.0)  # metres 5 away are not 5 units any more


def test_the_gripper_snaps_to_its_two_levels_when_binary_only():
    ref = np.array([0.0, 0.0, 0.6], np.float32)
    x = np.zeros((H, 3), np.float32)
    x[:, 2] = np.linspace(-1, 1, H)
    binary = fitted().denormalize(x, ref)[:, 2]
    assert np.all(np.isclose(binary, 0.0, atol=1e-6) | np.isclose(binary, 1.2)) and len(set(binary)) == 2
    cont = fitted(gripper="continuous").denormalize(x, ref)[:, 2]
    inside = (cont > 0.01) & (cont < 1.19)
    assert inside.any() and len(set(cont)) > 2  # as predicted
    one_level = make()
    eps = demos()
    for e in eps:
        e["action"][:, 2] = 0.4
    clone(one_level, eps, 1, BCConfig(batch_size=32, max_delay=2), spec=spec_of(one_level))
    assert len(set(np.round(one_level.denormalize(x, np.array([0, 0, 0.4], np.float32))[:, 2], 3))) > 2


def test_statistics_travel_with_the_weights_and_are_fitted_once():
    p = fitted()
    w = p.weights()
    assert w["norm.fitted"][0] == 1 and "norm.act_low" in w
    q = make()
    q.load_weights(1, w)
    ref = np.zeros(3, np.float32)
    x = np.random.default_rng(0).uniform(-1, 1, (H, 3)).astype(np.float32)
    np.testing.assert_array_equal(q.denormalize(x, ref), p.denormalize(x, ref))
    before = {k: v.copy() for k, v in q.weights().items() if k.startswith("norm.")}
    other = demos(seed=3)
    for e in other:
        e["obs/cube"] += 100.0  # data that would fit other statistics
    clone(q, other, 2, BCConfig(batch_size=32, max_delay=2), spec=spec_of(q))  # fine-tuning a cloned policy
    for k, v in before.items():
        np.testing.assert_array_equal(q.weights()[k], v)
    off = make()
    clone(off, demos(), 1, BCConfig(batch_size=32, max_delay=2, normalize=False), spec=spec_of(off))
    assert off.weights()["norm.fitted"][0] == 0


def test_qc_publishes_its_bc_priors_normalisation(tmp_path):
    p = fitted()
    save_file({k: np.ascontiguousarray(v) for k, v in p.weights().items()}, str(tmp_path / "policy.safetensors"))
    spec = PolicySpec(
        "flow",
        ("state", "cube"),
        (3, 2),
        LOW,
        HIGH,
        hidden=(32,),
        action_mode="delta",
        options={"horizon": H, "steps": 2, "delta_range": 0.3, "path": str(tmp_path)},
    )
    qc = build_algorithm("qc", QCConfig(batch_size=8), spec)
    published = qc.policy_weights()
    for k in ("act_low", "act_high", "grip_levels", "fitted"):
        np.testing.assert_array_equal(published[f"norm.{k}"], p.weights()[f"norm.{k}"])
    x = np.random.default_rng(1).uniform(-1, 1, (H, 3)).astype(np.float32)
    ref = np.zeros(3, np.float32)
    np.testing.assert_array_equal(
        qc.policy.denormalize(x, ref), p.denormalize(x, ref)
    )  # the actors act in the prior's space


def test_only_a_joint_named_gripper_is_snapped():
    from hal.spec import RobotSpec
    from robo_async.config import compose_config
    from robo_async.launch.policy_args import PolicyArgs, make_actor_policy

    cfg = compose_config(["policy=flow", "policy.obs_keys=[state]"])
    from omegaconf import OmegaConf

    args = PolicyArgs.from_config(OmegaConf.to_container(cfg.policy, resolve=True))
    for last, want in (("gripper", "binary"), ("wrist_roll", "continuous")):
        spec = RobotSpec(name="arm", joint_names=("a", "b", last), joint_low=LOW, joint_high=HIGH, hz=30.0)
        assert make_actor_policy(args, spec).gripper == want
