"""ZeroMQ channels between actors and the learner.

Data plane: actors PUSH `TransitionBatch`/`EpisodeStats`/`Heartbeat` to the learner's PULL.
Weights: the learner PUBlishes `LearnerStatus` and weight pushes; each actor's `WeightClient`
receives them on a background thread and hands the newest over between control ticks. Every
message on the PUB socket starts with a topic frame (`STATUS_TOPIC`, `WEIGHTS_TOPIC`), so a
subscriber that needs no weights (an actor whose policy runs on a policy server) subscribes to
statuses only and the publisher never sends it a weight part.
Bad messages are logged, counted and dropped; they never crash a process.
"""

from __future__ import annotations

import errno
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import zmq

from robo_async.transport.curve import LearnerAuth, actor_of, owns
from robo_async.transport.weights import Assembler, PushConfig, cast_into, keyframe_of, plan_push, seal
from robo_async.transport.wire import (
    LearnerStatus,
    Message,
    WeightPart,
    Weights,
    WireError,
    decode,
    encode,
)

Secure = Callable[[zmq.Socket], None]  # sets a socket's CURVE keys before it binds or connects

log = logging.getLogger(__name__)
STATUS_TOPIC = b"status"  # the topic frame before a `LearnerStatus` on the learner's PUB socket
WEIGHTS_TOPIC = b"weights"  # ... before a weight push part (`WeightPart`) or whole `Weights`
_TOPIC_KINDS = {STATUS_TOPIC: ("status",), WEIGHTS_TOPIC: ("wpart", "weights")}  # what each topic may carry


class PortInUse(RuntimeError):
    """The address to bind is taken (another run, or a fixed port in use)."""


def bind(sock: zmq.Socket, address: str) -> None:
    """Bind `sock` to `address`; a taken port raises `PortInUse` naming what to do (the socket is closed)."""
    try:
        sock.bind(address)
    except zmq.ZMQError as e:
        sock.close(linger=0)
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(
                f"{address} is already in use (another run?); stop it or choose other ports, "
                f"e.g. transport.data_port=0 transport.weights_port=0 to pick free ones"
            ) from None
        raise


def hwm(queue_mb: float, message_bytes: int, low: int = 2, high: int = 10_000) -> int:
    """A ZMQ high-water mark (counted in messages) from a budget in bytes and the expected message
    size, so a queue of camera batches or weights holds about `queue_mb`, not N messages of any size."""
    return int(min(max(queue_mb * 2**20 // max(message_bytes, 1), low), high))


class TransitionReceiver:
    """Learner side of the data plane (PULL, bound)."""

    def __init__(self, address: str, ctx: zmq.Context | None = None, max_message_mb: float = 64.0,
                 auth: LearnerAuth | None = None, queue_mb: float = 64.0, message_bytes: int = 65536) -> None:
        self._ctx = ctx or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PULL)
        self._auth = auth
        if auth is not None:  # CURVE server: only admitted actor keys connect; ids are bound to keys
            auth.secure(self._sock)
        # per actor connection: about queue_mb of batches; beyond it backpressure reaches the actors
        self._sock.setsockopt(zmq.RCVHWM, hwm(queue_mb, message_bytes, low=4))
        # a peer sending a larger frame is disconnected by ZMQ before it is buffered (it reconnects)
        self._sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_mb * 2**20))
        bind(self._sock, address)
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.dropped = 0
        self.id_mismatch = 0  # messages under another actor's id than the key they came with

    def poll(self, timeout_ms: int = 0, max_messages: int = 64) -> list[Message]:
        """The messages that arrived (waiting up to `timeout_ms` for the first), checked; malformed
        ones (`dropped`) and, with CURVE, ones under another actor's id (`id_mismatch`) left out."""
        out: list[Message] = []
        if not self._sock.poll(timeout_ms):
            return out
        while len(out) < max_messages:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                msg = decode([f.buffer for f in frames])
                if self._auth is not None:
                    owner = actor_of(frames[0])
                    claimed = getattr(msg, "actor_id", None)
                    if not owns(owner, claimed):
                        self.id_mismatch += 1
                        if self.id_mismatch <= 20 or self.id_mismatch % 1000 == 0:
                            log.warning("refused a %s message under actor id %s from the key of actor %s",
                                        msg.kind, claimed, owner)
                        continue
                out.append(msg)
            except WireError as e:
                self.dropped += 1
                if self.dropped <= 20 or self.dropped % 1000 == 0:  # a flood does not flood the log
                    log.warning("dropped a malformed message from an actor (%d so far): %s", self.dropped, e)
        return out

    def close(self) -> None:
        """Close the socket (what is queued in it is dropped)."""
        self._sock.close(linger=0)


