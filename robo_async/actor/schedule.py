"""`ChunkSchedule`: the actions an asynchronous runner has planned, keyed by the absolute control
tick they are for, and how an arriving chunk is merged into them (`actor.inference`'s modes, see
`robo_async.actor.inference`)."""

from __future__ import annotations

import numpy as np

MODES = ("sync", "drop_stale", "blend", "rtc")  # how the schedule merges a chunk (internal)


class ChunkSchedule:
    """Actions keyed by the absolute tick they are for."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown chunk merge mode '{mode}'; modes: {MODES}")
        self.mode = mode
        self._actions: dict[int, np.ndarray] = {}
        self._versions: dict[int, int] = {}
        self._obs_ticks: dict[int, int] = {}
        self.stale_dropped = 0
        self.popped_version = -1  # policy version of the last popped action
        self.popped_obs_tick = -1  # the observation tick the last popped action was computed from

    def remaining(self, tick: int) -> int:
        n = 0
        while tick + n in self._actions:
            n += 1
        return n

    def upcoming(self, tick: int, n: int) -> np.ndarray:
        """The committed actions for ticks tick .. tick+n-1 (fewer if the schedule runs out)."""
        out = []
        for k in range(tick, tick + n):
            if k not in self._actions:
                break
            out.append(self._actions[k])
        return np.asarray(out, np.float32)

    def clear(self) -> None:
        self._actions.clear()
        self._versions.clear()
        self._obs_ticks.clear()

    def merge(self, chunk: np.ndarray, start_tick: int, now: int, version: int = -1, obs_tick: int = -1) -> None:
        for i, a in enumerate(np.asarray(chunk, np.float32)):
            k = start_tick + i
            if k < now:
                self.stale_dropped += 1  # already in the past when the chunk arrived
                continue
            if self.mode == "blend" and k in self._actions:
                self._actions[k] = 0.5 * (self._actions[k] + a)
            else:
                self._actions[k] = a
            self._versions[k] = version
            if not (self.mode == "blend" and k in self._obs_ticks):
                self._obs_ticks[k] = obs_tick
        if self.mode != "blend":  # the new chunk is the plan now: forget what lies beyond it
            end = start_tick + len(chunk)
            for k in [k for k in self._actions if k >= end]:
                del self._actions[k]
                self._versions.pop(k, None)

    def pop(self, tick: int) -> np.ndarray | None:
        for k in [k for k in self._actions if k < tick]:
            del self._actions[k]
            self._versions.pop(k, None)
        self.popped_version = self._versions.pop(tick, self.popped_version)
        self.popped_obs_tick = self._obs_ticks.pop(tick, -1) if tick in self._actions else -1
        for k in [k for k in self._obs_ticks if k < tick]:
            del self._obs_ticks[k]
        return self._actions.pop(tick, None)
