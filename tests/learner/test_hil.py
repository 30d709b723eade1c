"""Learning from corrections: HG-DAgger's BC term, RLIF's penalty, and HIL training end to end
(`train teleop=virtual` on the serial launcher, `teleop=sim_leader` takeovers under Ray)."""

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.learner.algorithms import build_algorithm, config_class
from robo_async.learner.algorithms.base import PolicySpec, hil_rewards
from robo_async.learner.metrics import read_metrics
from robo_async.transport.wire import OPERATOR, POLICY, TAKEOVER

EXE = [sys.executable, "-m", "robo_async.cli"]
LOW, HIGH = (-1.9,) * 3, (1.9,) * 3


def spec():
    return PolicySpec("mlp", ("state",), (3,), LOW, HIGH, hidden=(32, 32), action_mode="absolute")


def batch(n, rng, operated):
    state = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    return {
        "obs/state": state,
        "next_obs/state": state,
        "action": np.full((n, 3), 1.2, np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "success": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
        "intervention": np.where(operated, OPERATOR, POLICY).astype(np.uint8),
    }


def mean_action(algo, state):
    with torch.no_grad():
        return torch.tanh(algo.actor(torch.as_tensor(state))[0]).numpy()


@pytest.mark.parametrize("weight", [0.0, 5.0])
def test_dagger_pulls_the_sac_actor_toward_the_operators_actions(weight):
    torch.manual_seed(0)  # the initial weights: not whatever earlier tests in this process left the generator at
    cfg = replace(config_class("sac")(), batch_size=64, dagger_weight=weight, hidden=(32, 32))
    algo = build_algorithm("sac", cfg, spec())
    rng = np.random.default_rng(0)
    probe = rng.uniform(-1, 1, (64, 3)).astype(np.float32)
    target = algo.policy.to_normalized(np.full((64, 3), 1.2, np.float32), probe)
    before = np.abs(mean_action(algo, probe) - target).mean()
    for _ in range(150):
        m = algo.update(batch(64, rng, np.arange(64) < 32))
    after = np.abs(mean_action(algo, probe) - target).mean()
    if weight:
        assert "losses/dagger_loss" in m and after < 0.5 * before
    else:
        assert "losses/dagger_loss" not in m and after > 0.7 * before


def test_rlif_penalises_the_first_tick_of_each_takeover_only():
    rewards = np.array([[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]], np.float32)
    iv = np.array([[POLICY, TAKEOVER, OPERATOR, POLICY], [OPERATOR, OPERATOR, POLICY, TAKEOVER]], np.uint8)
    np.testing.assert_allclose(hil_rewards(rewards, iv, 2.0), [[1, -1, 1, 1], [0.5, 0.5, 0.5, -1.5]])
    assert hil_rewards(rewards, iv, 0.0) is rewards and hil_rewards(rewards, None, 2.0) is rewards


def test_dagger_is_refused_where_it_has_no_meaning():
    with pytest.raises(ValueError, match="dagger_weight is for sac and qc; bc learns"):
        build_algorithm("bc", replace(config_class("bc")(), dagger_weight=1.0), spec())


@pytest.mark.parametrize(
    "key,value", [("dagger_weight", -1.0), ("dagger_weight", float("nan")), ("intervention_penalty", float("inf"))]
)
def test_correction_weights_that_are_not_finite_and_non_negative_are_refused(key, value):
    with pytest.raises(ValueError, match=f"algo.{key} must be a finite number >= 0"):
        config_class("sac")(**{key: value})
    assert getattr(config_class("sac")(**{key: 0.5}), key) == 0.5


def run(args, timeout=300):
    return subprocess.run(EXE + args, capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_hil_training_with_the_virtual_operator_records_corrections_and_learns_from_them(tmp_path):
    run_dir = tmp_path / "hil"
    res = run(
        [
            "train",
            "launcher=serial",
            "task=push",
            "teleop=virtual",
            "teleop.stall_ticks=15",
            "teleop.hold_ticks=10",
            "algo.dagger_weight=1.0",
            "algo.intervention_penalty=1.0",
            f"run_dir={run_dir}",
            "budget.env_steps=1500",
            "algo.warmup_steps=300",
            "algo.batch_size=32",
            "policy.hidden=[32,32]",
            "algo.hidden=[32,32]",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.2",
        ]
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    rows = read_metrics(run_dir)
    last = rows[-1]
    assert last["hil/operator_ticks"] > 50 and last["hil/takeovers"] > 2
    assert any("losses/dagger_loss" in r for r in rows)
    assert "operator" in res.stdout  # the progress line shows who is in control
    store = PersistentReplayStore(run_dir / "replay", StoreConfig()).open(readonly=True)
    try:  # every operator tick the learner counted is in the interventions table, none other
        assert store.counts["interventions"] == last["hil/operator_ticks"]
        iv = [int(r["intervention"]) for _, r in store.rows("interventions")]
        assert iv.count(TAKEOVER) >= 2 and POLICY not in iv
    finally:
        store.close()
    assert (run_dir / "learning_curve.png").exists()


@pytest.mark.e2e
def test_hil_takeovers_under_the_ray_launcher(tmp_path):
    run_dir = tmp_path / "ray"
    res = run(
        [
            "train",
            f"run_dir={run_dir}",
            "launcher=ray",
            "launcher.num_cpus=2",
            "actors=1",
            "budget.env_steps=1200",
            "algo.warmup_steps=200",
            "algo.batch_size=32",
            "policy.hidden=[32,32]",
            "algo.hidden=[32,32]",
            "stop_at_success=null",
            "eval_episodes=2",
            "learner.log_every_s=0.2",
            "teleop=sim_leader",
            "teleop.events={100: is_intervention, 140: is_intervention, 300: estop}",
        ]
    )
    # the e-stop at tick 300 latches a hold; the run goes on to its budget (the robot held)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    store = PersistentReplayStore(run_dir / "replay", StoreConfig()).open(readonly=True)
    try:
        iv = [int(r["intervention"]) for _, r in store.rows("interventions")]
        assert iv == [TAKEOVER] + [OPERATOR] * 39
    finally:
        store.close()
    assert read_metrics(run_dir)[-1]["actors/estopped"] > 0


@pytest.mark.parametrize("weight", [0.0, 5.0])
def test_dagger_pulls_the_qc_actor_toward_chunks_the_operator_drove(weight):
    from robo_async.learner.algorithms.qc.config import QCConfig

    spec = PolicySpec(
        "flow", ("state",), (3,), LOW, HIGH, hidden=(32, 32), action_mode="absolute", options={"horizon": 4}
    )
    algo = build_algorithm(
        "qc",
        QCConfig(
            critic_hidden=(32,),
            actor_hidden=(32,),
            batch_size=32,
            dagger_weight=weight,
            distill_only_updates=10**6,
            alpha=0.0,
        ),
        spec,
    )
    rng = np.random.default_rng(0)
    chunk = np.full((32, 4, 3), 1.2, np.float32)  # what the operator drove, every window

    def windows():
        state = rng.uniform(-1, 1, (32, 3)).astype(np.float32)
        iv = np.full((32, 4), OPERATOR, np.uint8)
        iv[16:] = POLICY  # half the windows are the policy's own
        return {
            "obs/state": state,
            "next_obs/state": state,
            "actions": chunk,
            "rewards": np.zeros((32, 4), np.float32),
            "mask": np.ones((32, 4), np.float32),
            "steps": np.full(32, 4),
            "terminated": np.zeros(32, bool),
            "truncated": np.zeros(32, bool),
            "success": np.zeros(32, bool),
            "policy_version": np.zeros(32, np.int64),
            "episode_success": np.full(32, -1, np.int8),
            "interventions": iv,
        }

    probe = windows()
    target = algo.chunks(probe)
    z = torch.zeros(32, 4, 3)

    def gap():
        with torch.no_grad():
            return (algo.actor(algo._inputs(probe, "obs/")[0], z) - target).abs().mean().item()

    before = gap()
    for _ in range(400):
        m = algo.update(windows())
    if weight:
        assert "losses/dagger_loss" in m and gap() < 0.5 * before
    else:
        assert "losses/dagger_loss" not in m and gap() > 0.7 * before
