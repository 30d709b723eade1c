"""The memory of the weight publisher's snapshots: `publish()` copies the learner's arrays into one
ALIGN-aligned block (`snapshot`, laid out by `snapshot_layout`; float32 held as float16 for a
half-precision push), from blocks reused from push to push (`SnapshotBlocks`: memory already
touched, so the copy on the learner's thread pays no page faults); `snapshot_bytes` is a block's size.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np

ALIGN = 64  # snapshot arrays start on cache-line boundaries (SIMD loads)


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
        return raw[start : start + nbytes]


def _held_as(a: np.ndarray, half: bool) -> np.dtype:
    """The dtype a snapshot holds `a` in: float32 as float16 when the push travels in half precision."""
    return np.dtype(np.float16) if half and a.dtype == np.float32 else a.dtype


def snapshot_bytes(
    arrays: Mapping[str, np.ndarray], keep: frozenset[str] = frozenset(), precision: str = "fp32"
) -> int:
    """The size of snapshot()'s block for these arrays (each array's bytes rounded up to ALIGN)."""
    return sum(
        -(-np.asarray(v).size * _held_as(np.asarray(v), precision == "fp16").itemsize // ALIGN) * ALIGN
        for k, v in arrays.items()
        if k not in keep
    )


def snapshot(
    arrays: Mapping[str, np.ndarray], keep: frozenset[str] = frozenset(), blocks: SnapshotBlocks | None = None
) -> dict[str, np.ndarray]:
    """Copies of `arrays` (but those in `keep`, taken as they are), laid out in one block: one
    allocation instead of one per array, which at a few MiB took twice the copy's time in page
    faults (17 arrays of 4 MiB in all: 1.5 ms apart, 0.6 ms in one block); from `blocks` when
    given (memory already touched, reused from push to push)."""
    out, copies = snapshot_layout(arrays, keep, blocks)
    for _, src, dst in copies:
        np.copyto(dst, src)
    return out


def snapshot_layout(
    arrays: Mapping[str, np.ndarray],
    keep: frozenset[str],
    blocks: SnapshotBlocks | None,
    half: bool = False,
    wide: frozenset[str] = frozenset(),
) -> tuple[dict[str, np.ndarray], list[tuple[str, np.ndarray, np.ndarray]]]:
    """snapshot()'s arrays before any copy (views of the block; `keep` ones as they are), and the
    copies to make: (name, source, destination) in the arrays' order. `half`: float32 arrays are
    held as float16 (a push in half precision: the conversion is the copy), but the `wide` ones
    (values beyond float16's range: they travel in float32)."""
    copy = {k: np.asarray(v) for k, v in arrays.items() if k not in keep}
    offsets, total = {}, 0
    for k, v in copy.items():
        offsets[k] = total
        total += -(-v.size * _held_as(v, half and k not in wide).itemsize // ALIGN) * ALIGN  # as snapshot_bytes()
    if blocks is not None:
        block = blocks.take(total)
    else:
        raw = np.empty(total + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        block = raw[start : start + total]  # every array on a 64-byte boundary (cache lines, SIMD loads)
    out, copies = {}, []
    for k, v in arrays.items():
        if k not in copy:
            out[k] = v
            continue
        a = copy[k]
        held = _held_as(a, half and k not in wide)
        out[k] = dst = block[offsets[k] : offsets[k] + a.size * held.itemsize].view(held).reshape(a.shape)
        copies.append((k, a, dst))
    return out, copies
