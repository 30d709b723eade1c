"""DSRL on a frozen LeRobot policy (`policy=diffusion algo=dsrl`): LeRobot's real diffusion policy,
saved by the test and loaded from that directory, steered through its sampler's starting noise."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from policies.lerobot_build import build_lerobot_policy, load_lerobot_policy
from policies.lerobot_dsrl import SteeredLeRobotPolicy
from robo_async.learner.metrics import read_metrics

pytest.importorskip("diffusers")
EXE = [sys.executable, "-m", "robo_async.cli"]
LOW, HIGH = [-1.0, -2.0, 0.0, -0.5], [1.0, 2.0, 1.5, 0.5]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small diffusion policy sampling with DDPM (stochastic per step), saved as LeRobot writes it."""
    p = build_lerobot_policy(
        "diffusion",
        state_dim=4,
        action_low=LOW,
        action_high=HIGH,
        env_keys=("target",),
        env_dim=3,
        chunk_size=4,
        down_dims=(32, 64),
        num_inference_steps=5,
        noise_scheduler_type="DDPM",
    )
    return p.save(tmp_path_factory.mktemp("diffusion"))


def steered(path, **kw):
    return SteeredLeRobotPolicy(load_lerobot_policy(path, action_low=LOW, action_high=HIGH, env_keys=("target",)), **kw)


OBS = {"state": np.array([0.1, -0.2, 0.5, 0.0], np.float32), "target": np.array([0.2, 0.0, 0.3], np.float32)}


def test_the_noise_decides_the_chunk(saved):
    p = steered(saved)
    assert type(p.prior.policy.diffusion.noise_scheduler).__name__ == "DDIMScheduler"  # DDPM swapped
    assert p.noise_shape == (4, 4) and p.horizon == 4
    batch = {k: v[None].repeat(2, 0) for k, v in OBS.items()}
    z = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0))
    a = p.steered(batch, z)
    np.testing.assert_array_equal(a, p.steered(batch, z))  # a function of the noise
    assert not np.allclose(a, p.steered(batch, -z))
    # the executed chunk is the prior's own for that noise (predict_action_chunk(noise=) + its post-processor)
    pre = p.prior_batch(batch)
    with torch.no_grad():
        want = p.prior.post(p.prior.predict_normalized(pre, noise=z)).numpy()
    np.testing.assert_allclose(a, np.clip(want, LOW, HIGH), atol=1e-6)


def test_steered_chunks_stay_inside_the_joint_limits_and_keep_a_prefix(saved):
    p = steered(saved, noise_bound=3.0)
    with torch.no_grad():
        for m in p.noise_actor.modules():
            if isinstance(m, nn.Linear):
                m.weight.mul_(100.0)  # the actor asks for extreme noise
    rng = np.random.default_rng(0)
    for _ in range(10):
        obs = {"state": rng.uniform(LOW, HIGH).astype(np.float32), "target": rng.normal(size=3).astype(np.float32)}
        a = p.predict_chunk(obs).actions
        assert a.shape == (4, 4) and np.all(a >= np.array(LOW, np.float32)) and np.all(a <= np.array(HIGH, np.float32))
    prefix = np.full((2, 4), 0.25, np.float32)
    np.testing.assert_array_equal(p.predict_chunk(OBS, prefix=prefix).actions[:2], prefix)


def test_only_the_noise_actor_travels(saved):
    a, b = steered(saved), steered(saved)
    w = a.weights()
    assert w and all(k.startswith(("trunk.", "head.")) for k in w)  # no prior weights
    with torch.no_grad():
        for m in a.noise_actor.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_()
    a.deterministic = b.deterministic = True
    assert not np.allclose(a.predict_chunk(OBS).actions, b.predict_chunk(OBS).actions)
    b.load_weights(3, a.weights())
    np.testing.assert_allclose(a.predict_chunk(OBS).actions, b.predict_chunk(OBS).actions, atol=1e-6)
    assert b.version == 3


