"""LeRobot chunk policies behind our Policy interface: ACT built with random init, saved and loaded
from a local directory, driven by the async runner; VLAs that need the hub are refused clearly."""

import numpy as np
import pytest

from policies.base import WeightsMismatch
from policies.lerobot_build import LeRobotPolicyUnavailable, build_lerobot_policy, load_lerobot_policy
from robo_async.actor.inference import AsyncChunkRunner, InferenceEngine
from sim import ReachConfig, ReachTask, SimRobot

SPEC = ReachTask().spec()
SMALL_ACT = dict(
    dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_vae_encoder_layers=1, latent_dim=8, use_vae=False
)


def act(cameras=(("front", 48, 48),), chunk=6, **kw):
    return build_lerobot_policy(
        "act",
        state_dim=6,
        action_low=SPEC.joint_low,
        action_high=SPEC.joint_high,
        env_keys=("target", "ee_to_target"),
        env_dim=6,
        env_scale=10.0,
        cameras=cameras,
        chunk_size=chunk,
        **{**SMALL_ACT, **kw},
    )


@pytest.fixture(scope="module")
def observation():
    task = ReachTask(ReachConfig(cameras=("front",), image_size=48))
    robot = SimRobot(task)
    robot.connect()
    obs = robot.reset(seed=3).as_dict()
    robot.close()
    return obs


def test_act_random_init_predicts_a_chunk_in_limits(observation):
    p = act()
    assert "image/front" in observation or "front" in observation
    c = p.predict_chunk(observation)
    assert c.actions.shape == (6, SPEC.action_dim)
    assert np.all(c.actions >= np.asarray(SPEC.joint_low) - 1e-6) and np.all(
        c.actions <= np.asarray(SPEC.joint_high) + 1e-6
    )
    # the forwarded state is what the policy sees: a different state gives a different chunk
    other = p.predict_chunk(observation, forwarded_state=np.asarray(SPEC.joint_high, np.float32) * 0.9)
    assert not np.allclose(other.actions, c.actions)


def test_prefix_is_returned_exactly(observation):
    p = act()
    prefix = np.full((2, SPEC.action_dim), 0.1234, np.float32)
    c = p.predict_chunk(observation, prefix=prefix)
    np.testing.assert_array_equal(c.actions[:2], prefix)


def test_saved_policy_loads_from_a_local_directory_with_the_same_outputs(observation, tmp_path):
    p = act()
    want = p.predict_chunk(observation).actions
    p.save(tmp_path / "act")
    q = load_lerobot_policy(
        tmp_path / "act",
        action_low=SPEC.joint_low,
        action_high=SPEC.joint_high,
        env_keys=("target", "ee_to_target"),
        cameras=("front",),
    )
    assert q.architecture == p.architecture
    np.testing.assert_allclose(q.predict_chunk(observation).actions, want, atol=1e-5)
    with pytest.raises(LeRobotPolicyUnavailable, match="config.json missing"):
        load_lerobot_policy(tmp_path / "nothing", action_low=SPEC.joint_low, action_high=SPEC.joint_high)


def test_weights_sync_and_other_architectures_are_rejected(observation):
    p, q = act(), act()
    q.load_weights(7, p.weights())
    assert q.version == 7
    np.testing.assert_allclose(q.predict_chunk(observation).actions, p.predict_chunk(observation).actions, atol=1e-5)
    bigger = act(dim_model=64)
    with pytest.raises(WeightsMismatch):
        q.load_weights(8, bigger.weights())
    assert q.version == 7  # old weights kept


def test_act_drives_the_async_runner(observation):
    p = act(cameras=(), chunk=5)
    engine = InferenceEngine(p, SPEC.action_dim, p.horizon)
    runner = AsyncChunkRunner(engine, SPEC, "rtc", True)
    obs = {k: v for k, v in observation.items() if not k.startswith("image")}
    try:
        for k in range(40):
            a = runner.tick(k, obs)
            assert a.shape == (SPEC.action_dim,) and np.all(np.isfinite(a))
            if k % 5 == 4:  # let the engine catch up: this test counts chunks, not time
                import time

                deadline = time.monotonic() + 10
                while engine.busy and time.monotonic() < deadline:
                    time.sleep(0.001)
        assert len(runner.versions) >= 2 and engine.bad_chunks == 0
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["smolvla", "pi0", "pi05"])
def test_vlas_that_need_the_hub_are_refused_by_name(kind):
    with pytest.raises(LeRobotPolicyUnavailable, match="hub"):
        build_lerobot_policy(kind, state_dim=6, action_low=SPEC.joint_low, action_high=SPEC.joint_high)


def test_unknown_policy_type_is_named():
    with pytest.raises((LeRobotPolicyUnavailable, ValueError, KeyError), match="nosuch"):
        build_lerobot_policy("nosuch", state_dim=6, action_low=SPEC.joint_low, action_high=SPEC.joint_high)


