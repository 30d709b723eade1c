"""The chunked critic (`algo=qc`): best-of-N, the one-step actor's range, an end-to-end run."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from policies.onestep import OneStepChunkPolicy
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.qc import QCConfig
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
LOW, HIGH = (-1.0, -2.0, 0.0), (1.0, 2.0, 1.5)


def policy(n: int) -> OneStepChunkPolicy:
    return OneStepChunkPolicy(
        obs_keys=("state",),
        obs_dims=(3,),
        action_low=LOW,
        action_high=HIGH,
        horizon=4,
        hidden=(32, 32),
        action_mode="absolute",
        best_of_n=n,
        critic_hidden=(16,),
    )


class ChunkSum(nn.Module):
    """Critic heads (two members) whose Q is the sum of the chunk's entries (the last H*A inputs): [2, B]."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h[:, -self.width :].sum(-1).unsqueeze(0).expand(2, -1)


def test_best_of_n_executes_the_highest_q_candidate():
    p = policy(16)
    p.critic.heads = ChunkSum(4 * 3)
    seen = []
    forward = p.actor.forward

    def record(*a, **k):
        out = forward(*a, **k)
        seen.append(out.detach().clone())
        return out

    p.actor.forward = record
    cond = torch.randn(5, 3)
    best = p.act(cond)
    cands = seen[-1].reshape(5, 16, 4, 3)
    q = cands.sum((2, 3))
    assert not torch.allclose(q.max(1).values, q.min(1).values)  # the candidates differ
    torch.testing.assert_close(best, cands[torch.arange(5), q.argmax(1)])
    p.critic.heads = _Neg(ChunkSum(12))  # the negated critic picks the lowest instead
    worst = p.act(cond)
    cands = seen[-1].reshape(5, 16, 4, 3)
    torch.testing.assert_close(worst, cands[torch.arange(5), cands.sum((2, 3)).argmin(1)])


class _Neg(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return -self.inner(h)


def test_one_step_chunks_stay_inside_the_action_range():
    p = policy(1)
    with torch.no_grad():
        for m in p.actor.net:
            if isinstance(m, nn.Linear):
                m.weight.mul_(50.0)  # push the raw outputs far outside [-1, 1]
    rng = np.random.default_rng(0)
    for _ in range(50):
        chunk = p.predict_chunk({"state": rng.normal(size=3).astype(np.float32) * 10}).actions
        assert chunk.shape == (4, 3)
        assert np.all(chunk >= np.array(LOW, np.float32)) and np.all(chunk <= np.array(HIGH, np.float32))
    committed = np.full((2, 3), 0.5, np.float32)
    out = p.predict_chunk({"state": np.zeros(3, np.float32)}, prefix=committed, delay_ticks=2).actions
    np.testing.assert_array_equal(out[:2], committed)  # a committed prefix comes back exactly


def test_qc_refuses_a_policy_it_cannot_train():
    spec = PolicySpec("mlp", ("state",), (3,), LOW, HIGH)
    with pytest.raises(ValueError, match="algo=qc .* policy=flow"):
        build_algorithm("qc", QCConfig(), spec)


@pytest.mark.e2e
def test_qc_serial_run_raises_q_on_a_task_that_pays_every_step(tmp_path):
    """InvertedPendulum pays +1 per tick until the pole falls: Q must climb from its start."""
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
            "algo=qc",
            "algo.warmup_steps=300",
            "algo.batch_size=64",
            "algo.critic_hidden=[64,64]",
            "algo.actor_hidden=[64,64]",
            "algo.utd_ratio=0.5",
            "algo.max_version_lag=50",
            f"run_dir={run_dir}",
            "budget.env_steps=2500",
            "budget.seconds=600",
            "stop_at_success=null",
            "eval_episodes=0",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [r for r in read_metrics(run_dir) if "losses/qf1_values" in r]
    assert len(rows) > 4 and rows[-1]["time/updates"] > 100
    first, last = rows[0]["losses/qf1_values"], rows[-1]["losses/qf1_values"]
    assert last > first + 1.0, (first, last)
    assert rows[-1]["losses/window_steps"] > 1.5  # windows of several ticks, not single steps


def window_batch(b=16, h=4, a=3, cams=("front",), size=16, seed=0):
    rng = np.random.default_rng(seed)
    batch = {
        "obs/state": rng.normal(size=(b, a)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (b, h, a)).astype(np.float32),
        "rewards": np.ones((b, h), np.float32),
        "mask": np.ones((b, h), np.float32),
        "steps": np.full(b, h),
        "terminated": np.zeros(b, bool),
        "truncated": np.zeros(b, bool),
        "success": np.zeros(b, bool),
        "policy_version": np.zeros(b, np.int64),
        "episode_success": np.full(b, -1, np.int8),
    }
    batch["next_obs/state"] = batch["obs/state"]
    for c in cams:
        batch[f"obs/{c}"] = rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8)
        batch[f"next_obs/{c}"] = batch[f"obs/{c}"]
    return batch


