"""MLP networks: a tanh-squashed Gaussian actor (for SAC; its critics: policies.critics), on state vectors
and, with `cameras`, on camera frames through a small conv encoder (pixel SAC, DrQ-style)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from policies.base import ActionChunk, ChunkRequest, Policy, camera_frames, register

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers of `sizes` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class GaussianActor(nn.Module):
    """obs -> (mean, log_std) of a Gaussian squashed by tanh into [-1, 1] per action dim."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.trunk = mlp([obs_dim, *hidden])
        self.head = nn.Linear(hidden[-1], 2 * act_dim)
        self.act_dim = act_dim

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, O] -> (mean, log_std) [B, A] each, log_std squashed into [LOG_STD_MIN, LOG_STD_MAX]."""
        h = torch.relu(self.trunk(obs))
        mean, log_std = self.head(h).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed sample and its log-probability (summed over dims)."""
        mean, log_std = self(obs)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        log_prob = log_prob - (2 * (np.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return a, log_prob

    def dist(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean, log_std, latent features) for obs: the features drive gSDE exploration."""
        h = torch.relu(self.trunk(obs))
        mean, log_std = self.head(h).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std, h

    def act(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Actions in [-1, 1] for obs: tanh of the mean when `deterministic`, else a sample."""
        if deterministic:
            return torch.tanh(self(obs)[0])
        return self.sample(obs)[0]


class ObsNorm(nn.Module):
    """A running mean and standard deviation of the flat vector inputs, fitted on every batch the learner
    trains on (Chan et al.'s parallel update), inputs mapped to (x - mean) / max(std, eps) clipped to
    +-clip: HER's input normaliser (Andrychowicz et al. 2017), so positions in metres and velocities of
    a few mm per tick weigh alike without a hand-set `obs_scale` per key. The identity until fitted. Its
    statistics are buffers: they travel with the actor's weights and live in checkpoints."""

    def __init__(self, dim: int, clip: float = 5.0, eps: float = 1e-2) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1, dtype=torch.float64))  # [1]: the wire carries no 0-d arrays
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(dim, dtype=torch.float64))
        self.clip, self.eps = float(clip), float(eps)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch [B, D] into the statistics; rows with a non-finite value are left out."""
        x = x.detach().to(torch.float64).reshape(-1, self.mean.shape[0])
        x = x[torch.isfinite(x).all(-1)]
        if not len(x):
            return
        n, nb = float(self.count[0]), float(len(x))
        mean_b = x.mean(0)
        delta = mean_b - self.mean
        total = n + nb
        self.mean += delta * (nb / total)
        self.m2 += ((x - mean_b) ** 2).sum(0) + delta**2 * (n * nb / total)
        self.count.fill_(total)

    def std(self) -> torch.Tensor:
        """The running standard deviation per input, at least `eps`."""
        return (self.m2 / self.count.clamp(min=1.0)).sqrt().clamp(min=self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised and clipped inputs, float32 (unchanged before two rows were seen)."""
        if float(self.count[0]) < 2:
            return x
        return ((x - self.mean) / self.std()).clamp(-self.clip, self.clip).to(torch.float32)


def flatten_obs(
    obs: Mapping[str, np.ndarray | torch.Tensor],
    keys: Sequence[str],
    scale: Mapping[str, float] | None = None,
) -> torch.Tensor:
    """Concatenate the named vector observations (last axis) into one float32 tensor, each
    multiplied by `scale[key]` (default 1) so inputs of different units have similar size."""
    scale = scale or {}
    parts = [torch.as_tensor(obs[k], dtype=torch.float32) * float(scale.get(k, 1.0)) for k in keys]
    return torch.cat(parts, dim=-1)


