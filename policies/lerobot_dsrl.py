"""DSRL on a frozen LeRobot policy (`lerobot_dsrl`): a small noise actor steers the prior's sampler
(diffusion, the flow-matching VLAs), or, for a policy that takes no noise (ACT), picks a residual on its
chunk. The prior is a `LeRobotChunkPolicy`; only the noise actor's weights travel.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from policies.base import ActionChunk, Policy, register
from policies.lerobot_chunk import LeRobotChunkPolicy


def _deterministic_sampler(policy: LeRobotChunkPolicy) -> None:
    """DSRL needs noise -> chunk to be a function: a diffusion policy sampling with DDPM (which
    adds fresh noise every step) samples with DDIM instead (eta 0, the same trained betas)."""
    diffusion = getattr(policy.policy, "diffusion", None)
    sched = getattr(diffusion, "noise_scheduler", None)
    if sched is None or type(sched).__name__ == "DDIMScheduler":
        return
    from diffusers.schedulers.scheduling_ddim import DDIMScheduler

    diffusion.noise_scheduler = DDIMScheduler.from_config(sched.config)


@register("lerobot_dsrl")
class SteeredLeRobotPolicy(Policy):
    """DSRL (Wagenmaker et al. 2025) on a frozen LeRobot policy whose sampler takes its starting
    noise (`predict_action_chunk(noise=)`: diffusion, and the flow-matching VLAs): a small
    tanh-Gaussian actor over the policy's own observation features picks the noise in
    [-b, b]^noise_shape; the chunk is the frozen policy's chunk for that noise (so always one it
    can make, inside the joint limits). Only the noise actor's weights travel; every machine
    loads the prior from `policy.path=`. A committed prefix (RTC) is kept exactly.

    A deterministic policy that takes no noise (ACT) gets a residual head instead (residual RL,
    as Policy Decorator / ResiP): the same actor picks z in [-b, b]^(chunk x A) and the chunk is the
    frozen policy's own plus `residual_scale * z` in its normalized action space (at most
    `residual_scale * b` of each action's spread), so the critics, the learner and the wire are DSRL's."""

    def __init__(
        self,
        prior: LeRobotChunkPolicy,
        noise_bound: float = 1.5,
        noise_hidden: tuple[int, ...] = (128, 128),
        seed: int = 0,
        residual_scale: float = 0.1,
    ) -> None:
        from policies.mlp import GaussianActor

        shape = prior.noise_shape
        self.residual = shape is None  # ACT: a residual head on its chunk
        if self.residual:
            if not residual_scale > 0:
                raise ValueError(
                    f"LeRobot '{prior.type}' takes no starting noise; its residual head needs "
                    f"residual_scale > 0 (got {residual_scale})"
                )
            shape = (prior.horizon, prior.action_dim)
        self.prior, self.noise_shape = prior, shape
        self.noise_bound, self.residual_scale = float(noise_bound), float(residual_scale)
        prior.policy.requires_grad_(False)
        _deterministic_sampler(prior)
        self.horizon, self.dt = prior.horizon, prior.dt
        self.low, self.high = prior.low, prior.high
        self.deterministic = False
        self._gen = torch.Generator().manual_seed(seed)
        self.feature_dim = int(self.features(self._zeros()).shape[-1])
        self.noise_actor = GaussianActor(self.feature_dim, shape[0] * shape[1], tuple(noise_hidden))
        self.prior_loaded = True

    @property
    def architecture(self) -> str:
        sizes = "-".join(str(m.out_features) for m in self.noise_actor.trunk if isinstance(m, torch.nn.Linear))
        head = f"residual{self.residual_scale:g}" if self.residual else "dsrl"
        return (
            f"{head}-{sizes}-z{self.noise_shape[0]}x{self.noise_shape[1]}-b{self.noise_bound:g}:"
            f"{self.prior.architecture}"
        )

    @property
    def instruction(self) -> str:  # type: ignore[override]
        """The task text given to the prior LeRobot policy."""
        return self.prior.task

    @instruction.setter
    def instruction(self, text: str) -> None:
        self.prior.task = text

    def module(self) -> torch.nn.Module:
        return self.noise_actor

    def reset(self) -> None:
        """Reset the prior LeRobot policy (at an episode start)."""
        self.prior.reset()

    # --- batched observation -> the prior's inputs and features --------------------------------
    def _zeros(self) -> dict[str, np.ndarray]:
        c = self.prior.policy.config
        obs: dict[str, np.ndarray] = {self.prior.state_key: np.zeros((1, c.robot_state_feature.shape[0]), np.float32)}
        if self.prior.env_keys:
            env = c.env_state_feature.shape[0] if c.env_state_feature else 0
            obs["__env"] = np.zeros((1, env), np.float32)
        for cam in self.prior.cameras:
            _, h, w = c.input_features[f"observation.images.{cam}"].shape
            obs[cam] = np.zeros((1, h, w, 3), np.uint8)
        return obs

    def prior_batch(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> dict:
        """Batched observations ([B, ...] arrays, as sampled from the store) -> the prior's
        preprocessed batch."""
        p = self.prior
        state = np.asarray(obs[p.state_key] if forwarded_state is None else forwarded_state, np.float32)
        b: dict = {"observation.state": torch.as_tensor(p._from_robot(state), dtype=torch.float32)}
        n = len(state)
        if p.env_keys:
            env = (
                obs["__env"]
                if "__env" in obs
                else np.concatenate([np.asarray(obs[k], np.float32).reshape(n, -1) for k in p.env_keys], axis=1)
            )
            b["observation.environment_state"] = torch.as_tensor(np.asarray(env, np.float32))
        for cam in p.cameras:
            frames = obs.get(f"image/{cam}", obs.get(cam))
            if frames is None:
                raise KeyError(f"lerobot policy needs camera '{cam}' but the observation has {sorted(obs)}")
            b[f"observation.images.{cam}"] = torch.as_tensor(np.asarray(frames)).permute(0, 3, 1, 2).float() / 255.0
        b["task"] = [p.task] * n
        return p.pre(b)

    def _history(self, batch: dict) -> dict:
        if self.prior.type != "diffusion":
            return batch
        out = dict(batch)
        for k, v in batch.items():
            if k.startswith("observation.") and torch.is_tensor(v):
                out[k] = v.unsqueeze(1)  # n_obs_steps = 1
        if self.prior.policy.config.image_features:
            out["observation.images"] = torch.stack([out[k] for k in self.prior.policy.config.image_features], dim=-4)
        return out

    @torch.no_grad()
    def features(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> torch.Tensor:
        """[B, F]: the observation as the prior conditions on it (diffusion: its global
        conditioning, image features included); other types: the normalized state and
        environment vectors."""
        batch = self.prior_batch(obs, forwarded_state)
        if self.prior.type == "diffusion":
            return self.prior.policy.diffusion._prepare_global_conditioning(self._history(batch))
        parts = [batch["observation.state"]]
        if "observation.environment_state" in batch:
            parts.append(batch["observation.environment_state"])
        return torch.cat([x.reshape(len(x), -1).float() for x in parts], dim=-1)

    @torch.no_grad()
    def steered(
        self, obs: Mapping[str, np.ndarray], noise: torch.Tensor, forwarded_state: np.ndarray | None = None
    ) -> np.ndarray:
        """Joint targets [B, H, A] (robot units, inside the limits) the prior makes from `noise`
        (a residual prior: its own chunk plus `residual_scale * noise`, normalized)."""
        batch = self.prior_batch(obs, forwarded_state)
        z = noise.reshape(len(noise), *self.noise_shape)
        if self.residual:
            chunk = self.prior.predict_normalized(batch) + self.residual_scale * z.to(torch.float32)
        else:
            chunk = self.prior.predict_normalized(batch, noise=z)
        a = self.prior.post(chunk)
        a = np.asarray(a.detach().cpu().numpy(), np.float32).reshape(len(noise), -1, self.prior.action_dim)
        return np.clip(self.prior._to_robot(a), self.low, self.high).astype(np.float32)

    def normalize(self, actions: np.ndarray) -> np.ndarray:
        """Joint targets -> [-1, 1] across the joint range (what the critics see)."""
        return (2 * (np.asarray(actions, np.float32) - self.low) / (self.high - self.low) - 1).astype(np.float32)

    def noise(self, features: torch.Tensor) -> torch.Tensor:
        """Starting noise [B, *noise_shape] (the actor's mode when deterministic)."""
        with torch.no_grad():
            z = self.noise_actor.act(features, self.deterministic)
        return (z * self.noise_bound).reshape(len(z), *self.noise_shape)

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        one = {k: np.asarray(v)[None] for k, v in obs.items()}
        fs = None if forwarded_state is None else np.asarray(forwarded_state, np.float32)[None]
        z = self.noise(self.features(one, fs))
        a = self.steered(one, z, fs)[0]
        if prefix is not None and len(prefix):
            d = min(len(prefix), len(a))
            a[:d] = np.asarray(prefix, np.float32)[:d]
        return ActionChunk(a, self.dt, self.version)
