"""DSRL (`algo=dsrl`): a frozen flow policy steered through its starting noise."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from torch import nn

from policies.flow import FlowChunkPolicy
from policies.onestep import NoiseSteeredPolicy
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.dsrl import DSRLConfig
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
LOW, HIGH = (-1.0, -2.0, 0.0), (1.0, 2.0, 1.5)
KW = dict(obs_keys=("state",), obs_dims=(3,), action_low=LOW, action_high=HIGH, horizon=4, hidden=(32, 32))


def test_steered_chunks_stay_inside_the_action_range_and_only_the_noise_actor_travels():
    prior = FlowChunkPolicy(**KW, action_mode="absolute")
    p = NoiseSteeredPolicy(**KW, action_mode="absolute", noise_bound=3.0)
    p.load_prior(prior.weights())
    with torch.no_grad():
        for m in p.noise_actor.modules():
            if isinstance(m, nn.Linear):
                m.weight.mul_(100.0)  # noise at its bounds
    rng = np.random.default_rng(0)
    for det in (False, True):
        p.deterministic = det
        for _ in range(30):
            chunk = p.predict_chunk({"state": rng.normal(size=3).astype(np.float32) * 5}).actions
            assert chunk.shape == (4, 3)
            assert np.all(chunk >= np.array(LOW, np.float32)) and np.all(chunk <= np.array(HIGH, np.float32))
    assert set(p.weights()) == set(p.noise_actor.state_dict())  # the frozen prior is not published
    # the chunk is the prior's chunk for the noise the actor picked
    obs = {"state": np.array([0.1, 0.2, 0.3], np.float32)}
    cond = torch.as_tensor(p.condition(obs))[None]
    z = p.noise(cond)
    want = prior.denormalize(prior.sample(cond, noise=z)[0].numpy())
    np.testing.assert_allclose(p.predict_chunk(obs).actions, want, atol=1e-6)


def test_dsrl_needs_a_prior_and_refuses_a_mismatched_one(tmp_path):
    spec = PolicySpec("flow", ("state",), (3,), LOW, HIGH, hidden=(32, 32), options={"horizon": 4})
    with pytest.raises(ValueError, match="policy.path"):
        build_algorithm("dsrl", DSRLConfig(), spec)
    other = FlowChunkPolicy(**{**KW, "hidden": (16, 16)})
    save_file(other.weights(), str(tmp_path / "policy.safetensors"))
    with pytest.raises(ValueError, match="does not fit policy=flow"):
        build_algorithm(
            "dsrl", DSRLConfig(), PolicySpec(**{**spec.__dict__, "options": {"horizon": 4, "path": str(tmp_path)}})
        )


@pytest.mark.e2e
def test_dsrl_serial_run_raises_q_on_a_task_that_pays_every_step(tmp_path):
    prior = FlowChunkPolicy(
        obs_keys=("state",),
        obs_dims=(4,),
        action_low=(-3.0,),
        action_high=(3.0,),
        horizon=4,
        hidden=(64, 64),
        action_mode="absolute",
    )
    (tmp_path / "bc").mkdir()
    save_file(prior.weights(), str(tmp_path / "bc" / "policy.safetensors"))  # a prior the test made
    run_dir = tmp_path / "run"
    res = subprocess.run(
        EXE
        + [
            "train",
            "launcher=serial",
            "task=gym",
            "task.env_id=InvertedPendulum-v5",
            "task.episode_ticks=100",
            "policy=flow",
            "policy.obs_keys=[state]",
            "policy.action_mode=absolute",
            "policy.horizon=4",
            "policy.hidden=[64,64]",
            f"policy.path={tmp_path / 'bc'}",
            "algo=dsrl",
            "algo.warmup_steps=300",
            "algo.batch_size=64",
            "algo.critic_hidden=[64,64]",
            "algo.utd_ratio=0.5",
            f"run_dir={run_dir}",
            "budget.env_steps=2500",
            "budget.seconds=600",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [r for r in read_metrics(run_dir) if "losses/qf1_values" in r]
    assert len(rows) > 4 and rows[-1]["time/updates"] > 100
    first, last = rows[0]["losses/qf1_values"], rows[-1]["losses/qf1_values"]
    assert last > first + 1.0, (first, last)
    assert "evaluation: success rate" in res.stdout  # the checkpoint evaluates with the prior from policy.path


def pixel_dsrl():  # type: ignore[no-untyped-def]
    """DSRL on a small flow prior with one 16x16 camera (saved to, and loaded from, a temporary policy.path)."""
    import tempfile
    from pathlib import Path

    low, high = (-2.0,) * 3, (2.0,) * 3
    prior = FlowChunkPolicy(
        ("state",),
        (3,),
        low,
        high,
        horizon=4,
        steps=2,
        hidden=(32, 32),
        action_mode="absolute",
        cameras=("front",),
        image_size=16,
    )
    with tempfile.TemporaryDirectory() as d:
        save_file({k: np.ascontiguousarray(v) for k, v in prior.weights().items()}, str(Path(d) / "policy.safetensors"))
        spec = PolicySpec(
            "flow",
            ("state",),
            (3,),
            low,
            high,
            hidden=(32, 32),
            action_mode="absolute",
            options={"horizon": 4, "steps": 2, "cameras": ("front",), "image_size": 16, "path": d},
        )
        return build_algorithm("dsrl", DSRLConfig(batch_size=16), spec)


def test_dsrl_from_pixels_encodes_each_batch_of_frames_once():
    """The prior is frozen, so its features of the observation and the next observation serve the
    critics, the noise actor and the prior's own chunks: two encoder passes per update, not five."""
    from tests.learner.test_qc import window_batch

    algo = pixel_dsrl()
    calls = []
    algo.policy.net.vision.register_forward_hook(lambda m, i, o: calls.append(len(o)))
    metrics = algo.update(window_batch(16, 4, 3, ("front",), 16))
    assert np.isfinite(metrics["losses/qf_loss"])
    assert calls == [16, 16]


def test_dsrl_on_stored_embeddings_runs_no_encoder_and_sees_what_the_frames_give():
    """With `obs/embedding` in the batch (made by the prior's frozen encoder) the update encodes
    no frames, and its features equal those computed from the frames (to float16 precision)."""
    from robo_async.buffer.embeddings import embed_batch
    from robo_async.transport.wire import TransitionBatch
    from tests.learner.test_qc import window_batch

    algo = pixel_dsrl()
    enc = algo.frozen_encoder()
    assert enc is not None and enc.cameras == ("front",)
    frames = window_batch(16, 4, 3, ("front",), 16)
    rows = {k: v for k, v in frames.items() if k.startswith(("obs/", "next_obs/"))}
    embedded = embed_batch(TransitionBatch(0, 0, rows), enc)[0].arrays
    batch = {k: v for k, v in frames.items() if not k.endswith("/front")}  # no frames: as the sampler gives it
    batch.update({k: v for k, v in embedded.items() if "embedding" in k})
    obs = {k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")}
    from_frames = algo.steer.features({k.removeprefix("obs/"): v for k, v in frames.items() if k.startswith("obs/")})
    torch.testing.assert_close(algo.steer.features(obs), from_frames, atol=5e-3, rtol=5e-3)
    calls = []
    algo.policy.net.vision.register_forward_hook(lambda m, i, o: calls.append(len(o)))
    metrics = algo.update(batch)
    assert np.isfinite(metrics["losses/qf_loss"]) and calls == []
