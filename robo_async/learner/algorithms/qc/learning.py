"""Q-chunking (Li et al. 2025) with flow Q-learning (Park et al. 2025): RL of chunk policies.

- The critic scores whole chunks: Q(s_t, a_{t:t+H}) over the actions that were executed, from
  store windows of H consecutive transitions of one episode, with the H-step backup
  `sum_k gamma^k r_{t+k} + gamma^H Q'(s_{t+H}, a')` (shorter at an episode end; no bootstrap
  after a termination, a time limit still bootstraps).
- The flow policy (`policy=flow`) keeps learning by BC (flow matching) on the same windows: it
  stays the behaviour prior; a `policy.path=` BC run is the warm start.
- A one-step actor (noise z -> chunk in one pass) maximises Q while distilling the flow policy's
  chunk for the same z (`alpha`): FQL's policy extraction. The actors run it (`flow_onestep`);
  with `best_of_n > 1` they draw n chunks and execute the highest-Q one, and the target uses the
  best of n too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.augment import random_shift
from policies.critics import policy_value, subset_min
from policies.flow import FlowChunkPolicy
from policies.onestep import ChunkCritic, OneStepChunkPolicy
from robo_async.buffer.cache import window_targets
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, hil_rewards, register, soft_update
from robo_async.learner.algorithms.qc.config import QCConfig


def flow_prior(spec: PolicySpec, algo: str) -> FlowChunkPolicy:
    """The BC flow policy an algorithm builds on, with `policy.path=` weights when given."""
    if spec.name != "flow":
        raise ValueError(
            f"algo={algo} trains a chunk policy from policy=flow (its BC prior); "
            f"policy={spec.name} does not fit: use policy=flow"
        )
    flow = FlowChunkPolicy(**spec.flow_kwargs())  # type: ignore[arg-type]
    path = spec.options.get("path")
    if path:
        from safetensors.numpy import load_file

        file = Path(str(path)) / "policy.safetensors" if Path(str(path)).is_dir() else Path(str(path))
        if not file.is_file():
            raise ValueError(f"policy.path={path}: no policy.safetensors there (train one with `robo-async bc`)")
        try:
            flow.load_weights(0, load_file(str(file)))
        except ValueError as e:
            raise ValueError(f"policy.path={file} does not fit policy=flow as configured: {e}") from None
    return flow


@register("qc", QCConfig)
class QC(Algorithm):
    """Q-chunking with flow Q-learning (see the module's docstring): a chunk critic, the BC flow
    prior (`policy.path=` warm start, stays on the learner) and a one-step actor, trained on
    windows of `horizon` executed ticks (with `max_delay` ticks of lookback for asynchronous
    actors). Publishes the one-step actor (`flow_onestep`; with `best_of_n > 1` the critic too)."""

    supports_device = True
    whole_chunks = True  # Q(s, chunk) of chunks that ran whole

    def __init__(self, config: QCConfig, policy: PolicySpec) -> None:
        self.config = c = config
        self.spec = policy
        self.flow = flow_prior(policy, "qc")
        self.window = self.flow.horizon
        if c.max_delay is not None and c.max_delay < 0:
            raise ValueError(f"algo.max_delay must be >= 0, not {c.max_delay}")
        self.lookback = int(c.max_delay or 0)
        _, extra = self.acting_policy(c, policy.name)
        extra.pop("path")
        self.policy = OneStepChunkPolicy(**policy.flow_kwargs(), **extra)  # type: ignore[arg-type]
        self.policy.norm.load_state_dict(self.flow.norm.state_dict())  # chunks in the prior's normalized space
        self.actor = self.policy.actor
        cond, h, a = sum(policy.obs_dims), self.flow.horizon, len(policy.action_low)
        cams, size = len(self.flow.cameras), self.flow.image_size
        self.critic = self.policy.critic or ChunkCritic(cond, h, a, c.critic_hidden, cams, size, c.critics)
        if cams:  # pixel SAC/RLPD-style: one image encoder, trained by the critic, read by the actor
            self.actor.encoder = self.critic.encoder
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=c.lr)
        self.actor_opt = torch.optim.Adam(
            [p for n, p in self.actor.named_parameters() if not n.startswith("encoder.")], lr=c.lr
        )
        self._gen = torch.Generator().manual_seed(0)
        self.flow_opt = torch.optim.Adam(self.flow.net.parameters(), lr=c.lr)
        self.updates = 0

    @staticmethod
    def acting_policy(config: QCConfig, policy: str) -> tuple[str, dict[str, object]]:  # type: ignore[override]
        # the flow prior (policy.path) stays on the learner: the actors only run the one-step actor
        return "flow_onestep", {
            "best_of_n": config.best_of_n,
            "critic_hidden": tuple(config.critic_hidden),
            "critics": config.critics,
            "actor_hidden": tuple(config.actor_hidden),
            "path": None,
        }

    def modules(self) -> dict[str, nn.Module]:
        out = {"actor": self.policy.module(), "critic_target": self.critic_target, "flow": self.flow.net}
        if self.policy.critic is None:
            out["critic"] = self.critic
        return out

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"critic_opt": self.critic_opt, "actor_opt": self.actor_opt, "flow_opt": self.flow_opt}

    # --- the batch ---------------------------------------------------------------------------
    def _inputs(self, batch: Mapping[str, np.ndarray], prefix: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Vector conditioning and camera frames (DrQ-shifted) of `obs/` or `next_obs/`."""
        obs = {k.removeprefix(prefix): v for k, v in batch.items() if k.startswith(prefix)}
        imgs = self.flow.images(obs)
        if imgs is not None:
            imgs = random_shift(self.tensor(imgs), self.config.augment_pad, self._gen)
        return self.tensor(self.flow.condition(obs)), imgs

    def chunks(self, batch: Mapping[str, np.ndarray], ref: np.ndarray | None = None) -> torch.Tensor:
        """The executed windows, normalized like the policy's chunks (relative to `ref`, by
        default the window's first state)."""
        ref = batch["obs/state"] if ref is None else ref
        return self.tensor(np.clip(self.flow.normalize(batch["actions"], ref), -1, 1))

    def acting_inputs(
        self, batch: Mapping[str, np.ndarray]
    ) -> tuple[torch.Tensor, torch.Tensor | None, np.ndarray, torch.Tensor] | None:
        """What an asynchronous actor had when it asked for each window's chunk, `lag` ticks
        before it (the sampler's lookback): that observation with its state forwarded through
        the committed actions (position control: the last committed target, as the actor's
        `forward_state` and delay-consistent BC do), and the delay. (conditioning, frames, the
        forwarded state, delays [B]); None without lookback."""
        if "lag" not in batch:
            return None
        lag = np.asarray(batch["lag"], np.int64)
        obs = {k.removeprefix("lag_obs/"): v for k, v in batch.items() if k.startswith("lag_obs/")}
        fstate = np.array(obs["state"], np.float32)
        a = len(self.flow.low)
        last = batch["lag_actions"][np.arange(len(lag)), np.maximum(lag - 1, 0)]
        fstate[lag > 0, :a] = last[lag > 0, :a]
        imgs = self.flow.images(obs)
        if imgs is not None:
            imgs = random_shift(self.tensor(imgs), self.config.augment_pad, self._gen)
        return self.tensor(self.flow.condition(obs, fstate)), imgs, fstate, self.tensor(lag)

    def relative_to(self, x: torch.Tensor, ref_from: np.ndarray, ref_to: np.ndarray) -> torch.Tensor:
        """Normalized chunks [B, H, A] made relative to `ref_from` re-expressed relative to
        `ref_to` (delta mode; absolute chunks do not depend on the state)."""
        if self.flow.action_mode != "delta":
            return x
        a, r = len(self.flow.low), self.flow.delta_range
        low, high = self.tensor(self.flow.low), self.tensor(self.flow.high)
        to = self.tensor(np.asarray(ref_to, np.float32)[:, :a])[:, None]
        shift = self.tensor(np.asarray(ref_from, np.float32)[:, :a])[:, None] - to
        norm = self.flow.norm.to(x.device)  # in the coarse space, where a shift is a shift
        y = torch.clamp(
            norm.to_coarse(x) + shift / r, (low - to) / r, (high - to) / r
        )  # the joint limits, as the actor clips
        return torch.clamp(norm.from_coarse(y), -1, 1)

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        c = self.config
        cond, imgs = self._inputs(batch, "obs/")
        next_cond, next_imgs = self._inputs(batch, "next_obs/")
        chunk = self.chunks(batch)
        iv = batch.get("interventions")
        rewards = hil_rewards(batch["rewards"], iv, c.intervention_penalty)
        ret, boot = window_targets(rewards, batch["mask"], batch["steps"], batch["terminated"], c.gamma)
        ret_t, boot_t = self.tensor(ret), self.tensor(boot)
        b, shape = len(chunk), tuple(chunk.shape[1:])

        # critic: H-step backup on the executed chunk. With cameras the next observation is encoded
        # once, by the online encoder without gradients, for the actor and the target heads (DrQ-v2)
        with torch.no_grad():
            self.policy.deterministic = False
            next_f = self.critic.encoder(next_cond, next_imgs)
            if c.best_of_n > 1:
                next_chunk = self.policy.act(next_cond, next_imgs)
            else:
                next_chunk = self.actor(next_cond, torch.randn(b, *shape, device=self.device), features=next_f)
            q_next = subset_min(self.critic_target(next_cond, next_chunk, features=next_f), c.critic_subset, self._gen)
            target = ret_t + boot_t * q_next
        feats = self.critic.encoder(cond, imgs)  # with cameras, the encoder learns from the critic only
        qs = self.critic(cond, chunk, features=feats)  # [critics, B]
        critic_loss = ((qs - target) ** 2).mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        # what the actor had when it asked for this chunk (delay-consistent acting), or the
        # window's own first observation
        acting = self.acting_inputs(batch)
        zeros = torch.zeros(b, dtype=torch.long, device=self.device)
        if acting is None:
            a_cond, a_imgs, a_chunk, delay, a_feats = cond, imgs, chunk, zeros, feats.detach()
        else:
            a_cond, a_imgs, fstate, delay = acting
            a_chunk = self.chunks(batch, fstate)
            with torch.no_grad():
                a_feats = self.critic.encoder(a_cond, a_imgs)

        # flow policy: BC on the executed chunks (the behaviour prior)
        flow_loss = torch.zeros((), device=self.device)
        flow_cond = None
        if c.bc_flow:  # the flow's conditioning is encoded once: trained here, reused (detached) below
            flow_cond = self.flow.net.encode(a_cond, a_imgs)
            flow_loss = self.flow.bc_loss(a_cond, a_chunk, delay, a_imgs, zeros, encoded=flow_cond)
            self.flow_opt.zero_grad(set_to_none=True)
            flow_loss.backward()
            self.flow_opt.step()
            flow_cond = flow_cond.detach()

        # one-step actor: maximise Q (of the chunk where it starts), stay near the flow policy's
        # chunk for the same noise and inputs
        z = torch.randn(b, *shape, device=self.device)
        with torch.no_grad():
            target_chunk = self.flow.sample(a_cond, images=a_imgs, noise=z, delay=delay, encoded=flow_cond)
        f = feats.detach()
        act = self.actor(a_cond, z, features=a_feats, delay=delay)
        distill = ((act - target_chunk) ** 2).mean()
        q_chunk = act if acting is None else self.relative_to(act, acting[2], batch["obs/state"])
        q_pi = policy_value(self.critic(cond, q_chunk, features=f), c.critic_subset)
        q_loss = -q_pi.mean() / q_pi.abs().mean().detach().clamp(min=1e-6)
        warm = self.updates < c.distill_only_updates
        actor_loss = c.alpha * distill + (0.0 if warm else q_loss)
        dagger = None
        if c.dagger_weight and iv is not None:  # HG-DAgger: windows an operator drove throughout
            operated = torch.as_tensor(((iv > 0) | (batch["mask"] == 0)).all(1) & (iv[:, 0] > 0), device=self.device)
            if bool(operated.any()):
                dagger = ((act[operated] - a_chunk[operated]) ** 2).mean()
                actor_loss = actor_loss + c.dagger_weight * dagger
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        soft_update(self.critic, self.critic_target, c.tau)
        self.updates += 1
        return {
            "losses/qf_loss": critic_loss.item() / c.critics,
            "losses/qf1_values": qs[0].mean().item(),
            "losses/actor_loss": actor_loss.item(),
            "losses/q_pi": q_pi.mean().item(),
            "losses/distill_loss": distill.item(),
            "losses/flow_bc_loss": flow_loss.item(),
            "losses/window_steps": float(np.mean(batch["steps"])),
            **({"losses/mean_delay": float(np.mean(batch["lag"]))} if "lag" in batch else {}),
            **({"losses/dagger_loss": dagger.item()} if dagger is not None else {}),
        }
