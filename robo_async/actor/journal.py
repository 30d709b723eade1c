"""`Journal`: an actor's local store of the transition batches the learner has not acked yet, so an
actor restart resends them (`Uplink` decides what goes in and when; this module only keeps them).

One LMDB environment per actor stream (`<run_dir>/actors/<id>/journal`), one table `batches`:
key = the batch's first seq (8 bytes, big-endian), value = the batch's wire frames packed with
msgpack (the bytes `transport.wire.encode` made, read back through `decode`'s checks). Writes are
group commits: a list of batches put and of seqs deleted in one transaction (and its fsync).

    j = Journal(path, actor_id)
    held, damaged = j.open()            # [(seq, count)] of readable entries; seqs of damaged ones
    j.write([(seq, frames)], [old_seq]) # lmdb.Error on failure: the caller keeps the data in RAM
    batch = j.load(seq)                 # None: missing or damaged
    j.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lmdb
import msgpack

from robo_async.transport.wire import TransitionBatch, WireError, decode

MAP_SIZE = 256 * 2**30  # LMDB's address-space reservation (sparse: the disk holds only what is written)


def _key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


def decode_entry(value: bytes) -> TransitionBatch:
    """A journal value back to its batch, or `WireError` naming why it is damaged."""
    try:
        frames = msgpack.unpackb(value, raw=False)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for a damaged entry
        raise WireError(f"journal entry is not msgpack: {type(e).__name__}") from None
    msg = decode(frames) if isinstance(frames, list) else None
    if not isinstance(msg, TransitionBatch):
        raise WireError("journal entry is not a transition batch")
    return msg


class Journal:
    """The LMDB of one actor stream's unacked batches (see the module's docstring)."""

    def __init__(self, path: str | Path, actor_id: int) -> None:
        self.path = Path(path)
        self.actor_id = actor_id
        self._env: lmdb.Environment | None = None

    def open(self) -> tuple[list[tuple[int, int]], list[int]]:
        """Open (creating it) and read what it holds: (seq, count) of each readable batch in seq
        order, and the seqs of damaged entries. A journal that cannot be opened is a RuntimeError
        that says what to do."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(self.path), map_size=MAP_SIZE, max_dbs=2, readahead=False)
            self._db = self._env.open_db(b"batches")
        except lmdb.Error as e:
            raise RuntimeError(
                f"actor {self.actor_id}: journal {self.path} cannot be opened ({e}); move it aside to start without it"
            ) from None
        held, damaged = [], []
        with self._env.begin(db=self._db) as txn:
            for k, v in txn.cursor():
                try:
                    b = decode_entry(v)
                except WireError:
                    damaged.append(int.from_bytes(k, "big"))
                    continue
                held.append((b.seq, b.count))
        return held, damaged

    def load(self, seq: int) -> TransitionBatch | None:
        """The batch starting at `seq`, or None if it is missing or damaged."""
        assert self._env is not None
        with self._env.begin(db=self._db) as txn:
            v = txn.get(_key(seq))
        try:
            return decode_entry(v) if v is not None else None
        except WireError:
            return None

    def write(self, puts: Sequence[tuple[int, Sequence]], deletes: Sequence[int]) -> None:
        """Put each (seq, wire frames) and delete each seq, in one transaction; `lmdb.Error` if it
        failed (nothing of it was written)."""
        assert self._env is not None
        with self._env.begin(write=True, db=self._db) as txn:
            for seq, frames in puts:  # packed from the arrays' memory (no copies)
                txn.put(_key(seq), msgpack.packb(list(frames), use_bin_type=True))
            for seq in deletes:
                txn.delete(_key(seq))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