def test_qc_from_pixels_shares_one_encoder_trained_by_the_critic_only():
    spec = PolicySpec(
        "flow",
        ("state",),
        (3,),
        LOW,
        HIGH,
        hidden=(32, 32),
        action_mode="absolute",
        options={"horizon": 4, "cameras": ("front",), "image_size": 16},
    )
    algo = build_algorithm("qc", QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=16), spec)
    assert algo.actor.encoder is algo.critic.encoder  # one encoder (pixel SAC / RLPD style)
    enc_ids = {id(p) for p in algo.critic.encoder.parameters()}
    assert not enc_ids & {id(p) for g in algo.actor_opt.param_groups for p in g["params"]}
    before = [p.detach().clone() for p in algo.critic.encoder.parameters()]
    m = algo.update(window_batch())
    assert np.isfinite(m["losses/qf_loss"]) and np.isfinite(m["losses/actor_loss"])
    assert any(not torch.equal(a, p) for a, p in zip(before, algo.critic.encoder.parameters(), strict=False))
    # the published policy sees frames and makes chunks from them
    w = algo.policy_weights()
    assert any(k.startswith("actor.encoder.vision") for k in w)
    obs = {"state": np.zeros(3, np.float32), "front": np.zeros((16, 16, 3), np.uint8)}
    assert algo.policy.predict_chunk(obs).actions.shape == (4, 3)


