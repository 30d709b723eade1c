"""A policy's frozen camera encoder as a function of frames, with a version naming its weights.

The frozen-representation path (DSRL on a pixel BC prior): the encoder never changes during RL,
so each camera frame is embedded once, where it is produced (the actor's uplink thread, next to
the robot), and stored beside the frames as the observation key `embedding` (float16), with the
encoder's version per row in `embedding_version`. The learner's critics and noise actor then
train on embeddings plus proprioception and never run the convolutions. The version is a hash
of the encoder's weights: two encoders with the same version embed every frame the same way.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

EMBEDDING = "embedding"  # observation key: the frozen encoder's embedding of the row's frames
EMBEDDING_VERSION = "embedding_version"  # observation key: the version of the encoder that made it


def encoder_version(module: nn.Module) -> int:
    """A positive 56-bit hash of a module's weights and buffers (names, dtypes, shapes, values)."""
    h = hashlib.blake2b(digest_size=7)
    for name, t in sorted(module.state_dict().items()):
        a = t.detach().cpu().contiguous().numpy()
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return int.from_bytes(h.digest(), "big")


def show_version(version: int) -> str:
    """An encoder version as users see it (14 hex digits)."""
    return f"{int(version):014x}"


class FrozenEncoder:
    """Frames -> embeddings with a copy of a policy's camera encoder (frozen: the copy is private,
    so it may run on another thread than the policy's inference)."""

    def __init__(self, vision: nn.Module, cameras: tuple[str, ...], batch: int = 256) -> None:
        self.module = copy.deepcopy(vision).eval().requires_grad_(False).cpu()
        self.cameras = tuple(cameras)
        self.version = encoder_version(self.module)
        self.dim = int(vision.out) * len(self.cameras)
        self.batch = batch

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """frames [B, n_cams, H, W, 3] uint8 -> embeddings [B, dim] float16."""
        out = np.empty((len(frames), self.dim), np.float16)
        with torch.no_grad():
            for i in range(0, len(frames), self.batch):
                out[i : i + self.batch] = (
                    self.module(torch.as_tensor(np.ascontiguousarray(frames[i : i + self.batch])))
                    .numpy()
                    .astype(np.float16)
                )
        return out

    def embed(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The embeddings of batched observations (camera keys [B, H, W, 3])."""
        missing = [c for c in self.cameras if c not in obs]
        if missing:
            raise ValueError(f"the frozen encoder needs cameras {list(self.cameras)}; the observation lacks {missing}")
        return self(np.stack([np.asarray(obs[c]) for c in self.cameras], axis=1))
