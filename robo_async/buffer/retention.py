"""Retention for the replay store: tables kept within `buffer.max_rows` / `buffer.max_gb`, oldest
first, in chunks on the committer thread; evicted rows optionally copied to an archive store
first; frames deleted with the last record that uses them (interventions share online's frames);
and the disk-space monitor that pauses ingest before the disk is full.

`Retention` is owned by `PersistentReplayStore` (lmdb_store.py), which calls it with what it needs
and nothing more::

    retention = Retention(config, path, open_archive=..., on_evicted=...)
    retention.load(key, value)                 # on open, for each meta key (its own marks only)
    errors = retention.retain(handles, schema, counts)   # committer thread, between commits
    retention.disk_ok()                        # before accepting data

It owns the retention marks, written in the same transactions as the deletions: the oldest index
still held per table (`first:<table>`), per table and actor the seq below which rows are evicted
(`ev:<table>:<actor>`), and each actor's last evicted online row (`pm:<actor>`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import lmdb
import msgpack

from robo_async.buffer.codec import CorruptRecord, Schema, decode_record, image_key, peek_record
from robo_async.buffer.layout import TABLES, Handles, StoreConfig, index_key, read_int

log = logging.getLogger("robo_async.buffer.lmdb_store")


class ArchiveSink(Protocol):
    """Where evicted records go before they are deleted: another store of the same format."""

    def append_raw(self, table: str, records: Sequence[bytes], images: Mapping[bytes, bytes | None]) -> None:
        """Append records and images exactly as stored, durably (one commit)."""

    def close(self) -> None:
        """Release the sink."""


# (index, actor, seq, stored record, image keys, intervention) of one record being evicted
_Evicted = tuple[int, int, int, bytes, list[bytes], int]


def _own_keys(keys: list[bytes], actor: int, seq: int) -> list[bytes]:
    """The image keys among `keys` written for the row (actor, seq) itself."""
    return [k for k in keys if k[:16] == image_key(actor, seq, 0)[:16]]


class Retention:
    """Eviction, archiving and the disk monitor of one store (see the module's docstring).

    `open_archive(schema)` opens the archive store (called once, on the first eviction with
    `archive_dir` set); `on_evicted(table, first)` tells the store the oldest index it holds moved."""

    def __init__(
        self,
        config: StoreConfig,
        path: Path,
        open_archive: Callable[[Schema], ArchiveSink],
        on_evicted: Callable[[str, int], None],
    ) -> None:
        self.config = config
        self.path = path
        self.first = dict.fromkeys(TABLES, 0)  # the oldest index still held (evicted below it)
        self.archived = 0  # rows copied to the archive store before eviction
        self.disk_free_gb = float("inf")
        self._open_archive = open_archive
        self._on_evicted = on_evicted
        self._archive: ArchiveSink | None = None
        self._evicting: dict[str, int] = {}  # table -> the first index kept, while rows below it are deleted
        self._disk_t = 0.0
        self._disk_warned = -1e9
        self._ev_seq: dict[str, dict[int, int]] = {t: {} for t in TABLES}  # per actor: seqs below are evicted
        # actor -> (seq, mirrored, image keys) of its last evicted online row (one entry per actor)
        self._prev_mirrored: dict[int, tuple[int, bool, list[bytes] | None]] = {}

    def load(self, key: bytes, value: bytes) -> None:
        """One meta entry read back on open: retention's own marks are kept, other keys ignored."""
        if key.startswith(b"first:"):
            self.first[key[6:].decode()] = read_int(value)
        elif key.startswith(b"pm:"):  # the last evicted online row of an actor
            q, mirrored, keys = msgpack.unpackb(value, raw=False)
            self._prev_mirrored[int(key[3:])] = (q, mirrored, keys)
        elif key.startswith(b"ev:"):  # ev:<table>:<actor>
            _, table, actor = key.decode().split(":")
            self._ev_seq[table][int(actor)] = read_int(value)

    def disk_ok(self) -> bool:
        """Free space on the store's disk, checked every few seconds: a warning below disk_warn_gb,
        no new data below disk_min_gb (said loudly, with what to do)."""
        now = time.monotonic()
        if now - self._disk_t < 2.0:
            return self.disk_free_gb >= self.config.disk_min_gb
        self._disk_t = now
        try:
            self.disk_free_gb = shutil.disk_usage(self.path).free / 2**30
        except OSError:
            return True
        cfg = self.config
        if self.disk_free_gb < cfg.disk_warn_gb and now - self._disk_warned > 60:
            self._disk_warned = now
            stop = self.disk_free_gb < cfg.disk_min_gb
            log.error(
                "replay store %s: %.2f GB free on its disk (%s); %s set buffer.max_rows or buffer.max_gb "
                "(retention, optionally buffer.archive_dir) or free space",
                self.path,
                self.disk_free_gb,
                f"below buffer.disk_min_gb={cfg.disk_min_gb}: new data is NOT accepted, the actors keep it"
                if stop
                else f"warning at buffer.disk_warn_gb={cfg.disk_warn_gb}",
                "writes are paused;" if stop else "",
            )
        return self.disk_free_gb >= cfg.disk_min_gb

    def held_from(self, table: str) -> int:
        """The oldest index of `table` that is not evicted or being evicted (readers meeting a
        missing row below it met an eviction, not damage)."""
        return self._evicting.get(table, self.first[table])

    @property
    def limited(self) -> bool:
        """Whether any limit is set (without one, retain() does nothing)."""
        return bool(self.config.max_rows or self.config.max_gb)

    def over(self, counts: Mapping[str, int], data_bytes: int) -> dict[str, int]:
        """Rows each table must lose to meet max_rows and max_gb (online absorbs the bytes limit)."""
        cfg = self.config
        live = {t: counts[t] - self.first[t] for t in TABLES}
        out = {t: max(0, live[t] - int(n)) for t, n in cfg.max_rows.items() if n is not None}
        if cfg.max_gb is not None:
            limit = cfg.max_gb * 2**30
            if data_bytes > limit and live["online"] > 0:
                per_row = data_bytes / max(sum(live.values()), 1)
                need = int((data_bytes - 0.9 * limit) / max(per_row, 1)) + 1
                out["online"] = max(out.get("online", 0), min(need, live["online"]))
        return {t: n for t, n in out.items() if n > 0}

    def retain(self, h: Handles, schema: Schema, counts: Mapping[str, int]) -> list[str]:
        """Evict the oldest rows of tables over their limits, a chunk per call (committer thread).
        Returns one line per table whose eviction failed (nothing of it was deleted)."""
        if not self.limited:
            return []
        errors = []
        data_bytes = h.data_bytes() if self.config.max_gb is not None else 0
        for table, n in self.over(counts, data_bytes).items():
            try:
                self._evict(h, schema, counts, table, min(n, self.config.evict_chunk))
            except (lmdb.Error, OSError) as e:
                errors.append(f"retention: {type(e).__name__}: {e}")
                log.error(
                    "replay store %s: evicting from '%s' failed (%s); nothing was deleted", self.path, table, errors[-1]
                )
        return errors

    def _evict(self, h: Handles, schema: Schema, counts: Mapping[str, int], table: str, n: int) -> None:
        """Delete records [first, first+n) of `table` and the images no other held record uses,
        after copying them to the archive store (if configured) in a commit of their own."""
        db, lo = h.dbs[f"t:{table}"], self.first[table]
        hi = min(lo + n, counts[table])
        if hi <= lo:
            return
        other = "interventions" if table == "online" else "online"
        archive_on = self.config.archive_dir is not None
        with h.env.begin() as txn:
            recs: list[_Evicted] = []
            for i in range(lo, hi):
                v = txn.get(index_key(i), db=db)
                if v is None:
                    continue
                try:
                    a, q, row, keys = decode_record(schema, v)
                    iv = int(row["intervention"]) if "intervention" in row else 0
                except CorruptRecord:
                    a, q, keys, iv = -1, -1, [], 0
                recs.append((i, a, q, v, keys, iv))
            nxt: dict[int, bool] = {}  # interventions: is the actor's next seq the next record here (mirrored too)?
            if table == "interventions":
                for j, (i, a, q, *_rest) in enumerate(recs):
                    after: tuple[int | None, int, int] | None = recs[j + 1][:3] if j + 1 < len(recs) else None
                    if after is None:
                        v = txn.get(index_key(i + 1), db=db)
                        after = (None, *peek_record(v)) if v is not None else None
                    nxt[i] = after is not None and after[1] == a and after[2] == q + 1
            images = {k: txn.get(k, db=h.dbs["img"]) for r in recs for k in r[4]} if archive_on else {}
        if archive_on:
            if self._archive is None:
                self._archive = self._open_archive(schema)
            self._archive.append_raw(table, [r[3] for r in recs], images)
            self.archived += len(recs)
        ev = dict(self._ev_seq[table])
        prev = dict(self._prev_mirrored)
        self._evicting[table] = hi  # (the pager must not take these rows' absence for damage)
        try:
            self._delete(h, recs, table, other, nxt, ev, prev, hi)
            self.first[table] = hi
        finally:
            del self._evicting[table]
        self._ev_seq[table] = ev
        self._prev_mirrored = prev
        self._on_evicted(table, hi)
        log.info(
            "replay store %s: retention evicted %d rows of '%s' (now %d held)",
            self.path,
            hi - lo,
            table,
            counts[table] - hi,
        )

    def _delete(
        self,
        h: Handles,
        recs: list[_Evicted],
        table: str,
        other: str,
        nxt: dict[int, bool],
        ev: dict[int, int],
        prev: dict[int, tuple[int, bool, list[bytes] | None]],
        hi: int,
    ) -> None:
        """One transaction: delete `recs` and the images no held record uses any more; write the
        new marks (`ev` and `prev` are updated here, stored by the caller once committed)."""
        db, meta = h.dbs[f"t:{table}"], h.dbs["meta"]
        with h.env.begin(write=True) as txn:
            for i, a, q, _, keys, iv in recs:
                txn.delete(index_key(i), db=db)
                if a < 0:
                    continue
                ev[a] = max(ev.get(a, 0), q + 1)
                gone_there = q < self._ev_seq[other].get(a, 0)  # the other table no longer holds (a, q)
                drop: list[bytes] = []
                if table == "demos":
                    drop = _own_keys(keys, a, q)
                elif table == "online":
                    # the same actor's previous row, if an operator drove it and the interventions
                    # table still holds it, may use this row's obs frame as its next obs
                    p_seq, p_mirrored, p_keys = prev.get(a, (q - 1, True, None))  # unknown: assume so
                    pred_held = p_mirrored and p_seq == q - 1 and p_seq >= self._ev_seq["interventions"].get(a, 0)
                    if iv == 0 or gone_there:
                        drop = [k for k in _own_keys(keys, a, q) if not (pred_held and (p_keys is None or k in p_keys))]
                    prev[a] = (q, iv > 0, keys)
                else:  # interventions: its images belong to online rows (a, q) and maybe (a, q+1)
                    if gone_there:
                        drop = _own_keys(keys, a, q)
                    if not nxt.get(i, False) and q + 1 < self._ev_seq["online"].get(a, 0):
                        drop += _own_keys(keys, a, q + 1)
                for k in drop:
                    txn.delete(k, db=h.dbs["img"])
            txn.put(f"first:{table}".encode(), index_key(hi), db=meta)
            for a, q in ev.items():
                if q != self._ev_seq[table].get(a):
                    txn.put(f"ev:{table}:{a}".encode(), index_key(q), db=meta)
            for a, entry in prev.items():
                if entry is not self._prev_mirrored.get(a):
                    txn.put(f"pm:{a}".encode(), msgpack.packb(list(entry), use_bin_type=True), db=meta)

    def close(self) -> None:
        """Close the archive store, if one was opened."""
        if self._archive is not None:
            self._archive.close()
            self._archive = None
