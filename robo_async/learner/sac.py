"""Soft Actor-Critic: twin critics, target critics, learned temperature (Haarnoja et al. 2018).

Actions inside the algorithm are normalised to [-1, 1]; the policy maps them to joint targets.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from policies.mlp import GaussianActor, TwinCritic


@dataclass(frozen=True)
class SACConfig:
    gamma: float = 0.9  # discount per control tick
    tau: float = 0.01  # Polyak factor for the target critics
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    init_alpha: float = 0.1
    target_entropy: float | None = None  # None: -action_dim
    batch_size: int = 256
    utd_ratio: float = 1.0  # learner updates per environment step
    warmup_steps: int = 1000  # transitions in the store before the first update
    limiter_slack: int = 512  # env steps as-fast-as-possible actors may run ahead of the update ratio
    hidden: tuple[int, ...] = (256, 256)


class SAC:
    """The losses and optimisers. `update()` is one gradient step on every network."""

    def __init__(self, actor: GaussianActor, obs_dim: int, act_dim: int, config: SACConfig) -> None:
        self.config = config
        self.actor = actor
        self.critic = TwinCritic(obs_dim, act_dim, config.hidden)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(float(config.init_alpha)).log())
        self.target_entropy = (
            -float(act_dim) if config.target_entropy is None else config.target_entropy
        )
        self.actor_opt = torch.optim.Adam(actor.parameters(), lr=config.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr)

    def update(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> dict[str, float]:
        c = self.config
        alpha = self.log_alpha.exp().detach()

        with torch.no_grad():
            next_act, next_logp = self.actor.sample(next_obs)
            q1_t, q2_t = self.critic_target(next_obs, next_act)
            v_next = torch.min(q1_t, q2_t) - alpha * next_logp
            target = reward + c.gamma * (1.0 - terminated) * v_next
        q1, q2 = self.critic(obs, act)
        critic_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        new_act, logp = self.actor.sample(obs)
        q1_pi, q2_pi = self.critic(obs, new_act)
        actor_loss = (alpha * logp - torch.min(q1_pi, q2_pi)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        with torch.no_grad():
            for p, p_t in zip(self.critic.parameters(), self.critic_target.parameters()):
                p_t.lerp_(p, c.tau)

        return {
            "losses/qf_loss": critic_loss.item() / 2,
            "losses/qf1_values": q1.mean().item(),
            "losses/actor_loss": actor_loss.item(),
            "losses/alpha_loss": alpha_loss.item(),
            "losses/alpha": alpha.item(),
            "losses/entropy": -logp.mean().item(),
        }

    # --- checkpoint state (tensors only, plus optimiser state) ------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}
