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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from robo_async.transport.assembler import Assembler
from robo_async.transport.curve import LearnerAuth, admitted, owns
from robo_async.transport.wire import (
    MAX_FRAMES,
    LearnerStatus,
    Message,
    WeightPart,
    Weights,
    WireError,
    decode,
    encode,
    recv_frames,
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


HEARTBEAT_IVL_MS = 2_000  # ZMTP PINGs on every link between actors and learner
HEARTBEAT_TIMEOUT_MS = 20_000  # nothing back for this long: the peer is gone (a host without power, a
# connection left half-open), the link is closed (a connecting side then reconnects)


def heartbeats(sock: zmq.Socket) -> None:
    """ZMTP heartbeats on `sock` (before bind/connect): a peer that answers nothing for
    HEARTBEAT_TIMEOUT_MS is disconnected rather than kept, with its queue, forever."""
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)


def hwm(queue_mb: float, message_bytes: int, low: int = 2, high: int = 10_000) -> int:
    """A ZMQ high-water mark (counted in messages) from a budget in bytes and the expected message
    size, so a queue of camera batches or weights holds about `queue_mb`, not N messages of any size."""
    return int(min(max(queue_mb * 2**20 // max(message_bytes, 1), low), high))


class TransitionReceiver:
    """Learner side of the data plane (PULL, bound)."""

    def __init__(
        self,
        address: str,
        ctx: zmq.Context | None = None,
        max_message_mb: float = 64.0,
        auth: LearnerAuth | None = None,
        queue_mb: float = 64.0,
        message_bytes: int = 65536,
    ) -> None:
        self._ctx = ctx or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PULL)
        self._auth = auth
        if auth is not None:  # CURVE server: only admitted actor keys connect; ids are bound to keys
            auth.secure(self._sock)
        # per actor connection: about queue_mb of batches; beyond it backpressure reaches the actors
        self._sock.setsockopt(zmq.RCVHWM, hwm(queue_mb, message_bytes, low=4))
        # a peer sending a larger frame is disconnected by ZMQ before it is buffered (it reconnects)
        self._sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_mb * 2**20))
        heartbeats(self._sock)
        bind(self._sock, address)
        self.address = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.dropped = 0
        self.last_dropped = ""  # why the last one was dropped
        self.id_mismatch = 0  # messages under another actor's id than the key they came with

    def poll(self, timeout_ms: int = 0, max_messages: int = 64) -> list[Message | RefusedBatch]:
        """The messages that arrived (waiting up to `timeout_ms` for the first), checked; malformed
        ones (`dropped`) and, with CURVE, ones under another actor's id (`id_mismatch`) left out;
        transitions refused for their contents as a `RefusedBatch` (their range, for the store)."""
        out: list[Message | RefusedBatch] = []
        if not self._sock.poll(timeout_ms):
            return out
        while len(out) < max_messages:
            try:
                frames = recv_frames(self._sock, zmq.NOBLOCK)
            except zmq.Again:
                break
            except WireError as e:
                self._drop(e)
                continue
            try:
                msg = decode([f.buffer for f in frames])
                if self._auth is not None:
                    owner = admitted(frames[0])
                    claimed = getattr(msg, "actor_id", None)
                    if not owns(owner, claimed):
                        self.id_mismatch += 1
                        if self.id_mismatch <= 20 or self.id_mismatch % 1000 == 0:
                            log.warning(
                                "refused a %s message under actor id %s from the key of actor %s",
                                msg.kind,
                                claimed,
                                owner,
                            )
                        continue
                out.append(msg)
            except WireError as e:
                self._drop(e)
                if e.stream is not None and (self._auth is None or owns(admitted(frames[0]), e.stream[0])):
                    out.append(RefusedBatch(*e.stream, reason=str(e)))  # its range is passed over
            except Exception as e:
                log.exception("a message from an actor failed in its checks")
                self._drop(WireError(f"{type(e).__name__}: {str(e)[:200]}"))
        return out

    def _drop(self, e: WireError) -> None:
        self.dropped += 1
        self.last_dropped = str(e)[:300]
        if self.dropped <= 20 or self.dropped % 1000 == 0:  # a flood does not flood the log
            log.warning("dropped a malformed message from an actor (%d so far): %s", self.dropped, e)

    def close(self) -> None:
        """Close the socket (what is queued in it is dropped)."""
        self._sock.close(linger=0)


@dataclass(frozen=True)
class RefusedBatch:
    """Transitions the checks refused for what they hold (a NaN, a column of the wrong type), from
    a readable header: resent, they would be refused again and their stream would wait for them
    forever, so the learner passes over their range (`ReplayStore.refuse`), counted and named."""

    actor_id: int
    seq: int
    count: int
    reason: str
    kind = "refused"


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
        heartbeats(self._sock)
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

    def __init__(
        self,
        address: str,
        ctx: zmq.Context | None = None,
        every_s: float = 0.05,
        max_message_mb: float = 16384.0,
        secure: Secure | None = None,
        weights: bool = True,
    ) -> None:
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

    def start(self) -> WeightClient:
        """Start receiving (a daemon thread); returns self."""
        self._thread.start()
        return self

    def _subscriber(self, topic: bytes) -> zmq.Socket:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, topic)
        sock.setsockopt(zmq.RCVHWM, 16)
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_bytes)
        heartbeats(sock)
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
                        self._take_one(weights)
                if status in ready:
                    while status.poll(0):
                        self._take_one(status)
                    next_status = time.monotonic() + self._every_s
        finally:
            status.close(linger=0)
            if weights is not None:
                weights.close(linger=0)

    def _take_one(self, sock: zmq.Socket) -> None:
        """The next message from `sock` (at most MAX_FRAMES parts after the topic); whatever it
        makes fail is a dropped message with its reason, never the end of this thread."""
        try:
            self._take(recv_frames(sock, max_frames=MAX_FRAMES + 1))
        except WireError as e:
            self._dropped(e)
        except zmq.ZMQError:
            raise
        except Exception as e:
            log.exception("a message from the learner failed in its handling")
            self._dropped(WireError(f"{type(e).__name__}: {str(e)[:200]}"))

    def _dropped(self, e: WireError) -> None:
        self.dropped += 1
        if self.dropped <= 20 or self.dropped % 1000 == 0:
            log.warning("dropped a malformed message from the learner (%d so far): %s", self.dropped, e)

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
            self._dropped(e)
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
