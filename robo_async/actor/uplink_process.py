"""The actor's transport in a child process (`actor.uplink=process`): the control loop only copies
each finished batch into shared memory.

The control process's `Adder` hands batches to `ProcessUplinks.put`, which encodes the batch's
header, copies its frames into the next slot of a `SlotRing` (shared memory the actor owns) and
returns: no ZMQ send, no journal, no thread on the control process's GIL. A child process hosts
one `Uplink` per robot (lane) and does everything else: reads the slots in order, encodes camera
frames, journals, sends, takes acks from its own status subscription, resends. Episode summaries
and heartbeats go to it over a local ZMQ pipe.

A slot is released (free for the control process again) only once its batch is safe without the
child: journaled or acked. So:
- the child killed (kill -9): the actor starts another, which opens the journals (queueing what
  they hold) and reads the ring again from the first unreleased slot: no gap in any stream, only
  duplicates the store drops;
- the actor killed: the child sees its parent gone, takes every published slot, journals what is
  not acked and exits; the restarted actor resends it from the journal. Only rows of a batch not
  yet handed over (at most `flush_every - 1` per robot) die with the actor, as they did before.

A batch larger than a slot (bigger images than the spec said) goes in slices of its rows that each
fit one; a single row larger than a slot goes over the pipe, and an empty slot (no frames) keeps
its place in the stream: the child takes nothing past that slot until the row has come, so no row
overtakes another and none waits for an ack. The control process keeps the row until its slot is
released, and sends it again to each new child.

A policy with a frozen camera encoder embeds frames on the uplink thread (torch): it keeps the
in-process uplink (`actor.uplink=process` falls back to `thread`, logged).

    group = ProcessUplinks(actor_id, ids, configs, data_address, weights_address, keys_dir)
    next_seqs = group.open()                  # starts the child; what each journal holds
    group.start(acked_per_lane)
    lanes = group.lanes                       # one outlet per robot for its Adder: put, unacked, resends
    group.close(drain_s)                      # the child drains, journals the rest, exits

This module is the control process's side; the child's is `actor/uplink_child.py`.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack
import zmq

from robo_async.actor.ring import SlotRing
from robo_async.actor.uplink import UplinkError
from robo_async.actor.uplink_child import ChildArgs, child_main, pack
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.wire import Message, TransitionBatch, encode

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _PipedRow:
    """A row larger than a slot, kept by the control process until its marker slot is released."""

    lane: int
    frames: list = field(repr=False)
    sent: bool = False  # to the current child (a new child is sent it again)


class LaneUplink:
    """One robot's outlet into the group: what the `Adder` and the actor use of an `Uplink`."""

    def __init__(self, group: ProcessUplinks, lane: int) -> None:
        self._group, self.lane = group, lane

    def put(self, msg: Message) -> None:
        self._group.put(self.lane, msg)

    @property
    def unacked(self) -> int:
        return self._group.figure("unacked", self.lane)

    @property
    def resends(self) -> int:
        return self._group.figure("resends", self.lane)


