"""A ring of message slots in shared memory: the control process writes, the transport process
reads (`actor.uplink=process`).

One writer, one reader, slots taken in order. The writer copies a message's frames into the next
free slot and advances `written`; the reader takes slots from `read`-on and advances `released`
only when what a slot held is safe elsewhere (journaled or acked), so a reader killed mid-way
loses nothing: its successor starts again at `released`. A slot is free once released.

    ring = SlotRing.create(slots=256, slot_bytes=1 << 16)     # the actor (owner: unlinks it)
    ring.write(lane, frames)                                  # False: full, or too large for a slot
    peer = SlotRing.attach(ring.name)                         # the transport process
    lane, frames = peer.read(k)                               # slot k (k from peer.released on)
    peer.release(k + 1)                                       # slots before k + 1 may be reused

Layout: a 64-byte header of int64 (written, released, slots, slot_bytes), then the slots; each
slot starts with lane (u32), frame count (u32) and one u64 length per frame, then the frames.
Counters are 8-byte aligned (single stores on x86-64 and arm64); the writer fills a slot before it
publishes `written`, the reader copies a slot out before it publishes `released`.

The memory is reserved when the ring is made: shared memory is otherwise taken page by page as it
is first written, and a /dev/shm too small for the ring (64 MB in a container by default) would
then kill the writer with SIGBUS mid-run, its robot not closed. Too small, `create` says so.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Sequence
from multiprocessing import shared_memory

import numpy as np

HEADER = 64
MAX_FRAMES = 64  # frames per message (a transition batch has one per column)
SLOT_HEADER = 8 + 8 * MAX_FRAMES


class RingError(ValueError):
    """A slot that cannot be read (a count or length out of range): the ring is not ours or is damaged."""


class SharedMemoryFull(OSError):
    """/dev/shm cannot hold the ring: raised by `SlotRing.create`, before anything is written."""


SHM_DIR = "/dev/shm"  # where POSIX shared memory lives on Linux


def _reserve(shm: shared_memory.SharedMemory) -> None:
    """Take every page of `shm` now (ENOSPC here, not SIGBUS at a later write); the segment is
    removed when that fails."""
    if not hasattr(os, "posix_fallocate"):  # (macOS: no /dev/shm, and no such call)
        return
    try:
        os.posix_fallocate(shm._fd, 0, shm.size)  # type: ignore[attr-defined]
    except OSError as e:
        shm.close()
        shm.unlink()
        if e.errno == errno.ENOSPC:
            raise SharedMemoryFull(_too_small(shm.size)) from None
        raise


def _too_small(wanted: int) -> str:
    """One line: the size wanted, /dev/shm's free space and size, and what to do."""
    mib = 2**20
    try:
        st = os.statvfs(SHM_DIR)
        space = f"has {st.f_bavail * st.f_frsize / mib:.1f} MiB free of {st.f_blocks * st.f_frsize / mib:.1f} MiB"
    except OSError:
        space = "cannot hold it"
    return (
        f"the transport ring needs {wanted / mib:.1f} MiB of shared memory and {SHM_DIR} {space}: give the "
        f"container more (docker run --shm-size=1g) or set actor.uplink=thread (no ring)"
    )


class SlotRing:
    """See the module's docstring."""

    def __init__(self, shm: shared_memory.SharedMemory, owner: bool) -> None:
        self._shm, self.owner = shm, owner
        self._counters = np.ndarray((4,), np.int64, buffer=shm.buf[:32])
        self.slots, self.slot_bytes = int(self._counters[2]), int(self._counters[3])
        if self.slots < 1 or self.slot_bytes <= SLOT_HEADER or HEADER + self.slots * self.slot_bytes > shm.size:
            raise RingError(f"shared memory {shm.name} is not a slot ring ({self.slots} x {self.slot_bytes} bytes)")
        self._buf = shm.buf

    @classmethod
    def create(cls, slots: int, slot_bytes: int) -> SlotRing:
        if slots < 1 or slot_bytes <= SLOT_HEADER:
            raise ValueError(f"a ring needs >= 1 slot of > {SLOT_HEADER} bytes, not {slots} x {slot_bytes}")
        slot_bytes = -(-slot_bytes // 64) * 64
        shm = shared_memory.SharedMemory(create=True, size=HEADER + slots * slot_bytes)
        _reserve(shm)
        c = np.ndarray((4,), np.int64, buffer=shm.buf[:32])
        c[:] = (0, 0, slots, slot_bytes)
        del c
        return cls(shm, owner=True)

    @classmethod
    def attach(cls, name: str) -> SlotRing:
        try:
            shm = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            raise RingError(f"no shared memory named {name}") from None
        return cls(shm, owner=False)

    @property
    def name(self) -> str:
        return self._shm.name

    @property
    def written(self) -> int:
        return int(self._counters[0])

    @property
    def released(self) -> int:
        return int(self._counters[1])

    def free(self) -> int:
        """Slots the writer may fill now."""
        return self.slots - (self.written - self.released)

    def fits(self, frames: Sequence[bytes | memoryview]) -> bool:
        return len(frames) <= MAX_FRAMES and SLOT_HEADER + sum(memoryview(f).nbytes for f in frames) <= self.slot_bytes

    def write(self, lane: int, frames: Sequence[bytes | memoryview]) -> bool:
        """Copy `frames` into the next slot and publish it; False (nothing written) when the ring
        is full or the message does not fit a slot."""
        w = self.written
        if w - self.released >= self.slots or not self.fits(frames):
            return False
        base = HEADER + (w % self.slots) * self.slot_bytes
        views = [memoryview(f).cast("B") for f in frames]
        struct.pack_into(f"<II{len(views)}Q", self._buf, base, lane, len(views), *(v.nbytes for v in views))
        at = base + SLOT_HEADER
        for v in views:
            self._buf[at : at + v.nbytes] = v
            at += v.nbytes
        self._counters[0] = w + 1  # published after the slot is filled
        return True

    def read(self, k: int) -> tuple[int, list[bytes]]:
        """(lane, frames) of slot number `k` (released <= k < written), copied out."""
        if not self.released <= k < self.written:
            raise RingError(f"slot {k} is not readable (released {self.released}, written {self.written})")
        base = HEADER + (k % self.slots) * self.slot_bytes
        lane, n = struct.unpack_from("<II", self._buf, base)
        if n > MAX_FRAMES:
            raise RingError(f"slot {k} says {n} frames (at most {MAX_FRAMES})")
        lengths = struct.unpack_from(f"<{n}Q", self._buf, base + 8)
        if SLOT_HEADER + sum(lengths) > self.slot_bytes:
            raise RingError(f"slot {k}'s frames ({sum(lengths)} bytes) overrun the slot ({self.slot_bytes})")
        out, at = [], base + SLOT_HEADER
        for n_bytes in lengths:
            out.append(bytes(self._buf[at : at + n_bytes]))
            at += n_bytes
        return lane, out

    def release(self, upto: int) -> None:
        """Slots before `upto` are free again (never moves back)."""
        if upto > self.written:
            raise RingError(f"cannot release up to slot {upto}: only {self.written} written")
        if upto > self.released:
            self._counters[1] = upto

    def close(self, unlink: bool | None = None) -> None:
        """Unmap; the owner (or, with `unlink`, a reader whose writer is gone) also removes it."""
        self._counters = None  # type: ignore[assignment]  # views must go before the mapping closes
        self._buf = None  # type: ignore[assignment]
        try:
            self._shm.close()
        except BufferError:  # a view is still alive somewhere: the mapping goes with the process
            pass
        if self.owner if unlink is None else unlink:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
