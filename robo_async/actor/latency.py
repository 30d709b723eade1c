"""Inference latency as the actor measures it: over a sliding window, in seconds (`LatencyTracker`:
the engine's, a remote policy's) and in control ticks from request to merge (`TickLatency`: what a
chunk's committed prefix must cover), and the small-window `percentile` both read.
"""

from __future__ import annotations

import math
from collections import deque


def percentile(values: deque[float] | deque[int] | list[float], q: float) -> float:
    """numpy's default (linear) percentile of a small window, without numpy's per-call overhead
    (~5 us against ~90 us for 50 values: a remote actor asks for its p95 on every request)."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


class TickLatency:
    """Latency in control ticks as the loop saw it: from the tick a chunk was asked for to the
    tick it was merged (the first tick it could be used), over a sliding window. This is what a
    prefix must cover, wherever the policy runs (here or on a server across a network), and it
    needs no clock: a tick is the unit."""

    def __init__(self, window: int = 50, min_samples: int = 3) -> None:
        self._samples: deque[int] = deque(maxlen=window)
        self.min_samples = min_samples
        self._cached: dict[float, int | None] = {}  # by q; the runner asks every tick, samples come per chunk

    def add(self, ticks: int) -> None:
        self._samples.append(max(int(ticks), 0))
        self._cached.clear()

    def ticks(self, q: float = 95) -> int | None:
        """The q-th percentile (rounded up), or None before `min_samples` chunks have landed.
        Outliers (over twice the median plus one: a lost request answered on a re-request, a
        stall) are left out: planning every chunk for them would idle the robot on every chunk
        for a rare loss, which the re-request and holding already cover."""
        if len(self._samples) < self.min_samples:
            return None
        if q not in self._cached:
            cut = 2 * percentile(self._samples, 50) + 1
            self._cached[q] = int(math.ceil(percentile([s for s in self._samples if s <= cut], q) - 1e-9))
        return self._cached[q]


class LatencyTracker:
    """Inference latency over a sliding window (seconds)."""

    def __init__(self, window: int = 50, initial_s: float = 0.0) -> None:
        self._samples: deque[float] = deque(maxlen=window)
        self._initial = initial_s

    def add(self, seconds: float) -> None:
        self._samples.append(seconds)

    @property
    def samples(self) -> list[float]:
        """The window's latencies (s), oldest first."""
        return list(self._samples)

    def percentile(self, q: float) -> float:
        return percentile(self._samples, q) if self._samples else self._initial

    def ticks(self, dt: float, q: float = 95) -> int:
        """Whole control ticks an inference takes (rounded up)."""
        return int(math.ceil(self.percentile(q) / dt - 1e-9))
