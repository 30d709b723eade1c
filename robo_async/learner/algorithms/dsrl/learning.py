"""DSRL (Wagenmaker et al. 2025), the noise-aliased variant: steer a frozen flow policy by
picking its starting noise; nothing of the flow policy is trained.

- Q^A(s, a_{t:t+H}): a chunked critic on the executed windows with H-step backups (as `algo=qc`);
  the next chunk is the frozen flow's chunk for the noise actor's z'.
- Q^W(s, z) = Q^A(s, flow(s, z)): a noise critic regressed onto Q^A for noise samples (the
  actor's and uniform ones), so the actor learns in noise space without noise being recorded:
  transitions hold what was executed, which is what any policy driving the robot produces.
- The noise actor pi(z | s): SAC against Q^W, with a learned temperature, z in [-b, b]^(H x A).
Works for any flow/diffusion-type policy whose sampler takes its starting noise: our flow policy
(`policy=flow`, actors run `flow_dsrl`) and LeRobot policies whose `predict_action_chunk` takes
`noise=` (`policy=act policy.type=diffusion`, ...; actors run `lerobot_dsrl`; a DDPM sampler is
switched to DDIM so noise -> chunk is a function). Only the noise actor's weights travel, the
prior comes from `policy.path=` on every machine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from policies.critics import policy_value, subset_min
from policies.embedding import EMBEDDING, FrozenEncoder
from policies.lerobot_dsrl import SteeredLeRobotPolicy
from policies.onestep import ChunkCritic, NoiseSteeredPolicy
from robo_async.buffer.cache import window_targets
from robo_async.learner.algorithms.base import Algorithm, PolicySpec, hil_rewards, refuse_dagger, register, soft_update
from robo_async.learner.algorithms.dsrl.config import DSRLConfig
from robo_async.learner.algorithms.qc.learning import flow_prior
from robo_async.learner.algorithms.sac.learning import Temperature


class _FlowSteer:
    """The frozen prior as DSRL's update sees it: our flow policy (critics see delta chunks)."""

    def __init__(self, p: NoiseSteeredPolicy, tensor) -> None:  # type: ignore[no-untyped-def]
        self.p, self.tensor = p, tensor
        self.noise_shape = (p.horizon, len(p.low))

    def _inputs(self, obs: Mapping[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor | None]:
        imgs = self.p.images(obs)
        return self.tensor(self.p.condition(obs)), None if imgs is None else self.tensor(imgs)

    def features(self, obs: Mapping[str, np.ndarray]) -> torch.Tensor:
        """The prior's conditioning: from the stored embeddings of the frames when the batch has
        them (`obs/embedding`, made by this prior's encoder), else by encoding the frames."""
        with torch.no_grad():
            if EMBEDDING in obs:
                cond = self.p.net.features(self.tensor(self.p.condition(obs)))
                return torch.cat([cond, self.tensor(obs[EMBEDDING]).float()], dim=-1)
            return self.p.net.encode(*self._inputs(obs))

    def chunks(
        self, obs: Mapping[str, np.ndarray], z: torch.Tensor, features: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The frozen flow's chunks for noise z; `features` (from `features(obs)`): the frames are not
        encoded again."""
        cond = self.tensor(self.p.condition(obs))
        imgs = None
        if features is None:
            cond, imgs = self._inputs(obs)
        return self.p.sample(cond, images=imgs, noise=z.reshape(len(z), *self.noise_shape), encoded=features)

    def executed(self, actions: np.ndarray, state: np.ndarray) -> torch.Tensor:
        return self.tensor(np.clip(self.p.normalize(actions, state), -1, 1))


class _LeRobotSteer:
    """A frozen LeRobot policy (critics see chunks across the joint range)."""

    def __init__(self, p: SteeredLeRobotPolicy, tensor) -> None:  # type: ignore[no-untyped-def]
        self.p, self.tensor = p, tensor
        self.noise_shape = p.noise_shape

    def features(self, obs: Mapping[str, np.ndarray]) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):  # the frozen LeRobot policy runs as it was saved (fp32)
            return self.tensor(self.p.features(obs).float().cpu().numpy())

    def chunks(
        self, obs: Mapping[str, np.ndarray], z: torch.Tensor, features: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The frozen policy's chunks for noise z (it encodes the observation itself)."""
        with torch.autocast("cpu", enabled=False):
            return self.tensor(self.p.normalize(self.p.steered(obs, z.detach().float().cpu())))

    def executed(self, actions: np.ndarray, state: np.ndarray) -> torch.Tensor:
        return self.tensor(np.clip(self.p.normalize(actions), -1, 1))


def lerobot_prior(spec: PolicySpec) -> SteeredLeRobotPolicy:
    """`policy=act policy.type=<type> policy.path=<a saved LeRobot policy>`, noise-steered."""
    from policies.lerobot_build import LeRobotPolicyUnavailable, load_lerobot_policy

    path = spec.options.get("path")
    if not path:
        raise ValueError("algo=dsrl steers a frozen policy: give policy.path=<a saved LeRobot policy directory>")
    try:
        return load_lerobot_policy(
            str(path),
            action_low=spec.action_low,
            action_high=spec.action_high,
            env_keys=tuple(k for k in spec.obs_keys if k != "state"),
            cameras=tuple(spec.options.get("cameras") or ()),
            dt=spec.dt,  # type: ignore[arg-type]
            units=str(spec.options.get("units", "rad")),
            task=str(spec.options.get("instruction", "")),
            state_dim=spec.obs_dims[0] if spec.obs_keys[:1] == ("state",) else None,
            env_dim=int(sum(d for k, d in zip(spec.obs_keys, spec.obs_dims, strict=False) if k != "state")),
        )
    except LeRobotPolicyUnavailable as e:
        raise ValueError(str(e)) from None


@register("dsrl", DSRLConfig)
class DSRL(Algorithm):
    """DSRL (see the module's docstring): a noise actor steers a frozen flow or LeRobot policy
    (`policy.path=`) through its starting noise. Learns from windows of `horizon` executed ticks;
    publishes only the noise actor's weights (actors run `flow_dsrl` or `lerobot_dsrl`)."""

    supports_device = True
    whole_chunks = True  # Q(s, chunk) of chunks that ran whole

    def __init__(self, config: DSRLConfig, policy: PolicySpec) -> None:
        self.config = c = config
        refuse_dagger(config, "dsrl")
        self.spec = policy
        self.policy: NoiseSteeredPolicy | SteeredLeRobotPolicy
        if policy.name == "lerobot":
            try:
                self.policy = SteeredLeRobotPolicy(
                    lerobot_prior(policy), c.noise_bound, tuple(c.noise_hidden), residual_scale=c.residual_scale
                )
            except ValueError as e:
                raise ValueError(f"algo=dsrl: {e}") from None
            self.steer: _FlowSteer | _LeRobotSteer = _LeRobotSteer(self.policy, self.tensor)
            feat = self.policy.feature_dim
        else:
            if not policy.options.get("path") and policy.name == "flow":
                raise ValueError("algo=dsrl steers a frozen policy: give policy.path=<a `robo-async bc` run>")
            prior = flow_prior(policy, "dsrl")
            _, extra = self.acting_policy(c, policy.name)
            self.policy = NoiseSteeredPolicy(**policy.flow_kwargs(), **extra)  # type: ignore[arg-type]
            self.policy.load_prior(prior.weights())
            self.steer = _FlowSteer(self.policy, self.tensor)
            feat = self.policy.noise_actor.trunk[0].in_features
        self.window = self.policy.horizon
        h, a = self.policy.horizon, len(policy.action_low)
        self.critic = ChunkCritic(feat, h, a, c.critic_hidden, critics=c.critics)  # Q^A(s, chunk)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._gen = torch.Generator().manual_seed(0)  # the target's random subset of critics
        self.noise_critic = ChunkCritic(feat, *self.steer.noise_shape, c.critic_hidden)  # Q^W(s, z)
        self.actor = self.policy.noise_actor
        self.temperature = Temperature(c.init_alpha)
        zn = self.steer.noise_shape[0] * self.steer.noise_shape[1]
        self.target_entropy = -zn / 2 if c.target_entropy is None else c.target_entropy
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=c.lr)
        self.noise_critic_opt = torch.optim.Adam(self.noise_critic.parameters(), lr=c.lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=c.lr)
        self.alpha_opt = torch.optim.Adam(self.temperature.parameters(), lr=c.lr)

    @staticmethod
    def acting_policy(config: DSRLConfig, policy: str) -> tuple[str, dict[str, object]]:  # type: ignore[override]
        name = "lerobot_dsrl" if policy == "lerobot" else "flow_dsrl"
        extra: dict[str, object] = {"noise_bound": config.noise_bound, "noise_hidden": tuple(config.noise_hidden)}
        if policy == "lerobot":  # (ACT: its residual head's scale)
            extra["residual_scale"] = config.residual_scale
        return name, extra

    def to_device(self, device: torch.device | str) -> None:
        if isinstance(self.policy, SteeredLeRobotPolicy):  # its processors pin it to the CPU it was loaded on
            return
        super().to_device(device)
        self.policy.net.to(self.device)  # the frozen prior is not a trained module

    def frozen_encoder(self) -> FrozenEncoder | None:
        """The pixel prior's camera encoder: the critics and the noise actor learn on its stored
        embeddings (the frames are encoded once, where they are produced)."""
        return self.policy.frozen_encoder() if isinstance(self.policy, NoiseSteeredPolicy) else None

    def modules(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "noise_critic": self.noise_critic,
            "temperature": self.temperature,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "critic_opt": self.critic_opt,
            "noise_critic_opt": self.noise_critic_opt,
            "actor_opt": self.actor_opt,
            "alpha_opt": self.alpha_opt,
        }

    def _steer(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z, logp = self.actor.sample(feats)
        return (z * self.policy.noise_bound).reshape(len(z), *self.steer.noise_shape), logp

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        c = self.config
        p, s = self.policy, self.steer
        obs = {k.removeprefix("obs/"): v for k, v in batch.items() if k.startswith("obs/")}
        nxt = {k.removeprefix("next_obs/"): v for k, v in batch.items() if k.startswith("next_obs/")}
        f, next_f = s.features(obs), s.features(nxt)
        chunk = s.executed(batch["actions"], batch["obs/state"])
        rewards = hil_rewards(batch["rewards"], batch.get("interventions"), c.intervention_penalty)
        ret, boot = window_targets(rewards, batch["mask"], batch["steps"], batch["terminated"], c.gamma)
        alpha = self.temperature.log_alpha.exp().detach()

        with torch.no_grad():  # Q^A: H-step backup on the executed chunk
            z_next, _ = self._steer(next_f)
            a_next = s.chunks(nxt, z_next, next_f)  # the frozen encoder's features: frames encoded once
            q_next = subset_min(self.critic_target(next_f, a_next, features=next_f), c.critic_subset, self._gen)
            target = self.tensor(ret) + self.tensor(boot) * q_next
        qs = self.critic(f, chunk, features=f)  # [critics, B]
        critic_loss = ((qs - target) ** 2).mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        with torch.no_grad():  # Q^W(s, z) <- Q^A(s, flow(s, z)) for the actor's and uniform noise
            # rows: the batch's observations with the actor's noise, then the first `uni` of them with
            # uniform noise (noise_uniform of the batch: the prior's chunks are most of the update's cost)
            uni = int(round(c.noise_uniform * len(f)))
            idx = np.concatenate([np.arange(len(f)), np.arange(uni) % len(f)])
            z_pi, _ = self._steer(f)
            z_uni = (torch.rand_like(z_pi[:uni]) * 2 - 1) * p.noise_bound
            z_all = torch.cat([z_pi, z_uni])
            f2 = f[torch.as_tensor(idx, device=f.device)]
            a_all = s.chunks({k: v[idx] for k, v in obs.items()}, z_all, f2)
            w_target = policy_value(self.critic(f2, a_all, features=f2), c.critic_subset)
        ws = self.noise_critic(f2, z_all / p.noise_bound, features=f2)
        noise_loss = ((ws - w_target) ** 2).mean(1).sum()
        self.noise_critic_opt.zero_grad(set_to_none=True)
        noise_loss.backward()
        self.noise_critic_opt.step()

        z, logp = self._steer(f)
        qw = self.noise_critic(f, z / p.noise_bound, features=f).min(0).values
        actor_loss = (alpha * logp - qw).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = -(self.temperature.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()

        soft_update(self.critic, self.critic_target, c.tau)
        return {
            "losses/qf_loss": critic_loss.item() / c.critics,
            "losses/qf1_values": qs[0].mean().item(),
            "losses/noise_critic_loss": noise_loss.item() / 2,
            "losses/actor_loss": actor_loss.item(),
            "losses/alpha": alpha.item(),
            "losses/entropy": -logp.mean().item(),
            "losses/window_steps": float(np.mean(batch["steps"])),
        }
