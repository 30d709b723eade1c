"""`Adder`: the only path from an actor to the learner. Numbers transitions `(actor_id, seq)`.

Rows are kept as references and stacked into columns once per flush, so the per-tick cost is
a few list appends. Batches are compact: `obs/<key>` for every row and `final_obs/<key>` for the
last row's next observation only (`wire.expand_next_obs` rebuilds `next_obs/<key>`). Batches go to an outlet (the `Uplink`), which keeps them until the learner
acks them; `put` never blocks the control loop.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from robo_async.transport.wire import FINAL_OBS, EpisodeStats, Heartbeat, Message, TransitionBatch


class Outlet(Protocol):
    def put(self, msg: Message) -> None: ...


class Adder:
    def __init__(self, actor_id: int, outlet: Outlet, flush_every: int = 32, start_seq: int = 0) -> None:
        self.actor_id = actor_id
        self._outlet = outlet
        self._flush_every = flush_every
        self.seq = start_seq  # seq of the next transition
        self._first_seq = start_seq
        self._rows: list[tuple] = []
        self._keys: tuple[str, ...] = ()

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
    ) -> None:
        if not self._rows:
            self._keys = tuple(obs)
            self._first_seq = self.seq
        self._rows.append((obs, next_obs, action, reward, terminated, truncated, policy_version, success))
        self.seq += 1
        if len(self._rows) >= self._flush_every:
            self.flush()

    def _batch(self) -> TransitionBatch:
        rows = self._rows
        arrays: dict[str, np.ndarray] = {}
        last = rows[-1][1]
        for k in self._keys:
            # next_obs[i] is obs[i+1] (a batch never spans episodes: send_episode flushes), so
            # each observation, camera frames included, crosses the wire and the journal once
            arrays[f"obs/{k}"] = np.stack([r[0][k] for r in rows])
            arrays[f"{FINAL_OBS}{k}"] = np.asarray(last[k])[None]
        arrays["action"] = np.stack([r[2] for r in rows]).astype(np.float32, copy=False)
        arrays["reward"] = np.array([r[3] for r in rows], dtype=np.float32)
        arrays["terminated"] = np.array([r[4] for r in rows], dtype=bool)
        arrays["truncated"] = np.array([r[5] for r in rows], dtype=bool)
        arrays["policy_version"] = np.array([r[6] for r in rows], dtype=np.int64)
        arrays["success"] = np.array([r[7] for r in rows], dtype=bool)
        return TransitionBatch(self.actor_id, self._first_seq, arrays)

    def flush(self) -> None:
        if self._rows:
            self._outlet.put(self._batch())
            self._rows = []

    def send_episode(self, stats: EpisodeStats) -> None:
        self.flush()
        self._outlet.put(stats)

    def send_heartbeat(self, beat: Heartbeat) -> None:
        self._outlet.put(beat)
