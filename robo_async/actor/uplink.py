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

What the uplink holds until it is acked (the entries, the journal's commits, the spill) is its base,
`UnackedBatches` (`actor/unacked.py`); what it is given, `UplinkConfig` (`actor/uplink_config.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import zmq

from robo_async.actor.unacked import Entry, UnackedBatches
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.wire import LearnerStatus, Message, StreamGap, TransitionBatch, encode

if TYPE_CHECKING:  # the transport process (actor.uplink=process) runs without torch
    from policies.embedding import FrozenEncoder

log = logging.getLogger(__name__)


class UplinkError(RuntimeError):
    """The uplink cannot send any more (its thread died); the actor must stop and be restarted."""


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


class Uplink(UnackedBatches):
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
        super().__init__(actor_id, config, encoder)  # the unacked batches, the journal and the lock
        self._secure = secure  # CURVE client keys (transport/curve.py), set before connecting
        self.address = address
        self._status = status
        self._ctx = ctx or zmq.Context.instance()
        self._inbox: deque[Message] = deque()
        self._other: deque[Message] = deque()
        self._other_in: deque[Message] = deque(maxlen=config.max_other)  # from put(), for the thread
        self._cursor = 0  # entries before it were sent since the last (re)send started
        self._boot: str | None = None
        self._paused_since: float | None = None  # the learner's status says its ingest is paused (since)
        self._said_paused = False
        self._progress_t = time.monotonic()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by put() when it left work (the driving thread's, once started)
        self._detached = threading.Event()  # the driving thread has let go of this uplink (closed or died)
        self._driver: UplinkThread | None = None
        self._sock: zmq.Socket | None = None
        self.direct_sends = 0
        self.resends = 0
        self.dropped_other = 0
        self.error: BaseException | None = None  # what killed the uplink thread

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

    # --- the thread --------------------------------------------------------------------------
    def _intake_one(self, msg: Message) -> None:
        if isinstance(msg, TransitionBatch):
            nbytes = sum(a.nbytes for a in msg.arrays.values())
            e = Entry(msg.seq, msg.count, msg, nbytes)
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
