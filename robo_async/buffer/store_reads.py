"""The reading side of the LMDB replay store (`PersistentReplayStore`, lmdb_store.py, is made of it and
of commit_threads.py): a table's rows in order (`rows`, `records`: damaged ones skipped, counted and
logged), samples from the RAM caches (`sample`, `sample_windows`), the pager thread that fills them
from disk (pager.py), and what the store holds (`live`, `first`, `embedding_versions`, `last_commit`,
`disk_bytes`, `data_bytes`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import lmdb
import msgpack
import numpy as np

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import CorruptRecord, Schema, peek_record
from robo_async.buffer.layout import TABLES, Handles, StoreConfig, index_key, read_int
from robo_async.buffer.pager import page
from robo_async.buffer.retention import Retention
from robo_async.buffer.store import ReplayError

log = logging.getLogger("robo_async.buffer.lmdb_store")


class StoreReads:
    """Reading a replay store: its tables on disk, its caches in RAM, its status. The store's state
    (declared below) is set by `PersistentReplayStore`, which opens, writes and closes it."""

    path: Path
    config: StoreConfig
    schema: Schema | None
    caches: dict[str, TableCache]
    counts: dict[str, int]  # committed per table, ever (indices run 0..count-1)
    retention: Retention
    corrupt_records: int
    _h: Handles | None
    _stop: threading.Event

    @property
    def _env(self) -> lmdb.Environment | None:
        return self._h.env if self._h is not None else None

    @property
    def _dbs(self) -> dict[str, lmdb._Database]:
        assert self._h is not None
        return self._h.dbs

    @property
    def first(self) -> dict[str, int]:
        """The oldest index each table still holds (retention evicted the rows below it)."""
        return self.retention.first

    @property
    def archived(self) -> int:
        """Rows copied to the archive store before eviction."""
        return self.retention.archived

    @property
    def disk_free_gb(self) -> float:
        """Free space (GiB) on the store's disk at the last check (inf before the first)."""
        return self.retention.disk_free_gb

    def embedding_versions(self) -> dict[int, int]:
        """Rows committed per frozen-encoder version (`obs/embedding_version`; buffer/embeddings.py),
        as counted at commit (rows retention evicted since are still counted)."""
        assert self._h is not None
        out: dict[int, int] = {}
        with self._h.env.begin(db=self._h.dbs["meta"]) as txn:
            cur = txn.cursor()
            if cur.set_range(b"emb:"):
                for k, v in cur:
                    if not k.startswith(b"emb:"):
                        break
                    out[int(k[4:], 16)] = read_int(v)
        return out

    def live(self, table: str) -> int:
        """Rows of `table` held now (committed minus evicted)."""
        return self.counts[table] - self.first[table]

    def data_bytes(self) -> int:
        """Bytes of the pages holding data (see `Handles.data_bytes`)."""
        assert self._h is not None
        return self._h.data_bytes()

    # --- reading -----------------------------------------------------------------------------
    def _read_row(
        self, txn: lmdb.Transaction, table: str, i: int, memo: dict[bytes, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """One decoded transition (see `Handles.read_record` for `memo`)."""
        assert self._h is not None and self.schema is not None
        return self._h.read_record(txn, self.schema, table, i, memo)[2]

    def rows(
        self, table: str = "online", start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Decoded transitions `[start, stop)` of a table in order; damaged ones are skipped (logged)."""
        for i, _, _, row in self.records(table, start, stop):
            yield i, row

    def records(
        self, table: str = "online", start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, int, int, dict[str, np.ndarray]]]:
        """Like `rows`, with each transition's (actor_id, seq): (index, actor_id, seq, row)."""
        assert self._h is not None
        stop = self.counts[table] if stop is None else stop
        start = max(start, self.first[table])  # evicted rows are gone
        for lo in range(start, stop, 1024):
            with self._h.env.begin() as txn:
                for i in range(lo, min(lo + 1024, stop)):
                    try:
                        row = self._read_row(txn, table, i)
                        actor, seq = peek_record(txn.get(index_key(i), db=self._dbs[f"t:{table}"]))
                        yield i, actor, seq, row
                    except CorruptRecord as e:
                        self._corrupt(table, i, e)

    def _corrupt(self, table: str, i: int, e: Exception) -> None:
        self.corrupt_records += 1
        log.warning("replay store %s: skipping damaged record %d of '%s': %s", self.path, i, table, e)

    def _pager(self) -> None:
        assert self._h is not None
        page(self, self._h, self.config, self._stop, self.retention.held_from, self._corrupt)

    def can_sample(self, table: str = "online") -> bool:
        """Whether `table`'s cache holds enough to sample from."""
        c = self.caches.get(table)
        return c is not None and c.ready()

    def sample_windows(
        self,
        batch_size: int,
        horizon: int,
        rng: np.random.Generator,
        table: str = "online",
        lookback: int = 0,
        exclude: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray] | None:
        """Windows of `horizon` consecutive transitions of one actor's episode (TableCache.sample_windows);
        None while no complete window is cached."""
        if not self.can_sample(table):
            return None
        return self.caches[table].sample_windows(batch_size, horizon, rng, lookback=lookback, exclude=exclude)

    def sample(
        self,
        batch_size: int,
        rng: np.random.Generator,
        table: str = "online",
        goal_at: str | None = None,
        final: bool = False,
    ) -> dict[str, np.ndarray]:
        """`batch_size` transitions drawn uniformly from `table`'s RAM cache (never from disk);
        raises ReplayError while it has nothing to sample. `goal_at`/`final`: HER's future goals
        (`TableCache.sample`)."""
        if not self.can_sample(table):
            raise ReplayError(f"table '{table}' has nothing to sample yet")
        return self.caches[table].sample(batch_size, rng, goal_at, final)

    def __len__(self) -> int:
        return sum(self.live(t) for t in TABLES)

    # --- status ------------------------------------------------------------------------------
    def last_commit(self) -> float | None:
        """Wall-clock time (s since the epoch) of the last commit, None if none."""
        assert self._h is not None
        with self._h.env.begin(db=self._dbs["meta"]) as txn:
            raw = txn.get(b"last_commit")
        return float(msgpack.unpackb(raw)) if raw else None

    def disk_bytes(self) -> int:
        """Size of the store's files on disk, in bytes."""
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())
