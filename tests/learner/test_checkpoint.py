import pytest
import torch

from robo_async.learner import checkpoint
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.sac import SACConfig


def spec(obs_dim, act_dim, hidden):
    return PolicySpec("mlp", ("state",), (obs_dim,), (-1.0,) * act_dim, (1.0,) * act_dim, hidden)


def trained_sac(seed=0, steps=5):
    torch.manual_seed(seed)
    sac = build_algorithm("sac", SACConfig(hidden=(32, 32), batch_size=16), spec(9, 6, (32, 32)))
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        o = torch.randn(16, 9, generator=g)
        sac.losses(o, torch.rand(16, 6, generator=g) * 2 - 1, torch.randn(16, generator=g), o, torch.zeros(16))
    return sac


def test_checkpoint_roundtrip_restores_everything(tmp_path):
    src = trained_sac(0)
    path = checkpoint.save(tmp_path, src, {"updates": 5, "version": 2})
    dst = trained_sac(1, steps=1)
    tensors, metadata = checkpoint.read(path)
    checkpoint.restore(dst, tensors, metadata)
    for name, module in src.modules().items():
        for k, v in module.state_dict().items():
            torch.testing.assert_close(dst.modules()[name].state_dict()[k], v)
    assert dst.temperature.log_alpha.item() == pytest.approx(src.temperature.log_alpha.item())
    for name, opt in src.optimizers().items():
        s_state, d_state = opt.state_dict()["state"], dst.optimizers()[name].state_dict()["state"]
        for idx in s_state:
            torch.testing.assert_close(d_state[idx]["exp_avg_sq"], s_state[idx]["exp_avg_sq"])
    assert checkpoint.meta_of(metadata) == {"updates": 5, "version": 2}
    # Restored optimisers keep training identically.
    o = torch.ones(16, 9)
    torch.manual_seed(3)
    m1 = src.losses(o, torch.zeros(16, 6), torch.ones(16), o, torch.zeros(16))
    torch.manual_seed(3)
    m2 = dst.losses(o, torch.zeros(16, 6), torch.ones(16), o, torch.zeros(16))
    assert m1["losses/qf_loss"] == pytest.approx(m2["losses/qf_loss"], rel=1e-5)


def test_checkpoint_keeps_newest_and_resolves_run_dir(tmp_path):
    sac = trained_sac()
    for u in (1, 2, 3, 4):
        checkpoint.save(tmp_path / "checkpoints", sac, {"updates": u}, keep=3)
    names = [p.name for p in checkpoint.list_checkpoints(tmp_path / "checkpoints")]
    assert names == [f"ckpt_{u:09d}.safetensors" for u in (2, 3, 4)]
    assert checkpoint.resolve(tmp_path).name.endswith("000000004.safetensors")


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    path = checkpoint.save(tmp_path, trained_sac(), {"updates": 1})
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.read(path)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint found"):
        checkpoint.resolve(tmp_path / "empty")


def test_metrics_rotate_past_their_size_and_read_back_in_order(tmp_path):
    from robo_async.learner.metrics import MetricsLogger, read_metrics

    m = MetricsLogger(tmp_path, tensorboard=False, max_mb=0.01)  # ~10 KB per file
    for step in range(600):
        m.write(step, {"charts/x": float(step), "charts/pad": 1.0})
    m.close()
    assert (tmp_path / "metrics.1.jsonl").exists()
    assert (tmp_path / "metrics.jsonl").stat().st_size <= 0.01 * 2**20 + 200
    assert (tmp_path / "metrics.1.jsonl").stat().st_size <= 0.01 * 2**20 / 2 + 200  # the history: half the budget
    steps = [r["step"] for r in read_metrics(tmp_path)]
    # the run from its first record (issue 38: older points thinned, not dropped), in order; the
    # recent part at full resolution
    assert steps[0] == 0 and steps[-1] == 599 and steps == sorted(set(steps))
    recent = [r["step"] for r in read_metrics(tmp_path)[-50:]]
    assert recent == list(range(550, 600))
    assert len(steps) < 600  # thinned


def test_a_long_runs_history_keeps_its_first_step_in_tensorboard_too(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from robo_async.learner.metrics import MetricsLogger, read_metrics

    m = MetricsLogger(tmp_path, tensorboard=True, max_mb=0.005)
    for step in range(400):
        m.write(step, {"charts/x": float(step), "charts/pad": 1.0})
    m.close()  # (waits for the history's TensorBoard log)
    assert m.rotations >= 2
    history = EventAccumulator(str(tmp_path / "tb.1"))
    history.Reload()
    old = [e.step for e in history.Scalars("charts/x")]
    recent = EventAccumulator(str(tmp_path / "tb"))
    recent.Reload()
    new = [e.step for e in recent.Scalars("charts/x")]
    assert old[0] == 0 and old == sorted(old) and new[-1] == 399
    assert old + new == [r["step"] for r in read_metrics(tmp_path)]  # the same points as the JSON lines
    assert not (tmp_path / "tb.old").exists() and not (tmp_path / "tb.1.tmp").exists()