def small_act(**kw):
    return build_lerobot_policy(
        "act",
        state_dim=4,
        action_low=LOW,
        action_high=HIGH,
        env_keys=("target",),
        env_dim=3,
        chunk_size=4,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        use_vae=False,
        **kw,
    )


def test_act_gets_a_residual_head_on_its_own_chunk(tmp_path):
    """ACT takes no noise: the actor's z is a residual, scaled and added to ACT's normalized chunk."""
    path = small_act().save(tmp_path / "act")
    act = load_lerobot_policy(path, action_low=LOW, action_high=HIGH, env_keys=("target",))
    assert act.noise_shape is None
    p = SteeredLeRobotPolicy(act, noise_bound=1.5, residual_scale=0.1)
    assert p.residual and p.noise_shape == (4, 4) and p.architecture.startswith("residual0.1-")
    batch = {k: v[None].repeat(3, 0) for k, v in OBS.items()}
    with torch.no_grad():
        own = p.prior.predict_normalized(p.prior_batch(batch))
        base = np.clip(p.prior.post(own).numpy(), LOW, HIGH)
    np.testing.assert_allclose(p.steered(batch, torch.zeros(3, 4, 4)), base, atol=1e-6)  # z = 0: ACT's own chunk
    z = torch.full((3, 4, 4), 1.5)
    with torch.no_grad():
        want = np.clip(p.prior.post(own + 0.15).numpy(), LOW, HIGH)
    got = p.steered(batch, z)
    np.testing.assert_allclose(got, want, atol=1e-5)  # ACT's chunk + 0.1 * z in its normalized space
    assert np.abs(got - base).max() > 1e-3
    assert all(k.startswith(("trunk.", "head.")) for k in p.weights())  # only the residual head travels
    with pytest.raises(ValueError, match="residual_scale > 0"):
        SteeredLeRobotPolicy(act, residual_scale=0.0)


