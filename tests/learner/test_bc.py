"""`algo=bc` for every policy: what it asks the sampler for, and the delay-consistent windows it
trains chunk policies on (`robo-async bc` feeds it `DemoWindows`, the learner a `Sampler`)."""

import numpy as np
import pytest

from policies.flow import FlowChunkPolicy
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.bc.chunk import delay_consistent
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.demos import DemoWindows

A = 3
LOW, HIGH = (-100.0,) * A, (100.0,) * A


def spec(name, **options):
    return PolicySpec(
        name,
        ("state", "tick"),
        (A, 1),
        LOW,
        HIGH,
        hidden=(16,),
        action_mode="absolute",
        options={"horizon": 4, "steps": 2, **options},
    )


def episodes(n=3, ticks=30):
    """Tick t observes state t and `tick` t, and commands t + 0.5 on every joint; episode i adds 1000 i."""
    out = []
    for i in range(n):
        t = np.arange(ticks, dtype=np.float32) + 1000 * i
        out.append(
            {
                "obs/state": np.tile(t[:, None], (1, A)),
                "obs/tick": t[:, None],
                "action": np.tile(t[:, None] + 0.5, (1, A)),
            }
        )
    return out


def test_bc_asks_for_what_each_policy_learns_from():
    one_step = build_algorithm("bc", BCConfig(), spec("mlp"))
    assert (one_step.window, one_step.lookback) == (1, 0)
    chunk = build_algorithm("bc", BCConfig(max_delay=5), spec("flow"))
    assert (chunk.window, chunk.lookback) == (4, 5)  # windows of H actions, delays of up to max_delay ticks
    with pytest.raises(ValueError, match="robo-async bc policy=tiny_vla"):
        build_algorithm("bc", BCConfig(), spec("tiny_vla"))


def test_windows_stay_inside_one_episode_and_fill_missing_features():
    eps = episodes()
    del eps[1]["obs/tick"]  # a task without this feature (multi-task demonstrations)
    w = DemoWindows(eps, window=4, lookback=5, seed=0)
    b = w.sample(256)
    assert b["actions"].shape == (256, 4, A) and b["lag_actions"].shape == (256, 5, A)
    inside = b["mask"] > 0
    episode = b["actions"][:, :, 0] // 1000
    assert (episode == episode[:, :1]).all()  # never two episodes in a window
    steps = np.diff(b["actions"][:, :, 0], axis=1)
    assert np.all(steps[inside[:, 1:]] == 1)  # consecutive ticks, repeated after the episode end
    second = episode[:, 0] == 1
    assert second.any() and (b["obs/tick"][second] == 0).all()  # zeros where a demo lacks the feature


def test_chunk_windows_are_delay_consistent_both_ways():
    policy = FlowChunkPolicy(**spec("flow").flow_kwargs())
    b = DemoWindows(episodes(), window=4, lookback=5, seed=0).sample(512)
    cond, chunks, delay, prefix, frames = delay_consistent(policy, b, 5, np.random.default_rng(0))
    start = b["actions"][:, 0, 0] - 0.5  # the window's first tick
    fstate, tick = cond[:, 0], cond[:, A]
    rtc, fwd = prefix > 0, (prefix == 0) & (delay > 0)
    assert rtc.any() and fwd.any() and delay.max() <= 5 and frames is None
    # rtc: the window's own observation, its first d actions committed, the state at the last of them
    np.testing.assert_array_equal(delay[rtc], prefix[rtc])
    np.testing.assert_array_equal(tick[rtc], start[rtc])
    np.testing.assert_array_equal(fstate[rtc], start[rtc] + prefix[rtc] - 0.5)
    # forward: the observation d ticks before the window, forwarded through the d actions since
    np.testing.assert_array_equal(tick[fwd], start[fwd] - delay[fwd])
    np.testing.assert_array_equal(fstate[fwd], start[fwd] - 0.5)
    # no delay: the window's observation as it was
    none = delay == 0
    np.testing.assert_array_equal(tick[none], start[none])
    np.testing.assert_array_equal(fstate[none], start[none])
    np.testing.assert_allclose(chunks, policy.normalize(b["actions"]), atol=1e-6)  # the whole window is the target


def test_one_update_per_policy_kind_on_sampler_shaped_batches():
    for name, cfg in (("mlp", BCConfig(batch_size=16)), ("flow", BCConfig(batch_size=16, max_delay=2))):
        algo = build_algorithm("bc", cfg, spec(name))
        w = DemoWindows(episodes(), window=algo.window, lookback=algo.lookback)
        before = {k: v.copy() for k, v in algo.policy_weights().items()}
        metrics = algo.update(w.sample(cfg.batch_size))
        assert np.isfinite(metrics[algo.loss_key])
        assert any(not np.array_equal(before[k], v) for k, v in algo.policy_weights().items())


def test_demonstrations_that_do_not_fit_the_task_are_refused_naming_key_and_shapes():
    from hal.spec import CameraSpec, RobotSpec
    from robo_async.learner.algorithms.bc.demos import check_demos

    spec = RobotSpec(
        name="r",
        joint_names=("a", "b", "c"),
        joint_low=(-1,) * 3,
        joint_high=(1,) * 3,
        hz=30.0,
        cameras=(CameraSpec("front", 64, 64),),
        features=(("tick", 1),),
    )
    good = {
        "obs/state": np.zeros((5, 3)),
        "obs/tick": np.zeros((5, 1)),
        "obs/front": np.zeros((5, 64, 64, 3), np.uint8),
        "action": np.zeros((5, 3)),
    }
    check_demos([good], spec, ("state", "tick", "front"))
    small = {**good, "obs/front": np.zeros((5, 32, 32, 3), np.uint8)}
    with pytest.raises(ValueError, match="front is 32x32x3 per tick, the task's camera front is 64x64x3"):
        check_demos([good, small], spec, ("state", "front"))
    with pytest.raises(ValueError, match="tick is 2 per tick, the task's observation tick is 1"):
        check_demos([{**good, "obs/tick": np.zeros((5, 2))}], spec, ("state", "tick"))
    with pytest.raises(ValueError, match="have no 'wrist'"):
        check_demos([good], spec, ("state", "wrist"))
    with pytest.raises(ValueError, match="action has .*4.* the task's robot has 3 joints"):
        check_demos([{**good, "action": np.zeros((5, 4))}], spec, ("state",))
