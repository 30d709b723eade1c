"""Image augmentation for RL from pixels: DrQ's random shift (Kostrikov et al. 2020; Yarats et
al. 2021): pad each frame by `pad` pixels (edge replicated) and crop back at a random offset,
independently per sample and camera. Exact integer shifts, no interpolation."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def random_shift(images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None) -> torch.Tensor:
    """images [B, n_cams, H, W, C] (any dtype) -> float32, same shape, each frame shifted."""
    if pad <= 0:
        return images.float()
    b, n, h, w, c = images.shape
    x = images.reshape(b * n, h, w, c).permute(0, 3, 1, 2).float()
    x = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    m = b * n
    dev = images.device
    dy = torch.randint(0, 2 * pad + 1, (m,), generator=generator).to(dev)
    dx = torch.randint(0, 2 * pad + 1, (m,), generator=generator).to(dev)
    rows = (torch.arange(h, device=dev)[None] + dy[:, None])[:, None, :, None].expand(m, c, h, w + 2 * pad)
    x = x.gather(2, rows)
    cols = (torch.arange(w, device=dev)[None] + dx[:, None])[:, None, None, :].expand(m, c, h, w)
    x = x.gather(3, cols)
    return x.permute(0, 2, 3, 1).reshape(b, n, h, w, c)
