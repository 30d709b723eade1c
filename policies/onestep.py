"""Chunk policies that RL trains against a chunked critic (`algo=qc`, Q-chunking with FQL).

`OneStepChunkPolicy` (`flow_onestep`): the one-step policy of flow Q-learning (Park et al. 2025):
an MLP maps the observation and a noise sample z ~ N(0, I) straight to a whole chunk, in one
pass, trained to maximise Q(s, chunk) while staying close to what the BC flow policy makes of the
same z. The actor runs it (a tenth of the flow's cost); the flow policy stays on the learner.
With `best_of_n > 1` it also carries the chunked critic: it draws n chunks and executes the one
with the highest Q (the critic travels with the weights).

Actions use the flow policy's normalization (`action_mode`, `delta_range`), so a BC flow
policy, its critic and this actor agree on what a chunk means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from policies.base import ActionChunk, ChunkRequest, Policy, register
from policies.critics import CriticEnsemble, load_twin_heads
from policies.embedding import FrozenEncoder
from policies.flow import FlowChunkPolicy
from policies.networks import ChunkNorm, ImageEncoder


def mlp(dims: list[int], out: int, layer_norm: bool = False) -> nn.Sequential:
    """Linear layers over `dims` with SiLU (and LayerNorm when asked) between them, then a linear head of
    `out`."""
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:], strict=False):
        layers += [nn.Linear(a, b), *([nn.LayerNorm(b)] if layer_norm else []), nn.SiLU()]
    layers.append(nn.Linear(dims[-1], out))
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    """Observation features: the vector inputs, plus camera features when there are cameras."""

    def __init__(self, cond_dim: int, cameras: int, image_size: int) -> None:
        super().__init__()
        self.vision = ImageEncoder(cameras, image_size) if cameras else None
        self.out = cond_dim + (self.vision.out * cameras if self.vision is not None else 0)

    def forward(self, cond: torch.Tensor, images: torch.Tensor | None = None) -> torch.Tensor:
        """cond [B, C] and images [B, N, H, W, 3] -> features [B, out]; raises ValueError when the policy has
        cameras and no images came."""
        if self.vision is None:
            return cond
        if images is None:
            raise ValueError("this policy has cameras; the observation brought no images")
        return torch.cat([cond, self.vision(images)], dim=-1)


class ChunkActor(nn.Module):
    """(observation features, noise z [B, H*A], delay [B]) -> normalized chunk [B, H, A] in [-1, 1].
    The delay (ticks between the observation and the chunk's start, as a fraction of H) tells it
    how stale its observation will be, as the flow policy is told (delay-consistent acting)."""

    def __init__(
        self,
        cond_dim: int,
        horizon: int,
        action_dim: int,
        hidden: tuple[int, ...],
        cameras: int = 0,
        image_size: int = 64,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        self.encoder = Encoder(cond_dim, cameras, image_size)
        self.net = mlp([self.encoder.out + horizon * action_dim + 1, *hidden], horizon * action_dim)

    def forward(
        self,
        cond: torch.Tensor,
        z: torch.Tensor,
        images: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
        delay: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One pass to a normalized chunk [B, H, A]; `features` (from `encoder`) skip encoding again, `delay`
        [B] in ticks."""
        f = self.encoder(cond, images) if features is None else features
        d = torch.zeros(len(z), 1, device=z.device) if delay is None else delay.float().reshape(-1, 1) / self.horizon
        x = self.net(torch.cat([f, z.reshape(len(z), -1), d], dim=-1))
        return torch.tanh(x).reshape(len(z), self.horizon, self.action_dim)


class ChunkCritic(nn.Module):
    """Q(s, a_{t:t+H}) over a normalized chunk for each of `critics` members (policies.critics;
    LayerNorm, SiLU): [critics, B]. Checkpoints of the twin heads (`q1`, `q2`) load into two."""

    def __init__(
        self,
        cond_dim: int,
        horizon: int,
        action_dim: int,
        hidden: tuple[int, ...],
        cameras: int = 0,
        image_size: int = 64,
        critics: int = 2,
    ) -> None:
        super().__init__()
        self.encoder = Encoder(cond_dim, cameras, image_size)
        in_dim = self.encoder.out + horizon * action_dim
        self.heads = CriticEnsemble(in_dim, hidden, critics, layer_norm=True, activation="silu")
        self._register_load_state_dict_pre_hook(lambda state, prefix, *_: load_twin_heads(state, prefix, into="heads."))

    def forward(
        self,
        cond: torch.Tensor,
        chunk: torch.Tensor,
        images: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(cond, chunk [B, H, A]) -> Q [critics, B]; `features` skip encoding again."""
        f = self.encoder(cond, images) if features is None else features
        return self.heads(torch.cat([f, chunk.reshape(len(chunk), -1)], dim=-1))


@register("flow_onestep")
class OneStepChunkPolicy(FlowChunkPolicy):
    """The `flow_onestep` policy that `algo=qc` publishes: a one-step chunk actor over the flow policy's
    normalization, optionally with the chunked critic to pick the best of `best_of_n` chunks (see the
    module's docstring)."""

    def __init__(
        self,
        *args: object,
        best_of_n: int = 1,
        critic_hidden: tuple[int, ...] = (256, 256),
        actor_hidden: tuple[int, ...] | None = None,
        critics: int = 2,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if int(best_of_n) < 1:
            raise ValueError(f"best_of_n must be at least 1, not {best_of_n}")
        self.best_of_n = int(best_of_n)
        hidden = (
            tuple(actor_hidden)
            if actor_hidden
            else tuple(m.out_features for m in self.net.net if isinstance(m, nn.Linear))[:-1]
        )
        cond = sum(self.obs_dims)
        cams = len(self.cameras)
        self.actor = ChunkActor(cond, self.horizon, len(self.low), hidden, cams, self.image_size)
        self.critic = (
            ChunkCritic(cond, self.horizon, len(self.low), tuple(critic_hidden), cams, self.image_size, critics)
            if self.best_of_n > 1
            else None
        )
        self._norm = self.net.norm  # the flow prior's normalisation (QC copies the prior's in): actors need it
        self.net = None  # type: ignore[assignment]  (the flow policy stays on the learner)
        self._modules = nn.ModuleDict(
            {"actor": self.actor, **({"critic": self.critic} if self.critic else {}), "norm": self._norm}
        )

    @property
    def norm(self) -> ChunkNorm:
        return self._norm

    @property
    def architecture(self) -> str:
        cams = f"+{len(self.cameras)}cam{self.image_size}" if self.cameras else ""
        sizes = "-".join(str(m.out_features) for m in self.actor.net if isinstance(m, nn.Linear))
        best = f"-best{self.best_of_n}" if self.best_of_n > 1 else ""
        return f"onestep-{self.action_mode}:{sum(self.obs_dims)}{cams}-H{self.horizon}x{len(self.low)}-d-{sizes}{best}"

    def module(self) -> nn.Module:
        return self._modules

    def act(
        self,
        cond: torch.Tensor,
        images: torch.Tensor | None = None,
        n: int | None = None,
        delay: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Normalized chunks [B, H, A]: one per row, or the best of n by the critic's Q. `delay`
        [B]: ticks from the observation to the chunk's start (default 0)."""
        n = self.best_of_n if n is None else n
        b = cond.shape[0]
        shape = (b, self.horizon, len(self.low))
        with torch.no_grad():
            f = self.actor.encoder(cond, images)
            if self.deterministic and n == 1:
                return self.actor(cond, torch.zeros(shape, device=cond.device), features=f, delay=delay)
            if n == 1:
                return self.actor(
                    cond, torch.randn(shape, generator=self._gen).to(cond.device), features=f, delay=delay
                )
            assert self.critic is not None, "best-of-n needs the critic"
            fr = f.repeat_interleave(n, 0)
            z = torch.randn((b * n, *shape[1:]), generator=self._gen).to(cond.device)
            if self.deterministic:
                z[::n] = 0  # the mode is always among the candidates
            chunks = self.actor(cond, z, features=fr, delay=None if delay is None else delay.repeat_interleave(n, 0))
            cf = self.critic.encoder(cond, images).repeat_interleave(n, 0)
            q = self.critic(cond, chunks, features=cf).min(0).values.reshape(b, n)
            best = q.argmax(1)
            return chunks.reshape(b, n, *shape[1:])[torch.arange(b, device=cond.device), best]

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        cond = torch.as_tensor(self.condition(obs, forwarded_state))[None]
        ref = np.asarray(obs["state"] if forwarded_state is None else forwarded_state, np.float32)
        imgs = self.images(obs)
        delay = len(prefix) if prefix is not None and len(prefix) else int(delay_ticks)
        x = self.act(cond, None if imgs is None else torch.as_tensor(imgs)[None], delay=torch.full((1,), float(delay)))[
            0
        ].numpy()
        actions = self.denormalize(x, ref)
        if prefix is not None and len(prefix):
            actions[: len(prefix)] = np.asarray(prefix, np.float32)[: self.horizon]  # committed: kept exactly
        return ActionChunk(actions, self.dt, self.version)

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """The one-step actor on a batch (a vectorized actor's simulators, the policy server's actors)."""
        if _one_by_one(requests):
            return Policy.predict_chunks(self, requests)
        cond, images, delays, refs = _batch_inputs(self, requests)
        x = self.act(cond, images, delay=delays).numpy()
        return [ActionChunk(self.denormalize(xi, ref), self.dt, self.version) for xi, ref in zip(x, refs, strict=False)]


def _batch_inputs(
    p: FlowChunkPolicy, requests: Sequence[ChunkRequest]
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, list[np.ndarray]]:
    """(conditions [B, D], images [B, cams, H, W, 3] or None, delays [B], reference states) of
    requests without a committed prefix, for one batched forward pass."""
    cond = torch.as_tensor(np.stack([p.condition(r.obs, r.forwarded_state) for r in requests]))
    imgs = [p.images(r.obs) for r in requests]
    images = None if imgs[0] is None else torch.as_tensor(np.stack(imgs))
    delays = torch.as_tensor([float(r.delay_ticks) for r in requests])
    refs = [
        np.asarray(r.obs["state"] if r.forwarded_state is None else r.forwarded_state, np.float32) for r in requests
    ]
    return cond, images, delays, refs


def _one_by_one(requests: Sequence[ChunkRequest]) -> bool:
    """A single request, or one with a committed prefix (RTC): answered one by one."""
    return len(requests) <= 1 or any(r.prefix is not None and len(r.prefix) for r in requests)


@register("flow_dsrl")
class NoiseSteeredPolicy(FlowChunkPolicy):
    """DSRL (Wagenmaker et al. 2025): a frozen flow policy (its weights from `policy.path=`)
    whose starting noise is picked by a small tanh-Gaussian actor over the observation features.
    Only the noise actor's weights travel; the chunk is the frozen flow's chunk for that noise,
    so it is always one the flow policy can make (and inside the action range). A committed
    prefix (RTC) is honoured by the flow sampler as usual."""

    def __init__(
        self, *args: object, noise_bound: float = 1.5, noise_hidden: tuple[int, ...] = (128, 128), **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        from policies.mlp import GaussianActor

        self.noise_bound = float(noise_bound)
        self.net.requires_grad_(False)
        feat = sum(self.obs_dims) + (self.net.vision.out * len(self.cameras) if self.net.vision is not None else 0)
        self.noise_actor = GaussianActor(feat, self.horizon * len(self.low), tuple(noise_hidden))
        self.prior_loaded = False
        self._encoder: FrozenEncoder | None = None

    @property
    def architecture(self) -> str:
        sizes = "-".join(str(m.out_features) for m in self.noise_actor.trunk if isinstance(m, nn.Linear))
        return f"dsrl-{sizes}-z{self.horizon}x{len(self.low)}-b{self.noise_bound:g}:{super().architecture}"

    def module(self) -> nn.Module:
        return self.noise_actor

    def load_prior(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The frozen flow policy's weights (a `robo-async bc` policy.safetensors)."""
        from policies.base import WeightsMismatch

        current = self.net.state_dict()
        if set(arrays) != set(current) or any(tuple(arrays[k].shape) != tuple(v.shape) for k, v in current.items()):
            raise WeightsMismatch(f"the flow prior's weights do not fit {FlowChunkPolicy.architecture.fget(self)}")
        self.net.load_state_dict({k: torch.as_tensor(np.array(a)) for k, a in arrays.items()})
        self.prior_loaded = True
        self._encoder = None

    def frozen_encoder(self) -> FrozenEncoder | None:
        """The prior's camera encoder (frozen, loaded from `policy.path=`), once the prior is loaded."""
        if self.net.vision is None or not self.prior_loaded:
            return None
        if self._encoder is None:
            self._encoder = FrozenEncoder(self.net.vision, self.cameras)
        return self._encoder

    def noise(self, features: torch.Tensor) -> torch.Tensor:
        """Starting noise [B, H, A] for these observation features (the mode when deterministic)."""
        with torch.no_grad():
            z = self.noise_actor.act(features, self.deterministic)
        return (z * self.noise_bound).reshape(len(z), self.horizon, len(self.low))

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        cond = torch.as_tensor(self.condition(obs, forwarded_state))[None]
        imgs = self.images(obs)
        images = None if imgs is None else torch.as_tensor(imgs)[None]
        with torch.no_grad():
            z = self.noise(self.net.encode(cond, images))
        ref = np.asarray(obs["state"] if forwarded_state is None else forwarded_state, np.float32)
        p = None
        if prefix is not None and len(prefix):
            p = torch.as_tensor(self.normalize(np.asarray(prefix, np.float32)[: self.horizon], ref))[None]
        x = self.sample(cond, p, delay=len(prefix) if p is not None else delay_ticks, images=images, noise=z)[0]
        actions = self.denormalize(x.numpy(), ref)
        if p is not None:
            actions[: len(prefix)] = np.asarray(prefix, np.float32)[: self.horizon]
        return ActionChunk(actions, self.dt, self.version)

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """The noise actor and the frozen flow on a batch (a vectorized actor, the policy server)."""
        if _one_by_one(requests):
            return Policy.predict_chunks(self, requests)
        cond, images, delays, refs = _batch_inputs(self, requests)
        with torch.no_grad():
            encoded = self.net.encode(cond, images)
            z = self.noise(encoded)
        x = self.sample(cond, None, delay=delays, images=images, noise=z, encoded=encoded).numpy()
        return [ActionChunk(self.denormalize(xi, ref), self.dt, self.version) for xi, ref in zip(x, refs, strict=False)]
