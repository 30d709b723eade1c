"""`TableCache`: decoded transitions of one table in RAM, so sampling never touches the disk.

Two regions of preallocated columns:
- `recent`: a ring of the newest committed transitions (filled by the store's writer at commit);
- `reservoir`: a random subset of the older transitions, paged in from disk by a background
  thread (newest first after a restart, then random replacement).
A sample draws from each region in proportion to the share of the table it stands for, so it is
uniform over the whole table when the older data fits the reservoir, and close to it otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np

from robo_async.buffer.codec import Schema


class TableCache:
    def __init__(self, schema: Schema, capacity: int) -> None:
        capacity = max(capacity, 2)
        self.schema = schema
        self.recent_capacity = capacity - capacity // 2
        self.reservoir_capacity = capacity // 2
        self._recent = {c.name: np.zeros((self.recent_capacity, *c.shape), c.dtype) for c in schema.columns}
        self._reservoir = {c.name: np.zeros((self.reservoir_capacity, *c.shape), c.dtype) for c in schema.columns}
        self.reservoir_index = np.full(self.reservoir_capacity, -1, np.int64)  # table index per slot
        self.recent_filled = 0
        self.reservoir_filled = 0
        self._next = 0
        self.total = 0  # committed transitions in the table (on disk)
        self.lock = threading.Lock()

    # --- filled by the writer (recent) and the pager (reservoir) ----------------------------
    def set_total(self, total: int) -> None:
        with self.lock:
            self.total = total

    def append(self, arrays: Mapping[str, np.ndarray], total_after: int) -> None:
        """Newly committed rows (a batch, leading dim n) and the table size after the commit."""
        n = len(next(iter(arrays.values())))
        cap = self.recent_capacity
        if n > cap:
            arrays = {k: a[-cap:] for k, a in arrays.items()}
            n = cap
        first = min(n, cap - self._next)  # up to the end of the ring, then from its start
        with self.lock:
            for k, a in arrays.items():
                col = self._recent[k]
                col[self._next:self._next + first] = a[:first]
                if first < n:
                    col[:n - first] = a[first:]
            self._next = int((self._next + n) % cap)
            self.recent_filled = min(cap, self.recent_filled + n)
            self.total = total_after

    def older_count(self) -> int:
        """Table indices `[0, older_count)` are not in the recent ring."""
        return max(0, self.total - self.recent_filled)

    def put_reservoir(self, slot: int, table_index: int, row: Mapping[str, np.ndarray]) -> None:
        with self.lock:
            for k, a in row.items():
                self._reservoir[k][slot] = a
            self.reservoir_index[slot] = table_index
            self.reservoir_filled = max(self.reservoir_filled, slot + 1)

    # --- read by the sampler ----------------------------------------------------------------
    def ready(self) -> bool:
        return self.recent_filled + self.reservoir_filled > 0

    def cached(self) -> int:
        return self.recent_filled + self.reservoir_filled

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        with self.lock:
            older = self.older_count()
            res, rec = self.reservoir_filled, self.recent_filled
            if res + rec == 0:
                raise LookupError("nothing cached yet")
            if res == 0:
                n_old = 0
            elif rec == 0:
                n_old = n
            else:
                n_old = int(rng.binomial(n, older / max(older + rec, 1)))
            i_new = rng.integers(0, rec, size=n - n_old) if n > n_old else None
            i_old = rng.integers(0, res, size=n_old) if n_old else None
            out = {}
            for c in self.schema.columns:
                parts = []
                if i_new is not None:
                    parts.append(self._recent[c.name][i_new])
                if i_old is not None:
                    parts.append(self._reservoir[c.name][i_old])
                out[c.name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return out