@register("mlp")
class MLPPolicy(Policy):
    """SAC's actor as a `Policy`, chunk length 1. The network's output in [-1, 1] becomes an
    absolute joint target (rad) either across the joint range (`action_mode="absolute"`) or as a
    step of at most `delta_scale` rad from the conditioning joint state (`"delta"`: closed-loop,
    much faster to learn for reaching). Robots always receive absolute targets."""

    def __init__(
        self,
        obs_keys: Sequence[str],
        obs_dims: Sequence[int],
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden: Sequence[int] = (256, 256),
        dt: float = 1 / 30,
        deterministic: bool = False,
        action_mode: str = "delta",
        delta_scale: float = 0.15,
        obs_scale: Mapping[str, float] | None = None,
        exploration: str = "white",
        sde_every: int = 8,
        seed: int = 0,
        cameras: Sequence[str] = (),
        image_size: int = 64,
        obs_norm: bool = False,
    ) -> None:
        if exploration not in ("white", "gsde"):
            raise ValueError(f"exploration must be 'white' or 'gsde', not {exploration!r}")
        if int(sde_every) < 1:
            raise ValueError(f"sde_every must be at least 1, not {sde_every}")
        self.exploration, self.sde_every = exploration, int(sde_every)
        self._gen = torch.Generator().manual_seed(int(seed))
        self._theta: torch.Tensor | None = None  # gSDE: [A, F] noise weights, resampled every sde_every calls
        self._calls = 0
        self.obs_scale = dict(obs_scale or {})
        if action_mode not in ("absolute", "delta"):
            raise ValueError(f"action_mode must be 'absolute' or 'delta', not {action_mode!r}")
        self.action_mode = action_mode
        self.delta_scale = float(delta_scale)
        self.obs_keys = tuple(obs_keys)
        self.obs_dim = int(sum(obs_dims))
        self.low = np.asarray(action_low, dtype=np.float32)
        self.high = np.asarray(action_high, dtype=np.float32)
        self.hidden = tuple(hidden)
        self.dt = dt
        self.deterministic = deterministic
        from policies.networks import ImageEncoder

        self.cameras, self.image_size = tuple(cameras), int(image_size)
        # with cameras: one conv encoder over every camera (trained by SAC's critic), its
        # features after the vector inputs
        self.encoder = ImageEncoder(len(self.cameras), self.image_size) if self.cameras else None
        self.feature_dim = self.obs_dim + (self.encoder.out * len(self.cameras) if self.encoder is not None else 0)
        self.net = GaussianActor(self.feature_dim, len(self.low), self.hidden)
        self.norm = ObsNorm(self.obs_dim) if obs_norm else None  # over the vector inputs only
        parts = {"actor": self.net, "encoder": self.encoder, "norm": self.norm}
        self._module: nn.Module = (
            nn.ModuleDict({k: m for k, m in parts.items() if m is not None})
            if self.encoder is not None or self.norm is not None
            else self.net
        )
        self.version = -1

    @property
    def architecture(self) -> str:
        cams = f"+{len(self.cameras)}cam{self.image_size}" if self.cameras else ""
        cams += "+norm" if self.norm is not None else ""
        return f"mlp-{self.action_mode}:{self.obs_dim}{cams}-{'-'.join(map(str, self.hidden))}-{len(self.low)}"

    def module(self) -> nn.Module:
        return self._module

    def images(self, obs: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """Camera frames [n_cams, H, W, 3] (or [B, n_cams, H, W, 3] for batches); None without cameras."""
        return camera_frames(obs, self.cameras, "mlp policy")

    def inputs(self, obs: Mapping[str, np.ndarray | torch.Tensor], prefix: str = "", fit: bool = False) -> torch.Tensor:
        """The flat vector inputs of `obs` (keys `prefix + obs_key`, e.g. "next_obs/" in a batch): scaled by
        `obs_scale`, then normalised by the running statistics (`obs_norm`), which `fit` first updates
        with them (the learner does, on every batch it trains on)."""
        x = flatten_obs({k: obs[prefix + k] for k in self.obs_keys}, self.obs_keys, self.obs_scale)
        if self.norm is None:
            return x
        if fit:
            self.norm.update(x)
        return self.norm(x)

    def features(
        self, vectors: torch.Tensor, images: torch.Tensor | None = None, encoder: nn.Module | None = None
    ) -> torch.Tensor:
        """The actor's and critics' input: the flat vector inputs, then the image features of
        `images` [B, n_cams, H, W, 3] by `encoder` (default: the policy's own)."""
        if self.encoder is None:
            return vectors
        if images is None:
            raise ValueError("this policy has cameras; the observation brought no images")
        return torch.cat([vectors, (encoder or self.encoder)(images)], dim=-1)

    def _gsde(self, x: torch.Tensor) -> np.ndarray:
        """Generalized state-dependent exploration (Raffin et al. 2022), fitted to SAC's Gaussian:
        the pre-tanh noise is std(s) * (theta . phi(s) / |phi(s)|), with phi the actor's last
        hidden features and theta ~ N(0, I) drawn every `sde_every` ticks. Each tick's noise has
        the distribution SAC's white noise has (N(0, std^2) per joint), but it changes smoothly
        with the state and is held for `sde_every` ticks: commands a motor can follow."""
        mean, log_std, h = self.net.dist(x)
        if self._theta is None or self._calls % self.sde_every == 0:
            self._theta = torch.randn(mean.shape[-1], h.shape[-1], generator=self._gen)
        self._calls += 1
        phi = h[0] / h[0].norm().clamp(min=1e-6)
        eps = self._theta @ phi
        return torch.tanh(mean[0] + log_std[0].exp() * eps).numpy()

    def to_robot(self, a_norm: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Map normalised actions in [-1, 1] to joint targets in rad (`state`: joints, rad)."""
        if self.action_mode == "delta":
            return np.clip(state + self.delta_scale * a_norm, self.low, self.high)
        return self.low + (a_norm + 1.0) * 0.5 * (self.high - self.low)

    def to_normalized(self, action: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Inverse of `to_robot`, clipped to [-1, 1] (the learner's view of a stored action)."""
        if self.action_mode == "delta":
            a = (action - state) / self.delta_scale
        else:
            a = 2.0 * (action - self.low) / (self.high - self.low) - 1.0
        return np.clip(a, -1.0, 1.0)

    @torch.no_grad()
    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        del prefix, delay_ticks  # chunk length 1: nothing to keep fixed
        if forwarded_state is not None:
            obs = {**obs, "state": forwarded_state}
        x = self.inputs(obs).unsqueeze(0)
        if self.encoder is not None:
            x = self.features(x, torch.as_tensor(self.images(obs))[None])
        if self.exploration == "gsde" and not self.deterministic:
            a = self._gsde(x)
        else:
            a = self.net.act(x, self.deterministic)[0].numpy()
        target = self.to_robot(a, np.asarray(obs["state"], dtype=np.float32))
        return ActionChunk(target[None, :].astype(np.float32), self.dt, self.version)

    @torch.no_grad()
    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """One forward pass for a batch of requests (a vectorized actor's simulators, the policy
        server's actors). gSDE's exploration noise is a per-caller state, so with it (and not
        deterministic) the requests are answered one by one."""
        if len(requests) <= 1 or (self.exploration == "gsde" and not self.deterministic):
            return super().predict_chunks(requests)
        obs = [r.obs if r.forwarded_state is None else {**r.obs, "state": r.forwarded_state} for r in requests]
        x = self.inputs({k: np.stack([np.asarray(o[k]) for o in obs]) for k in self.obs_keys})
        if self.encoder is not None:
            x = self.features(x, torch.as_tensor(np.stack([self.images(o) for o in obs])))
        a = self.net.act(x, self.deterministic).numpy()
        states = np.stack([np.asarray(o["state"], np.float32) for o in obs])
        targets = self.to_robot(a, states).astype(np.float32)
        return [ActionChunk(t[None, :], self.dt, self.version) for t in targets]
