"""Latency injection: a policy wrapper whose every inference takes `delay_ms` (plus optional
uniform jitter) longer, for benchmarks and tests with the sim in wall-clock real-time mode."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from policies.base import ActionChunk, ChunkRequest, Policy, call_policy


class DelayedPolicy(Policy):
    """Wraps `inner` so each inference takes `delay_ms` more (plus uniform jitter up to `jitter_ms`, seeded):
    latency injection for benchmarks and tests. Everything else is the inner policy's."""

    def __init__(self, inner: Policy, delay_ms: float, jitter_ms: float = 0.0, seed: int = 0) -> None:
        self.inner = inner
        self.delay_ms, self.jitter_ms = delay_ms, jitter_ms
        self._rng = np.random.default_rng(seed)

    @property
    def architecture(self) -> str:
        return self.inner.architecture

    @property
    def version(self) -> int:  # type: ignore[override]
        """The inner policy's weights version."""
        return self.inner.version

    @property
    def deterministic(self) -> bool:
        """Whether the inner policy samples deterministically."""
        return self.inner.deterministic

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        self.inner.deterministic = value

    @property
    def horizon(self) -> int:
        """The inner policy's chunk length H (ticks)."""
        return self.inner.horizon

    @property
    def instruction(self) -> str:  # type: ignore[override]
        """The inner policy's language instruction."""
        return self.inner.instruction

    @instruction.setter
    def instruction(self, text: str) -> None:
        self.inner.instruction = text

    def module(self) -> torch.nn.Module:
        return self.inner.module()

    def frozen_encoder(self):  # type: ignore[no-untyped-def]
        return self.inner.frozen_encoder()

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        self.inner.load_weights(version, arrays)

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        t0 = time.monotonic()
        chunk = call_policy(self.inner, obs, forwarded_state, prefix, delay_ticks)
        self._wait(t0)
        return chunk

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """A batch costs one delay (an accelerator's forward pass takes about as long for a few
        rows as for one)."""
        t0 = time.monotonic()
        chunks = self.inner.predict_chunks(requests)
        self._wait(t0)
        return chunks

    def _wait(self, t0: float) -> None:
        extra = self.delay_ms + (self._rng.uniform(0, self.jitter_ms) if self.jitter_ms > 0 else 0.0)
        left = t0 + extra / 1000 - time.monotonic()
        if left > 0:
            time.sleep(left)
