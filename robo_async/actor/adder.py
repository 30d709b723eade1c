"""`Adder`: the only path from an actor to the learner. Numbers transitions `(actor_id, seq)`.

Rows are written into preallocated columns as they come (no stacking at flush time). Batches are compact: `obs/<key>`
for every row and `final_obs/<key>` for the
last row's next observation only (`wire.expand_next_obs` rebuilds `next_obs/<key>`). Batches go to an outlet (the
`Uplink`), which keeps them until the learner
acks them; `put` never blocks the control loop.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from robo_async.transport.wire import FINAL_OBS, EpisodeStats, Heartbeat, Message, TransitionBatch


class Outlet(Protocol):
    """Where the `Adder` hands finished batches and messages: the `Uplink` on an actor (acked
    delivery to the learner), `launch.experts.StoreOutlet` when recording straight into a store.
    On an actor `put` runs on the control loop, so it must return at once."""

    def put(self, msg: Message) -> None: ...


class Adder:
    """Numbers transitions and writes each row straight into preallocated columns (one copy per
    value, no per-flush stacking); a full or episode-ending batch goes to the outlet."""

    def __init__(self, actor_id: int, outlet: Outlet, flush_every: int = 32, start_seq: int = 0) -> None:
        self.actor_id = actor_id
        self._outlet = outlet
        self._flush_every = flush_every
        self.seq = start_seq  # seq of the next transition
        self._first_seq = start_seq
        self._n = 0
        self._obs_cols: list[tuple[str, np.ndarray]] = []
        self._action = np.empty(0, np.float32)
        self._scalars: list[tuple] = []
        self._last_next: dict[str, np.ndarray] = {}

    def _allocate(self, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        n = self._flush_every
        self._obs_cols = [(k, np.empty((n, *np.shape(v)), np.asarray(v).dtype)) for k, v in obs.items()]
        self._action = np.empty((n, *np.shape(action)), np.float32)
        self._policy_action = np.empty((n, *np.shape(action)), np.float32)
        # per-row scalars go to Python lists (an append is a tenth of a numpy item write) and
        # become columns once per batch
        self._scalars = []

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
    ) -> None:
        """One transition. `intervention` (wire.POLICY/OPERATOR/TAKEOVER) says who acted;
        `policy_action` is what the policy would have done (None: it acted, `action`)."""
        if self._n == 0:
            self._allocate(obs, action)  # fresh columns: the last batch's belong to the outlet now
            self._first_seq = self.seq
        i = self._n
        for k, col in self._obs_cols:
            col[i] = obs[k]
        self._action[i] = action
        self._policy_action[i] = action if policy_action is None else policy_action
        self._scalars.append((reward, terminated, truncated, policy_version, success, intervention))
        self._last_next = next_obs
        self._n += 1
        self.seq += 1
        if self._n >= self._flush_every:
            self.flush()

    def _batch(self) -> TransitionBatch:
        n = self._n
        arrays: dict[str, np.ndarray] = {}
        for k, col in self._obs_cols:
            # next_obs[i] is obs[i+1] (a batch never spans episodes: send_episode flushes), so
            # each observation, camera frames included, crosses the wire and the journal once
            arrays[f"obs/{k}"] = col[:n]
            arrays[f"{FINAL_OBS}{k}"] = np.asarray(self._last_next[k], col.dtype)[None]
        arrays["action"] = self._action[:n]
        arrays["policy_action"] = self._policy_action[:n]
        reward, terminated, truncated, version, success, intervention = zip(*self._scalars, strict=False)
        arrays["reward"] = np.array(reward, np.float32)
        arrays["terminated"] = np.array(terminated, bool)
        arrays["truncated"] = np.array(truncated, bool)
        arrays["policy_version"] = np.array(version, np.int64)
        arrays["success"] = np.array(success, bool)
        arrays["intervention"] = np.array(intervention, np.uint8)
        return TransitionBatch(self.actor_id, self._first_seq, arrays)

    def flush(self) -> None:
        if self._n:
            batch = self._batch()
            self._n = 0
            self._outlet.put(batch)

    def send_episode(self, stats: EpisodeStats) -> None:
        self.flush()
        self._outlet.put(stats)

    def send_heartbeat(self, beat: Heartbeat) -> None:
        self._outlet.put(beat)
