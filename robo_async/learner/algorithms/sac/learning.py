"""Soft Actor-Critic: twin critics, target critics, learned temperature (Haarnoja et al. 2018);
with `algo.critics`/`critic_subset`/`critic_layer_norm` (`algo=rlpd`), RLPD's critic ensemble.

Actions inside the algorithm are normalised to [-1, 1]; the policy (`policies.mlp.MLPPolicy`)
maps them to joint targets. Stored actions are joint targets as executed, mapped back here.

From pixels (`policy.cameras`), as DrQ / RLPD do it: the policy's conv encoder is trained by the
critic loss only, the actor reads its features detached, the target critics use a Polyak-averaged
target encoder, and frames get a random shift (`algo.augment_pad`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from policies.augment import random_shift
from policies.critics import CriticEnsemble, frozen, load_twin_heads, policy_value, subset_min
from robo_async.buffer.layout import TABLES
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, hil_rewards, mlp_policy, register, soft_update
from robo_async.learner.algorithms.sac.config import SACConfig

DEMOS = TABLES.index("demos")  # the `table` index of demonstration rows


class Critics(CriticEnsemble):
    """SAC's critics: Q(obs features, normalised action) for every member, [n, B]. Checkpoints of
    the twin critics (`q1`, `q2`) load into two members."""

    def __init__(self, obs_dim: int, act_dim: int, c: SACConfig) -> None:
        super().__init__(obs_dim + act_dim, c.hidden, c.critics, c.critic_layer_norm)
        self._register_load_state_dict_pre_hook(lambda state, prefix, *_: load_twin_heads(state, prefix))

    def q(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Every member's Q(obs features, normalised action): [n, B]."""
        return self(torch.cat([obs, act], dim=-1))


class Temperature(nn.Module):
    """The entropy temperature alpha, learned in log space."""

    def __init__(self, init_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(init_alpha)).log())


