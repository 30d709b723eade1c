"""`PersistentReplayStore`: the crash-safe replay store, on LMDB.

Why LMDB: every commit is atomic and copy-on-write (two meta pages), so a crash at any instant
leaves the last committed state intact with no journal replay; readers never block the writer;
it is one C library with Python bindings used in production for a decade. Layout (sub-databases):

    meta           schema, per-table counts, per-actor high-water marks, last commit time
    img            encoded camera images keyed by content (stored once; see codec.py)
    t:<table>      one record per transition, keyed by its 8-byte big-endian index in the table

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
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import lmdb
import msgpack
import numpy as np

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import (STORE_SCHEMA, CODECS, CorruptRecord, Schema, decode_batch_frames, decode_image,
                                     decode_record, encode_image, encode_record, image_key, peek_record)
from robo_async.buffer.retention import TABLES, Retention, _key
from robo_async.buffer.store import ReplayError, ReplayStore
from robo_async.transport.wire import (Frames, TransitionBatch, WireError, expand_next_obs,
                                      standard_columns)

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store on disk cannot be used (damaged beyond repair, or written by another schema)."""


@dataclass(frozen=True)
class StoreConfig:
    commit_every: int = 512  # transitions per group commit ...
    commit_ms: float = 50.0  # ... or this long after the first uncommitted one, whichever first
    image_codec: str = "qoi"  # qoi or png (lossless), or jpeg
    jpeg_quality: int = 95
    cache_mb: float = 1024.0  # decoded transitions kept in RAM, per table ...
    cache_transitions: int = 1_000_000  # ... and at most this many
    map_size_gb: float = 1024.0  # LMDB address space; the file grows only as data is written
    encode_threads: int = 2  # image encoders (OpenCV releases the GIL)
    tail_check: int = 64  # records at the end of each table verified on open
    max_queued_mb: float = 256.0  # uncommitted data; insert() waits beyond this (backpressure)
    page_chunk: int = 256  # records the pager reads per step
    refresh_per_s: float = 200.0  # older records swapped into a full reservoir per second (bounded CPU)
    page_run: int = 64  # consecutive records per refresh (windows need neighbours)
    # Retention (days-long runs): the oldest records of a table go first. Per table, at most this
    # many rows (absent: no limit), e.g. {online: 5000000}; and the whole store at most max_gb on
    # disk (online rows are evicted to stay under it). Evicted records are first copied, as they
    # are, into the store at archive_dir (same format; committed before they are deleted here).
    max_rows: dict[str, int | None] = field(default_factory=dict)
    max_gb: float | None = None
    archive_dir: str | None = None
    evict_chunk: int = 2048  # records deleted per transaction (the committer does it between commits)
    disk_warn_gb: float = 5.0  # warn (logged, metric) when the disk holding the store has less free space ...
    disk_min_gb: float = 1.0  # ... and stop accepting data below this (actors keep it and resend later)

    def __post_init__(self) -> None:
        # a table limited to null rows is not limited (the config lists every table, null by default)
        unknown = set(self.max_rows) - set(TABLES)
        if unknown or any(v is not None and int(v) < 1 for v in self.max_rows.values()):
            raise ValueError(f"buffer.max_rows {dict(self.max_rows)}: tables are {TABLES}, limits at least 1")


MIRROR = "interventions"  # online rows an operator acted on are also indexed here (same commit)


def _mirrored(table: str, intervention: np.ndarray, skip: int) -> np.ndarray | None:
    """Which rows of an online batch also go to the interventions table (None: none)."""
    if table != "online":
        return None
    m = np.asarray(intervention) > 0
    return m if m[skip:].any() else None


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each run of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def _int(b: bytes | None) -> int:
    return int.from_bytes(b, "big") if b else 0


@dataclass
class _Item:
    table: str
    batch: TransitionBatch
    nbytes: int = 0
    enqueued: float = field(default_factory=time.monotonic)
    decoded: dict[str, np.ndarray] = field(default_factory=dict)  # frames that came encoded, for the cache