class TransitionSender:
    """Actor side of the data plane (PUSH, connected). Never blocks: `send` returns False
    when the outgoing queue is full so the caller can keep the data and retry."""

    def __init__(self, address: str, ctx: zmq.Context | None = None, secure: Secure | None = None) -> None:
        self._ctx = ctx or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUSH)
        if secure is not None:
            secure(self._sock)
        self._sock.setsockopt(zmq.SNDHWM, 1_000)
        self._sock.setsockopt(zmq.LINGER, 2_000)
        self._sock.connect(address)

    def send(self, msg: Message) -> bool:
        """Queue `msg` for sending; False (nothing queued) when the queue is full."""
        try:
            self._sock.send_multipart(encode(msg), flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def close(self) -> None:
        """Close the socket, waiting up to 2 s for queued messages to leave."""
        self._sock.close()


ALIGN = 64  # snapshot arrays start on cache-line boundaries (SIMD loads)
PIPELINE_BYTES = 32 << 20  # publish() copies of at least this size overlap the push's first parts


class SnapshotBlocks:
    """Memory for `publish()` snapshots, reused from push to push. Fresh memory costs its page
    faults on first touch: a 2 GiB copy into fresh memory took 0.6-1.9 s here, into touched memory
    0.18 s, and that copy runs on the learner's thread. A block is free again once nothing refers
    to it: its push superseded and republished no more, and ZMQ done with its zero-copy frames
    (pyzmq drops its references when a frame has gone). At most `keep` blocks are held (a
    keyframe, the push being sent and the next one); when none is free a fresh one is taken.
    `prefault` bytes are allocated and touched now (the learner knows its policy's size when it
    starts), so even the first push copies into touched memory."""

    def __init__(self, keep: int = 3, prefault: int = 0) -> None:
        self.keep = keep
        self._blocks: list[np.ndarray] = []
        self.fresh = 0  # blocks allocated (and faulted in by their first copy)
        self.reused = 0  # snapshots copied into a block that was free again
        if prefault > 0:
            raw = np.empty(prefault + ALIGN, np.uint8)
            raw.fill(0)  # every page touched now, not on the learner's first publish()
            self._blocks.append(raw)

    def take(self, nbytes: int) -> np.ndarray:
        """An ALIGN-aligned uint8 block of `nbytes`, a view of a held block nothing else uses if
        one is big enough, else fresh memory."""
        for i in range(len(self._blocks)):
            # a free block: referred to by this list and getrefcount's own argument only
            if self._blocks[i].nbytes >= nbytes + ALIGN and sys.getrefcount(self._blocks[i]) == 2:
                self.reused += 1
                raw = self._blocks[i]
                break
        else:
            raw = np.empty(nbytes + ALIGN, np.uint8)
            self.fresh += 1
            if len(self._blocks) < self.keep:
                self._blocks.append(raw)
        start = -raw.ctypes.data % ALIGN
        return raw[start:start + nbytes]


def _held_as(a: np.ndarray, half: bool) -> np.dtype:
    """The dtype a snapshot holds `a` in: float32 as float16 when the push travels in half precision."""
    return np.dtype(np.float16) if half and a.dtype == np.float32 else a.dtype


def snapshot_bytes(arrays: Mapping[str, np.ndarray], keep: frozenset[str] = frozenset(), precision: str = "fp32"
                   ) -> int:
    """The size of snapshot()'s block for these arrays (each array's bytes rounded up to ALIGN)."""
    return sum(-(-np.asarray(v).size * _held_as(np.asarray(v), precision == "fp16").itemsize // ALIGN) * ALIGN
               for k, v in arrays.items() if k not in keep)


def snapshot(arrays: Mapping[str, np.ndarray], keep: frozenset[str] = frozenset(),
             blocks: SnapshotBlocks | None = None) -> dict[str, np.ndarray]:
    """Copies of `arrays` (but those in `keep`, taken as they are), laid out in one block: one
    allocation instead of one per array, which at a few MiB took twice the copy's time in page
    faults (17 arrays of 4 MiB in all: 1.5 ms apart, 0.6 ms in one block); from `blocks` when
    given (memory already touched, reused from push to push)."""
    out, copies = _layout(arrays, keep, blocks)
    for _, src, dst in copies:
        np.copyto(dst, src)
    return out


def _layout(arrays: Mapping[str, np.ndarray], keep: frozenset[str], blocks: SnapshotBlocks | None,
            half: bool = False) -> tuple[dict[str, np.ndarray], list[tuple[str, np.ndarray, np.ndarray]]]:
    """snapshot()'s arrays before any copy (views of the block; `keep` ones as they are), and the
    copies to make: (name, source, destination) in the arrays' order. `half`: float32 arrays are
    held as float16 (a push in half precision: the conversion is the copy)."""
    copy = {k: np.asarray(v) for k, v in arrays.items() if k not in keep}
    offsets, total = {}, 0
    for k, v in copy.items():
        offsets[k] = total
        total += -(-v.size * _held_as(v, half).itemsize // ALIGN) * ALIGN  # as snapshot_bytes() counts it
    if blocks is not None:
        block = blocks.take(total)
    else:
        raw = np.empty(total + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        block = raw[start:start + total]  # every array on a 64-byte boundary (cache lines, SIMD loads)
    out, copies = {}, []
    for k, v in arrays.items():
        if k not in copy:
            out[k] = v
            continue
        a = copy[k]
        held = _held_as(a, half)
        out[k] = dst = block[offsets[k]:offsets[k] + a.size * held.itemsize].view(held).reshape(a.shape)
        copies.append((k, a, dst))
    return out, copies


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

    def __init__(self, parts: list[WeightPart], tx: dict[str, np.ndarray], keyframe: tuple | None,
                 ready: Callable[[Iterable[str]], object]) -> None:
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
        if self.peek() is None:
            self.done = True

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

    def __init__(self, address: str, republish_s: float = 1.0, ctx: zmq.Context | None = None,
                 auth: LearnerAuth | None = None, queue_mb: float = 64.0, weights_bytes: int = 1 << 20,
                 push: PushConfig = PushConfig(), snapshot_bytes: int = 0) -> None:
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
        self.push_bytes = 0  # payload bytes of the newest push
        self.last_push_s = 0.0  # publish() -> its last part handed to ZMQ, for the newest push
        self.joins = 0  # weights subscriptions seen (actors connecting or reconnecting)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="weight-publisher", daemon=True)
        self._thread.start()

    def publish(self, weights: Weights, frozen: frozenset[str] = frozenset(),
                owned: frozenset[str] = frozenset()) -> None:
        """Hand over the newest weights: copied before this returns (the learner's arrays change
        with the next update), except `frozen` ones (never trained: the thread reads them, a
        keyframe copies them) and `owned` ones (private snapshots already: copied off a GPU). The
        thread sends a full-precision keyframe's first parts while the rest is being copied.
        Called from one thread (the learner's)."""
        t = time.monotonic()
        arrays, copies = _layout(weights.arrays, frozen | owned, self.blocks, half=self.push.precision == "fp16")
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
        except BaseException as e:  # watched: check() raises it on the learner's thread
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
                weights, self._weights = self._weights, None
                frozen, t_pub, copying = self._frozen, self._weights_t, self._copying
            if status is not None:
                self._send([STATUS_TOPIC, *encode(status)])
            if self._stop.is_set():
                return
            if weights is not None:
                if self.push.delta and stream is not None and stream.keyframe and not stream.done:
                    stream.finish()  # superseded: the keyframe whole all the same (deltas and repeats need it)
                    key = stream.key()
                if self.push.delta:
                    copying.wait()  # a delta compares values: once all are copied (fp16: converted by publish())
                parts, tx, keyframe = plan_push(weights.version, weights.arrays, weights.architecture, self.push, key,
                                                frozen)
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
            if not busy and stream is not None and (joined or time.monotonic() - last_sent > every):
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

    def _send(self, frames: list[bytes | memoryview]) -> bool:
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False  # a slow subscriber: this one waits (parts) or is superseded (statuses)

    def close(self) -> None:
        """Send the pending status (e.g. "stopping"), stop the thread, close the socket."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self._sock.close(linger=500)


class WeightClient:
    """Actor side of weight sync (SUB, connected). A daemon thread receives; the control loop
    calls `take_weights()` between ticks, which never blocks on the network. `weights=False`
    subscribes to statuses only (progress, allowance, acks, stopping, boot id): an actor whose
    policy runs on a policy server takes no weight pushes it would not use.

    Statuses and weights come on two subscriptions of the same publisher. The thread drains
    statuses at most every `every_s` (the newest wins): each wake takes the GIL from the control
    loop, and the learner's status comes every 20 ms, so waking per status would cost the loop ~50
    hand-offs a second for nothing. A weight push's parts are taken the moment they arrive (a
    push is not held back by the status throttle)."""

    def __init__(self, address: str, ctx: zmq.Context | None = None, every_s: float = 0.05,
                 max_message_mb: float = 16384.0, secure: Secure | None = None, weights: bool = True) -> None:
        self._ctx = ctx or zmq.Context.instance()
        self._secure = secure
        self.weights = weights  # subscribe to weight pushes too (False: statuses only)
        self._max_bytes = int(max_message_mb * 2**20)
        self._assembler = Assembler()  # streamed pushes -> verified weights (checksums)
        self._address = address
        self._every_s = every_s
        self._lock = threading.Lock()
        self._weights: Weights | None = None
        self._taken_version = -1
        self.status: LearnerStatus | None = None
        self.status_t = 0.0  # monotonic time the newest status arrived
        self.dropped = 0
        self.statuses = 0  # statuses received
        self.weight_messages = 0  # weight push parts (or whole pushes) that reached this socket
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weight-client", daemon=True)

    def start(self) -> "WeightClient":
        """Start receiving (a daemon thread); returns self."""
        self._thread.start()
        return self

    def _subscriber(self, topic: bytes) -> zmq.Socket:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, topic)
        sock.setsockopt(zmq.RCVHWM, 16)
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_bytes)
        if self._secure is not None:
            self._secure(sock)
        sock.connect(self._address)
        return sock

    def _run(self) -> None:
        status = self._subscriber(STATUS_TOPIC)
        weights = self._subscriber(WEIGHTS_TOPIC) if self.weights else None
        both, only_weights = zmq.Poller(), zmq.Poller()
        both.register(status, zmq.POLLIN)
        if weights is not None:
            both.register(weights, zmq.POLLIN)
            only_weights.register(weights, zmq.POLLIN)
        next_status = 0.0
        try:
            while not self._stop.is_set():
                wait = next_status - time.monotonic()
                if wait > 0 and weights is None:
                    self._stop.wait(wait)
                    continue
                timeout_ms = int(min(50.0, wait * 1000)) + 1 if wait > 0 else 50
                ready = dict((only_weights if wait > 0 else both).poll(timeout_ms))
                if weights is not None and weights in ready:
                    while weights.poll(0):  # a push's parts: every one now
                        self._take(weights.recv_multipart(copy=False))
                if status in ready:
                    while status.poll(0):
                        self._take(status.recv_multipart(copy=False))
                    next_status = time.monotonic() + self._every_s
        finally:
            status.close(linger=0)
            if weights is not None:
                weights.close(linger=0)

    def _take(self, frames: list[zmq.Frame]) -> None:
        topic = bytes(frames[0].buffer) if frames else b""
        if topic == WEIGHTS_TOPIC:
            self.weight_messages += 1
        try:
            kinds = _TOPIC_KINDS.get(topic)
            if kinds is None:
                raise WireError(f"unknown topic {topic[:16]!r}; known: {sorted(_TOPIC_KINDS)}")
            msg = decode([f.buffer for f in frames[1:]])
            if msg.kind not in kinds:
                raise WireError(f"a {msg.kind} message under the topic {topic!r}")
        except WireError as e:
            self.dropped += 1
            if self.dropped <= 20 or self.dropped % 1000 == 0:
                log.warning("dropped a malformed message from the learner (%d so far): %s", self.dropped, e)
            return
        if isinstance(msg, WeightPart):
            try:
                whole = self._assembler.feed(msg)  # a whole, verified push, or None (more parts to come)
            except WireError as e:
                self.dropped += 1
                log.warning("dropped a weights part: %s", e)
                return
            if whole is None:
                return
            msg = whole
        if isinstance(msg, LearnerStatus):
            self.status = msg
            self.status_t = time.monotonic()
            self.statuses += 1
        elif isinstance(msg, Weights):
            with self._lock:
                if self._weights is None or msg.version > self._weights.version:
                    self._weights = msg

    @property
    def weights_refused(self) -> int:
        """Pushes refused (checksum mismatch, pieces that do not fit) or not applicable (a delta
        against a keyframe this actor does not hold)."""
        return self._assembler.bad + self._assembler.missing_base

    def silent_s(self) -> float:
        """Seconds since the learner's last status (it sends one every ~20 ms); 0 before the first."""
        return time.monotonic() - self.status_t if self.status is not None else 0.0

    def take_weights(self) -> Weights | None:
        """Newest weights not yet taken, or None."""
        w = self._weights  # lock-free look first: called every control tick
        if w is None or w.version <= self._taken_version:
            return None
        with self._lock:
            w = self._weights
            if w is None or w.version <= self._taken_version:
                return None
            self._taken_version = w.version
            return w

    def close(self) -> None:
        """Stop receiving (joins the thread) and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
