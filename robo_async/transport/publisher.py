"""The learner's side of weight sync: `WeightPublisher` (its own thread and XPUB socket) and the
memory of its snapshots (snapshots.py). `publish()` copies the learner's arrays into a block reused
from push to push (`SnapshotBlocks`); the thread plans the push (transport/weights.py), seals each part (a
keyframe's digests) as it goes and streams it with non-blocking zero-copy sends, repeats the newest
keyframe and delta for actors that subscribe late, and sends the learner's statuses. The actor's
side is `channels.WeightClient`."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np
import zmq

from robo_async.transport.channels import STATUS_TOPIC, WEIGHTS_TOPIC, bind, heartbeats, hwm
from robo_async.transport.curve import LearnerAuth
from robo_async.transport.snapshots import SnapshotBlocks, snapshot_layout
from robo_async.transport.weights import PushConfig, cast_into, keyframe_of, plan_push, seal, too_wide_for_fp16
from robo_async.transport.wire import LearnerStatus, WeightPart, Weights, encode

log = logging.getLogger(__name__)

# a subscriber whose queue stays full this long (stopped, or its host gone with the connection
# half-open) no longer holds the others back: parts go on without it (it misses them, and gets the
# next push whole once it reads again), for LOSSY_HOLD_S, then the stream waits for the slowest again
STALL_S = 2.0
LOSSY_HOLD_S = 30.0
JOIN_REPEAT_S = 0.5  # the least time between two repeats made for subscribers that joined
PIPELINE_BYTES = 32 << 20  # publish() copies of at least this size overlap the push's first parts


class _Copying:
    """publish()'s copy, array by array, as the publisher thread sees it: a part goes out once
    the arrays it holds pieces of are copied, so the first parts travel while the rest is copied."""

    def __init__(self, names: Iterable[str], stop: threading.Event) -> None:
        self._index = {n: i for i, n in enumerate(names)}
        self._copied = 0
        self._stop = stop
        self._cv = threading.Condition()

    def advance(self) -> None:
        """One more array copied (in order)."""
        with self._cv:
            self._copied += 1
            self._cv.notify_all()

    def wait(self, names: Iterable[str] | None = None) -> None:
        """Until `names` (all when None) are copied, or the publisher stops."""
        need = len(self._index) if names is None else max((self._index.get(n, -1) for n in names), default=-1) + 1
        with self._cv:
            while self._copied < need and not self._stop.is_set():
                self._cv.wait(0.1)


class _Stream:
    """The publisher's newest push: its parts sealed (a keyframe's digests computed) and encoded
    one at a time as they go, kept for repeats."""

    def __init__(
        self,
        parts: list[WeightPart],
        tx: dict[str, np.ndarray],
        keyframe: tuple | None,
        ready: Callable[[Iterable[str]], object],
    ) -> None:
        self.tx = tx
        self.keyframe = keyframe  # (version, frozen names) for a keyframe, None for a delta
        self.parts: list[WeightPart] = []  # sealed so far
        self.frames: list[list[bytes | memoryview]] = []  # their messages, topic first
        self._sealing = seal(parts, tx, ready)  # each part once publish() copied its arrays
        self._next: list[bytes | memoryview] | None = None  # sealed, not yet sent
        self.done = False  # every part sealed and sent

    def peek(self) -> list[bytes | memoryview] | None:
        """The next part's message (sealed now if it was not), None once all were sent."""
        if self._next is None and not self.done:
            part = next(self._sealing, None)
            if part is None:
                self.done = True
            else:
                self.parts.append(part)
                self._next = [WEIGHTS_TOPIC, *encode(part)]
                self.frames.append(self._next)
        return self._next

    def sent(self) -> None:
        """The message peek() gave went out."""
        self._next = None
        self.peek()  # the next part sealed now, while ZMQ sends this one (or done)

    def key(self) -> tuple:
        """What deltas are made against (a keyframe, all sealed): keyframe_of()."""
        assert self.keyframe is not None and self.done
        return keyframe_of(self.keyframe[0], self.parts, self.tx, self.keyframe[1])

    def finish(self) -> None:
        """Seal every part left (a superseded keyframe: repeats send it whole)."""
        for part in self._sealing:
            self.parts.append(part)
            self.frames.append([WEIGHTS_TOPIC, *encode(part)])
        self._next = None
        self.done = True


