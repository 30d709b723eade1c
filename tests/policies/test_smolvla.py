"""LeRobot's SmolVLA built on a tiny SmolVLM generated here (no hub): its tokenizer trained on the
instructions, chunks of the right shape in the async actor and from the policy server, batched
inference, save/load with the backbone inside, missing files named, DSRL steering it."""

import shutil

import numpy as np
import pytest
import torch

from hal.safety import SafeRobot
from policies.base import ChunkRequest
from policies.lerobot_build import LeRobotPolicyUnavailable, build_lerobot_policy, load_lerobot_policy
from policies.tiny_backbone import BackboneFilesMissing, check_backbone_dir, instruction_tokenizer, make_tiny_smolvlm
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from sim import INSTRUCTIONS, ReachConfig, ReachTask, SimRobot

pytest.importorskip("transformers")
SPEC = ReachTask(ReachConfig(cameras=("front",), image_size=64)).spec()


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return make_tiny_smolvlm(tmp_path_factory.mktemp("vlm") / "tiny", list(INSTRUCTIONS.values()))


def smolvla(backbone, instruction="reach the red target"):
    torch.manual_seed(0)
    return build_lerobot_policy(
        "smolvla",
        state_dim=SPEC.state_dim,
        action_low=SPEC.joint_low,
        action_high=SPEC.joint_high,
        cameras=(("front", 64, 64),),
        chunk_size=8,
        dt=SPEC.dt,
        task=instruction,
        vlm_model_name=str(backbone),
        resize_imgs_with_padding=(64, 64),
        num_steps=3,
        max_state_dim=8,
        max_action_dim=8,
    )


def obs(i=0):
    rng = np.random.default_rng(i)
    return {
        "state": rng.uniform(-0.5, 0.5, SPEC.state_dim).astype(np.float32),
        "front": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
    }


def test_the_tokenizer_is_trained_on_the_instructions():
    tok = instruction_tokenizer(list(INSTRUCTIONS.values()))
    ids = [tok(t)["input_ids"] for t in INSTRUCTIONS.values()]
    assert len({tuple(i) for i in ids}) == 3 and all(tok.unk_token_id not in i for i in ids)
    assert tok("reach the purple banana")["input_ids"][2:] == [tok.unk_token_id] * 2  # unknown words
    assert tok.convert_tokens_to_ids("<image>") != tok.unk_token_id and tok.fake_image_token_id != tok.unk_token_id


def test_smolvla_chunks_in_the_async_actor(backbone):
    policy = smolvla(backbone)
    robot = SafeRobot(SimRobot(ReachTask(ReachConfig(cameras=("front",), image_size=64))))
    robot.connect()
    loop = ControlLoop(
        robot,
        policy,
        LoopConfig(max_steps=150, realtime=True, inference="async_forward_rtc", eval_every=0, inference_timeout_s=30),
    )
    result = loop.run()
    robot.close()
    assert result.ticks == 150 and loop.runner.chunks_merged >= 2 and loop.runner.engine.bad_chunks == 0
    c = policy.predict_chunk(obs(), forwarded_state=obs()["state"], prefix=np.zeros((3, 6), np.float32))
    assert c.actions.shape == (8, 6) and (c.actions[:3] == 0).all() and np.isfinite(c.actions).all()


def test_smolvla_batched_inference_matches_one_by_one(backbone):
    policy = smolvla(backbone)
    reqs = [ChunkRequest(obs(i), obs(i)["state"]) for i in range(3)]
    torch.manual_seed(5)
    noise = torch.randn(3, 8, 8)  # what the batched sampler draws after seed 5 (the same generator)
    torch.manual_seed(5)
    batched = [c.actions for c in policy.predict_chunks(reqs)]
    assert all(a.shape == (8, 6) for a in batched)
    for i, r in enumerate(reqs):  # row i of the batch is what request i alone gives for its noise
        with torch.no_grad():
            alone = policy.post(
                policy.predict_normalized(policy.pre(policy.batch(r.obs, r.forwarded_state)), noise=noise[i : i + 1])
            )
        want = np.clip(alone.numpy().reshape(8, 6), SPEC.joint_low, SPEC.joint_high)
        np.testing.assert_allclose(batched[i], want, atol=1e-4)


def test_save_and_load_round_trip_with_the_backbone_inside(backbone, tmp_path):
    policy = smolvla(backbone)
    saved = policy.save(tmp_path / "saved")
    moved = tmp_path / "elsewhere"
    shutil.copytree(saved, moved)
    shutil.rmtree(saved)
    loaded = load_lerobot_policy(
        moved, action_low=SPEC.joint_low, action_high=SPEC.joint_high, cameras=("front",), task=policy.task
    )
    assert loaded.architecture == policy.architecture
    for k, v in policy.weights().items():
        np.testing.assert_array_equal(loaded.weights()[k], v)
    noise = torch.randn(1, 8, 8)
    with torch.no_grad():
        a = policy.post(policy.predict_normalized(policy.pre(policy.batch(obs())), noise=noise))
        b = loaded.post(loaded.predict_normalized(loaded.pre(loaded.batch(obs())), noise=noise))
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    (moved / "backbone" / "tokenizer.json").unlink()
    with pytest.raises(BackboneFilesMissing, match="backbone is missing tokenizer.json"):
        load_lerobot_policy(moved, action_low=SPEC.joint_low, action_high=SPEC.joint_high, cameras=("front",))
    shutil.copy(backbone / "tokenizer.json", moved / "backbone")
    (moved / "model.safetensors").unlink()
    with pytest.raises(
        LeRobotPolicyUnavailable, match=f"LeRobot policy directory {moved} is missing model.safetensors"
    ):
        load_lerobot_policy(moved, action_low=SPEC.joint_low, action_high=SPEC.joint_high, cameras=("front",))


