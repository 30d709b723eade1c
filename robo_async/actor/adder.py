"""`Adder`: the only path from an actor to the learner. Numbers transitions `(actor_id, seq)`.

Rows are kept as references and stacked into columns once per flush, so the per-tick cost is
a few list appends. A batch that cannot be sent (learner slow or gone) stays queued and is
retried before newer data, oldest first.
"""

from __future__ import annotations

import logging
from collections import deque

import numpy as np

from robo_async.transport.channels import TransitionSender
from robo_async.transport.wire import EpisodeStats, Heartbeat, Message, TransitionBatch

log = logging.getLogger(__name__)


class Adder:
    def __init__(
        self,
        actor_id: int,
        sender: TransitionSender,
        flush_every: int = 32,
        start_seq: int = 0,
        max_pending: int = 4096,
    ) -> None:
        self.actor_id = actor_id
        self._sender = sender
        self._flush_every = flush_every
        self.seq = start_seq  # seq of the next transition
        self._first_seq = start_seq
        self._rows: list[tuple] = []
        self._keys: tuple[str, ...] = ()
        self._pending: deque[Message] = deque()
        self._max_pending = max_pending
        self.dropped_batches = 0

    def add(
        self,
        obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        next_obs: dict[str, np.ndarray],
        terminated: bool,
        truncated: bool,
        policy_version: int,
    ) -> None:
        if not self._rows:
            self._keys = tuple(obs)
            self._first_seq = self.seq
        self._rows.append((obs, next_obs, action, reward, terminated, truncated, policy_version))
        self.seq += 1
        if len(self._rows) >= self._flush_every:
            self.flush()

    def _batch(self) -> TransitionBatch:
        rows = self._rows
        arrays: dict[str, np.ndarray] = {}
        for k in self._keys:
            arrays[f"obs/{k}"] = np.stack([r[0][k] for r in rows])
            arrays[f"next_obs/{k}"] = np.stack([r[1][k] for r in rows])
        arrays["action"] = np.stack([r[2] for r in rows]).astype(np.float32, copy=False)
        arrays["reward"] = np.array([r[3] for r in rows], dtype=np.float32)
        arrays["terminated"] = np.array([r[4] for r in rows], dtype=bool)
        arrays["truncated"] = np.array([r[5] for r in rows], dtype=bool)
        arrays["policy_version"] = np.array([r[6] for r in rows], dtype=np.int64)
        return TransitionBatch(self.actor_id, self._first_seq, arrays)

    def flush(self) -> None:
        if self._rows:
            self._enqueue(self._batch())
            self._rows = []
        self._drain()

    def send_episode(self, stats: EpisodeStats) -> None:
        self.flush()
        self._enqueue(stats)
        self._drain()

    def send_heartbeat(self, beat: Heartbeat) -> None:
        self._sender.send(beat)  # best effort; the next one supersedes it

    def _enqueue(self, msg: Message) -> None:
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self.dropped_batches += 1
            log.warning("actor %d: learner unreachable, send queue full; dropped oldest batch", self.actor_id)
        self._pending.append(msg)

    def _drain(self) -> None:
        while self._pending and self._sender.send(self._pending[0]):
            self._pending.popleft()

    @property
    def pending(self) -> int:
        return len(self._pending)
