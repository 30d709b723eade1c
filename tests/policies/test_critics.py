"""RLPD's critic ensemble: members independent, the target a random subset's min, old twin
checkpoints loading into it, and SAC (`algo=rlpd`) learning with it."""

import pytest
import torch
from torch import nn

from policies.critics import CriticEnsemble, subset_min
from robo_async.learner import checkpoint
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.sac import SACConfig


def spec(obs_dim=4, act_dim=2, hidden=(32, 32)):
    return PolicySpec("mlp", ("state",), (obs_dim,), (-1.0,) * act_dim, (1.0,) * act_dim, hidden)


def test_members_are_independent_networks():
    torch.manual_seed(0)
    ens = CriticEnsemble(6, (16, 16), n=5, layer_norm=True)
    x = torch.randn(8, 6)
    qs = ens(x)
    assert qs.shape == (5, 8)
    assert len({round(float(q.mean().detach()), 6) for q in qs}) == 5  # each member its own initialisation
    qs[2].sum().backward()  # member 2's loss moves member 2's parameters only
    for p in ens.parameters():
        grads = p.grad.reshape(5, -1).abs().sum(1)
        assert grads[2] > 0 and float(grads[[0, 1, 3, 4]].sum()) == 0


def test_a_member_is_what_a_plain_mlp_with_its_weights_computes():
    torch.manual_seed(0)
    ens = CriticEnsemble(3, (8,), n=2, layer_norm=True, activation="silu")
    x = torch.randn(4, 3)
    lin0, ln, lin1 = ens.net[0], ens.net[1], ens.net[3]
    h = nn.functional.silu(
        nn.functional.layer_norm(x @ lin0.weight[1] + lin0.bias[1], (8,)) * ln.weight[1] + ln.bias[1]
    )
    torch.testing.assert_close(ens(x)[1], (h @ lin1.weight[1] + lin1.bias[1]).squeeze(-1))


def test_the_target_is_the_min_over_a_random_subset():
    qs = torch.arange(10, dtype=torch.float32).unsqueeze(1).repeat(1, 3)  # member i says i
    g = torch.Generator().manual_seed(0)
    draws = [float(subset_min(qs, 2, g)[0]) for _ in range(200)]
    assert min(draws) == 0 and max(draws) > 4  # not always the ensemble's min: a random pair's
    assert len(set(draws)) > 5
    assert float(subset_min(qs, 10, g)[0]) == 0 and float(subset_min(qs, 12, g)[0]) == 0  # all of them


def twin_heads(obs_act: int, hidden: tuple[int, ...]) -> nn.Module:
    """The twin critics' layout before the ensemble (`q1`, `q2`: Linear and ReLU in a Sequential)."""
    from policies.mlp import mlp

    m = nn.Module()
    m.q1, m.q2 = mlp([obs_act, *hidden, 1]), mlp([obs_act, *hidden, 1])
    return m


def test_a_twin_critic_checkpoint_loads_into_the_ensemble_and_computes_the_same():
    torch.manual_seed(0)
    old = twin_heads(6, (16, 16))
    sac = build_algorithm("sac", SACConfig(hidden=(16, 16)), spec())
    sac.critic.load_state_dict(old.state_dict())
    x = torch.randn(5, 6)
    q = sac.critic(x)
    torch.testing.assert_close(q[0], old.q1(x).squeeze(-1))
    torch.testing.assert_close(q[1], old.q2(x).squeeze(-1))


def test_a_checkpoint_of_twin_critics_resumes_with_a_fresh_critic_optimiser(tmp_path):
    torch.manual_seed(0)
    src = build_algorithm("sac", SACConfig(hidden=(16, 16), batch_size=8), spec())
    path = checkpoint.save(tmp_path, src, {"updates": 1, "version": 1})
    tensors, meta = checkpoint.read(path)
    old = twin_heads(6, (16, 16))
    for name in ("critic", "critic_target"):  # rewrite it as the twin layout wrote it
        tensors = {k: v for k, v in tensors.items() if not k.startswith(f"{name}/")}
        tensors |= {f"{name}/{k}": v for k, v in old.state_dict().items()}
    meta["critic_opt/param_groups"] = meta["critic_opt/param_groups"].replace(
        '"params": [0, 1, 2, 3, 4, 5]', '"params": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]'
    )
    tensors = {k: v for k, v in tensors.items() if not k.startswith("critic_opt/state/")}
    dst = build_algorithm("sac", SACConfig(hidden=(16, 16), batch_size=8), spec())
    checkpoint.restore(dst, tensors, meta)
    x = torch.randn(3, 6)
    torch.testing.assert_close(dst.critic(x)[1], old.q2(x).squeeze(-1))
    o = torch.randn(8, 4)
    out = dst.losses(o, torch.rand(8, 2) * 2 - 1, torch.randn(8), o, torch.zeros(8))
    assert torch.isfinite(torch.tensor(out["losses/qf_loss"]))


