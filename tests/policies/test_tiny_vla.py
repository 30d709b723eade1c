"""Our tiny VLA: instruction tokens, instruction-following after BC, multi-task `robo-async bc`."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from policies.base import ChunkRequest
from policies.tiny_vla import TinyVLA, tokenize, word_vocab
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.offline import clone
from sim import ReachTask

SPEC = ReachTask().spec()
INSTR = ("move left", "move right")


def vla(**kw):
    torch.manual_seed(0)
    return TinyVLA(
        ("state", "target"),
        (6, 3),
        SPEC.joint_low,
        SPEC.joint_high,
        instructions=INSTR,
        horizon=4,
        hidden=(64, 64),
        action_mode="delta",
        delta_range=0.6,
        **kw,
    )


def test_tokens():
    vocab = word_vocab(["Reach the red target", "lift the cube"])
    assert vocab == ("cube", "lift", "reach", "red", "target", "the")
    t = tokenize("lift the banana", vocab, max_len=5)
    assert t.tolist() == [3, 7, 1, 0, 0] and t.dtype == np.int64


def _demos(policy, n=40, t=12):
    """The same scenes under both instructions: 'left' moves joint 0 down, 'right' up."""
    rng = np.random.default_rng(0)
    eps = []
    for i in range(n):
        sign = -1.0 if i % 2 == 0 else 1.0
        state = rng.uniform(-0.3, 0.3, 6).astype(np.float32)
        target = rng.uniform(-0.3, 0.3, 3).astype(np.float32)
        acts = np.tile(state, (t, 1))
        acts[:, 0] += sign * 0.4
        eps.append(
            {
                "obs/state": np.tile(state, (t, 1)),
                "obs/target": np.tile(target, (t, 1)),
                "action": acts,
                "obs/instruction": np.tile(policy.tokens(INSTR[i % 2]), (t, 1)),
            }
        )
    return eps


def test_the_tiny_vla_follows_different_instructions_differently():
    policy = vla()
    clone(policy, _demos(policy), 400, BCConfig(batch_size=64, lr=2e-3, max_delay=0))
    policy.deterministic = True
    obs = {"state": np.zeros(6, np.float32), "target": np.full(3, 0.1, np.float32)}
    moves = {}
    for instruction in INSTR:
        policy.instruction = instruction
        moves[instruction] = float(policy.predict_chunk(obs).actions[:, 0].mean())
    assert moves["move left"] < -0.2 and moves["move right"] > 0.2, moves
    # the same policy, one batch, both instructions (as the policy server batches two actors)
    reqs = [ChunkRequest({**obs, "instruction": policy.tokens(i)}) for i in INSTR]
    batched = [c.actions[:, 0].mean() for c in policy.predict_chunks(reqs)]
    np.testing.assert_allclose(batched, [moves[i] for i in INSTR], atol=1e-5)


def test_an_untrained_policy_does_not_separate_them_by_construction():
    """The check above is not a property of any random init: before training, the two
    instructions do not give opposite moves of this size."""
    policy = vla()
    policy.deterministic = True
    obs = {"state": np.zeros(6, np.float32), "target": np.full(3, 0.1, np.float32)}
    moves = []
    for instruction in INSTR:
        policy.instruction = instruction
        moves.append(float(policy.predict_chunk(obs).actions[:, 0].mean()))
    assert not (moves[0] < -0.2 and moves[1] > 0.2)


@pytest.mark.e2e
def test_bc_on_all_sim_tasks_at_once_reports_success_per_instruction(tmp_path):
    run_dir = tmp_path / "vla"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "robo_async.cli",
            "bc",
            "policy=tiny_vla",
            "policy.bc.demos=2",
            "policy.bc.steps=10",
            "policy.bc.batch=16",
            "eval_episodes=1",
            "actor.inference=inline",
            f"run_dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads((run_dir / "eval.json").read_text())
    assert set(result["success"]) == {"reach the red target", "push the cube into the square", "lift the cube"}
    import yaml

    from robo_async.launch.builders import PolicyArgs, make_actor_policy

    meta = yaml.safe_load((run_dir / "policy.yaml").read_text())
    assert meta["tasks"] == ["reach", "push", "pick_lift"] and meta["demos"] == 6
    cfg = {**meta["policy"], "path": str(run_dir)}
    from robo_async.launch.builders import task_args, task_spec

    loaded = make_actor_policy(PolicyArgs.from_config(cfg), task_spec(task_args(meta["task"])))
    assert loaded.architecture == meta["architecture"]