@pytest.mark.e2e
def test_dsrl_steers_a_saved_lerobot_diffusion_policy_end_to_end(tmp_path):
    """Serial run on reach: the learner loads the saved prior, trains the noise actor and the
    critics; the actors steer the same prior with the published noise-actor weights."""
    from omegaconf import OmegaConf

    from robo_async.config import compose_config
    from robo_async.launch.builders import PolicyArgs, make_actor_policy, make_safe_robot, task_args

    cfg = OmegaConf.to_container(
        compose_config(
            [
                "task=reach",
                "policy=diffusion",
                "policy.chunk_size=4",
                "policy.overrides.down_dims=[32,64]",
                "policy.overrides.num_inference_steps=3",
            ]
        ),
        resolve=True,
    )
    spec = make_safe_robot(task_args(cfg["task"])).spec
    prior = make_actor_policy(PolicyArgs.from_config(cfg["policy"]), spec)
    prior.save(tmp_path / "prior")
    run_dir = tmp_path / "run"
    res = subprocess.run(
        EXE
        + [
            "train",
            "launcher=serial",
            "task=reach",
            "policy=diffusion",
            "policy.chunk_size=4",
            "policy.overrides.down_dims=[32,64]",
            "policy.overrides.num_inference_steps=3",
            f"policy.path={tmp_path / 'prior'}",
            "algo=dsrl",
            "algo.warmup_steps=100",
            "algo.batch_size=16",
            "algo.critic_hidden=[32,32]",
            "algo.noise_hidden=[32,32]",
            "algo.limiter_slack=32",
            f"run_dir={run_dir}",
            "budget.env_steps=400",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [r for r in read_metrics(run_dir) if "losses/noise_critic_loss" in r]
    assert rows and rows[-1]["time/updates"] > 5 and np.isfinite(rows[-1]["losses/qf_loss"])
    assert "evaluation: success rate" in res.stdout  # the checkpoint's noise actor steers the prior again


@pytest.mark.e2e
def test_a_residual_head_on_a_saved_lerobot_act_policy_end_to_end(tmp_path):
    """Serial run on reach from a LeRobot ACT checkpoint: the learner trains the residual head and the
    critics (algo=dsrl), actors run ACT plus the published head; the closing evaluation acts with it."""
    from omegaconf import OmegaConf

    from robo_async.config import compose_config
    from robo_async.launch.builders import PolicyArgs, make_actor_policy, make_safe_robot, task_args

    small = [
        "policy=act",
        "policy.chunk_size=4",
        "policy.overrides.dim_model=32",
        "policy.overrides.n_heads=2",
        "policy.overrides.dim_feedforward=64",
        "policy.overrides.n_encoder_layers=1",
        "policy.overrides.use_vae=false",
    ]
    cfg = OmegaConf.to_container(compose_config(["task=reach", *small]), resolve=True)
    spec = make_safe_robot(task_args(cfg["task"])).spec
    make_actor_policy(PolicyArgs.from_config(cfg["policy"]), spec).save(tmp_path / "act")
    run_dir = tmp_path / "run"
    res = subprocess.run(
        EXE
        + [
            "train",
            "launcher=serial",
            "task=reach",
            *small,
            f"policy.path={tmp_path / 'act'}",
            "algo=dsrl",
            "algo.residual_scale=0.2",
            "algo.warmup_steps=100",
            "algo.batch_size=16",
            "algo.critic_hidden=[32,32]",
            "algo.noise_hidden=[32,32]",
            "algo.limiter_slack=32",
            f"run_dir={run_dir}",
            "budget.env_steps=400",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [r for r in read_metrics(run_dir) if "losses/noise_critic_loss" in r]
    assert rows and rows[-1]["time/updates"] > 5 and np.isfinite(rows[-1]["losses/qf_loss"])
    assert "evaluation: success rate" in res.stdout
    from robo_async.learner import checkpoint

    _, metadata = checkpoint.read(checkpoint.resolve(run_dir))
    assert checkpoint.meta_of(metadata)["architecture"].startswith("residual0.2-")  # a residual head on ACT


def test_a_lerobot_act_checkpoint_and_its_residual_head_are_served_as_they_act_locally(tmp_path):
    """`robo-async serve`'s server holding ACT from its save_pretrained directory, and ACT with a
    trained residual head: an actor's remote chunks are the local policy's, to the bit."""
    from robo_async.actor.remote import RemotePolicy
    from robo_async.serve import PolicyServer, ServeConfig
    from sim import ReachTask

    spec = ReachTask().spec()
    low, high = list(spec.joint_low), list(spec.joint_high)
    path = build_lerobot_policy(
        "act",
        state_dim=spec.state_dim,
        action_low=low,
        action_high=high,
        env_keys=("ee_to_target",),
        env_dim=3,
        chunk_size=4,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        use_vae=False,
    ).save(tmp_path / "act")

    def act():
        return load_lerobot_policy(path, action_low=low, action_high=high, env_keys=("ee_to_target",))

    head = SteeredLeRobotPolicy(act(), residual_scale=0.2)
    with torch.no_grad():
        for m in head.noise_actor.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 0.5)  # a trained head: its residual is not zero
    served_head = SteeredLeRobotPolicy(act(), residual_scale=0.2)
    served_head.load_weights(7, head.weights())
    obs = {
        "state": np.linspace(-0.5, 0.5, spec.state_dim).astype(np.float32),
        "ee_to_target": np.array([0.1, -0.05, 0.02], np.float32),
    }
    for local, served, name in ((act(), act(), "lerobot"), (head, served_head, "lerobot_dsrl")):
        local.deterministic = served.deterministic = True
        server = PolicyServer(served, spec, ServeConfig("tcp://127.0.0.1:0", policy_name=name)).start()
        try:
            remote = RemotePolicy(server.bound, spec, policy=name)
            remote.connect(10)
            remote.deterministic = True  # (asked of the server with each request)
            assert remote.architecture == local.architecture
            np.testing.assert_array_equal(remote.predict_chunk(obs).actions, local.predict_chunk(obs).actions)
            remote.close()
        finally:
            server.close()
    assert not np.allclose(head.predict_chunk(obs).actions, act().predict_chunk(obs).actions)  # the head acts
