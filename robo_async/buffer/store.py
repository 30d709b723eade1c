"""`ReplayStore`: where transitions live between the actors and the learner's sampler.

The learner uses it like this::

    accepted = store.insert(batch)          # duplicates (seq already seen) are dropped
    store.ack(batch.actor_id)               # highest seq stored for that actor, for acks
    if limiter.can_update(updates, len(store)):
        batch = store.sample(256, rng)
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robo_async.transport.wire import Frames, TransitionBatch, WireError, expand_next_obs, standard_columns

log = logging.getLogger(__name__)


class ReplayError(ValueError):
    """A batch that does not fit the store (keys, shapes or dtypes differ from earlier data)."""


class ReplayStore(abc.ABC):
    """Tables of transitions keyed by `(actor_id, seq)`."""

    @abc.abstractmethod
    def insert(self, batch: TransitionBatch, table: str = "online") -> int:
        """Store a batch; returns how many transitions were new (duplicates are dropped)."""

    @abc.abstractmethod
    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator,
        table: str = "online",
        goal_at: str | None = None,
        final: bool = False,
    ) -> dict[str, np.ndarray]:
        """A uniformly sampled batch: the same keys as inserted, leading dim `batch_size`; with
        `goal_at`, `her/goal` too: that column at a later row of each row's episode (HER)."""

    def can_sample(self, table: str = "online") -> bool:
        """Whether `table` holds something to sample now."""
        return len(self) > 0

    def sample_windows(
        self,
        batch_size: int,
        horizon: int,
        rng: np.random.Generator,
        table: str = "online",
        lookback: int = 0,
        exclude: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray] | None:
        """`batch_size` windows of `horizon` consecutive transitions of one actor's episode (keys as
        `TableCache.sample_windows`, less the `exclude`d observation columns); None while no complete window is held,
        and always None for
        a store that keeps no episode order (the default)."""
        return None

    @abc.abstractmethod
    def refuse(self, actor_id: int, seq: int, count: int, reason: str) -> int:
        """Pass over seqs `seq .. seq+count-1` of `actor_id`'s stream (a batch refused for what it
        holds) if they are the next it expects: the stream goes on after them, the rows counted
        (`rows_refused`) and named in the log. Returns the rows passed over (0: not the next range)."""

    @abc.abstractmethod
    def ack(self, actor_id: int) -> int:
        """Next seq expected from `actor_id` (everything below it is stored)."""

    @abc.abstractmethod
    def recover(self) -> None:
        """Rebuild indexes from whatever is stored (no-op for memory-only stores)."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    def flush(self, timeout: float = 30.0) -> bool:
        """Make everything inserted so far durable (and acked); True when done."""
        return True

    def high_water(self) -> dict[int, int]:
        """Per actor, the next seq expected (everything below is stored); empty if not tracked."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional: memory-only stores hold nothing to release
        """Release what the store holds (threads, files); a no-op for memory-only stores."""