@register("sac", SACConfig)
class SAC(Algorithm):
    """SAC (see the module's docstring) for the one-step `policy=mlp`, on single transitions;
    with `dagger_weight` a BC loss toward operators' actions, with `intervention_penalty` RLIF
    rewards. Publishes the policy's actor."""

    def __init__(self, config: SACConfig, policy: PolicySpec) -> None:
        self.config = c = config
        self.spec = policy
        self.policy = mlp_policy(policy, "sac")
        self.actor = self.policy.net
        act_dim = len(policy.action_low)
        self.critic = Critics(self.policy.feature_dim, act_dim, c)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.encoder = self.policy.encoder  # None without cameras; else shared by critic and actor
        self.encoder_target = copy.deepcopy(self.encoder).requires_grad_(False) if self.encoder is not None else None
        self._gen = torch.Generator().manual_seed(0)
        self.temperature = Temperature(c.init_alpha)
        self.target_entropy = -float(act_dim) if c.target_entropy is None else c.target_entropy
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=c.actor_lr, foreach=True)
        critic_params = list(self.critic.parameters()) + (list(self.encoder.parameters()) if self.encoder else [])
        self.critic_opt = torch.optim.Adam(critic_params, lr=c.critic_lr, foreach=True)
        self.alpha_opt = torch.optim.Adam(self.temperature.parameters(), lr=c.alpha_lr)

    def modules(self) -> dict[str, nn.Module]:
        # "actor" is the published policy's module (with cameras: the Gaussian actor and the encoder)
        target = {"encoder_target": self.encoder_target} if self.encoder_target is not None else {}
        return {
            "actor": self.policy.module(),
            "critic": self.critic,
            "critic_target": self.critic_target,
            "temperature": self.temperature,
            **target,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        obs = self.policy.inputs(batch, "obs/", fit=True)  # policy.obs_norm: its statistics follow the replay
        next_obs = self.policy.inputs(batch, "next_obs/")
        act = torch.as_tensor(self.policy.to_normalized(batch["action"], batch["obs/state"]), dtype=torch.float32)
        iv = batch.get("intervention")
        reward = torch.as_tensor(
            hil_rewards(batch["reward"], iv, self.config.intervention_penalty), dtype=torch.float32
        )
        done = torch.as_tensor(batch["terminated"], dtype=torch.float32)  # truncation still bootstraps
        operated = torch.as_tensor(iv > 0) if iv is not None and self.config.dagger_weight else None
        tab = batch.get("table")
        demo = torch.as_tensor(tab == DEMOS) if tab is not None and self.config.demo_bc_weight else None
        if self.encoder is None:
            return self.losses(obs, act, reward, next_obs, done, operated=operated, demo=demo)
        pad = self.config.augment_pad

        def frames(prefix: str) -> torch.Tensor:
            imgs = self.policy.images({k.removeprefix(prefix): v for k, v in batch.items() if k.startswith(prefix)})
            return random_shift(torch.as_tensor(imgs), pad, self._gen)

        imgs, next_imgs = frames("obs/"), frames("next_obs/")
        feats = self.policy.features(obs, imgs)  # the critic's: the encoder learns from its loss
        with torch.no_grad():
            next_feats = self.policy.features(next_obs, next_imgs)
            next_target = self.policy.features(next_obs, next_imgs, self.encoder_target)
        out = self.losses(
            feats, act, reward, next_feats, done, next_target, actor_obs=feats.detach(), operated=operated, demo=demo
        )
        soft_update(self.encoder, self.encoder_target, self.config.tau)
        return out

    def losses(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        next_obs_target: torch.Tensor | None = None,
        actor_obs: torch.Tensor | None = None,
        operated: torch.Tensor | None = None,
        demo: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One SAC update on inputs already encoded: `obs` (the critic's, may carry the encoder's
        gradient), `next_obs` (the actor's next action), `next_obs_target` (the target critics';
        default `next_obs`), `actor_obs` (the actor's; default `obs`); `operated` marks rows an
        operator drove (HG-DAgger's BC term pulls the actor's mean toward their actions); `demo` marks
        demonstrations, cloned where the critics rate their action above the policy's (`demo_bc_weight`)."""
        c = self.config
        log_alpha = self.temperature.log_alpha
        alpha = log_alpha.exp().detach()
        next_t = next_obs if next_obs_target is None else next_obs_target
        a_obs = obs if actor_obs is None else actor_obs

        with torch.no_grad():
            next_act, next_logp = self.actor.sample(next_obs)
            q_next = subset_min(self.critic_target.q(next_t, next_act), c.critic_subset, self._gen)
            v_next = q_next - alpha * next_logp
            target = reward + c.gamma * (1.0 - terminated) * v_next
        qs = self.critic.q(obs, act)  # [n, B]
        critic_loss = ((qs - target) ** 2).mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        with frozen(self.critic):  # the actor's gradient goes through the critics, not into them
            new_act, logp = self.actor.sample(a_obs)
            qs_pi = self.critic.q(a_obs, new_act)
            actor_loss = (alpha * logp - policy_value(qs_pi, c.critic_subset)).mean()
            dagger = torch.zeros(())
            if operated is not None and bool(operated.any()):
                mean = torch.tanh(self.actor(a_obs[operated])[0])
                dagger = ((mean - act[operated].clamp(-1, 1)) ** 2).sum(-1).mean()
                actor_loss = actor_loss + c.dagger_weight * dagger
            demo_bc = kept = torch.zeros(())
            if demo is not None and bool(demo.any()):
                with torch.no_grad():  # the Q filter: clone only where the demonstrated action beats the policy's
                    q_demo = policy_value(self.critic.q(a_obs[demo], act[demo]), c.critic_subset)
                    better = (q_demo > policy_value(qs_pi.detach()[:, demo], c.critic_subset)).float()
                mean = torch.tanh(self.actor(a_obs[demo])[0])
                demo_bc = (((mean - act[demo].clamp(-1, 1)) ** 2).sum(-1) * better).sum() / demo.sum()
                kept = better.mean()
                actor_loss = actor_loss + c.demo_bc_weight * demo_bc
            self.actor_opt.zero_grad(set_to_none=True)
            actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        soft_update(self.critic, self.critic_target, c.tau)

        return {
            "losses/qf_loss": critic_loss.item() / c.critics,
            "losses/qf1_values": qs[0].mean().item(),
            "losses/actor_loss": actor_loss.item(),
            "losses/alpha_loss": alpha_loss.item(),
            "losses/alpha": alpha.item(),
            "losses/entropy": -logp.mean().item(),
            **({"losses/dagger_loss": dagger.item()} if operated is not None else {}),
            **({"losses/demo_bc_loss": demo_bc.item(), "losses/demo_kept": kept.item()} if demo is not None else {}),
        }
