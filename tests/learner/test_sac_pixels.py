"""SAC from pixels (`policy=mlp policy.cameras=[...] algo=sac`): one encoder trained by the
critic, read detached by the actor, a target encoder, and an end-to-end run on frames."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.bc import BCConfig
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
LOW, HIGH = (-1.0, -2.0, 0.0), (1.0, 2.0, 1.5)
SPEC = PolicySpec(
    "mlp",
    ("state",),
    (3,),
    LOW,
    HIGH,
    hidden=(32, 32),
    action_mode="absolute",
    options={"cameras": ("front", "wrist"), "image_size": 16},
)


def batch(b=32, seed=0):
    rng = np.random.default_rng(seed)
    out = {
        "obs/state": rng.normal(size=(b, 3)).astype(np.float32),
        "next_obs/state": rng.normal(size=(b, 3)).astype(np.float32),
        "action": rng.uniform(LOW, HIGH, (b, 3)).astype(np.float32),
        "reward": rng.normal(size=b).astype(np.float32),
        "terminated": np.zeros(b, bool),
    }
    for c in ("front", "wrist"):
        out[f"obs/{c}"] = rng.integers(0, 256, (b, 16, 16, 3), dtype=np.uint8)
        out[f"next_obs/{c}"] = rng.integers(0, 256, (b, 16, 16, 3), dtype=np.uint8)
    return out


def test_sac_from_pixels_trains_one_encoder_by_the_critic_only():
    sac = build_algorithm("sac", SACConfig(hidden=(32,), batch_size=32), SPEC)
    enc = {id(p) for p in sac.encoder.parameters()}
    assert enc <= {id(p) for g in sac.critic_opt.param_groups for p in g["params"]}
    assert not enc & {id(p) for g in sac.actor_opt.param_groups for p in g["params"]}
    before = [p.detach().clone() for p in sac.encoder.parameters()]
    target_before = [p.detach().clone() for p in sac.encoder_target.parameters()]
    m = sac.update(batch())
    assert np.isfinite(m["losses/qf_loss"]) and np.isfinite(m["losses/actor_loss"])
    assert any(not torch.equal(a, p) for a, p in zip(before, sac.encoder.parameters(), strict=False))
    moved = [not torch.equal(a, p) for a, p in zip(target_before, sac.encoder_target.parameters(), strict=False)]
    assert any(moved)  # Polyak-averaged toward the encoder
    assert not any(
        torch.equal(a, b)
        for a, b in zip(sac.encoder.parameters(), sac.encoder_target.parameters(), strict=False)
        if a.numel() > 1
    )  # but not a copy of it
    # the published policy carries the encoder, and what it sees changes what it does
    w = sac.policy_weights()
    assert any(k.startswith("encoder.") for k in w) and any(k.startswith("actor.") for k in w)
    sac.policy.deterministic = True
    obs = {
        "state": np.zeros(3, np.float32),
        "front": np.zeros((16, 16, 3), np.uint8),
        "wrist": np.zeros((16, 16, 3), np.uint8),
    }
    dark = sac.policy.predict_chunk(obs).actions
    bright = sac.policy.predict_chunk({**obs, "front": np.full((16, 16, 3), 255, np.uint8)}).actions
    assert dark.shape == (1, 3) and not np.allclose(dark, bright)


def test_bc_of_the_mlp_policy_learns_from_frames_too():
    bc = build_algorithm("bc", BCConfig(batch_size=32), SPEC)
    before = [p.detach().clone() for p in bc.policy.encoder.parameters()]
    bc.update(batch())
    assert any(not torch.equal(a, p) for a, p in zip(before, bc.policy.encoder.parameters(), strict=False))


@pytest.mark.e2e
def test_sac_from_pixels_end_to_end_on_frames_the_actor_encoded(tmp_path):
    run_dir = tmp_path / "run"
    res = subprocess.run(
        EXE
        + [
            "train",
            "launcher=serial",
            "task=reach",
            "task.cameras=[front]",
            "task.image_size=16",
            "policy=mlp",
            "policy.cameras=[front]",
            "policy.hidden=[32,32]",
            "algo=sac",
            "algo.warmup_steps=100",
            "algo.batch_size=16",
            "algo.hidden=[32,32]",
            f"run_dir={run_dir}",
            "budget.env_steps=300",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    last = read_metrics(run_dir)[-1]
    assert last["time/updates"] > 10 and "losses/qf1_values" in last
    assert last["buffer/frames_as_sent"] >= 300 and last["buffer/frames_encoded"] == 0
    assert "evaluation: success rate" in res.stdout  # the checkpoint (with its encoder) evaluates on frames
