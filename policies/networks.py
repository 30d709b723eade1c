"""The torch modules the chunk policies are made of: `ImageEncoder` (camera frames -> features; the
MLP, reward and embedding models use it too), `ChunkNorm` (a chunk policy's fitted normalisation)
and `FlowNet` (the flow-matching velocity network of `FlowChunkPolicy`, flow.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _time_embedding(t: torch.Tensor, dim: int = 16) -> torch.Tensor:
    freqs = torch.exp(torch.arange(dim // 2, dtype=torch.float32, device=t.device) * (-math.log(1000.0) / (dim // 2)))
    ang = t[:, None] * freqs[None] * 100.0
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class ImageEncoder(nn.Module):
    """A small conv net per camera (shared weights): uint8-range frames -> `out` features each."""

    def __init__(self, cameras: int, size: int, out: int = 64) -> None:
        super().__init__()
        self.size = size
        self.conv = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2),
            nn.SiLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 16, out),
            nn.LayerNorm(out),
        )
        self.cameras, self.out = cameras, out

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, n_cams, H, W, 3] (uint8 values) -> [B, n_cams * out]."""
        b, n = images.shape[:2]
        x = images.reshape(b * n, *images.shape[2:]).permute(0, 3, 1, 2).float() / 127.5 - 1
        if x.shape[-1] != self.size or x.shape[-2] != self.size:
            x = nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        # channels-last: frames arrive HWC, and oneDNN's convolutions run faster on it
        return self.conv(x.contiguous(memory_format=torch.channels_last)).reshape(b, n * self.out)


class ChunkNorm(nn.Module):
    """A chunk policy's normalisation, fitted on the demonstrations (`FlowChunkPolicy.fit_normalization`)
    and identity until then: the vector observations' mean and std, each action dimension's
    demonstrated range (in the coarse [-1, 1] space of `action_mode`), the gripper's two levels
    (closed, open; equal: not snapped). Buffers: saved, pushed and loaded with the weights."""

    def __init__(self, obs_dim: int, action_dim: int) -> None:
        super().__init__()
        self.register_buffer("obs_shift", torch.zeros(obs_dim))
        self.register_buffer("obs_scale", torch.ones(obs_dim))
        self.register_buffer("act_low", -torch.ones(action_dim))
        self.register_buffer("act_high", torch.ones(action_dim))
        self.register_buffer("grip_levels", torch.zeros(2))
        self.register_buffer("fitted", torch.zeros(1))  # 1: fitted (1-d: safetensors round trips)

    def to_coarse(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized chunks [..., A] -> the coarse space (identity until fitted)."""
        return self.act_low + (x + 1) / 2 * (self.act_high - self.act_low)

    def from_coarse(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of `to_coarse`."""
        return 2 * (x - self.act_low) / (self.act_high - self.act_low) - 1


class FlowNet(nn.Module):
    """The flow policy's network: the velocity of a noisy chunk x [B, H, A] at flow time t given the
    conditioning, the delay and the committed-prefix mask; camera frames through an `ImageEncoder` when
    there are cameras."""

    def __init__(
        self,
        cond_dim: int,
        horizon: int,
        action_dim: int,
        hidden: tuple[int, ...] = (256, 256),
        cameras: int = 0,
        image_size: int = 64,
        obs_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        self.norm = ChunkNorm(cond_dim if obs_dim is None else obs_dim, action_dim)
        self.vision = ImageEncoder(cameras, image_size) if cameras else None
        cond_dim += self.vision.out * cameras if self.vision is not None else 0
        dims = [horizon * action_dim + 16 + cond_dim + 1 + horizon, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:], strict=False):
            layers += [nn.Linear(a, b), nn.SiLU()]
        layers.append(nn.Linear(dims[-1], horizon * action_dim))
        self.net = nn.Sequential(*layers)

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, delay: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """x [B, H, A], t [B], cond [B, C], delay [B] (ticks / H), mask [B, H] (1: committed)."""
        b = x.shape[0]
        h = torch.cat([x.reshape(b, -1), _time_embedding(t), cond, delay[:, None], mask], dim=-1)
        return self.net(h).reshape(b, self.horizon, self.action_dim)

    def features(self, cond: torch.Tensor) -> torch.Tensor:
        """The vector observations standardised with the demonstrations' statistics."""
        return (cond - self.norm.obs_shift) / self.norm.obs_scale

    def encode(self, cond: torch.Tensor, images: torch.Tensor | None) -> torch.Tensor:
        """The full conditioning: vector inputs plus image features (computed once per chunk)."""
        cond = self.features(cond)
        if self.vision is None:
            return cond
        if images is None:
            raise ValueError("this flow policy has cameras; the observation brought no images")
        return torch.cat([cond, self.vision(images)], dim=-1)