def test_policy_act_from_hydra_config_builds_the_wrapper():
    from omegaconf import OmegaConf

    from robo_async.config import compose_config
    from robo_async.launch.builders import ConfigError, PolicyArgs, make_actor_policy, task_args, task_spec

    cfg = compose_config(
        [
            "policy=act",
            "policy.overrides.dim_model=32",
            "policy.overrides.n_heads=2",
            "policy.overrides.dim_feedforward=64",
            "policy.overrides.n_encoder_layers=1",
            "policy.inference_delay_ms=5",
        ]
    )
    spec = task_spec(task_args(cfg.task))
    p = make_actor_policy(PolicyArgs.from_config(OmegaConf.to_container(cfg.policy, resolve=True)), spec)
    assert p.horizon == 8 and p.inner.type == "act" and p.delay_ms == 5
    o = {"state": np.zeros(6, np.float32), "target": np.zeros(3, np.float32), "ee_to_target": np.zeros(3, np.float32)}
    assert p.predict_chunk(o).actions.shape == (8, 6)
    bad = compose_config(["policy=act", "policy.cameras=[wrist]"])
    with pytest.raises(ConfigError, match="wrist"):
        make_actor_policy(PolicyArgs.from_config(OmegaConf.to_container(bad.policy, resolve=True)), spec)


def test_a_checkpoint_whose_features_do_not_fit_the_robot_is_refused_naming_the_feature(tmp_path):
    act().save(tmp_path / "act")  # state 6, environment 6, action 6, camera front

    def load(**kw):
        base = dict(
            action_low=SPEC.joint_low,
            action_high=SPEC.joint_high,
            env_keys=("target", "ee_to_target"),
            cameras=("front",),
            state_dim=6,
            env_dim=6,
        )
        return load_lerobot_policy(tmp_path / "act", **{**base, **kw})

    assert load().action_dim == 6
    for kw, why in (
        (dict(state_dim=4), r"observation.state is \(6,\), the robot gives \(4,\)"),
        (dict(env_dim=3), r"observation.environment_state is \(6,\), the robot gives \(3,\)"),
        (dict(env_dim=0, env_keys=()), r"environment_state is \(6,\), the robot gives none"),
        (
            dict(action_low=SPEC.joint_low[:4], action_high=SPEC.joint_high[:4]),
            r"its action is \(6,\), the robot takes \(4,\)",
        ),
        (
            dict(cameras=("wrist",)),
            r"camera observation.images.front is \(3, 48, 48\), the robot gives "
            r"cameras \['wrist'\]",
        ),
    ):
        with pytest.raises(LeRobotPolicyUnavailable, match=why):
            load(**kw)


def test_units_deg_is_lerobots_arm_convention_with_the_gripper_on_its_joint_range(observation):
    """units=deg: arm joints in degrees, the gripper 0..100 onto [low, high] (hal.units.LeRobotUnits),
    both ways; the gripper is found by name, or is the last joint without names."""
    import torch

    low, high = np.asarray(SPEC.joint_low), np.asarray(SPEC.joint_high)
    for names in (SPEC.joint_names, None):
        p = act(cameras=(), units="deg", joint_names=names)
        out = np.array([[30.0, -45.0, 0.0, 10.0, 90.0, 0.0]] * p.horizon, np.float32)  # the model's units
        p.post = lambda chunk, out=out: torch.as_tensor(out)[None]  # what LeRobot's post-processor gives
        a = p.predict_chunk(observation).actions
        np.testing.assert_allclose(a[0, :5], np.deg2rad(out[0, :5]), rtol=1e-5)
        assert a[0, 5] == pytest.approx(low[5], abs=1e-6)  # LeRobot's gripper 0 is the joint's low end
        out[:, 5] = 100.0
        assert p.predict_chunk(observation).actions[0, 5] == pytest.approx(high[5], abs=1e-6)
        state = np.array([0.5, -0.5, 0.0, 0.1, 1.0, low[5]], np.float32)
        s = p.batch(observation, forwarded_state=state)["observation.state"].numpy()
        np.testing.assert_allclose(s[:5], np.rad2deg(state[:5]), rtol=1e-5)
        assert s[5] == pytest.approx(0.0, abs=1e-4)  # the joint's low end is LeRobot's gripper 0
        state[5] = high[5]
        assert p.batch(observation, forwarded_state=state)["observation.state"].numpy()[5] == pytest.approx(
            100.0, abs=1e-3
        )


def test_units_deg_refuses_a_state_that_is_not_one_value_per_joint():
    with pytest.raises(ValueError, match=r"observation.state has shape \(9,\)"):
        build_lerobot_policy(
            "act",
            state_dim=9,
            action_low=SPEC.joint_low,
            action_high=SPEC.joint_high,
            env_dim=3,
            chunk_size=4,
            units="deg",
            **SMALL_ACT,
        )
