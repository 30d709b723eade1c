"""What a control loop hands its data to and keeps about its ticks: the `Sink` protocol (the
`Adder` to a learner or a store, `EpisodeLog` for evaluation) and tick lateness (`LatenessTracker`)."""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from robo_async.transport.wire import EpisodeStats, Heartbeat


class Sink(Protocol):
    """Where the loop's data goes: `Adder` (to the learner or a store), `EpisodeLog` (eval)."""

    def add(
        self,
        obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        next_obs: dict[str, np.ndarray],
        terminated: bool,
        truncated: bool,
        policy_version: int,
        success: bool = False,
        intervention: int = 0,
        policy_action: np.ndarray | None = None,
    ) -> None: ...

    def send_episode(self, stats: EpisodeStats) -> None: ...

    def send_heartbeat(self, beat: Heartbeat) -> None: ...

    def flush(self) -> None: ...


class EpisodeLog:
    """A sink that keeps episode summaries only (evaluation, benchmarks); bounded."""

    def __init__(self, keep: int = 100_000) -> None:
        self.episodes: deque[EpisodeStats] = deque(maxlen=keep)

    def add(self, *args: object, **kwargs: object) -> None:
        pass

    def send_episode(self, stats: EpisodeStats) -> None:
        self.episodes.append(stats)

    def send_heartbeat(self, beat: Heartbeat) -> None:
        pass

    def flush(self) -> None:
        pass


class LatenessTracker:
    """Tick lateness (s) over a bounded window, and missed ticks (> half a period late) in total."""

    def __init__(self, dt: float, window: int = 5_000) -> None:
        self.dt = dt
        self.samples: deque[float] = deque(maxlen=window)
        self.missed = 0
        self.max = 0.0

    def add(self, lateness: float) -> None:
        self.samples.append(lateness)
        if lateness > self.dt / 2:
            self.missed += 1
        if lateness > self.max:
            self.max = lateness

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.samples, q) * 1000) if self.samples else 0.0
