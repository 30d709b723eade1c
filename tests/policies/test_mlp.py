import numpy as np
import pytest
import torch

from policies import MLPPolicy, WeightsMismatch, make_policy

LOW, HIGH = (-1.0,) * 6, (1.0,) * 6


def make(**kw):
    return MLPPolicy(("state", "target"), (6, 3), LOW, HIGH, hidden=(32, 32), **kw)


def obs():
    return {"state": np.zeros(6, np.float32), "target": np.ones(3, np.float32)}


@pytest.mark.parametrize("mode", ["delta", "absolute"])
def test_chunk_shape_and_limits(mode):
    p = make(action_mode=mode)
    chunk = p.predict_chunk(obs())
    assert chunk.actions.shape == (1, 6) and chunk.policy_version == -1
    assert np.all(chunk.actions >= -1) and np.all(chunk.actions <= 1)


def test_delta_mode_moves_at_most_delta_scale_from_state():
    p = make(action_mode="delta", delta_scale=0.1)
    for _ in range(20):
        a = p.predict_chunk(obs()).actions[0]
        assert np.all(np.abs(a) <= 0.1 + 1e-6)


def test_forwarded_state_is_used():
    p = make(action_mode="delta", delta_scale=0.1, deterministic=True)
    fwd = np.full(6, 0.5, np.float32)
    a = p.predict_chunk(obs(), forwarded_state=fwd).actions[0]
    assert np.all(np.abs(a - 0.5) <= 0.1 + 1e-6)


def test_normalize_inverts_to_robot():
    p = make(action_mode="delta", delta_scale=0.2)
    state = np.full(6, 0.1, np.float32)
    a = np.linspace(-0.9, 0.9, 6).astype(np.float32)
    np.testing.assert_allclose(p.to_normalized(p.to_robot(a, state), state), a, atol=1e-5)


def test_load_weights_sets_version_and_rejects_other_architecture():
    src, dst = make(), make()
    dst.load_weights(4, src.weights())
    assert dst.version == 4
    np.testing.assert_array_equal(dst.weights()["head.weight"], src.weights()["head.weight"])
    other = MLPPolicy(("state",), (6,), LOW, HIGH, hidden=(16,))
    before = dst.weights()
    with pytest.raises(WeightsMismatch):
        dst.load_weights(5, other.weights())
    assert dst.version == 4
    np.testing.assert_array_equal(dst.weights()["head.weight"], before["head.weight"])


def test_registry_names_unknown_policy():
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        make_policy("nope")


def test_gsde_noise_is_held_for_sde_every_ticks_and_has_sacs_marginal():
    p = MLPPolicy(
        ("state",),
        (4,),
        (-1.0,) * 3,
        (1.0,) * 3,
        hidden=(32, 32),
        action_mode="absolute",
        exploration="gsde",
        sde_every=5,
        seed=1,
    )
    p.version = 0
    obs = {"state": np.array([0.1, -0.2, 0.3, 0.0], np.float32)}
    acts = [p.predict_chunk(obs).actions[0] for _ in range(10)]
    assert all(np.array_equal(acts[0], a) for a in acts[1:5])  # held for 5 ticks
    assert not np.array_equal(acts[4], acts[5]) and all(np.array_equal(acts[5], a) for a in acts[6:10])
    p.sde_every = 1
    x = torch.as_tensor(obs["state"])[None]
    mean, log_std, _ = p.net.dist(x)
    u = np.arctanh(np.clip(np.stack([p.predict_chunk(obs).actions[0] for _ in range(4000)]), -0.999999, 0.999999))
    z = (u - mean[0].detach().numpy()) / log_std[0].exp().detach().numpy()
    assert np.all(np.abs(z.mean(0)) < 0.08) and np.all(np.abs(z.std(0) - 1) < 0.08)  # N(0, 1) per joint
    p.deterministic = True  # the mode has no noise at all
    assert np.array_equal(p.predict_chunk(obs).actions[0], p.predict_chunk(obs).actions[0])


def test_gsde_commands_are_smoother_than_white_noise_on_the_sim():
    from robo_async.actor.loop import ControlLoop
    from robo_async.actor.loop_config import LoopConfig
    from robo_async.launch.builders import TaskArgs, make_safe_robot

    jerk = {}
    for mode in ("white", "gsde"):
        robot = make_safe_robot(TaskArgs("reach", {}))
        spec = robot.spec
        p = MLPPolicy(
            ("state",),
            (spec.state_dim,),
            spec.joint_low,
            spec.joint_high,
            hidden=(64, 64),
            exploration=mode,
            sde_every=8,
            seed=0,
        )
        p.version = 0
        robot.connect()
        loop = ControlLoop(robot, p, LoopConfig(episode_ticks=60, max_episodes=4, eval_every=0, inference="inline"))
        try:
            loop.run()
        finally:
            robot.close()
        jerk[mode] = float(np.mean(loop.train_jerk))
    assert jerk["gsde"] < 0.5 * jerk["white"], jerk