@pytest.mark.parametrize("critics,subset,layer_norm", [(2, 2, False), (10, 2, True)])
def test_sac_with_an_ensemble_fits_its_critics_to_a_fixed_batch(critics, subset, layer_norm):
    torch.manual_seed(0)
    cfg = SACConfig(
        hidden=(64, 64), critic_lr=1e-3, critics=critics, critic_subset=subset, critic_layer_norm=layer_norm
    )
    sac = build_algorithm("sac", cfg, spec(hidden=(64, 64)))
    o, a = torch.randn(64, 4), torch.rand(64, 2) * 2 - 1
    r, done = torch.randn(64), torch.ones(64)  # terminal: the target is just the reward
    first = sac.losses(o, a, r, o, done)["losses/qf_loss"]
    for _ in range(300):
        last = sac.losses(o, a, r, o, done)["losses/qf_loss"]
    assert last < 0.2 * first
    assert sac.critic(torch.cat([o, a], -1)).shape == (critics, 64)


def test_the_rlpd_preset_is_sac_with_the_ensemble_and_symmetric_sampling(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    plan = build_plan(compose_config(["algo=rlpd"]), tmp_path / "run")
    ac = plan.learner.algo_config
    assert (plan.learner.algo, ac.critics, ac.critic_subset, ac.critic_layer_norm, ac.utd_ratio) == (
        "sac",
        10,
        2,
        True,
        20.0,
    )
    mix = plan.learner.mix
    assert mix["online"] == mix["demos"]
    assert build_plan(compose_config(["algo=rlpd", "algo.critics=4"]), tmp_path / "r2").learner.algo_config.critics == 4


def test_bad_ensemble_sizes_are_named():
    with pytest.raises(ValueError, match="algo.critics"):
        SACConfig(critics=0)
    with pytest.raises(ValueError, match="activation"):
        CriticEnsemble(3, (4,), activation="tanh")


def test_a_twin_chunk_critic_checkpoint_loads_into_the_chunk_ensemble():
    from policies.onestep import ChunkCritic, mlp

    torch.manual_seed(0)
    old = nn.Module()  # the twin heads' layout before the ensemble: Linear, LayerNorm, SiLU ..., Linear
    old.q1, old.q2 = mlp([3 + 4 * 2, 16, 16], 1, layer_norm=True), mlp([3 + 4 * 2, 16, 16], 1, layer_norm=True)
    critic = ChunkCritic(3, 4, 2, (16, 16))
    critic.load_state_dict(
        {**{k: v for k, v in critic.state_dict().items() if k.startswith("encoder")}, **old.state_dict()}
    )
    cond, chunk = torch.randn(5, 3), torch.randn(5, 4, 2)
    x = torch.cat([cond, chunk.reshape(5, -1)], -1)
    qs = critic(cond, chunk)
    torch.testing.assert_close(qs[0], old.q1(x).squeeze(-1))
    torch.testing.assert_close(qs[1], old.q2(x).squeeze(-1))


@pytest.mark.parametrize("critics,subset", [(2, 2), (5, 2)])
def test_qc_with_a_critic_ensemble_updates_every_member(critics, subset):
    from robo_async.learner.algorithms.qc import QCConfig

    torch.manual_seed(0)
    pspec = PolicySpec("flow", ("state",), (3,), (-1.0,) * 3, (1.0,) * 3, (32, 32), "absolute", options={"horizon": 4})
    qc = build_algorithm(
        "qc",
        QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=8, critics=critics, critic_subset=subset),
        pspec,
    )
    before = [p.detach().clone() for p in qc.critic.heads.parameters()]
    import numpy as np

    from tests.learner.test_qc import window_batch

    qc.update(window_batch(8, 4, 3, ()))
    assert qc.critic(torch.randn(6, 3), torch.randn(6, 4, 3)).shape == (critics, 6)
    for b, a in zip(before, qc.critic.heads.parameters(), strict=True):  # every member moved
        assert bool((a.detach() - b).reshape(critics, -1).abs().sum(1).gt(0).all())
    assert np.isfinite(qc.update(window_batch(8, 4, 3, ()))["losses/qf_loss"])
