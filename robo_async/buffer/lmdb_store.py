"""`PersistentReplayStore`: the crash-safe replay store, on LMDB.

Why LMDB: every commit is atomic and copy-on-write (two meta pages), so a crash at any instant
leaves the last committed state intact with no journal replay; readers never block the writer;
it is one C library with Python bindings used in production for a decade. The layout (a `meta`,
an `img` and a `t:<table>` sub-database) is described in layout.py.

How the learner uses it::

    store = PersistentReplayStore(run_dir / "replay", StoreConfig())
    store.open()                       # recover: repair a damaged tail, rebuild counts, page in
    store.insert(batch, "online")      # queued; the writer thread group-commits it (durable)
    store.ack(actor_id)                # next seq expected from that actor: all below is committed
    store.sample(256, rng, "online")   # from the in-RAM cache, never from disk
    store.close()                      # commits whatever is queued

A batch becomes durable when its group commit returns (fsync). Acks only ever cover committed
transitions, and the (actor, seq) high-water marks are written in the same transaction as the
data, so a resend after any crash is either new (stored) or a duplicate (dropped), never both.

This module holds the store's life (open, recover, close) and its stream's bookkeeping (`insert`,
`refuse`, `ack`: the accepted and committed high-water marks, the queue's backpressure). The class is
made of two more parts: its group commit's writer and committer threads (commit_threads.py, over
ingest.py's functions) and its reading side (store_reads.py: rows, samples from the RAM caches, the
pager thread, status). It composes the pager (pager.py: older records into the RAM cache) and
retention (retention.py: limits, archive, disk monitor), each given handles and counts, none editing
the store's fields.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import lmdb
import msgpack
import numpy as np

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import CODECS, CorruptRecord, Schema, decode_batch_frames
from robo_async.buffer.commit_threads import CommitThreads
from robo_async.buffer.ingest import Encoders, Pending, Prepared
from robo_async.buffer.layout import MIRROR, TABLES, Handles, StoreConfig, StoreError, index_key, read_int
from robo_async.buffer.recovery import read_meta, rebuild_high_water, repair_tail
from robo_async.buffer.retention import Retention
from robo_async.buffer.store import ReplayError, ReplayStore
from robo_async.buffer.store_reads import StoreReads
from robo_async.transport.wire import Frames, TransitionBatch, WireError, expand_next_obs, standard_columns

__all__ = ["MIRROR", "TABLES", "PersistentReplayStore", "StoreConfig", "StoreError"]

log = logging.getLogger(__name__)


class PersistentReplayStore(CommitThreads, StoreReads, ReplayStore):
    """The learner's replay store: tables of transitions on LMDB (durable once committed) with a
    RAM cache per table for sampling. Open it before use, close it after (see the module's
    docstring); `check()` raises if one of its threads died."""

    def __init__(self, path: str | Path, config: StoreConfig = StoreConfig()) -> None:
        if config.image_codec not in CODECS:
            raise ValueError(f"buffer.image_codec '{config.image_codec}' unknown; use one of {CODECS}")
        self.path = Path(path)
        self.config = config
        self.schema: Schema | None = None
        self.caches: dict[str, TableCache] = {}
        self.counts = dict.fromkeys(TABLES, 0)  # committed per table, ever (indices run 0..count-1)
        self.retention = Retention(config, self.path, open_archive=self._open_archive, on_evicted=self._evicted)
        self.commit_times: list[float] = []  # monotonic time of each commit (last 10k)
        self.write_errors = 0
        self.last_error: str | None = None
        self.out_of_order = 0  # batches that skipped ahead of an actor's high-water mark (resent later)
        self.rows_refused = 0  # transitions refused and passed over (`refuse`), over the store's life
        self.refusals = 0  # refusals since this store was opened (the log names the first 20, then every 1000th)
        self.corrupt_records = 0
        self.thread_error: str | None = None  # what killed a writer/committer/pager thread
        self.repaired: list[str] = []  # what recovery fixed, for logs and `buffer inspect`
        self.recovery_s = 0.0  # how long open() took (s)
        self._committed_hw: dict[int, int] = {}
        self._accepted_hw: dict[int, int] = {}
        self._lock = threading.Lock()
        self._h: Handles | None = None
        self._readonly = False
        self._queue: queue.Queue[Pending | None] = queue.Queue()
        self._queued_bytes = 0  # uncommitted batch bytes, bounded by max_queued_mb
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: Encoders | None = None
        self._commits: queue.Queue[tuple[list[Prepared], int, int] | None] = queue.Queue(1)  # writer -> committer
        self.frames_as_sent = 0  # images stored as an actor encoded them
        self.frames_encoded = 0  # images this store encoded (raw pixels: demos, imports, old actors)
        self._writer_hw: dict[int, int] = {}  # high-water marks including groups not yet committed
        self._fail_gen = 0  # bumped by each failed commit
        self._outstanding = 0  # queued items not yet committed or dropped
        self._drained = threading.Condition(self._lock)

    # --- open / recover --------------------------------------------------------------------
    def open(self, expect: Schema | None = None, readonly: bool = False, threads: bool = True) -> PersistentReplayStore:
        """Open (creating it if absent) and recover; `expect` is the schema this run writes (a
        store holding other columns is refused). With `threads`, start the writer, committer and
        pager. Returns the store."""
        t0 = time.monotonic()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            env = lmdb.open(
                str(self.path),
                map_size=int(self.config.map_size_gb * 2**30),
                max_dbs=8,
                readonly=readonly,
                readahead=False,
                meminit=False,
            )
            self._h = Handles(
                env,
                {
                    name: env.open_db(name.encode(), create=not readonly)
                    for name in ("meta", "img", *(f"t:{t}" for t in TABLES))
                },
            )
        except lmdb.Error as e:
            raise StoreError(
                f"replay store {self.path} cannot be opened ({type(e).__name__}: {e}); "
                f"it is damaged or not a replay store: move it aside and start a new one"
            ) from None
        self._readonly = readonly
        self.recover()
        if expect is not None:
            self._set_schema(expect) if self.schema is None else self._check_expected(expect)
        if not readonly and threads:
            self._pool = Encoders(self.config.encode_threads, self.config.image_codec, self.config.jpeg_quality)
            self._writer_hw = dict(self._committed_hw)
            for target, name in (
                (self._writer, "replay-writer"),
                (self._committer, "replay-commit"),
                (self._pager, "replay-pager"),
            ):
                t = threading.Thread(target=self._watched, args=(target, name), name=name, daemon=True)
                t.start()
                self._threads.append(t)
        self.recovery_s = time.monotonic() - t0
        return self

    def _watched(self, target: Callable[[], None], name: str) -> None:
        try:
            target()
        except BaseException as e:  # noqa: BLE001 - watched: check() raises it on the learner's thread
            self.thread_error = f"{name} thread died: {type(e).__name__}: {e}"
            log.error("replay store %s: %s", self.path, self.thread_error)
            with self._drained:  # nothing queued will commit now: wake flush() and insert()
                self._outstanding = 0
                self._queued_bytes = 0
                self._drained.notify_all()

    def check(self) -> None:
        """Raise StoreError if one of the store's threads (writer, committer, pager) died: a
        store that no longer commits is a learner failure (the supervisor restarts it), not silence."""
        if self.thread_error is not None:
            raise StoreError(f"replay store {self.path}: {self.thread_error}")

    def _check_expected(self, expect: Schema) -> None:
        assert self.schema is not None
        have = {c.name: c for c in self.schema.columns}
        for c in expect.columns:
            if c.name in have and have[c.name] != c:
                raise StoreError(
                    f"replay store {self.path} holds '{c.name}' as {have[c.name].describe()}, "
                    f"this run produces {c.describe()}; use another run directory"
                )

    def recover(self) -> None:
        """Read the schema and counts, repair a damaged tail, rebuild the high-water marks (recovery.py)."""
        assert self._h is not None
        schema, hw = read_meta(self._h, self.path, on_other=self._meta_entry)  # first:, ev:, pm:, rows_refused
        if schema is not None:
            self._set_schema(schema, write=False)
        self._committed_hw = dict(hw)
        if self.schema is None:
            self._accepted_hw = dict(hw)
            return
        for table in TABLES:
            self.counts[table], repaired = repair_tail(
                self._h, self.schema, table, self.first[table], self.config.tail_check, not self._readonly, self.path
            )
            self.repaired += [repaired] if repaired else []
            self.first[table] = min(self.first[table], self.counts[table])
            self.caches[table].set_total(self.counts[table], self.first[table])
        if self.repaired:
            self._committed_hw = rebuild_high_water(self._h, not self._readonly)
        self._accepted_hw = dict(self._committed_hw)

    def _meta_entry(self, key: bytes, value: bytes) -> None:
        if key == b"rows_refused":
            self.rows_refused = read_int(value)
        else:
            self.retention.load(key, value)

    def _set_schema(self, schema: Schema, write: bool = True) -> None:
        self.schema = schema
        per_tx = max(schema.transition_bytes, 1)
        cap = int(min(self.config.cache_transitions, self.config.cache_mb * 2**20 / per_tx))
        limits = self.config.max_rows  # a table under retention caches at most what it holds
        self.caches = {t: TableCache(schema, min(cap, int(limits.get(t) or cap))) for t in TABLES}
        if write and not self._readonly:
            assert self._h is not None
            with self._h.env.begin(write=True, db=self._dbs["meta"]) as txn:
                txn.put(b"schema", msgpack.packb(schema.to_msgpack(), use_bin_type=True))

    # --- insert / ack ------------------------------------------------------------------------
    def insert(self, batch: TransitionBatch, table: str = "online") -> int:
        """Queue a batch for the next group commit. Returns how many of its transitions are new;
        those become durable (and acked) once committed. Raises ReplayError for a batch that does
        not fit the store (nothing of it is queued)."""
        if table not in TABLES:
            raise ReplayError(f"unknown table '{table}'; tables: {TABLES}")
        self.check()
        try:  # compact batches (from an Adder) become full rows; every batch has the HIL columns
            batch = TransitionBatch(batch.actor_id, batch.seq, standard_columns(expand_next_obs(batch.arrays)))
        except WireError as e:
            raise ReplayError(f"actor {batch.actor_id} seq {batch.seq}: {e}") from None
        if self._readonly:
            raise ReplayError(f"replay store {self.path} is open read-only")
        decoded: dict[str, np.ndarray] = {}
        encoded = [k for k, a in batch.arrays.items() if isinstance(a, Frames)]
        if encoded and batch.seq + batch.count > self._accepted_hw.get(batch.actor_id, 0):
            # frames the actor encoded: stored as they came; decoded once here, which checks
            # them before anything is accepted, for the RAM cache (outside the lock)
            try:
                decoded = decode_batch_frames(batch.arrays, encoded)
            except CorruptRecord as e:
                raise ReplayError(f"actor {batch.actor_id} seq {batch.seq}: {e}") from None
        with self._lock:
            if self.schema is None:
                self._set_schema(Schema.of(batch.arrays))
            problem = self.schema.check(batch.arrays)  # type: ignore[union-attr]
            if problem:
                raise ReplayError(f"actor {batch.actor_id} seq {batch.seq}: {problem}")
            if encoded and not decoded:  # raced with another insert of the same rows
                return 0
            hw = self._accepted_hw.get(batch.actor_id, 0)
            if batch.seq > hw:  # a gap: an earlier batch was lost in flight; the actor resends it
                self.out_of_order += 1
                return 0
            new = batch.seq + batch.count - hw
            if new <= 0:
                return 0
            self._accepted_hw[batch.actor_id] = batch.seq + batch.count
            nbytes = sum(a.nbytes for a in batch.arrays.values()) + sum(a.nbytes for a in decoded.values())
            limit = self.config.max_queued_mb * 2**20
            self._drained.wait_for(lambda: self._queued_bytes + nbytes <= limit or self._outstanding == 0)
            self._outstanding += 1
            self._queued_bytes += nbytes
        self._queue.put(Pending(table, batch, nbytes, decoded=decoded))
        return new

    def refuse(self, actor_id: int, seq: int, count: int, reason: str) -> int:
        """Pass over seqs `seq .. seq+count-1` of `actor_id`'s stream, which this store will never
        take (a batch refused for what it holds): its stream goes on after them instead of waiting
        for them forever. Only the next range the stream expects is passed over (a later one comes
        round again once the batches before it arrive). The rows are counted (`rows_refused`,
        durable) and named in the log; once committed, the ack moves past them and the actor lets
        the batch go. Returns the rows passed over (0: not the next range)."""
        if self._readonly:
            raise ReplayError(f"replay store {self.path} is open read-only")
        self.check()
        with self._lock:
            if self._accepted_hw.get(actor_id, 0) != seq or count <= 0:
                return 0
            self._accepted_hw[actor_id] = seq + count
            self._outstanding += 1
        marker = TransitionBatch(actor_id, seq, {"reward": np.zeros(0, np.float32)})
        self._queue.put(Pending("online", marker, 0, refused=count))
        self.rows_refused += count
        self.refusals += 1
        if self.refusals <= 20 or self.refusals % 1000 == 0:  # named, but a hostile key cannot flood the log
            log.error(
                "replay store %s: actor %d's transitions %d..%d refused and passed over (%s); %d rows "
                "refused so far (%d refusals)",
                self.path,
                actor_id,
                seq,
                seq + count - 1,
                reason[:300],
                self.rows_refused,
                self.refusals,
            )
        return count

    def ack(self, actor_id: int) -> int:
        """Next seq expected from `actor_id`: everything below it is committed (durable)."""
        with self._lock:
            return self._committed_hw.get(actor_id, 0)

    def high_water(self) -> dict[int, int]:
        """Per actor, the next seq expected (committed high-water marks)."""
        with self._lock:
            return dict(self._committed_hw)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued is committed (or failed). True if the queue drained."""
        with self._drained:
            return self._drained.wait_for(lambda: self._outstanding == 0, timeout)

    def accepting(self) -> bool:
        """False while the writer is behind by max_queued_mb, or the disk is nearly full: leave
        messages in the socket (backpressure reaches the actors, whose uplinks keep the data)."""
        return self._queued_bytes < self.config.max_queued_mb * 2**20 and self.retention.disk_ok()

    def _evicted(self, table: str, first: int) -> None:
        self.caches[table].set_total(self.counts[table], first)

    def _open_archive(self, schema: Schema) -> PersistentReplayStore:
        assert self.config.archive_dir is not None
        return PersistentReplayStore(self.config.archive_dir, StoreConfig(cache_transitions=2)).open(
            expect=schema, readonly=False, threads=False
        )

    def append_raw(self, table: str, records: Sequence[bytes], images: Mapping[bytes, bytes | None]) -> None:
        """Append records and images exactly as another store of this schema holds them, in one
        commit (retention's archive copies; the store must be open without threads)."""
        assert self._h is not None
        with self._h.env.begin(write=True) as txn:
            db = self._dbs[f"t:{table}"]
            n = self.counts[table]
            for v in records:
                txn.put(index_key(n), v, db=db, append=True)
                n += 1
            for k, blob in images.items():
                if blob is not None:
                    txn.put(k, blob, db=self._dbs["img"], overwrite=False)
            txn.put(f"count:{table}".encode(), index_key(n), db=self._dbs["meta"])
        self.counts[table] = n

    def close(self) -> None:
        """Commit what is queued, stop the threads, close the archive and the environment."""
        if self._threads:
            self._queue.put(None)
            self._stop.set()
            for t in self._threads:
                t.join(timeout=60)
            self._threads = []
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.retention.close()
        if self._h is not None:
            self._h.env.close()
            self._h = None