@pytest.mark.e2e
def test_qc_from_pixels_trains_end_to_end_on_frames_the_actor_encoded(tmp_path):
    """Camera frames cross the wire encoded by the actor's uplink; the learner stores those bytes
    (it encodes none itself) and the chunked critic trains on them."""
    run_dir = tmp_path / "run"
    res = subprocess.run(
        EXE
        + [
            "train",
            "launcher=serial",
            "task=reach",
            "task.cameras=[front]",
            "task.image_size=16",
            "policy=flow",
            "policy.obs_keys=[state]",
            "policy.cameras=[front]",
            "policy.horizon=4",
            "policy.hidden=[32,32]",
            "algo=qc",
            "algo.warmup_steps=100",
            "algo.batch_size=16",
            "algo.critic_hidden=[32,32]",
            "algo.actor_hidden=[32,32]",
            f"run_dir={run_dir}",
            "budget.env_steps=400",
            "stop_at_success=null",
            "eval_episodes=0",
            "learner.log_every_s=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = read_metrics(run_dir)
    last = rows[-1]
    assert last["time/updates"] > 10 and "losses/qf1_values" in last
    assert last["buffer/frames_as_sent"] >= 400 and last["buffer/frames_encoded"] == 0


def lagged(batch, lag, a=3):
    """Add a lookback to a window batch: the observation `lag` ticks earlier and the actions since."""
    b = len(batch["obs/state"])
    rng = np.random.default_rng(1)
    batch["lag"] = np.asarray(lag, np.int64)
    batch["lag_obs/state"] = rng.normal(size=(b, a)).astype(np.float32)
    acts = rng.uniform(-0.5, 0.5, (b, 4, a)).astype(np.float32)
    acts[np.arange(4)[None] >= batch["lag"][:, None]] = 0
    batch["lag_actions"] = acts
    return batch


def test_qc_actor_learns_from_what_an_async_actor_had_when_it_asked():
    """With lookback (async_forward actors), the one-step actor and the flow prior see the
    observation `lag` ticks before the chunk with its state forwarded to the last committed
    target, and the delay; the critic scores the chunk from the state where it started."""
    spec = PolicySpec(
        "flow",
        ("state",),
        (3,),
        LOW,
        HIGH,
        hidden=(32, 32),
        action_mode="delta",
        options={"horizon": 4, "delta_range": 0.5},
    )
    algo = build_algorithm("qc", QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=8, max_delay=3), spec)
    assert algo.lookback == 3
    batch = lagged(window_batch(b=8, cams=()), [0, 1, 2, 3, 0, 1, 2, 3])
    seen = {}
    actor_forward, critic_forward = algo.actor.forward, algo.critic.forward

    def actor_rec(cond, z, images=None, features=None, delay=None):
        out = actor_forward(cond, z, images, features, delay)
        seen.setdefault("actor", []).append(
            (cond.detach().clone(), None if delay is None else delay.clone(), out.detach().clone())
        )
        return out

    def critic_rec(cond, chunk, images=None, features=None):
        seen.setdefault("critic", []).append((cond.detach().clone(), chunk.detach().clone()))
        return critic_forward(cond, chunk, images, features)

    algo.actor.forward, algo.critic.forward = actor_rec, critic_rec
    algo.update(batch)
    want_state = batch["lag_obs/state"].copy()
    for i, d in enumerate(batch["lag"]):
        if d:
            want_state[i] = batch["lag_actions"][i, d - 1]
    cond, delay, out = seen["actor"][-1]  # the policy-improvement pass (the first is the critic target's)
    np.testing.assert_allclose(cond.numpy(), want_state, rtol=1e-6)
    np.testing.assert_array_equal(delay.numpy(), batch["lag"])
    # the critic scores the actor's chunk from the window's own first state, re-expressed there
    q_cond, q_chunk = seen["critic"][-1]
    np.testing.assert_allclose(q_cond.numpy(), batch["obs/state"], rtol=1e-6)
    np.testing.assert_allclose(
        q_chunk.numpy(), algo.relative_to(out, want_state, batch["obs/state"]).numpy(), atol=1e-6
    )
    assert not np.allclose(q_chunk.numpy(), out.numpy(), atol=1e-3)  # the two states differ: so do the chunks
    with torch.no_grad():
        act = actor_forward(torch.as_tensor(want_state), torch.zeros(8, 4, 3), delay=torch.as_tensor(batch["lag"]))
    absolute = np.clip(want_state[:, None] + act.numpy() * 0.5, LOW, HIGH)
    expect = np.clip((absolute - batch["obs/state"][:, None]) / 0.5, -1, 1)
    got = algo.relative_to(act, want_state, batch["obs/state"]).numpy()
    np.testing.assert_allclose(got, expect, atol=1e-5)


def test_the_one_step_actor_is_told_its_delay():
    p = policy(1)
    p.deterministic = True
    obs = {"state": np.zeros(3, np.float32)}
    with torch.no_grad():
        for m in p.actor.net:
            if isinstance(m, nn.Linear):
                m.weight.normal_()
    a0 = p.predict_chunk(obs, delay_ticks=0).actions
    a3 = p.predict_chunk(obs, delay_ticks=3).actions
    assert not np.allclose(a0, a3)
    np.testing.assert_array_equal(a3, p.predict_chunk(obs, delay_ticks=3).actions)


@pytest.mark.parametrize(
    "overrides, want",
    [
        ([], 0),  # an as-fast sim: inline actors ask about their chunk's own first observation
        (["actor.inference=sync"], 0),
        (["actor.inference=async_forward"], 12),  # policy.bc.max_delay
        (["actor.inference=async_forward", "policy.bc.max_delay=3", "policy.inference_delay_ms=200"], 8),  # 6 ticks + 2
        (["actor.inference=async_forward", "algo.max_delay=5"], 5),
    ],
)
def test_qc_trains_its_actor_for_the_delays_its_actors_will_have(tmp_path, overrides, want):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    cfg = compose_config(["task=reach", "task.hz=30", "policy=flow", "algo=qc", *overrides])
    plan = build_plan(cfg, tmp_path / "run")
    assert plan.learner.algo_config.max_delay == want
    assert build_algorithm("qc", plan.learner.algo_config, plan.learner.policy).lookback == want
    assert plan.actors[0].loop.replan == "end"  # actor.replan=auto: chunks run whole for the chunked critic
    sac = build_plan(compose_config(["task=reach", "algo=sac"]), tmp_path / "sac")
    assert sac.actors[0].loop.replan == "due"


def test_qc_from_pixels_encodes_each_batch_of_frames_once_per_use():
    """One update: the online encoder sees the observation (trained) and the next observation (no
    gradients, for the actor and the target heads alike); the target critic's encoder is not run;
    the flow prior encodes its inputs once for its BC loss and its distillation target."""
    spec = PolicySpec(
        "flow",
        ("state",),
        (3,),
        LOW,
        HIGH,
        hidden=(32, 32),
        action_mode="absolute",
        options={"horizon": 4, "cameras": ("front",), "image_size": 16},
    )
    algo = build_algorithm("qc", QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=16), spec)
    calls = {"online": 0, "target": 0, "flow": 0}
    for name, module in (
        ("online", algo.critic.encoder.vision),
        ("target", algo.critic_target.encoder.vision),
        ("flow", algo.flow.net.vision),
    ):
        module.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    algo.update(window_batch())
    assert calls == {"online": 2, "target": 0, "flow": 1}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_learner_updates_in_the_precision_it_was_given(tmp_path, precision):
    """learner.precision=bf16: the update's forward passes run under bf16 autocast (weights and
    optimiser state stay fp32); fp32 leaves them alone. auto picks bf16 only where the device has it."""
    from robo_async.launch.builders import ConfigError, resolve_precision
    from robo_async.learner.config import LearnerConfig
    from robo_async.learner.learner import Learner

    spec = PolicySpec(
        "flow", ("state",), (3,), LOW, HIGH, hidden=(32, 32), action_mode="absolute", options={"horizon": 4}
    )
    learner = Learner(
        LearnerConfig(
            str(tmp_path),
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:0",
            spec,
            "qc",
            QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=16),
            precision=precision,
        )
    )
    seen = []
    from policies.critics import EnsembleLinear

    first = next(m for m in learner.algorithm.critic.modules() if isinstance(m, EnsembleLinear))
    first.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    batch = window_batch(16, 4, 3, ())
    learner.sampler.get = lambda timeout=0.0: batch
    assert learner._update()
    assert seen and set(seen) == {torch.bfloat16 if precision == "bf16" else torch.float32}
    assert first.weight.dtype == torch.float32
    assert resolve_precision(precision, "cpu") == precision
    with pytest.raises(ConfigError, match="fp32 or bf16"):
        resolve_precision("fp16", "cpu")