class WeightPublisher:
    """Learner side of weight sync (XPUB, bound). Its own thread owns the socket: `publish()` hands
    over a snapshot of the newest weights and returns; the thread encodes the push (parts, fp16,
    delta, digests: transport/weights.py) and streams it with non-blocking sends, so a multi-GB
    policy never stalls the learner; a newer push supersedes the rest of an older one. Every
    `republish_s` (a big push: at most a tenth of the time) and whenever an actor subscribes
    (XPUB) it repeats the newest keyframe and delta, so actors that (re)connect late or
    missed a part still get them. Statuses (`publish_status`) go out at the thread's next wake."""

    def __init__(
        self,
        address: str,
        republish_s: float = 1.0,
        ctx: zmq.Context | None = None,
        auth: LearnerAuth | None = None,
        queue_mb: float = 64.0,
        weights_bytes: int = 1 << 20,
        push: PushConfig = PushConfig(),
        snapshot_bytes: int = 0,
    ) -> None:
        self._ctx = ctx or zmq.Context.instance()
        # publish()'s copies, in memory reused from push to push; `snapshot_bytes` (what publish()
        # will copy: snapshot_bytes() of the policy's arrays but frozen and off-GPU ones) touched now
        self.blocks = SnapshotBlocks(prefault=snapshot_bytes)
        # XPUB (verbose): every subscription reaches this side, so a newly (re)connected actor gets
        # the newest keyframe and delta at once rather than at the next periodic repeat
        self._sock = self._ctx.socket(zmq.XPUB)
        self._sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        if auth is not None:  # weights go only to admitted actor keys
            auth.secure(self._sock)
        # per subscriber: about queue_mb of parts (at least 2 messages); a slow one misses older ones
        part = min(weights_bytes, int(push.part_mb * 2**20))
        self._sock.setsockopt(zmq.SNDHWM, hwm(queue_mb, part, low=2, high=256))
        # a full subscriber queue makes send() say EAGAIN instead of dropping a part silently:
        # the stream waits (at the slowest actor's pace) rather than leaving a push incomplete
        self._sock.setsockopt(zmq.XPUB_NODROP, 1)
        heartbeats(self._sock)  # a subscriber whose host is gone is dropped (while its queue has room)
        bind(self._sock, address)
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.push = push
        self._republish_s = republish_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._weights: Weights | None = None  # the newest weights not yet encoded
        self._weights_t = 0.0  # when they were handed over
        self._frozen: frozenset[str] = frozenset()  # their arrays the algorithm never trains
        self._copying = _Copying((), self._stop)  # publish()'s copy of them, array by array
        self._status: LearnerStatus | None = None  # the newest status not yet sent
        self.pushes = 0  # pushes sent whole (every part once)
        self.fp16_too_wide = 0  # arrays an fp16 push sent in float32 (values beyond float16's range)
        self.push_bytes = 0  # payload bytes of the newest push
        self.last_push_s = 0.0  # publish() -> its last part handed to ZMQ, for the newest push
        self.joins = 0  # weights subscriptions seen (actors connecting or reconnecting)
        self.stalls = 0  # times a subscriber's full queue held the stream STALL_S: it went on without it
        self._blocked_since = 0.0  # when the stream's sends started coming back EAGAIN (0: they go)
        self._lossy_until = 0.0  # parts go to whoever has room until then (a stalled subscriber misses them)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="weight-publisher", daemon=True)
        self._thread.start()

    def publish(
        self, weights: Weights, frozen: frozenset[str] = frozenset(), owned: frozenset[str] = frozenset()
    ) -> None:
        """Hand over the newest weights: copied before this returns (the learner's arrays change
        with the next update), except `frozen` ones (never trained: the thread reads them, a
        keyframe copies them) and `owned` ones (private snapshots already: copied off a GPU). The
        thread sends a full-precision keyframe's first parts while the rest is being copied.
        Called from one thread (the learner's)."""
        t = time.monotonic()
        # fp16: an array with a value beyond +-65,504 would become inf (and every actor would refuse
        # the push): it travels in float32, counted (one pass over the float32 arrays, fp16 only)
        wide = too_wide_for_fp16(
            {k: np.asarray(v) for k, v in weights.arrays.items() if k not in frozen}, self.push.precision
        )
        if wide:
            self.fp16_too_wide += len(wide)
            if self.fp16_too_wide <= 20 or self.fp16_too_wide % 1000 == 0:
                log.warning(
                    "weights %s exceed float16's range: sent in float32 in this fp16 push (%d so far)",
                    sorted(wide)[:4],
                    self.fp16_too_wide,
                )
        arrays, copies = snapshot_layout(
            weights.arrays, frozen | owned, self.blocks, half=self.push.precision == "fp16", wide=wide
        )
        copying = _Copying([k for k, _, _ in copies], self._stop)
        # a big copy overlaps the first parts' sending; a small one is made first (a hand-off per
        # array would cost more than it saves: the two threads take turns at the GIL)
        overlap = sum(dst.nbytes for _, _, dst in copies) >= PIPELINE_BYTES
        for _, src, dst in () if overlap else copies:
            cast_into(dst, src)
            copying.advance()
        with self._lock:
            self._frozen = frozen
            self._weights = Weights(weights.version, arrays, weights.architecture)
            self._copying = copying
            self._weights_t = t
        self._wake.set()  # the thread starts on the first parts while the rest is copied
        for _, src, dst in copies if overlap else ():
            cast_into(dst, src)  # (float32 -> float16 for a half-precision push)
            copying.advance()

    def publish_status(self, status: LearnerStatus) -> None:
        """Hand over the newest status; the thread sends it at its next wake (a newer one supersedes it)."""
        with self._lock:
            self._status = status
        self._wake.set()

    def check(self) -> None:
        """Raise if the publisher thread died (watched: the learner fails and is restarted)."""
        if self.error is not None:
            raise RuntimeError(f"the weight publisher thread died: {type(self.error).__name__}: {self.error}")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - watched: check() raises it on the learner's thread
            self.error = e
            log.error("weight publisher thread died: %s: %s", type(e).__name__, e)

    def _loop(self) -> None:
        key: tuple[int, dict] | None = None  # the newest keyframe (version, transmitted arrays, digests)
        key_frames: list[list[bytes | memoryview]] = []  # its messages, topic first
        stream: _Stream | None = None  # the newest push (keyframe or delta), its parts sealed as they go
        queue: deque[list[bytes | memoryview]] = deque()  # messages of a repeat
        started, last_sent = 0.0, 0.0
        joined = False  # an actor subscribed and has not had a repeat since
        while True:
            with self._lock:
                status, self._status = self._status, None
                # a push in flight is sent whole before a newer one starts (the newest waits, newer ones
                # supersede it): a push slower than the publish interval still reaches the actors, and
                # the cadence follows the send time
                weights = None
                if stream is None or stream.done:
                    weights, self._weights = self._weights, None
                frozen, t_pub, copying = self._frozen, self._weights_t, self._copying
            if status is not None:  # to whoever has room: a slow subscriber's queue never holds back acks
                self._send([STATUS_TOPIC, *encode(status)], lossy=True)
            if self._stop.is_set():
                return
            if weights is not None:
                if self.push.delta and stream is not None and stream.keyframe and not stream.done:
                    stream.finish()  # superseded: the keyframe whole all the same (deltas and repeats need it)
                    key = stream.key()
                if self.push.delta:
                    copying.wait()  # a delta compares values: once all are copied (fp16: converted by publish())
                parts, tx, keyframe = plan_push(
                    weights.version, weights.arrays, weights.architecture, self.push, key, frozen
                )
                stream = _Stream(parts, tx, (weights.version, frozen) if keyframe else None, copying.wait)
                if keyframe:
                    key_frames = stream.frames
                queue = deque()
                started = t_pub
                self.push_bytes = sum(a.nbytes for p in parts for a in p.arrays.values())
            sent = 0
            while sent < 8 * 2**20:  # a bounded slice per wake: statuses are not held up
                frames = queue[0] if queue else stream.peek() if stream is not None else None
                if frames is None or not self._send(frames):
                    break
                if queue:
                    queue.popleft()
                else:
                    assert stream is not None
                    stream.sent()
                    if stream.done and stream.keyframe:
                        key = stream.key()
                sent += sum(memoryview(f).nbytes for f in frames)
                if started and stream is not None and stream.done:
                    self.last_push_s, started = time.monotonic() - started, 0.0
                    self.pushes += 1
                last_sent = time.monotonic()
            busy = bool(queue) or (stream is not None and not stream.done)
            # (one that came mid-push is served once it is out; one before any push needs nothing)
            joined = (self._joined() or joined) and stream is not None
            # repeats: at once for an actor that just subscribed; else every republish_s, but a big
            # push no more than a tenth of the time (a 2 GiB policy every second would keep a
            # network link busy for nothing)
            every = max(self._republish_s, 9.0 * self.last_push_s)
            # a join's repeat goes to every subscriber (XPUB cannot address one): at most one per
            # JOIN_REPEAT_S or twice a push's send time, so actors reconnecting in a loop cannot keep
            # the link busy with keyframes
            join_gap = max(JOIN_REPEAT_S, 2.0 * self.last_push_s)
            joined_now = joined and time.monotonic() - last_sent > join_gap
            if not busy and stream is not None and (joined_now or time.monotonic() - last_sent > every):
                joined = False
                queue = deque(stream.frames if stream.frames is key_frames else [*key_frames, *stream.frames])
                last_sent = time.monotonic()
                busy = bool(queue)
            self._wake.wait(0.002 if busy else 0.05)
            self._wake.clear()

    def _joined(self) -> bool:
        """A weights subscription came in (an actor connected or reconnected) since the last look."""
        joined = False
        for _ in range(1000):  # bounded: (un)subscriptions are one small message each
            try:
                msg = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if msg[:1] == b"\x01" and msg[1:] == WEIGHTS_TOPIC:
                self.joins += 1
                joined = True
        return joined

    def _send(self, frames: list[bytes | memoryview], lossy: bool = False) -> bool:
        """Send one message without blocking; False when a subscriber's queue is full (the stream
        waits for it). `lossy`: to the subscribers with room (XPUB_NODROP off for this send).
        A stream held up STALL_S by a full queue goes on lossy for LOSSY_HOLD_S (`stalls`)."""
        now = time.monotonic()
        lossy = lossy or now < self._lossy_until
        if lossy:
            self._sock.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            if not lossy:
                self._blocked_since = 0.0
            return True
        except zmq.Again:
            if not self._blocked_since:
                self._blocked_since = now
            elif now - self._blocked_since >= STALL_S:
                self.stalls += 1
                self._lossy_until, self._blocked_since = now + LOSSY_HOLD_S, 0.0
                log.warning(
                    "a weights subscriber has read nothing for %.0f s (stopped, or its host gone): the "
                    "others get the weights without it for %.0f s (%d time(s) so far)",
                    STALL_S,
                    LOSSY_HOLD_S,
                    self.stalls,
                )
            return False
        finally:
            if lossy:
                self._sock.setsockopt(zmq.XPUB_NODROP, 1)

    def close(self) -> None:
        """Send the pending status (e.g. "stopping"), stop the thread, close the socket."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self._sock.close(linger=500)
