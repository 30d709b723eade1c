"""The flow policy's two RTC conditionings (path: prefix on its flow path; clean: training-time
RTC) and REMAC-style perturbed / hidden prefixes in the BC loss."""

import numpy as np
import torch

from policies.flow import FlowChunkPolicy
from sim import ReachTask

SPEC = ReachTask().spec()


def policy(mode):
    p = FlowChunkPolicy(
        ("state",),
        (6,),
        SPEC.joint_low,
        SPEC.joint_high,
        horizon=6,
        steps=4,
        hidden=(32,),
        prefix_mode=mode,
        action_mode="absolute",
    )
    p.deterministic = True
    return p


def record_inputs(p):
    seen = []
    forward = p.net.forward

    def spy(x, t, cond, delay, mask):
        seen.append((x.clone(), float(t[0]), mask.clone()))
        return forward(x, t, cond, delay, mask)

    p.net.forward = spy
    return seen


def test_clean_prefix_is_given_exactly_at_every_step_and_path_prefix_follows_the_flow():
    prefix = np.full((2, 6), 0.3, np.float32)
    obs = {"state": np.zeros(6, np.float32)}
    for mode in ("clean", "path"):
        p = policy(mode)
        seen = record_inputs(p)
        chunk = p.predict_chunk(obs, prefix=prefix)
        np.testing.assert_array_equal(chunk.actions[:2], prefix)  # returned exactly either way
        want = torch.as_tensor(p.normalize(prefix))
        assert len(seen) == 4
        for x, t, mask in seen:
            assert mask[0, :2].tolist() == [1, 1] and mask[0, 2:].sum() == 0
            on_path = (1 - t) * 0.0 + t * want  # deterministic: x0 = 0
            expect = want if mode == "clean" else on_path
            torch.testing.assert_close(x[0, :2], expect)
        assert "rtcclean" in p.architecture if mode == "clean" else "rtcclean" not in p.architecture


def _loss_inputs(p, **kw):
    seen = record_inputs(p)
    torch.manual_seed(0)
    cond = torch.zeros(4, 6)
    chunks = torch.rand(4, 6, 6) * 2 - 1
    p.bc_loss(cond, chunks, torch.full((4,), 3), prefix_len=torch.full((4,), 3), **kw)
    return seen[0], chunks


def test_remac_perturbs_only_the_given_prefix_and_hiding_frees_positions():
    p = policy("clean")
    (x_plain, _, m_plain), chunks = _loss_inputs(p)
    torch.testing.assert_close(x_plain[:, :3], chunks[:, :3])  # clean: the demonstration's prefix
    (x_noisy, _, m_noisy), _ = _loss_inputs(p, prefix_noise=0.2)
    assert (x_noisy[:, :3] - chunks[:, :3]).abs().mean() > 0.05  # the given prefix is perturbed
    assert torch.equal(m_plain, m_noisy)
    (x_hidden, _, m_hidden), _ = _loss_inputs(p, prefix_hide=1.0)
    assert m_hidden.sum() == 0 and m_plain[:, :3].sum() == 12  # every committed position hidden: all free
