"""What an uplink holds until the learner acks it (`UnackedBatches`, the base of `Uplink`): each
batch handed over (`Entry`) and where it is (RAM, the journal, or both); the journal opened on
start (what it holds queued again, damaged entries declared lost as gaps), its group commits
(written batches, deleted acked ones), the batches' wire frames (encoded once, camera frames
embedded or compressed first), and the spill past the RAM budget (only the journal's copy kept).
Sending, resending and the thread are the uplink's (`actor/uplink.py`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb

from robo_async.actor.journal import Journal
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.wire import TransitionBatch, encode, is_image_column

if TYPE_CHECKING:  # the transport process (actor.uplink=process) runs without torch
    from policies.embedding import FrozenEncoder

log = logging.getLogger("robo_async.actor.uplink")


@dataclass(eq=False)  # entries compare by identity
class Entry:
    """One batch handed over and not yet acked (or a range declared lost), and where it is."""

    seq: int
    count: int
    batch: TransitionBatch | None  # None once spilled: read back from the journal to resend
    nbytes: int
    frames: list | None = None  # the batch's wire frames, encoded once (journal and sends share them)
    journaled: bool = False
    sent_t: float = 0.0  # monotonic time of the latest send
    gap: str = ""  # not rows but a range this actor lost (why): sent as a StreamGap until acked


class UnackedBatches:
    """The unacked batches of one stream, in seq order, in RAM and in the journal; `Uplink` sends
    them. Its lock guards them (the uplink's `put()` and thread take it one at a time)."""

    def __init__(self, actor_id: int, config: UplinkConfig, encoder: FrozenEncoder | None) -> None:
        self.actor_id = actor_id
        self._encoder = encoder  # a frozen camera encoder: each batch's frames are embedded here (buffer/embeddings.py)
        self.config = config
        self._unacked: deque[Entry] = deque()
        self._ram = 0
        self._acked = 0
        self._to_journal: list[Entry] = []
        self._to_delete: list[int] = []
        self._journal: Journal | None = None  # actor/journal.py: the LMDB of unacked batches
        # Guards the queues, counters and the socket (used by put() and the thread, one at a time;
        # the lock is the memory barrier ZMQ asks for). put() only ever try-acquires it.
        self._lock = threading.Lock()
        self._unacked_count = 0
        self._warned_ram = False
        self.spilled = 0
        self.journal_errors = 0
        self.gaps = 0  # ranges of this stream declared lost to the learner (damaged or missing journal entries)

    def open(self) -> int:
        """Open the journal (if configured) and queue what it holds. Returns the next seq to use."""
        if self.config.journal_dir is None:
            return 0
        path = Path(self.config.journal_dir)
        self._journal = Journal(path, self.actor_id)
        held, damaged = self._journal.open()
        next_seq = 0
        for seq, count in held:
            self._unacked.append(Entry(seq, count, None, 0, journaled=True))
            self._unacked_count += count
            next_seq = max(next_seq, seq + count)
        if damaged:
            self._declare_gaps(damaged, path)
        if self._unacked:
            log.info(
                "actor %d: journal holds %d unacked transitions (seq %d..%d); resending",
                self.actor_id,
                self.unacked,
                self._unacked[0].seq,
                next_seq - 1,
            )
        return next_seq

    def _declare_gaps(self, damaged: list[int], path: Path) -> None:
        """Damaged journal entries (their keys: the seqs they start at) become gaps the learner is
        told of in the stream's order: from each to the next batch the journal still holds (a
        damaged entry after the last one needs none: numbering goes on from there)."""
        starts = sorted(e.seq for e in self._unacked)
        gaps = []
        for d in sorted(damaged):
            after = [s for s in starts if s > d]
            if after:  # (journaled: the damaged entry is deleted once the gap is acked)
                gaps.append(Entry(d, after[0] - d, None, 0, journaled=True, gap=f"damaged in journal {path}"))
        for g in gaps:
            self._unacked.append(g)
            self._unacked_count += g.count
        self._unacked = deque(sorted(self._unacked, key=lambda e: e.seq))
        self.gaps += len(gaps)
        log.error(
            "actor %d: %d damaged batch(es) in journal %s skipped; %d range(s) declared lost to the learner (%s)",
            self.actor_id,
            len(damaged),
            path,
            len(gaps),
            [(g.seq, g.count) for g in gaps][:8],
        )

    def _load(self, e: Entry) -> TransitionBatch | None:
        assert self._journal is not None
        return self._journal.load(e.seq)

    def _frames(self, e: Entry) -> list:
        if e.frames is None:
            assert e.batch is not None
            b = e.batch
            if self._encoder is not None and self._has_images(b):
                from robo_async.buffer.embeddings import embed_batch  # once, before the frames are encoded

                b = embed_batch(b, self._encoder)[0]
            if self.config.image_codec and self._has_images(b):
                from robo_async.buffer.codec import encode_frames  # camera frames: encoded here, once

                b = TransitionBatch(
                    b.actor_id, b.seq, encode_frames(b.arrays, self.config.image_codec, self.config.jpeg_quality)
                )
            e.frames = encode(b)
        return e.frames

    def _commit_journal(self, locked: bool = False) -> None:
        """Write queued batches to the journal and delete acked ones, in one transaction. The
        write (and its fsync) runs without the lock unless the caller holds it (`locked`)."""
        if self._journal is None:
            return
        if not locked:
            self._lock.acquire()
        try:
            todo, dels = self._to_journal, self._to_delete
            self._to_journal, self._to_delete = [], []
            # usually encoded already (put() sent them); the frames are immutable from here on
            writes = [(e.seq, self._frames(e)) for e in todo if e.batch is not None]
        finally:
            if not locked:
                self._lock.release()
        if not (todo or dels):
            return
        ok = True
        try:
            self._journal.write(writes, dels)
        except lmdb.Error as err:
            ok = False
            self.journal_errors += 1
            log.error("actor %d: journal write failed (%s); unacked data stays in RAM", self.actor_id, err)
        if not locked:
            self._lock.acquire()
        try:
            if not ok:  # try again at the next commit
                self._to_journal[:0] = [e for e in todo if e.seq + e.count > self._acked]
                self._to_delete[:0] = dels
                return
            for e in todo:
                e.journaled = True
                if e.seq + e.count <= self._acked:  # acked while it was being written
                    self._to_delete.append(e.seq)
        finally:
            if not locked:
                self._lock.release()

    @staticmethod
    def _has_images(batch: TransitionBatch) -> bool:
        return any(is_image_column(a) for a in batch.arrays.values())

    @property
    def unacked(self) -> int:
        """Transitions not yet acked (safe to read from any thread)."""
        return self._unacked_count

    def durable(self) -> int:
        """Every seq below this is acked by the learner or written to the journal: safe should this
        process die (what `actor.uplink=process` releases its shared-memory slots by)."""
        with self._lock:
            safe = self._acked
            for e in self._unacked:
                if not e.journaled:
                    break
                safe = max(safe, e.seq + e.count)
            return safe

    def _spill(self) -> None:
        """Past the RAM budget, keep only the journal's copy of the oldest unacked batches."""
        if self._ram <= self.config.max_ram_mb * 2**20:
            return
        if self._journal is None:  # nowhere to spill: keep it (losing it is worse), say so once
            if not self._warned_ram:
                log.warning(
                    "actor %d: %.0f MB unacked and no journal to spill to; holding it in RAM",
                    self.actor_id,
                    self._ram / 2**20,
                )
                self._warned_ram = True
            return
        victims = []
        for e in self._unacked:
            if self._ram <= self.config.max_ram_mb * 2**20 * 0.9:
                break
            if e.batch is not None:
                victims.append(e)
                if not e.journaled and e not in self._to_journal:
                    self._to_journal.append(e)
                self._ram -= e.nbytes
        self._commit_journal(locked=True)  # rare (past the RAM budget): written under the lock
        for e in victims:
            if e.journaled:
                e.batch = e.frames = None
                self.spilled += 1
            else:
                self._ram += e.nbytes  # journal write failed: keep it in RAM
