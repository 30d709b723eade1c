"""The transport process of `actor.uplink=process` (the child `ProcessUplinks` starts): one `Uplink`
per robot (lane) fed from the shared-memory `SlotRing` and the pipe from the control process. It
reads the slots in order, hands their batches to the uplinks (which encode camera frames, journal,
send, take acks from its own status subscription, resend), releases a slot only once its batch is
journaled or acked, reports its figures, and, its parent gone, journals what is not acked and exits.
What it is told (`ChildArgs`) and the pipe's message heads (`pack`) are the two sides' protocol.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import msgpack
import zmq

from robo_async.actor.ring import SlotRing
from robo_async.actor.uplink import UplinkError
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.wire import TransitionBatch, decode

log = logging.getLogger("robo_async.actor.uplink_process")

POLL_MS = 2  # the child looks at the ring this often (no wake-up send on the control process)
STATS_S = 0.1  # the child reports unacked/resends/errors this often


@dataclass(frozen=True)
class ChildArgs:
    """What the transport process is told (plain values: it is a spawned process)."""

    actor_id: int
    lane_ids: tuple[int, ...]
    configs: tuple[UplinkConfig, ...]
    data_address: str
    weights_address: str
    keys_dir: str | None
    ring: str
    to_child: str
    to_parent: str
    log_level: int = logging.INFO
    acked: tuple[int, ...] | None = None  # a replacement: start at once from these acks (no start message)


def pack(d: dict) -> bytes:
    """A message head on the pipe between the control process and the transport process."""
    return msgpack.packb(d, use_bin_type=True)


def child_main(args: ChildArgs) -> None:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    back = None
    try:
        _Child(args).run()
    except BaseException as e:  # reported, then the parent starts another
        log.exception("actor %d: transport process failed", args.actor_id)
        try:
            back = zmq.Context.instance().socket(zmq.PUSH)
            back.setsockopt(zmq.LINGER, 1000)
            back.connect(args.to_parent)
            back.send(pack({"k": "stats", "error": f"{type(e).__name__}: {e}"[:1000]}))
        finally:
            if back is not None:
                back.close()
        raise SystemExit(1) from None


def _journal_lock(args: ChildArgs, wait_s: float = 120.0) -> object | None:
    """An exclusive lock beside the journal, held for this process's life: a transport process
    whose actor was killed may still be journaling what it took when the restarted actor's starts;
    the new one opens the journal only after the old one is done."""
    import fcntl

    jd = args.configs[0].journal_dir
    if jd is None:
        return None
    Path(jd).mkdir(parents=True, exist_ok=True)
    f = open(Path(jd) / "uplink.lock", "w")
    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() > deadline:
                f.close()
                raise UplinkError(
                    f"actor {args.actor_id}: journal {jd} stayed locked by another transport process for {wait_s:.0f} s"
                ) from None
            if not said:
                log.info("actor %d: waiting for the previous transport process to finish journaling", args.actor_id)
                said = True
            time.sleep(0.05)


class _Child:
    def __init__(self, args: ChildArgs) -> None:
        from functools import partial

        from robo_async.actor.uplink import Uplink, UplinkThread
        from robo_async.transport.channels import WeightClient

        self.args = args
        self.parent = os.getppid()
        self._lock = _journal_lock(args)  # held until this process ends (kill -9 included)
        ctx = zmq.Context.instance()
        self.inbox = ctx.socket(zmq.PULL)
        self.inbox.connect(args.to_child)
        self.back = ctx.socket(zmq.PUSH)
        self.back.setsockopt(zmq.LINGER, 1000)
        self.back.connect(args.to_parent)
        self.ring = SlotRing.attach(args.ring)
        secure = None
        if args.keys_dir is not None:
            from robo_async.transport.curve import secure_client

            secure = partial(secure_client, keys_dir=args.keys_dir, actor_id=args.actor_id)
        self.client = WeightClient(args.weights_address, secure=secure, weights=False).start()
        self.uplinks = [
            Uplink(i, args.data_address, lambda: self.client.status, c, secure=secure)
            for i, c in zip(args.lane_ids, args.configs, strict=False)
        ]
        self.thread = UplinkThread(f"uplink-{args.actor_id}")  # one thread drives every lane's uplink
        self.next_seq = [u.open() for u in self.uplinks]  # journal entries are queued; the ring skips them
        self.read = self.ring.released
        self.held: deque[tuple[int, int, int]] = deque()  # (slot, lane, end seq): read, not yet released
        self.piped: dict[int, list[bytes]] = {}  # marker slot -> frames of a row larger than a slot, not yet taken
        self.started = False
        if args.acked is not None:  # a replacement for a child that died: no start message comes
            for u, a in zip(self.uplinks, args.acked, strict=False):
                u.start(a, thread=self.thread)
            self.started = True
        self.terminated = False  # SIGTERM (e.g. multiprocessing ending daemonic children): as if orphaned
        import signal

        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "terminated", True))

    def run(self) -> None:
        self.back.send(pack({"k": "open", "next": self.next_seq}))
        next_stats = 0.0
        closing: float | None = None
        while True:
            orphan = os.getppid() != self.parent or self.terminated
            if self.inbox.poll(POLL_MS):
                while True:
                    try:
                        frames = self.inbox.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    closing = self._command(frames, closing)
            if self.started:
                self._take()
                self._release()
                for u in self.uplinks:
                    if u.error is not None:
                        raise UplinkError(f"uplink thread of stream {u.actor_id} died: {u.error}")
            now = time.monotonic()
            if now >= next_stats:
                next_stats = now + STATS_S
                self._stats()
            if orphan:  # the actor is gone (or this process is told to end): journal what was taken and go
                gone = os.getppid() != self.parent
                log.warning(
                    "actor %d: %s; journaling %d unacked transitions",
                    self.args.actor_id,
                    "the actor process is gone" if gone else "transport process terminated",
                    sum(u.unacked for u in self.uplinks),
                )
                if not self.started:
                    for u in self.uplinks:
                        u.start(0, thread=self.thread)
                    self.started = True
                    self._take()
                self._close(1.0)
                self.ring.close(unlink=gone)  # an actor still alive keeps its ring (and starts another child)
                return
            if closing is not None and self.read >= self.ring.written:
                self._close(closing)
                self.back.send(pack({"k": "closed"}))
                self.ring.close(unlink=False)
                return

    def _command(self, frames: list[bytes], closing: float | None) -> float | None:
        head = msgpack.unpackb(frames[0], raw=False)
        kind = head.get("k")
        if kind == "start":
            for u, a in zip(self.uplinks, head["acked"], strict=False):
                u.start(int(a), thread=self.thread)
            self.started = True
        elif kind == "msg":
            self.uplinks[int(head["lane"])].put(decode(frames[1:]))
        elif kind == "row" and int(head["slot"]) >= self.read:  # taken when `_take` reaches its slot
            self.piped[int(head["slot"])] = frames[1:]
        elif kind == "close":
            return float(head.get("drain_s", 5.0))
        return closing

    def _take(self) -> None:
        """Every published slot, in order, to its lane's uplink (copied out of the ring). An empty
        slot stands for a row larger than a slot, sent over the pipe: nothing after it is taken
        before it has come (an actor gone before sending it: nothing after it is journaled, no gap)."""
        while self.read < self.ring.written:
            lane, frames = self.ring.read(self.read)
            if not frames:
                row = self.piped.pop(self.read, None)
                if row is None:
                    break
                frames = row
            msg = decode(frames)
            if isinstance(msg, TransitionBatch) and msg.seq >= self.next_seq[lane]:  # else the journal has it
                self.uplinks[lane].put(msg)
                self.held.append((self.read, lane, msg.seq + msg.count))
            else:
                self.held.append((self.read, lane, -1))
            self.read += 1

    def _release(self) -> None:
        """Free the slots whose batches are journaled or acked, in ring order."""
        upto = None
        durable: dict[int, int] = {}
        while self.held:
            slot, lane, end = self.held[0]
            if lane not in durable:
                durable[lane] = self.uplinks[lane].durable()
            if end > durable[lane]:
                break
            self.held.popleft()
            upto = slot + 1
        if upto is not None:
            self.ring.release(upto)

    def _stats(self) -> None:
        try:
            self.back.send(
                pack(
                    {
                        "k": "stats",
                        "unacked": [u.pending for u in self.uplinks],
                        "resends": [u.resends for u in self.uplinks],
                    }
                ),
                zmq.NOBLOCK,
            )
        except zmq.Again:
            pass

    def _close(self, drain_s: float) -> None:
        """Wait (all lanes at once) up to `drain_s` for acks; then each uplink journals its rest."""
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and any(u.pending for u in self.uplinks):
            st = self.client.status
            if st is not None and st.stopping:
                break
            time.sleep(0.01)
        for u in self.uplinks:
            u.close(0.0)
        self.client.close()