class InMemoryReplayStore(ReplayStore):
    """A ring buffer of columns in RAM. Lost when the process ends (see the persistent store)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._cols: dict[str, np.ndarray] = {}
        self._size = 0
        self._next = 0
        self._hw: dict[int, int] = {}
        self.rows_refused = 0

    def _allocate(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._cols = {k: np.zeros((self.capacity, *a.shape[1:]), a.dtype) for k, a in arrays.items()}

    def _check(self, arrays: Mapping[str, np.ndarray]) -> None:
        if set(arrays) != set(self._cols):
            raise ReplayError(f"batch keys {sorted(arrays)} differ from the store's {sorted(self._cols)}")
        for k, a in arrays.items():
            col = self._cols[k]
            if a.shape[1:] != col.shape[1:] or a.dtype != col.dtype:
                raise ReplayError(f"'{k}' is {a.dtype}{a.shape[1:]}, store holds {col.dtype}{col.shape[1:]}")

    def insert(self, batch: TransitionBatch, table: str = "online") -> int:
        if table != "online":
            raise ReplayError(f"the in-memory store has only the 'online' table, not '{table}'")
        try:  # compact batches (from an Adder) become full rows; frames encoded at an actor, pixels
            arrays = standard_columns(expand_next_obs(batch.arrays))
            if any(isinstance(a, Frames) for a in arrays.values()):
                from robo_async.buffer.codec import CorruptRecord, decode_batch_frames

                try:
                    arrays = {
                        **arrays,
                        **decode_batch_frames(arrays, [k for k, a in arrays.items() if isinstance(a, Frames)]),
                    }
                except CorruptRecord as e:
                    raise WireError(str(e)) from None
            batch = TransitionBatch(batch.actor_id, batch.seq, arrays)
        except WireError as e:
            raise ReplayError(f"actor {batch.actor_id} seq {batch.seq}: {e}") from None
        if not self._cols:
            self._allocate(batch.arrays)
        self._check(batch.arrays)
        hw = self._hw.get(batch.actor_id, 0)
        if batch.seq > hw:  # a gap: an earlier batch was lost in flight; the actor resends in order
            return 0
        skip = max(0, hw - batch.seq)  # leading transitions already stored
        n = batch.count - skip
        if n <= 0:
            return 0
        idx = (self._next + np.arange(n)) % self.capacity
        for k, a in batch.arrays.items():
            self._cols[k][idx] = a[skip:]
        self._next = int((self._next + n) % self.capacity)
        self._size = min(self.capacity, self._size + n)
        self._hw[batch.actor_id] = batch.seq + batch.count
        return n

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator,
        table: str = "online",
        goal_at: str | None = None,
        final: bool = False,
    ) -> dict[str, np.ndarray]:
        if goal_at is not None:
            raise ReplayError("hindsight relabelling needs the persistent store's episode links (buffer=lmdb)")
        if table != "online":
            raise ReplayError(f"the in-memory store has only the 'online' table, not '{table}'")
        if self._size == 0:
            raise ReplayError("cannot sample from an empty store")
        idx = rng.integers(0, self._size, size=batch_size)
        return {k: c[idx] for k, c in self._cols.items()}

    def can_sample(self, table: str = "online") -> bool:
        """Whether the store holds rows (it has only the `online` table)."""
        return table == "online" and self._size > 0

    def refuse(self, actor_id: int, seq: int, count: int, reason: str) -> int:
        if self._hw.get(actor_id, 0) != seq or count <= 0:
            return 0
        self._hw[actor_id] = seq + count
        self.rows_refused += count
        log.error(
            "actor %d's transitions %d..%d refused and passed over (%s)", actor_id, seq, seq + count - 1, reason[:300]
        )
        return count

    def ack(self, actor_id: int) -> int:
        return self._hw.get(actor_id, 0)

    def recover(self) -> None:
        pass

    def high_water(self) -> dict[int, int]:
        """Per actor, the next seq expected."""
        return dict(self._hw)

    def __len__(self) -> int:
        return self._size


@dataclass
class SampleToInsertRatio:
    """Reverb-style rate limiter tying learner updates to collected data.

    Updates may run while `updates < (inserted - min_size) * updates_per_insert`; actors in
    as-fast-as-possible sim mode may insert while `inserted < min_size + updates /
    updates_per_insert + slack`. Its state is part of every checkpoint.
    """

    updates_per_insert: float
    min_size: int
    slack: int = 512
    inserted: int = 0
    updates: int = 0

    def can_update(self) -> bool:
        """Whether the learner may run one more update now."""
        return self.inserted >= self.min_size and self.updates < (
            (self.inserted - self.min_size) * self.updates_per_insert + 1
        )

    def allowed_inserts(self) -> int:
        """Transitions that may have been inserted so far: as-fast actors pause beyond it."""
        return int(self.min_size + self.updates / self.updates_per_insert + self.slack)

    def state_dict(self) -> dict[str, int]:
        """The counters, for checkpoints."""
        return {"inserted": self.inserted, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Restore the counters from a checkpoint's `state_dict()`."""
        self.inserted, self.updates = int(state["inserted"]), int(state["updates"])