class PersistentReplayStore(Retention, ReplayStore):
    def __init__(self, path: str | Path, config: StoreConfig = StoreConfig()) -> None:
        if config.image_codec not in CODECS:
            raise ValueError(f"buffer.image_codec '{config.image_codec}' unknown; use one of {CODECS}")
        self.path = Path(path)
        self.config = config
        self.schema: Schema | None = None
        self.caches: dict[str, TableCache] = {}
        self.counts = dict.fromkeys(TABLES, 0)  # committed per table, ever (indices run 0..count-1)
        self.first = dict.fromkeys(TABLES, 0)  # the oldest index still held (retention evicts below it)
        self.archived = 0  # rows copied to the archive store before eviction
        self._ev_seq: dict[str, dict[int, int]] = {t: {} for t in TABLES}  # per actor: seqs below are evicted
        # actor -> (seq, mirrored, image keys) of its last evicted online row (one entry per actor)
        self._prev_mirrored: dict[int, tuple[int, bool, list[bytes] | None]] = {}
        self._archive: "PersistentReplayStore | None" = None
        self.disk_free_gb = float("inf")
        self._disk_t = 0.0
        self.commit_times: list[float] = []  # monotonic time of each commit (last 10k)
        self.write_errors = 0
        self.last_error: str | None = None
        self.out_of_order = 0  # batches that skipped ahead of an actor's high-water mark (resent later)
        self.corrupt_records = 0
        self.thread_error: str | None = None  # what killed a writer/committer/pager thread
        self.repaired: list[str] = []  # what recovery fixed, for logs and `buffer inspect`
        self._committed_hw: dict[int, int] = {}
        self._accepted_hw: dict[int, int] = {}
        self._lock = threading.Lock()
        self._env: lmdb.Environment | None = None
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._queued_bytes = 0  # uncommitted batch bytes, bounded by max_queued_mb
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None
        self._commits: queue.Queue = queue.Queue(1)  # groups from the writer to the committer
        self._encode_s = 0.5e-3  # running mean of one frame's encode time (s)
        self.frames_as_sent = 0  # images stored as an actor encoded them
        self.frames_encoded = 0  # images this store encoded (raw pixels: demos, imports, old actors)
        self._writer_hw: dict[int, int] = {}  # high-water marks including groups not yet committed
        self._fail_gen = 0  # bumped by each failed commit
        self._outstanding = 0  # queued items not yet committed or dropped
        self._drained = threading.Condition(self._lock)

    # --- open / recover --------------------------------------------------------------------
    def open(self, expect: Schema | None = None, readonly: bool = False,
             threads: bool = True) -> "PersistentReplayStore":
        t0 = time.monotonic()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(self.path), map_size=int(self.config.map_size_gb * 2**30), max_dbs=8,
                                  readonly=readonly, readahead=False, meminit=False)
            self._dbs = {name: self._env.open_db(name.encode(), create=not readonly)
                         for name in ("meta", "img", *(f"t:{t}" for t in TABLES))}
        except lmdb.Error as e:
            raise StoreError(f"replay store {self.path} cannot be opened ({type(e).__name__}: {e}); "
                             f"it is damaged or not a replay store: move it aside and start a new one") from None
        self._readonly = readonly
        self.recover()
        if expect is not None:
            self._set_schema(expect) if self.schema is None else self._check_expected(expect)
        if not readonly and threads:
            self._pool = ThreadPoolExecutor(self.config.encode_threads, thread_name_prefix="encode")
            self._writer_hw = dict(self._committed_hw)
            for target, name in ((self._writer, "replay-writer"), (self._committer, "replay-commit"),
                                 (self._pager, "replay-pager")):
                t = threading.Thread(target=self._watched, args=(target, name), name=name, daemon=True)
                t.start()
                self._threads.append(t)
        self.recovery_s = time.monotonic() - t0
        return self

    def _watched(self, target: Callable[[], None], name: str) -> None:
        try:
            target()
        except BaseException as e:  # watched: check() raises it on the learner's thread
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
                raise StoreError(f"replay store {self.path} holds '{c.name}' as {have[c.name].describe()}, "
                                 f"this run produces {c.describe()}; use another run directory")

    def recover(self) -> None:
        """Read the schema and counts, repair a damaged tail, rebuild the high-water marks."""
        assert self._env is not None
        with self._env.begin(db=self._dbs["meta"]) as txn:
            raw = txn.get(b"schema")
            if raw is not None:
                d = msgpack.unpackb(raw, raw=False)
                if d.get("store_schema") != STORE_SCHEMA:
                    raise StoreError(f"replay store {self.path} was written with store schema "
                                     f"{d.get('store_schema')}, this version reads {STORE_SCHEMA}; "
                                     f"export it with the version that wrote it, or start a new store")
                self._set_schema(Schema.from_msgpack(d), write=False)
            hw = {}
            for k, v in txn.cursor():
                if k.startswith(b"hw:"):
                    hw[int(k[3:])] = _int(v)
                elif k.startswith(b"first:"):
                    self.first[k[6:].decode()] = _int(v)
                elif k.startswith(b"pm:"):  # the last evicted online row of an actor (retention)
                    q, mirrored, keys = msgpack.unpackb(v, raw=False)
                    self._prev_mirrored[int(k[3:])] = (q, mirrored, keys)
                elif k.startswith(b"ev:"):  # ev:<table>:<actor>
                    _, table, actor = k.decode().split(":")
                    self._ev_seq[table][int(actor)] = _int(v)
        self._committed_hw = dict(hw)
        if self.schema is None:
            self._accepted_hw = dict(hw)
            return
        for table in TABLES:
            self.counts[table] = self._repair_tail(table)
            self.first[table] = min(self.first[table], self.counts[table])
            self.caches[table].set_total(self.counts[table], self.first[table])
        if self.repaired:
            self._committed_hw = self._rebuild_high_water()
        self._accepted_hw = dict(self._committed_hw)

    def _repair_tail(self, table: str) -> int:
        """Checks the last records; discards a damaged run at the end (logged). Returns the count."""
        assert self._env is not None and self.schema is not None
        db = self._dbs[f"t:{table}"]
        with self._env.begin(db=db) as txn:
            cur = txn.cursor()
            n = _int(cur.key()) + 1 if cur.last() else self.first[table]  # (all evicted: empty, count kept)
            meta_n = _int(txn.get(f"count:{table}".encode(), db=self._dbs["meta"]))
            bad = 0
            for i in range(n - 1, max(-1, n - 1 - self.config.tail_check), -1):
                try:
                    self._read_row(txn, table, i)
                    break
                except CorruptRecord:
                    bad += 1
        if bad or meta_n != n:
            msg = (f"replay store {self.path}: table '{table}' had {n} records (meta said {meta_n}); "
                   f"discarded {bad} damaged record(s) at the tail; actors resend what was not acked")
            log.warning(msg)
            self.repaired.append(msg)
            if not self._readonly:
                with self._env.begin(write=True) as txn:
                    for i in range(n - bad, n):
                        txn.delete(_key(i), db=db)
                    txn.put(f"count:{table}".encode(), _key(n - bad), db=self._dbs["meta"])
        return n - bad

    def _rebuild_high_water(self) -> dict[int, int]:
        assert self._env is not None
        hw: dict[int, int] = {}
        with self._env.begin() as txn:
            for table in TABLES:
                for _, v in txn.cursor(db=self._dbs[f"t:{table}"]):
                    try:
                        a, s = peek_record(v)
                    except Exception:
                        continue
                    hw[a] = max(hw.get(a, 0), s + 1)
            if not self._readonly:
                with self._env.begin(write=True) as w:
                    for a, s in hw.items():
                        w.put(f"hw:{a}".encode(), _key(s), db=self._dbs["meta"])
        return hw

    def _set_schema(self, schema: Schema, write: bool = True) -> None:
        self.schema = schema
        per_tx = max(schema.transition_bytes, 1)
        cap = int(min(self.config.cache_transitions, self.config.cache_mb * 2**20 / per_tx))
        limits = self.config.max_rows  # a table under retention caches at most what it holds
        self.caches = {t: TableCache(schema, min(cap, int(limits.get(t) or cap))) for t in TABLES}
        if write and not self._readonly:
            assert self._env is not None
            with self._env.begin(write=True, db=self._dbs["meta"]) as txn:
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
            decoded = self._decode_frames(batch, encoded)
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
        self._queue.put(_Item(table, batch, nbytes, decoded=decoded))
        return new

    def _decode_frames(self, batch: TransitionBatch, names: list[str]) -> dict[str, np.ndarray]:
        try:
            return decode_batch_frames(batch.arrays, names)
        except CorruptRecord as e:
            raise ReplayError(f"actor {batch.actor_id} seq {batch.seq}: {e}") from None

    def ack(self, actor_id: int) -> int:
        with self._lock:
            return self._committed_hw.get(actor_id, 0)

    def high_water(self) -> dict[int, int]:
        with self._lock:
            return dict(self._committed_hw)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued is committed (or failed). True if the queue drained."""
        with self._drained:
            return self._drained.wait_for(lambda: self._outstanding == 0, timeout)

    def accepting(self) -> bool:
        """False while the writer is behind by max_queued_mb, or the disk is nearly full: leave
        messages in the socket (backpressure reaches the actors, whose uplinks keep the data)."""
        return self._queued_bytes < self.config.max_queued_mb * 2**20 and self._disk_ok()

    def _done(self, n: int, nbytes: int) -> None:
        with self._drained:
            self._outstanding -= n
            self._queued_bytes -= nbytes
            self._drained.notify_all()

    # --- the writer thread -------------------------------------------------------------------
    def _writer(self) -> None:
        """Groups queued batches and starts encoding their frames; the committer writes them.
        The two overlap, so the encoders stay busy while a group is being committed."""
        cfg = self.config
        fail_gen = 0
        while True:
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._stop.is_set() and self._queue.empty():
                    break
                continue
            if item is None:
                break
            if fail_gen != self._fail_gen:  # a commit failed: restart numbering from what is on disk
                self._commits.join()
                fail_gen = self._fail_gen
                self._writer_hw = dict(self._committed_hw)
            group: list[tuple] = []
            deadline = time.monotonic() + cfg.commit_ms / 1000
            n, images, taken, nbytes, last = 0, 0, 1, item.nbytes, False
            # Frames this group may hold so that encoding it takes about commit_ms (measured).
            image_cap = max(8, cfg.commit_ms / 1000 * cfg.encode_threads / max(self._encode_s, 1e-5))
            while True:
                prepared = self._prepare(item, self._writer_hw)
                if prepared is not None:
                    group.append(prepared)
                    n += prepared[0].batch.count - prepared[1]
                    images += len(prepared[3])
                if n >= cfg.commit_every or images >= image_cap or time.monotonic() >= deadline:
                    break
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    last = True
                    break
                taken += 1
                nbytes += item.nbytes
            self._commits.put((group, taken, nbytes))
            if last:
                break
        self._commits.put(None)

    def _encode(self, img: np.ndarray, codec: str, quality: int) -> bytes:
        t0 = time.perf_counter()
        blob = encode_image(img, codec, quality)
        self._encode_s = 0.95 * self._encode_s + 0.05 * (time.perf_counter() - t0)  # running mean
        return blob

    def _committer(self) -> None:
        while True:
            try:
                job = self._commits.get(timeout=0.5)
            except queue.Empty:
                self._retain()  # idle: catch up with retention
                continue
            if job is None:
                self._commits.task_done()
                break
            group, taken, nbytes = job
            try:
                if group:
                    self._commit(group)
            finally:
                self._done(taken, nbytes)
                self._commits.task_done()
            self._retain()

    # --- retention ---------------------------------------------------------------------------
    def _prepare(self, item: _Item, group_hw: dict[int, int]) -> tuple | None:
        """Trim what is already stored; encode the frames that are new. None if nothing is new."""
        b = item.batch
        start = group_hw.get(b.actor_id, 0)
        skip = start - b.seq
        if skip < 0 or skip >= b.count:
            if skip < 0:
                self.out_of_order += 1
            return None
        group_hw[b.actor_id] = b.seq + b.count
        assert self.schema is not None and self._pool is not None
        col_index = {c.name: j for j, c in enumerate(self.schema.columns)}
        keys: dict[str, list[bytes]] = {}
        todo: dict[bytes, np.ndarray] = {}
        n = b.count - skip
        blobs: dict[bytes, bytes] = {}  # images that came encoded: stored as they are
        for c in self.schema.images:
            col = b.arrays[c.name][skip:]
            obs_twin = "obs/" + c.name.removeprefix("next_obs/") if c.name.startswith("next_obs/") else None
            twin = b.arrays[obs_twin][skip:] if obs_twin in b.arrays else None
            pre = isinstance(col, Frames)
            ks = []
            for i in range(n):
                seq = b.seq + skip + i
                if twin is not None and i + 1 < n and (col[i] == twin[i + 1] if pre and isinstance(twin, Frames)
                                                       else np.array_equal(col[i], twin[i + 1])):
                    ks.append(image_key(b.actor_id, seq + 1, col_index[obs_twin]))  # stored as the next obs
                    continue
                k = image_key(b.actor_id, seq, col_index[c.name])
                ks.append(k)
                if pre:
                    blobs[k] = col[i]
                else:
                    todo[k] = col[i]
            keys[c.name] = ks
        codec, q = self.config.image_codec, self.config.jpeg_quality
        futures = {k: self._pool.submit(self._encode, im, codec, q) for k, im in todo.items()}
        self.frames_encoded += len(todo)
        self.frames_as_sent += len(blobs)
        for k, blob in blobs.items():
            futures[k] = done = Future()
            done.set_result(blob)
        return item, skip, keys, futures

    def _commit(self, group: list) -> None:
        assert self._env is not None and self.schema is not None
        counts = dict(self.counts)
        hw: dict[int, int] = {}
        meta = self._dbs["meta"]
        kept = []
        try:
            with self._env.begin(write=True) as txn:
                for item, skip, keys, futures in group:
                    b, db = item.batch, self._dbs[f"t:{item.table}"]
                    if b.seq + skip != hw.get(b.actor_id, self._committed_hw.get(b.actor_id, 0)):
                        self.out_of_order += 1  # follows a group that failed: the actor resends it
                        continue
                    kept.append((item, skip))
                    for k, fut in futures.items():
                        txn.put(k, fut.result(), db=self._dbs["img"])
                    mirror = _mirrored(item.table, b.arrays["intervention"], skip)
                    for i in range(skip, b.count):
                        row_keys = {c: ks[i - skip] for c, ks in keys.items()}
                        record = encode_record(self.schema, b.actor_id, b.seq + i, b.arrays, i, row_keys)
                        txn.put(_key(counts[item.table]), record, db=db, append=True)
                        counts[item.table] += 1
                        if mirror is not None and mirror[i]:  # frames shared: keyed by (actor, seq)
                            txn.put(_key(counts[MIRROR]), record, db=self._dbs[f"t:{MIRROR}"], append=True)
                            counts[MIRROR] += 1
                    hw[b.actor_id] = b.seq + b.count
                for t in TABLES:
                    if counts[t] != self.counts[t]:
                        txn.put(f"count:{t}".encode(), _key(counts[t]), db=meta)
                for a, s in hw.items():
                    txn.put(f"hw:{a}".encode(), _key(s), db=meta)
                txn.put(b"last_commit", msgpack.packb(time.time()), db=meta)
        except (lmdb.Error, OSError, ValueError) as e:  # disk/map full, I/O, encode error: nothing stored
            self.write_errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
            for _, _, _, futures in group:
                for fut in futures.values():
                    fut.cancel()
            lost = sum(g[0].batch.count - g[1] for g in group)
            log.error("replay store %s: commit of %d transitions failed (%s); they are not acked, "
                      "the actors keep them and resend", self.path, lost, self.last_error)
            with self._lock:
                self._accepted_hw = dict(self._committed_hw)
                self._fail_gen += 1
            return
        now = time.monotonic()
        mirrored = self.counts[MIRROR]
        with self._lock:
            self._committed_hw.update(hw)
            self.counts = counts
            self.commit_times.append(now)
            del self.commit_times[:-10_000]
        for item, skip in kept:
            b = item.batch
            rows = {k: item.decoded.get(k, a)[skip:] for k, a in b.arrays.items()}
            self.caches[item.table].append(rows, counts[item.table], b.actor_id, b.seq + skip)
            mirror = _mirrored(item.table, b.arrays["intervention"], skip)
            if mirror is not None:  # each run of operator ticks: consecutive seqs (windows stay inside)
                for lo, hi in _runs(mirror[skip:]):
                    mirrored += hi - lo
                    self.caches[MIRROR].append({k: a[lo:hi] for k, a in rows.items()}, mirrored, b.actor_id,
                                               b.seq + skip + lo)

    # --- reading -----------------------------------------------------------------------------
    def _read_row(self, txn: lmdb.Transaction, table: str, i: int,
                  memo: dict[bytes, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One decoded transition. `memo` keeps decoded frames across calls: consecutive records
        share frames (a next_obs frame is the next record's obs frame), decoded once."""
        return self._read_record(txn, table, i, memo)[2]

    def _read_record(self, txn: lmdb.Transaction, table: str, i: int,
                     memo: dict[bytes, np.ndarray] | None = None) -> tuple[int, int, dict[str, np.ndarray]]:
        """(actor_id, seq, decoded transition) of record i."""
        assert self.schema is not None
        value = txn.get(_key(i), db=self._dbs[f"t:{table}"])
        if value is None:
            raise CorruptRecord(f"record {i} of '{table}' is missing")
        actor, seq, row, img_keys = decode_record(self.schema, value)
        for c, k in zip(self.schema.images, img_keys):
            if memo is not None and k in memo:
                row[c.name] = memo[k]
                continue
            blob = txn.get(k, db=self._dbs["img"])
            if blob is None:
                raise CorruptRecord(f"record {i} of '{table}': image '{c.name}' is missing")
            row[c.name] = decode_image(blob, c)
            if memo is not None:
                memo[k] = row[c.name]
        return actor, seq, row

    def rows(self, table: str = "online", start: int = 0, stop: int | None = None
             ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Decoded transitions `[start, stop)` of a table in order; damaged ones are skipped (logged)."""
        for i, _, _, row in self.records(table, start, stop):
            yield i, row

    def records(self, table: str = "online", start: int = 0, stop: int | None = None
                ) -> Iterator[tuple[int, int, int, dict[str, np.ndarray]]]:
        """Like `rows`, with each transition's (actor_id, seq): (index, actor_id, seq, row)."""
        assert self._env is not None
        stop = self.counts[table] if stop is None else stop
        start = max(start, self.first[table])  # evicted rows are gone
        for lo in range(start, stop, 1024):
            with self._env.begin() as txn:
                for i in range(lo, min(lo + 1024, stop)):
                    try:
                        row = self._read_row(txn, table, i)
                        actor, seq = peek_record(txn.get(_key(i), db=self._dbs[f"t:{table}"]))
                        yield i, actor, seq, row
                    except CorruptRecord as e:
                        self._corrupt(table, i, e)

    def _corrupt(self, table: str, i: int, e: Exception) -> None:
        self.corrupt_records += 1
        log.warning("replay store %s: skipping damaged record %d of '%s': %s", self.path, i, table, e)

    def _pager(self) -> None:
        """Pages older transitions into each table's reservoir: newest first, then random runs of
        consecutive records (so windows of one actor's episode exist among older data too)."""
        rng = np.random.default_rng()
        chunk, run = self.config.page_chunk, max(1, self.config.page_run)
        self._next_refresh: dict[str, float] = {}
        while not self._stop.is_set():
            busy = False
            for table, cache in list(self.caches.items()):
                older = cache.older_count()
                cap = cache.reservoir_capacity
                if older == 0 or cap == 0:
                    continue
                filled = cache.reservoir_filled
                if filled < min(cap, older):  # first fill, newest first, each chunk in table order
                    m = min(chunk, cap - filled, older - filled)
                    slots = list(range(filled, filled + m))
                    lo = older - filled - m
                elif older > cap and self.config.refresh_per_s > 0:
                    # a random run of old records over a random run of slots, at a bounded rate
                    if time.monotonic() < self._next_refresh.get(table, 0.0):
                        continue
                    m = min(run, cap)
                    self._next_refresh[table] = time.monotonic() + m / self.config.refresh_per_s
                    first = int(rng.integers(0, cap - m + 1))
                    slots = list(range(first, first + m))
                    lo = int(rng.integers(0, older - m + 1))
                else:
                    continue
                busy = True
                base = cache.first  # indices are offset by what retention evicted
                assert self._env is not None
                memo: dict[bytes, np.ndarray] = {}
                got: tuple[list, list, list, list, list] = ([], [], [], [], [])
                with self._env.begin() as txn:
                    for j, slot in enumerate(slots):
                        try:
                            actor, seq, row = self._read_record(txn, table, base + lo + j, memo)
                        except CorruptRecord as e:
                            if base + lo + j >= self.first[table]:  # (not an eviction racing the pager)
                                self._corrupt(table, base + lo + j, e)
                            continue
                        for part, v in zip(got, (slot, base + lo + j, row, actor, seq)):
                            part.append(v)
                cache.put_reservoir_run(*got)
            self._stop.wait(0.002 if busy else 0.05)

    def can_sample(self, table: str = "online") -> bool:
        c = self.caches.get(table)
        return c is not None and c.ready()

    def sample_windows(self, batch_size: int, horizon: int, rng: np.random.Generator, table: str = "online",
                       lookback: int = 0) -> dict[str, np.ndarray] | None:
        """Windows of `horizon` consecutive transitions of one actor's episode (TableCache.sample_windows);
        None while no complete window is cached."""
        if not self.can_sample(table):
            return None
        return self.caches[table].sample_windows(batch_size, horizon, rng, lookback=lookback)

    def sample(self, batch_size: int, rng: np.random.Generator, table: str = "online") -> dict[str, np.ndarray]:
        if not self.can_sample(table):
            raise ReplayError(f"table '{table}' has nothing to sample yet")
        return self.caches[table].sample(batch_size, rng)

    def __len__(self) -> int:
        return sum(self.live(t) for t in TABLES)

    # --- status ------------------------------------------------------------------------------
    def last_commit(self) -> float | None:
        assert self._env is not None
        with self._env.begin(db=self._dbs["meta"]) as txn:
            raw = txn.get(b"last_commit")
        return float(msgpack.unpackb(raw)) if raw else None

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    def close(self) -> None:
        if self._threads:
            self._queue.put(None)
            self._stop.set()
            for t in self._threads:
                t.join(timeout=60)
            self._threads = []
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._archive is not None:
            self._archive.close()
            self._archive = None
        if self._env is not None:
            self._env.close()
            self._env = None
