"""Our tiny VLA: a language-conditioned flow-matching chunk policy small enough for CPU demos.

    instruction --word tokens--> InstructionEncoder (embedding + one transformer layer, pooled)
    camera frames -------------> ImageEncoder (the flow policy's small conv net)
    proprio state + features --> (the forwarded state at the chunk's start)
                                  \\-> the flow action head (pi0-style, `policies/flow.py`)

It is the flow policy with an instruction encoder in its conditioning, so everything the flow
policy does it does too: delay-consistent BC, RTC prefixes (path or clean), batched inference on
the policy server, the async actor. Trained on several sim tasks at once (`robo-async bc
policy=tiny_vla`), each demonstration labelled with its task's instruction; at run time it
follows `instruction` (or an `instruction` observation, token ids, when a batch carries one).

Tokens: the words of the instructions it was built with (lower case), 0 = padding, 1 = unknown.
Features a task does not have (e.g. the cube's in `reach`) are zero.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from policies.base import register
from policies.flow import FlowChunkPolicy
from policies.networks import FlowNet

TEXT_LEN = 12  # tokens per instruction (longer ones are cut)


def word_vocab(instructions: Sequence[str]) -> tuple[str, ...]:
    """The sorted lower-case words of `instructions`: the tiny VLA's vocabulary."""
    return tuple(sorted({w for s in instructions for w in s.lower().split()}))


def tokenize(text: str, vocab: Sequence[str], max_len: int = TEXT_LEN) -> np.ndarray:
    """int64 [max_len]: word i of the vocabulary -> i + 2, unknown -> 1, padding 0."""
    index = {w: i + 2 for i, w in enumerate(vocab)}
    ids = [index.get(w, 1) for w in text.lower().split()][:max_len]
    return np.asarray(ids + [0] * (max_len - len(ids)), np.int64)


class InstructionEncoder(nn.Module):
    """A one-layer transformer over an instruction's token ids: embedding, learned positions, mean over non-
    padding tokens."""

    def __init__(self, vocab_size: int, dim: int = 32, max_len: int = TEXT_LEN) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=2 * dim, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.dim = dim

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, L] (int) -> [B, dim], the mean over non-padding positions."""
        pad = tokens == 0
        h = self.layer(self.embed(tokens) + self.pos[: tokens.shape[1]], src_key_padding_mask=pad)
        keep = (~pad).float()[..., None]
        return self.norm((h * keep).sum(1) / keep.sum(1).clamp(min=1.0))


class VLANet(FlowNet):
    """FlowNet whose conditioning vector ends with `text_len` token ids, encoded here."""

    def __init__(
        self,
        cond_dim: int,
        horizon: int,
        action_dim: int,
        hidden: tuple[int, ...],
        cameras: int,
        image_size: int,
        vocab_size: int,
        text_dim: int = 32,
        text_len: int = TEXT_LEN,
    ) -> None:
        super().__init__(cond_dim + text_dim, horizon, action_dim, hidden, cameras, image_size, obs_dim=cond_dim)
        self.text = InstructionEncoder(vocab_size, text_dim, text_len)
        self.text_len = text_len

    def features(self, cond: torch.Tensor) -> torch.Tensor:
        """The standardised vector observations and the encoded instruction (the last `text_len` ids)."""
        tokens = cond[:, -self.text_len :].round().long()
        return torch.cat([super().features(cond[:, : -self.text_len]), self.text(tokens)], dim=-1)


@register("tiny_vla")
class TinyVLA(FlowChunkPolicy):
    """The `tiny_vla` policy: the flow policy conditioned on a language instruction too, encoded by a small
    transformer over a word vocabulary built from `instructions`."""

    def __init__(
        self,
        obs_keys: tuple[str, ...],
        obs_dims: tuple[int, ...],
        action_low: tuple[float, ...],
        action_high: tuple[float, ...],
        instructions: Sequence[str] = (),
        instruction: str = "",
        text_dim: int = 32,
        **kw: object,
    ) -> None:
        if not instructions:
            raise ValueError("tiny_vla needs its instructions (the words it knows), e.g. sim.INSTRUCTIONS' values")
        super().__init__(obs_keys, obs_dims, action_low, action_high, **kw)  # type: ignore[arg-type]
        self.instructions = tuple(instructions)
        self.vocab = word_vocab(self.instructions)
        self.instruction = instruction or self.instructions[0]
        torch.manual_seed(int(kw.get("seed", 0)))  # type: ignore[call-overload]
        self.net = VLANet(
            sum(self.obs_dims),
            self.horizon,
            len(self.low),
            tuple(kw.get("hidden", (256, 256))),  # type: ignore[arg-type]
            len(self.cameras),
            self.image_size,
            len(self.vocab) + 2,
            int(text_dim),
        )

    @property
    def architecture(self) -> str:
        words = hashlib.sha1(" ".join(self.vocab).encode()).hexdigest()[:8]
        return f"tiny_vla-{len(self.vocab)}w{words}-t{self.net.text.dim}:" + super().architecture

    def tokens(self, text: str) -> np.ndarray:
        """`text` as token ids, int64 [text_len] (see `tokenize`)."""
        return tokenize(text, self.vocab, self.net.text_len)

    def condition(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> np.ndarray:
        """Features (zeros for those the task lacks), then the instruction's token ids (from an
        `instruction` observation when there is one, else `self.instruction`)."""
        state = np.asarray(obs["state"] if forwarded_state is None else forwarded_state, np.float32)
        lead = state.shape[:-1]
        parts = []
        for k, dim in zip(self.obs_keys, self.obs_dims, strict=False):
            v = forwarded_state if (k == "state" and forwarded_state is not None) else obs.get(k)
            v = np.zeros((*lead, dim), np.float32) if v is None else np.asarray(v, np.float32)
            parts.append(v * self.obs_scale.get(k, 1.0))
        tokens = obs.get("instruction")
        tokens = (
            np.broadcast_to(self.tokens(self.instruction), (*lead, self.net.text_len))
            if tokens is None
            else np.asarray(tokens)
        )
        return np.concatenate([*parts, tokens.astype(np.float32)], axis=-1).astype(np.float32)
