"""`Uplink`: the actor's side of acknowledged delivery, on its own thread.

The control loop hands messages over with `put()` (never blocks). In the common case `put()`
packs and sends the batch itself (a non-blocking send of the newest batch, when nothing older
waits and the uplink thread is not busy): a background thread doing every send would take the
GIL from the control loop at each of the message's frames (measured: hundreds of hand-offs a
second, a fifth of an as-fast actor's rate). Batches with camera frames are the thread's: it
encodes the frames (QOI by default) so the learner stores the bytes as they came. Everything else
is the uplink thread's, which:
- sends transition batches in seq order and keeps each one until the learner's status acks it
  (`LearnerStatus.acked`: every seq below is committed to the learner's store);
- resends everything unacked when the learner restarts (a new `boot_id`) or when acks stop
  advancing for `resend_s` (a lost message, a failed commit), but not while the learner's status
  says its ingest is paused (a nearly full disk: it reads nothing); the store drops duplicates;
- writes batches to a journal, an actor-local LMDB, in group commits every `journal_commit_ms`, so an
  actor restart resends what it had journaled; with `journal=False` only batches beyond
  `max_ram_mb` of unacked data are spilled there.

    uplink = Uplink(actor_id, address, status=client.latest_status, config=UplinkConfig(dir))
    next_seq = uplink.open()             # what the journal holds decides where numbering resumes
    uplink.start(acked=status.acked_for(actor_id) or 0)
    uplink.put(batch)                    # from the control loop
    uplink.close(drain_s=5)              # waits for acks (unless the learner is stopping)

A vectorized actor's streams share one thread (`UplinkThread`): `u.start(acked, thread=shared)`
for each. Its wakes are the actor's, not one set per stream (64 threads waking 20 times a second
each took the GIL from the control loop ~1,300 times a second). If it dies, every stream it
drives raises on its next `put()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb
import zmq

from robo_async.actor.journal import Journal
from robo_async.actor.options import ActorOptions
from robo_async.buffer.layout import StoreConfig
from robo_async.transport.options import TransportOptions
from robo_async.transport.wire import LearnerStatus, Message, StreamGap, TransitionBatch, encode, is_image_column

if TYPE_CHECKING:  # the transport process (actor.uplink=process) runs without torch
    from policies.embedding import FrozenEncoder

log = logging.getLogger(__name__)


class UplinkError(RuntimeError):
    """The uplink cannot send any more (its thread died); the actor must stop and be restarted."""


@dataclass(frozen=True)
class UplinkConfig:
    """Acknowledged delivery: the journal, the RAM budget, resends, frame encoding, queue sizes. A
    field named as an `actor.*` or `transport.*` key takes its default from `ActorOptions` or
    `TransportOptions` (the one definition); training actors get it from `from_options`."""

    journal_dir: str | None = None  # actor-local store of unacked batches; None: RAM only
    journal: bool = ActorOptions.journal  # journal every batch (else only spill beyond max_ram_mb)
    max_ram_mb: float = ActorOptions.max_ram_mb  # unacked batches held in RAM before the oldest are spilled
    journal_commit_ms: float = 100.0  # journal group-commit interval
    resend_s: float = ActorOptions.resend_s  # resend unacked batches when acks stall this long
    max_other: int = 1000  # episode stats / heartbeats waiting to be sent (oldest dropped)
    # The thread wakes this often (or when put() leaves it work). Every wake takes the GIL from
    # the control loop; keep it under journal_commit_ms so the journal is written on time.
    idle_s: float = 0.05
    # Camera frames are encoded here, on the uplink thread (never in put()), so the learner only
    # stores bytes and the wire and journal carry ~5x less: "qoi" or "png" (lossless), "jpeg", or
    # None to send raw pixels (the store's `buffer.image_codec` and `jpeg_quality`).
    image_codec: str | None = StoreConfig.image_codec
    jpeg_quality: int = StoreConfig.jpeg_quality
    # batches queued in ZMQ, in bytes (the high-water mark is sized from it) ...
    queue_mb: float = TransportOptions.queue_mb
    message_bytes: int = 65536  # ... and the expected size of one batch message

    @classmethod
    def from_options(
        cls,
        options: ActorOptions,
        *,
        journal_dir: str | None,
        image_codec: str | None,
        jpeg_quality: int,
        queue_mb: float,
        message_bytes: int,
    ) -> UplinkConfig:
        """A training actor's delivery: `actor.journal`, `max_ram_mb` and `resend_s` as they are;
        the journal's place, the store's frame encoding (`buffer.image_codec`, `jpeg_quality`) and
        the queue sizes (`transport.queue_mb`, one batch's size) from the plan."""
        return cls(
            journal_dir=journal_dir,
            journal=options.journal,
            max_ram_mb=options.max_ram_mb,
            resend_s=options.resend_s,
            image_codec=image_codec,
            jpeg_quality=jpeg_quality,
            queue_mb=queue_mb,
            message_bytes=message_bytes,
        )


@dataclass(eq=False)  # entries compare by identity
class _Entry:
    seq: int
    count: int
    batch: TransitionBatch | None  # None once spilled: read back from the journal to resend
    nbytes: int
    frames: list | None = None  # the batch's wire frames, encoded once (journal and sends share them)
    journaled: bool = False
    sent_t: float = 0.0  # monotonic time of the latest send
    gap: str = ""  # not rows but a range this actor lost (why): sent as a StreamGap until acked


class UplinkThread:
    """The thread that drives one or more uplinks (a vectorized actor's streams): each round it
    steps every uplink under its lock, commits their journals every `journal_commit_ms`, and sleeps until a
    `put()` leaves it work or `idle_s` passes. It ends when its last uplink is closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.wake = threading.Event()  # set by any member's put() when it left work
        self._members: list[Uplink] = []
        self._lock = threading.Lock()  # guards the members and the thread's start and end
        self._thread: threading.Thread | None = None

    def add(self, uplink: Uplink) -> None:
        with self._lock:
            self._members.append(uplink)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self.wake.set()

    def _run(self) -> None:
        members: list[Uplink] = []
        try:
            next_commit = time.monotonic()
            while True:
                with self._lock:
                    for u in [u for u in self._members if u._stop.is_set()]:
                        self._members.remove(u)
                        u._detached.set()
                    if not self._members:
                        self._thread = None
                        return
                    members = list(self._members)
                busy = False
                for u in members:
                    with u._lock:
                        assert u._sock is not None
                        busy |= u._step(u._sock)
                now = time.monotonic()
                if now >= next_commit:
                    next_commit = now + members[0].config.journal_commit_ms / 1000
                    for u in members:
                        u._commit_journal()
                if not busy:  # sleep (acks may have moved, batches may wait), or until a put() leaves work
                    self.wake.wait(members[0].config.idle_s)
                    self.wake.clear()
        except BaseException as e:  # noqa: BLE001 - watched: every member's next put() raises it on the control thread
            with self._lock:
                self._thread = None
                for u in self._members:
                    u.error = e
                    u._detached.set()
                self._members.clear()  # a stream added later gets a fresh thread, not these
            log.error("%s: uplink thread died: %s: %s", self.name, type(e).__name__, e)


class Uplink:
    """The actor's side of acknowledged delivery (see the module's docstring): `put()` from the
    control loop, a thread that sends in order, journals, resends and drops what the learner acked."""

    def __init__(
        self,
        actor_id: int,
        address: str,
        status: Callable[[], LearnerStatus | None],
        config: UplinkConfig = UplinkConfig(),
        ctx: zmq.Context | None = None,
        secure: Callable[[zmq.Socket], None] | None = None,
        encoder: FrozenEncoder | None = None,
    ) -> None:
        self.actor_id = actor_id
        self._encoder = encoder  # a frozen camera encoder: each batch's frames are embedded here (buffer/embeddings.py)
        self._secure = secure  # CURVE client keys (transport/curve.py), set before connecting
        self.address = address
        self.config = config
        self._status = status
        self._ctx = ctx or zmq.Context.instance()
        self._inbox: deque[Message] = deque()
        self._unacked: deque[_Entry] = deque()
        self._other: deque[Message] = deque()
        self._other_in: deque[Message] = deque(maxlen=config.max_other)  # from put(), for the thread
        self._cursor = 0  # entries before it were sent since the last (re)send started
        self._ram = 0
        self._acked = 0
        self._boot: str | None = None
        self._paused_since: float | None = None  # the learner's status says its ingest is paused (since)
        self._said_paused = False
        self._progress_t = time.monotonic()
        self._to_journal: list[_Entry] = []
        self._to_delete: list[int] = []
        self._journal: Journal | None = None  # actor/journal.py: the LMDB of unacked batches
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by put() when it left work (the driving thread's, once started)
        self._detached = threading.Event()  # the driving thread has let go of this uplink (closed or died)
        self._driver: UplinkThread | None = None
        # Guards the queues, counters and the socket (used by put() and the thread, one at a time;
        # the lock is the memory barrier ZMQ asks for). put() only ever try-acquires it.
        self._lock = threading.Lock()
        self._sock: zmq.Socket | None = None
        self.direct_sends = 0
        self._unacked_count = 0
        self._warned_ram = False
        self.resends = 0
        self.spilled = 0
        self.journal_errors = 0
        self.gaps = 0  # ranges of this stream declared lost to the learner (damaged or missing journal entries)
        self.dropped_other = 0
        self.error: BaseException | None = None  # what killed the uplink thread

    # --- journal ---------------------------------------------------------------------------------
    def open(self) -> int:
        """Open the journal (if configured) and queue what it holds. Returns the next seq to use."""
        if self.config.journal_dir is None:
            return 0
        path = Path(self.config.journal_dir)
        self._journal = Journal(path, self.actor_id)
        held, damaged = self._journal.open()
        next_seq = 0
        for seq, count in held:
            self._unacked.append(_Entry(seq, count, None, 0, journaled=True))
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
                gaps.append(_Entry(d, after[0] - d, None, 0, journaled=True, gap=f"damaged in journal {path}"))
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

    def _load(self, e: _Entry) -> TransitionBatch | None:
        assert self._journal is not None
        return self._journal.load(e.seq)

    def _frames(self, e: _Entry) -> list:
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

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self, acked: int = 0, thread: UplinkThread | None = None) -> None:
        """Connect and hand the uplink to `thread` (shared by a vectorized actor's streams; None:
        a thread of its own). `acked`: what the learner's status says it holds of this stream."""
        self._apply_ack(acked)
        sock = self._ctx.socket(zmq.PUSH)
        from robo_async.transport.channels import hwm

        # about queue_mb of batches queued in ZMQ; the rest wait in unacked (RAM, then the journal)
        sock.setsockopt(zmq.SNDHWM, hwm(self.config.queue_mb, self.config.message_bytes, low=4))
        sock.setsockopt(zmq.IMMEDIATE, 1)  # queue only to a live learner; resend covers the rest
        sock.setsockopt(zmq.LINGER, 2000)
        if self._secure is not None:
            self._secure(sock)
        sock.connect(self.address)
        self._sock = sock
        self._driver = thread or UplinkThread(f"uplink-{self.actor_id}")
        self._wake = self._driver.wake
        self._driver.add(self)

    def put(self, msg: Message) -> None:
        """Hand a message over. Never blocks: a transition batch is sent here, now, when it is
        next in order and the thread is not busy; else (and other messages) the thread sends it.
        Raises UplinkError once the uplink thread has died (nothing handed over is then sent)."""
        if self.error is not None:
            raise UplinkError(
                f"actor {self.actor_id}: the uplink thread died "
                f"({type(self.error).__name__}: {self.error}); unacked data stays in the journal"
            )
        if not isinstance(msg, TransitionBatch):
            # episode summaries and heartbeats: the thread sends them at its next wake (within
            # idle_s); the control loop does not pay a send and a wake-up of ZMQ's I/O thread
            if len(self._other_in) == self._other_in.maxlen:
                self.dropped_other += 1
            self._other_in.append(msg)
            return
        if (
            self._inbox
            or self._sock is None
            or ((self.config.image_codec or self._encoder) and self._has_images(msg))
            or not self._lock.acquire(blocking=False)
        ):
            self._inbox.append(msg)  # older messages wait, or the thread is at work: keep the order
            self._wake.set()
            return
        try:
            self._intake_one(msg)
            if self._cursor == len(self._unacked) - 1:  # all older batches are sent
                self.direct_sends += self._send_batches(self._sock, limit=1)
            else:
                self._wake.set()
        finally:
            self._lock.release()

    @staticmethod
    def _has_images(batch: TransitionBatch) -> bool:
        return any(is_image_column(a) for a in batch.arrays.values())

    def close(self, drain_s: float = 5.0) -> None:
        """Stop after everything is acked, the learner says it is stopping, or `drain_s` passes.
        Whatever is still unacked stays in the journal for the next start."""
        deadline = time.monotonic() + drain_s
        while self._driver is not None and not self._detached.is_set() and time.monotonic() < deadline:
            st = self._status()
            idle = not (self._inbox or self._unacked or self._other_in or self._other)
            if idle or (st is not None and st.stopping):
                break
            time.sleep(0.01)
        self._stop.set()
        self._wake.set()
        if self._driver is not None:
            self._detached.wait(timeout=10)  # the thread lets go of it between two rounds
            self._driver = None
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            if self._journal is not None:
                while self._inbox:  # batches that never reached the thread
                    self._intake_one(self._inbox.popleft())
                for e in self._unacked:
                    if not e.journaled and e.batch is not None and e not in self._to_journal:
                        self._to_journal.append(e)
                self._commit_journal(locked=True)
                self._journal.close()
                self._journal = None

    @property
    def pending(self) -> int:
        """Transitions handed over and not yet acked, including those the thread has not seen."""
        return self._unacked_count + sum(m.count for m in list(self._inbox) if isinstance(m, TransitionBatch))

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

    # --- the thread --------------------------------------------------------------------------
    def _intake_one(self, msg: Message) -> None:
        if isinstance(msg, TransitionBatch):
            nbytes = sum(a.nbytes for a in msg.arrays.values())
            e = _Entry(msg.seq, msg.count, msg, nbytes)
            self._unacked.append(e)
            self._unacked_count += msg.count
            self._ram += nbytes
            if self._journal is not None and self.config.journal:
                self._to_journal.append(e)
        else:
            if len(self._other) >= self.config.max_other:
                self._other.popleft()
                self.dropped_other += 1
            self._other.append(msg)

    def _apply_ack(self, acked: int) -> None:
        if acked < self._acked:
            return
        self._acked = acked
        self._progress_t = time.monotonic()
        while self._unacked and self._unacked[0].seq + self._unacked[0].count <= acked:
            e = self._unacked.popleft()
            self._unacked_count -= e.count
            self._cursor = max(0, self._cursor - 1)
            if e.batch is not None:
                self._ram -= e.nbytes
            if e.journaled:
                self._to_delete.append(e.seq)
            elif e in self._to_journal:
                self._to_journal.remove(e)

    def _step(self, sock: zmq.Socket) -> bool:
        """One round of the thread's work; the caller holds the lock."""
        busy = False
        while self._inbox:
            self._intake_one(self._inbox.popleft())
            busy = True
        while self._other_in:
            self._intake_one(self._other_in.popleft())
        st = self._status()
        now = time.monotonic()
        if st is not None:
            if st.boot_id != self._boot:
                if self._boot is not None:
                    log.warning(
                        "actor %d: learner restarted; resending %d unacked transitions", self.actor_id, self.unacked
                    )
                    self._resend(now)
                self._boot = st.boot_id
            acked = st.acked_for(self.actor_id)
            if acked is not None and acked > self._acked:
                self._apply_ack(acked)
            if st.paused and self._paused_since is None:
                self._paused_since = now
            elif not st.paused and self._paused_since is not None:
                if self._said_paused:
                    log.warning(
                        "actor %d: the learner reads again after %.0f s; %d unacked transitions to go",
                        self.actor_id,
                        now - self._paused_since,
                        self.unacked,
                    )
                self._paused_since, self._said_paused = None, False
            if self._paused_since is not None:  # acks stall by design: resending would queue the same rows again
                self._progress_t = now
                if not self._said_paused and now - self._paused_since > self.config.resend_s:  # (not a blip)
                    self._said_paused = True
                    log.warning(
                        "actor %d: the learner paused ingest (its disk is nearly full or its writer is "
                        "behind); keeping %d unacked transitions until it reads again",
                        self.actor_id,
                        self.unacked,
                    )
        waited = now - max(self._progress_t, self._unacked[0].sent_t) if self._unacked else 0.0
        if self._cursor > 0 and waited > self.config.resend_s:
            log.warning(
                "actor %d: no ack for %.0f s; resending %d unacked transitions",
                self.actor_id,
                self.config.resend_s,
                self.unacked,
            )
            self._resend(now)
        busy |= self._send(sock)
        self._spill()
        return busy

    def _resend(self, now: float) -> None:
        self._cursor = 0
        self._progress_t = now
        self.resends += 1

    def _send(self, sock: zmq.Socket) -> bool:
        sent = self._send_batches(sock) > 0
        return self._send_other(sock) or sent

    def _send_batches(self, sock: zmq.Socket, limit: int | None = None) -> int:
        """Send unsent batches in seq order (at most `limit`); the lock is held. Returns how many."""
        n = 0
        while self._cursor < len(self._unacked) and (limit is None or n < limit):
            e = self._unacked[self._cursor]
            if e.gap:  # rows this actor lost: the learner passes over them (in the stream's order)
                frames = encode(StreamGap(self.actor_id, e.seq, e.count, e.gap[:200]))
            elif e.batch is not None:
                frames = self._frames(e)
            else:  # spilled: read back from the journal
                batch = self._load(e)
                if batch is None:  # journal entry lost: declared a gap, so the stream goes on past it
                    log.error(
                        "actor %d: batch at seq %d (%d rows) missing from the journal: declared lost to the learner",
                        self.actor_id,
                        e.seq,
                        e.count,
                    )
                    e.gap, e.journaled = "missing from the journal", False
                    self.gaps += 1
                    frames = encode(StreamGap(self.actor_id, e.seq, e.count, e.gap))
                else:
                    frames = encode(batch)
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                if limit is not None:  # put() could not send it: the thread retries
                    self._wake.set()
                return n
            e.sent_t = time.monotonic()
            self._cursor += 1
            n += 1
        return n

    def _send_other(self, sock: zmq.Socket) -> bool:
        sent = False
        while self._other:
            try:
                sock.send_multipart(encode(self._other[0]), flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._other.popleft()
            sent = True
        return sent

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