def test_slow_updates_do_not_hold_back_the_learners_status(tmp_path, monkeypatch):
    """One step starts updates only for UPDATE_BURST_S: with updates that each take longer than
    that, every step updates once and then publishes its status (acks for the actors)."""
    from robo_async.learner import learner as learner_module
    from robo_async.learner.config import LearnerConfig
    from robo_async.learner.learner import Learner

    spec = PolicySpec(
        "flow", ("state",), (3,), LOW, HIGH, hidden=(32, 32), action_mode="absolute", options={"horizon": 4}
    )
    learner = Learner(
        LearnerConfig(
            str(tmp_path),
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:0",
            spec,
            "qc",
            QCConfig(critic_hidden=(32,), actor_hidden=(32,), batch_size=16, limit_to_data=False),
            status_every_s=0.02,
        )
    )
    learner.open()
    try:
        clock = [1000.0]
        monkeypatch.setattr(learner_module.time, "monotonic", lambda: clock[0])
        batch = window_batch(16, 4, 3, ())
        learner.sampler.get = lambda timeout=0.0: batch
        real = learner.algorithm.update

        def slow(b):
            clock[0] += learner_module.UPDATE_BURST_S + 0.05  # each update takes longer than a burst
            return real(b)

        learner.algorithm.update = slow
        statuses = []
        learner._publisher.publish_status = lambda st: statuses.append(st)
        for i in range(3):
            before = learner.updates
            learner.step()
            assert learner.updates == before + 1 and len(statuses) == i + 1
    finally:
        monkeypatch.undo()
        learner.close()