class ProcessUplinks:
    """The control process's side (see the module's docstring)."""

    def __init__(
        self,
        actor_id: int,
        lane_ids: list[int],
        configs: list[UplinkConfig],
        data_address: str,
        weights_address: str,
        keys_dir: str | None = None,
        ring_mb: float = 64.0,
    ) -> None:
        if len(lane_ids) != len(configs) or not lane_ids:
            raise ValueError("one UplinkConfig per lane")
        self.actor_id, self.lane_ids = actor_id, list(lane_ids)
        # the child holds at most half the ring unacked in RAM before spilling to the journal (with a
        # journal), so the ring frees up while the learner is away
        slot_bytes = max(c.message_bytes for c in configs) + (64 << 10)
        slots = int(max(4, min(4096, ring_mb * 2**20 // slot_bytes)))
        half_mb = slots * slot_bytes / 2**20 / 2 / len(configs)
        self.configs = [replace(c, max_ram_mb=min(c.max_ram_mb, half_mb)) for c in configs]
        self.data_address, self.weights_address, self.keys_dir = data_address, weights_address, keys_dir
        self.ring = SlotRing.create(slots, slot_bytes)
        self._dir = tempfile.mkdtemp(prefix=f"uplink-{actor_id}-")
        self._ctx = zmq.Context.instance()
        self._out = self._ctx.socket(zmq.PUSH)  # episode summaries, heartbeats, start/close
        self._out.setsockopt(zmq.LINGER, 0)
        self._out.setsockopt(zmq.SNDHWM, 10_000)
        self._out.bind(f"ipc://{self._dir}/to-child")
        self._in = self._ctx.socket(zmq.PULL)  # open, stats, closed
        self._in.setsockopt(zmq.LINGER, 0)
        self._in.bind(f"ipc://{self._dir}/to-parent")
        self._proc: mp.process.BaseProcess | None = None
        self._overflow: deque[tuple[int, list | tuple, int]] = deque()  # (lane, frames, rows) waiting for a slot
        self._piped: dict[int, _PipedRow] = {}  # marker slot -> the row over the pipe, until the slot is released
        self._figures: dict[str, list[int]] = {"unacked": [0] * len(lane_ids), "resends": [0] * len(lane_ids)}
        self._acked: list[int] | None = None
        self.restarts = 0
        self.error: str | None = None
        self.lanes = [LaneUplink(self, j) for j in range(len(lane_ids))]
        self._warned_full = self._warned_split = self._warned_pipe = False

    # --- the child ------------------------------------------------------------------------------
    def _spawn(self, acked: list[int] | None = None) -> None:
        args = ChildArgs(
            self.actor_id,
            tuple(self.lane_ids),
            tuple(self.configs),
            self.data_address,
            self.weights_address,
            self.keys_dir,
            self.ring.name,
            f"ipc://{self._dir}/to-child",
            f"ipc://{self._dir}/to-parent",
            logging.getLogger().level,
            None if acked is None else tuple(acked),
        )
        self._proc = mp.get_context("spawn").Process(
            target=child_main, args=(args,), daemon=True, name=f"uplink-{self.actor_id}"
        )
        self._proc.start()

    def _wait(self, kind: str, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._in.poll(50):
                m = msgpack.unpackb(self._in.recv(), raw=False)
                self._note(m)
                if m.get("k") == kind:
                    return m
            elif self._proc is not None and not self._proc.is_alive():
                raise UplinkError(
                    f"actor {self.actor_id}: the transport process exited "
                    f"({self._proc.exitcode}) before it said {kind!r}" + (f": {self.error}" if self.error else "")
                )
        raise UplinkError(f"actor {self.actor_id}: the transport process said no {kind!r} in {timeout_s:.0f} s")

    def _note(self, m: dict) -> None:
        if m.get("k") == "open":  # a new child: it has none of the rows over the pipe yet
            for row in self._piped.values():
                row.sent = False
        if m.get("k") == "stats":
            for key in self._figures:
                v = m.get(key)
                if isinstance(v, list) and len(v) == len(self.lane_ids):
                    self._figures[key] = [int(x) for x in v]
        if m.get("error"):
            self.error = str(m["error"])

    def open(self) -> list[int]:
        """Start the transport process; the next seq per lane after what its journal holds."""
        self._spawn()
        return [int(x) for x in self._wait("open", 120)["next"]]

    def start(self, acked: list[int]) -> None:
        self._acked = list(acked)
        self._out.send(pack({"k": "start", "acked": self._acked}))

    def _restart(self, wait: bool = False) -> None:
        """The child died: another one opens the journals and reads the ring from the first
        unreleased slot. From the control loop (`wait=False`) this only starts the process (a
        fork and exec); batches go on into the ring meanwhile."""
        assert self._proc is not None
        self.restarts += 1
        log.error(
            "actor %d: the transport process died (exit %s); starting another (%d so far)%s",
            self.actor_id,
            self._proc.exitcode,
            self.restarts,
            f": {self.error}" if self.error else "",
        )
        if self.restarts > 20:
            raise UplinkError(
                f"actor {self.actor_id}: the transport process died {self.restarts} times"
                + (f"; last: {self.error}" if self.error else "")
            )
        self.error = None
        self._spawn(acked=self._acked or [0] * len(self.lane_ids))
        if wait:
            self._wait("open", 120)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # --- from the control loop -----------------------------------------------------------------
    def put(self, lane: int, msg: Message) -> None:
        """Never blocks: a batch goes into the ring (or, while it is full, waits here in RAM);
        anything else to the child over the pipe."""
        if self._proc is not None and self._proc.exitcode is not None:
            self._restart()
        if not isinstance(msg, TransitionBatch):
            try:
                self._out.send_multipart(
                    [pack({"k": "msg", "lane": lane}), *encode(msg)], flags=zmq.NOBLOCK, copy=False
                )
            except zmq.Again:
                pass  # the child is far behind or gone: a summary or heartbeat is not worth waiting for
            self._send_piped()  # (a new child may be waiting for rows over the pipe: heartbeats come on time)
            return
        for frames, rows in self._parts(msg):
            self._overflow.append((lane, frames, rows))
        self._drain()

    def _parts(self, msg: TransitionBatch) -> list:
        """The batch's frames, or, when it is larger than a slot (bigger images than the spec
        said), the frames of consecutive slices of its rows that each fit one (same seqs, in
        order: the store sees the same rows). A single row larger than a slot goes whole over the
        pipe, its place in the stream kept by an empty slot (`_drain`)."""
        frames = encode(msg)
        if self.ring.fits(frames):
            return [(frames, msg.count)]
        n = msg.count
        row = max(1, sum(memoryview(f).nbytes for f in frames) // max(n, 1))
        per = max(1, (self.ring.slot_bytes - (64 << 10)) // row)
        if not self._warned_split:
            self._warned_split = True
            log.warning(
                "actor %d: a %d-row batch does not fit a ring slot (%d bytes); handed over in parts of <= %d rows",
                self.actor_id,
                n,
                self.ring.slot_bytes,
                per,
            )
        out: list = []
        i = 0
        while i < n:
            j = min(n, i + per)
            part = TransitionBatch(msg.actor_id, msg.seq + i, {k: v[i:j] for k, v in msg.arrays.items()})
            pf = encode(part)
            if self.ring.fits(pf):
                out.append((pf, j - i))
                i = j
            elif j - i > 1:
                per = max(1, (j - i) // 2)
            else:  # one row larger than a slot
                out.append((("pipe", pf), 1))
                i = j
        return out

    def _drain(self) -> None:
        while self._overflow:
            lane, frames, _ = self._overflow[0]
            if isinstance(frames, tuple):  # a row larger than a slot: an empty slot holds its place
                if not self.ring.write(lane, ()):
                    break
                self._piped[self.ring.written - 1] = _PipedRow(lane, frames[1])
                if not self._warned_pipe:
                    self._warned_pipe = True
                    log.warning(
                        "actor %d: a row of %d bytes is larger than a ring slot; sent over the pipe",
                        self.actor_id,
                        sum(memoryview(f).nbytes for f in frames[1]),
                    )
            elif not self.ring.write(lane, frames):
                break
            self._overflow.popleft()
        self._send_piped()
        if self._overflow and not self._warned_full:
            self._warned_full = True
            log.warning(
                "actor %d: the transport ring is full (%d slots); batches wait in RAM until the learner acks",
                self.actor_id,
                self.ring.slots,
            )

    def _send_piped(self) -> None:
        """Send the child the rows over the pipe it lacks, in slot order (a new child says "open":
        it lacks them all); forget those whose slot is released (journaled or acked)."""
        if not self._piped:
            return
        self._read_in()
        for slot in [k for k in self._piped if k < self.ring.released]:
            del self._piped[slot]
        for slot, row in self._piped.items():
            if row.sent:
                continue
            try:
                self._out.send_multipart(
                    [pack({"k": "row", "lane": row.lane, "slot": slot}), *row.frames], flags=zmq.NOBLOCK
                )
            except zmq.Again:  # no child connected yet, or it is far behind: the next put tries again
                return
            row.sent = True

    def _read_in(self) -> None:
        while True:
            try:
                self._note(msgpack.unpackb(self._in.recv(zmq.NOBLOCK), raw=False))
            except zmq.Again:
                break

    def figure(self, key: str, lane: int) -> int:
        self._read_in()
        if key == "unacked":  # and what still waits here for a free slot
            return self._figures[key][lane] + sum(n for j, _, n in self._overflow if j == lane)
        return self._figures[key][lane]

    # --- the end -----------------------------------------------------------------------------
    def _hand_over(self, deadline: float) -> None:
        """Put what waits here into the ring (while it is full, the child frees slots) and send the
        child every row over the pipe it lacks."""
        while (self._overflow or any(not r.sent for r in self._piped.values())) and time.monotonic() < deadline:
            if not self.alive():
                self._restart(wait=True)
            self._drain()
            time.sleep(0.005)

    def close(self, drain_s: float = 5.0) -> None:
        """The child takes every batch, waits up to `drain_s` for acks, journals the rest, exits."""
        try:
            deadline = time.monotonic() + drain_s + 30
            self._hand_over(deadline)
            if not self.alive() and self.ring.written > self.ring.released:
                self._restart(wait=True)  # a child to journal what is still in the ring
                self._hand_over(deadline)  # (and the rows over the pipe it needs for that)
            if self.alive():
                self._out.send(pack({"k": "close", "drain_s": drain_s}))
                try:
                    self._wait("closed", drain_s + 30)
                except UplinkError as e:
                    log.error("%s", e)
            if self._proc is not None:
                self._proc.join(timeout=10)
                if self._proc.is_alive():
                    self._proc.kill()
            if self._overflow:
                log.error(
                    "actor %d: %d batches could not be handed to the transport process",
                    self.actor_id,
                    len(self._overflow),
                )
        finally:
            self._out.close(linger=0)
            self._in.close(linger=0)
            self.ring.close()
            for name in ("to-child", "to-parent"):
                Path(self._dir, name).unlink(missing_ok=True)
            try:
                os.rmdir(self._dir)
            except OSError:
                pass