def test_a_backbone_directory_missing_files_is_named_in_one_line(backbone, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(backbone, broken)
    (broken / "config.json").unlink()
    (broken / "tokenizer_config.json").unlink()
    with pytest.raises(BackboneFilesMissing) as e:
        check_backbone_dir(broken)
    assert str(e.value) == f"backbone directory {broken} is missing config.json, tokenizer_config.json"
    from robo_async.launch.builders import ConfigError, vla_backbone

    with pytest.raises(ConfigError, match="policy.backbone: backbone directory .* is missing config.json"):
        vla_backbone(str(broken))
    with pytest.raises(ConfigError, match="needs policy.backbone: tiny"):
        vla_backbone(None)


def test_smolvla_from_the_policy_server(backbone):
    from robo_async.actor.remote import RemotePolicy
    from robo_async.serve import PolicyServer, ServeConfig

    server = PolicyServer(smolvla(backbone), SPEC, ServeConfig("tcp://127.0.0.1:0", policy_name="lerobot")).start()
    try:
        remote = RemotePolicy(server.bound, SPEC, policy="lerobot")
        remote.connect(30)
        c = remote.predict_chunk(obs(), forwarded_state=obs()["state"], delay_ticks=3)
        assert c.actions.shape == (8, 6) and remote.architecture.startswith("lerobot-smolvla")
        remote.close()
    finally:
        server.close()


def test_dsrl_steers_smolvla(backbone):
    from policies.lerobot_dsrl import SteeredLeRobotPolicy

    steered = SteeredLeRobotPolicy(smolvla(backbone), noise_bound=1.5)
    assert steered.noise_shape == (8, 8)  # chunk x SmolVLA's padded action space
    one = {k: v[None] for k, v in obs().items()}
    z = torch.zeros(1, 8, 8)
    a0 = steered.steered(one, z)
    a1 = steered.steered(one, z + 1.0)
    assert a0.shape == (1, 8, 6) and not np.allclose(a0, a1)  # the noise steers the chunk
    np.testing.assert_allclose(a0, steered.steered(one, z), atol=1e-5)  # and is a function of it
    assert steered.predict_chunk(obs()).actions.shape == (8, 6)


@pytest.mark.e2e
def test_bc_trains_smolvla_with_its_own_loss_and_evaluates_it(tmp_path):
    """`robo-async bc policy=smolvla`: LeRobot's training loss through its preprocessor (the
    tokenizer), saved as a LeRobot directory with its backbone, evaluated in the async actor."""
    import json
    import subprocess
    import sys

    run_dir = tmp_path / "sbc"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "robo_async.cli",
            "bc",
            "policy=smolvla",
            "task.cameras=[front]",
            "task.image_size=64",
            "policy.bc.demos=2",
            "policy.bc.steps=6",
            "policy.bc.batch=4",
            "eval_episodes=1",
            f"run_dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    for f in ("config.json", "model.safetensors", "policy_preprocessor.json", "backbone/tokenizer.json", "policy.yaml"):
        assert (run_dir / f).is_file(), f
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["episodes"] == 1 and result["mode"] == "async_forward_rtc"
    trained = load_lerobot_policy(run_dir, action_low=SPEC.joint_low, action_high=SPEC.joint_high, cameras=("front",))
    fresh = smolvla(run_dir / "backbone")  # the same seed: the weights bc started from
    changed = {k for k, v in trained.weights().items() if not np.array_equal(v, fresh.weights()[k])}
    assert any("lm_expert" in k for k in changed)  # the action expert learned
    assert not any("vision_model" in k for k in changed)  # the frozen vision encoder did not


@pytest.mark.e2e
def test_dsrl_trains_online_on_a_saved_smolvla(backbone, tmp_path):
    """`robo-async train algo=dsrl policy=smolvla policy.path=<saved SmolVLA>`: the learner and
    the actor load the frozen SmolVLA (its backbone inside), the noise actor learns and its
    weights reach the actor."""
    import subprocess
    import sys

    from robo_async.learner.metrics import read_metrics

    saved = smolvla(backbone).save(tmp_path / "smolvla")
    run_dir = tmp_path / "dsrl"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "robo_async.cli",
            "train",
            "task=reach",
            "task.cameras=[front]",
            "task.image_size=64",
            "policy=smolvla",
            f"policy.path={saved}",
            "algo=dsrl",
            "algo.warmup_steps=100",
            "algo.batch_size=16",
            "budget.env_steps=700",
            "eval_episodes=0",
            "stop_at_success=null",
            "learner.publish_every=5",
            "dashboard.port=null",
            "actor.journal=false",
            f"run_dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    last = read_metrics(run_dir)[-1]
    # (the actor is gated by the learner's allowance, so 600 post-warm-up ticks mean several published versions)
    assert last["time/env_steps"] >= 700 and last["time/updates"] > 0 and last["charts/actor_policy_version"] > 0, last
