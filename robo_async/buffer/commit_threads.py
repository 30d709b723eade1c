"""The replay store's group commit, its two threads (`PersistentReplayStore`, lmdb_store.py, is made
of them and of store_reads.py): the writer groups queued batches, trims what is already grouped or
stored and starts encoding their frames; the committer writes each group in one LMDB transaction
(ingest.py's `write_group`), moves the committed high-water marks, feeds the RAM caches, and runs
retention when idle. A commit that fails stores nothing: the accepted marks fall back to the
committed ones, nothing is acked, and the actors resend.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

import lmdb
import msgpack

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import Schema
from robo_async.buffer.ingest import Encoders, Pending, Prepared, feed_caches, frame_jobs, next_group, write_group
from robo_async.buffer.layout import MIRROR, Handles, StoreConfig
from robo_async.buffer.retention import Retention

log = logging.getLogger("robo_async.buffer.lmdb_store")


class CommitThreads:
    """The writer and committer threads of a replay store. The store's state (declared below) is
    set by `PersistentReplayStore`; `insert` and `refuse` fill the queue, these threads empty it."""

    path: Path
    config: StoreConfig
    schema: Schema | None
    caches: dict[str, TableCache]
    counts: dict[str, int]
    retention: Retention
    commit_times: list[float]
    write_errors: int
    last_error: str | None
    out_of_order: int
    frames_as_sent: int
    frames_encoded: int
    _h: Handles | None
    _readonly: bool
    _lock: threading.Lock
    _queue: queue.Queue[Pending | None]
    _queued_bytes: int
    _stop: threading.Event
    _pool: Encoders | None
    _commits: queue.Queue[tuple[list[Prepared], int, int] | None]
    _writer_hw: dict[int, int]
    _committed_hw: dict[int, int]
    _accepted_hw: dict[int, int]
    _fail_gen: int
    _outstanding: int
    _drained: threading.Condition

    def _done(self, n: int, nbytes: int) -> None:
        with self._drained:
            self._outstanding -= n
            self._queued_bytes -= nbytes
            self._drained.notify_all()

    # --- the writer and committer threads -----------------------------------------------------
    def _writer(self) -> None:
        """Groups queued batches and starts encoding their frames; the committer writes them.
        The two overlap, so the encoders stay busy while a group is being committed."""
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
            assert self._pool is not None
            group, taken, nbytes, last = next_group(item, self._queue, self._prepare, self.config, self._pool.mean_s)
            self._commits.put((group, taken, nbytes))
            if last:
                break
        self._commits.put(None)

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

    def _prepare(self, item: Pending) -> Prepared | None:
        """Trim what is already stored or grouped; encode the frames that are new. None if nothing is new."""
        group_hw = self._writer_hw
        b = item.batch
        if item.refused:  # a refused range: it follows what is grouped, or it is moot
            if group_hw.get(b.actor_id, 0) != b.seq:
                return None
            group_hw[b.actor_id] = b.seq + item.refused
            return Prepared(item, 0, {}, {})
        skip = group_hw.get(b.actor_id, 0) - b.seq
        if skip < 0 or skip >= b.count:
            if skip < 0:
                self.out_of_order += 1
            return None
        group_hw[b.actor_id] = b.seq + b.count
        assert self.schema is not None and self._pool is not None
        keys, todo, blobs = frame_jobs(b, skip, self.schema)
        self.frames_encoded += len(todo)
        self.frames_as_sent += len(blobs)
        return Prepared(
            item,
            skip,
            keys,
            {k: self._pool.submit(im) for k, im in todo.items()}
            | {k: Encoders.ready(blob) for k, blob in blobs.items()},
        )

    def _commit(self, group: list[Prepared]) -> None:
        assert self._h is not None  # (no schema yet when all the store has seen is a refused range)
        counts = dict(self.counts)
        try:
            with self._h.env.begin(write=True) as txn:
                hw, kept, gaps = write_group(txn, self._h, self.schema, group, counts, self._committed_hw)
                txn.put(b"last_commit", msgpack.packb(time.time()), db=self._h.dbs["meta"])
            self.out_of_order += gaps  # they follow a group that failed: the actors resend them
        except (lmdb.Error, OSError, ValueError) as e:  # disk/map full, I/O, encode error: nothing stored
            self.write_errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
            for p in group:
                for fut in p.futures.values():
                    fut.cancel()
            lost = sum(p.item.batch.count - p.skip for p in group)
            log.error(
                "replay store %s: commit of %d transitions failed (%s); they are not acked, "
                "the actors keep them and resend",
                self.path,
                lost,
                self.last_error,
            )
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
        feed_caches(self.caches, kept, counts, mirrored)

    # --- retention (retention.py) --------------------------------------------------------------
    def _retain(self) -> None:
        if self._readonly or self.schema is None or self._h is None:
            return
        for error in self.retention.retain(self._h, self.schema, self.counts):
            self.write_errors += 1
            self.last_error = error
