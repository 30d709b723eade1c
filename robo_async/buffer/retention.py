"""Retention for the replay store: tables kept within `buffer.max_rows` / `buffer.max_gb`, oldest
first, in chunks on the committer thread; evicted rows optionally copied to an archive store
first; frames deleted with the last record that uses them (interventions share online's frames);
and the disk-space monitor that pauses ingest before the disk is full.

`Retention` is a mixin of `PersistentReplayStore` (lmdb_store.py): it works on that store's LMDB
environment, tables, counts, caches and meta keys (`first:<table>`, `ev:<table>:<actor>`,
`pm:<actor>`), all written in the same transactions as the deletions.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import TYPE_CHECKING

import lmdb
import msgpack

from robo_async.buffer.codec import CorruptRecord, decode_record, image_key, peek_record

if TYPE_CHECKING:
    from robo_async.buffer.lmdb_store import PersistentReplayStore

log = logging.getLogger("robo_async.buffer.lmdb_store")
TABLES = ("online", "demos", "interventions")


def _key(i: int) -> bytes:
    return i.to_bytes(8, "big")


class Retention:
    """Eviction, archiving and the disk monitor (see the module's docstring)."""

    def _disk_ok(self) -> bool:
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
        if self.disk_free_gb < cfg.disk_warn_gb and now - getattr(self, "_disk_warned", -1e9) > 60:
            self._disk_warned = now
            stop = self.disk_free_gb < cfg.disk_min_gb
            log.error("replay store %s: %.2f GB free on its disk (%s); %s set buffer.max_rows or buffer.max_gb "
                      "(retention, optionally buffer.archive_dir) or free space", self.path, self.disk_free_gb,
                      f"below buffer.disk_min_gb={cfg.disk_min_gb}: new data is NOT accepted, the actors keep it"
                      if stop else f"warning at buffer.disk_warn_gb={cfg.disk_warn_gb}",
                      "writes are paused;" if stop else "")
        return self.disk_free_gb >= cfg.disk_min_gb

    def live(self, table: str) -> int:
        """Rows of `table` held now (committed minus evicted)."""
        return self.counts[table] - self.first[table]

    def _over(self) -> dict[str, int]:
        """Rows each table must lose to meet max_rows and max_gb (online absorbs the bytes limit)."""
        cfg = self.config
        out = {t: max(0, self.live(t) - int(cfg.max_rows[t])) for t in TABLES if cfg.max_rows.get(t) is not None}
        if cfg.max_gb is not None and self._env is not None:
            used = self.data_bytes()
            limit = cfg.max_gb * 2**30
            if used > limit and self.live("online") > 0:
                per_row = used / max(sum(self.live(t) for t in TABLES), 1)
                need = int((used - 0.9 * limit) / max(per_row, 1)) + 1
                out["online"] = max(out.get("online", 0), min(need, self.live("online")))
        return {t: n for t, n in out.items() if n > 0}

    def data_bytes(self) -> int:
        """Bytes of the pages holding data (the file keeps freed pages and reuses them, so it
        stops growing once retention frees as much as is written)."""
        assert self._env is not None
        with self._env.begin() as txn:
            pages = 0
            for db in self._dbs.values():
                st = txn.stat(db)
                pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            return pages * self._env.stat()["psize"]

    def _retain(self) -> None:
        """Evict the oldest rows of tables over their limits, a chunk per call (committer thread)."""
        if self._readonly or self.schema is None or not (self.config.max_rows or self.config.max_gb):
            return
        for table, n in self._over().items():
            try:
                self._evict(table, min(n, self.config.evict_chunk))
            except (lmdb.Error, OSError) as e:
                self.write_errors += 1
                self.last_error = f"retention: {type(e).__name__}: {e}"
                log.error("replay store %s: evicting from '%s' failed (%s); nothing was deleted", self.path,
                          table, self.last_error)

    def _own_keys(self, keys: list[bytes], actor: int, seq: int) -> list[bytes]:
        return [k for k in keys if k[:16] == image_key(actor, seq, 0)[:16]]

    def _evict(self, table: str, n: int) -> None:
        """Delete records [first, first+n) of `table` and the images no other held record uses,
        after copying them to the archive store (if configured) in a commit of their own."""
        assert self._env is not None and self.schema is not None
        db, lo = self._dbs[f"t:{table}"], self.first[table]
        hi = min(lo + n, self.counts[table])
        if hi <= lo:
            return
        other = "interventions" if table == "online" else "online"
        with self._env.begin() as txn:
            recs = []
            for i in range(lo, hi):
                v = txn.get(_key(i), db=db)
                if v is None:
                    continue
                try:
                    a, q, row, keys = decode_record(self.schema, v)
                    iv = int(row["intervention"]) if "intervention" in row else 0
                except CorruptRecord:
                    a, q, keys, iv = -1, -1, [], 0
                recs.append((i, a, q, v, keys, iv))
            nxt = {}  # interventions: is the same actor's next seq the next record here (mirrored too)?
            if table == "interventions":
                for j, (i, a, q, *_rest) in enumerate(recs):
                    after = recs[j + 1] if j + 1 < len(recs) else None
                    if after is None:
                        v = txn.get(_key(i + 1), db=db)
                        after = (None, *peek_record(v)) if v is not None else None
                    nxt[i] = after is not None and after[1] == a and after[2] == q + 1
            images = {k: txn.get(k, db=self._dbs["img"]) for r in recs for k in r[4]} if self._archive_on() else {}
        if self._archive_on():
            self._archive_records(table, recs, images)
        ev = dict(self._ev_seq[table])
        prev = dict(self._prev_mirrored)
        meta = self._dbs["meta"]
        with self._env.begin(write=True) as txn:
            for i, a, q, _, keys, iv in recs:
                txn.delete(_key(i), db=db)
                if a < 0:
                    continue
                ev[a] = max(ev.get(a, 0), q + 1)
                gone_there = q < self._ev_seq[other].get(a, 0)  # the other table no longer holds (a, q)
                drop: list[bytes] = []
                if table == "demos":
                    drop = self._own_keys(keys, a, q)
                elif table == "online":
                    # the same actor's previous row, if an operator drove it and the interventions
                    # table still holds it, may use this row's obs frame as its next obs
                    p_seq, p_mirrored, p_keys = prev.get(a, (q - 1, True, None))  # unknown: assume so
                    pred_held = p_mirrored and p_seq == q - 1 and p_seq >= self._ev_seq["interventions"].get(a, 0)
                    if iv == 0 or gone_there:
                        drop = [k for k in self._own_keys(keys, a, q)
                                if not (pred_held and (p_keys is None or k in p_keys))]
                    prev[a] = (q, iv > 0, keys)
                else:  # interventions: its images belong to online rows (a, q) and maybe (a, q+1)
                    if gone_there:
                        drop = self._own_keys(keys, a, q)
                    if not nxt.get(i, False) and q + 1 < self._ev_seq["online"].get(a, 0):
                        drop += self._own_keys(keys, a, q + 1)
                for k in drop:
                    txn.delete(k, db=self._dbs["img"])
            txn.put(f"first:{table}".encode(), _key(hi), db=meta)
            for a, q in ev.items():
                if q != self._ev_seq[table].get(a):
                    txn.put(f"ev:{table}:{a}".encode(), _key(q), db=meta)
            for a, entry in prev.items():
                if entry is not self._prev_mirrored.get(a):
                    txn.put(f"pm:{a}".encode(), msgpack.packb(list(entry), use_bin_type=True), db=meta)
        with self._lock:
            self._ev_seq[table] = ev
            self._prev_mirrored = prev
            self.first[table] = hi
        self.caches[table].set_total(self.counts[table], hi)
        log.info("replay store %s: retention evicted %d rows of '%s' (now %d held)", self.path, hi - lo, table,
                 self.live(table))

    def _archive_on(self) -> bool:
        return self.config.archive_dir is not None

    def _archive_records(self, table: str, recs: list, images: dict[bytes, bytes | None]) -> None:
        """Copy evicted records, as they are, into the archive store (durable before deletion here)."""
        if self._archive is None:
            assert self.schema is not None
            from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig

            self._archive = PersistentReplayStore(self.config.archive_dir, StoreConfig(cache_transitions=2))
            self._archive.open(expect=self.schema, readonly=False, threads=False)
        arch = self._archive
        assert arch._env is not None
        with arch._env.begin(write=True) as txn:
            db = arch._dbs[f"t:{table}"]
            n = arch.counts[table]
            for _, _, _, v, _, _ in recs:
                txn.put(_key(n), v, db=db, append=True)
                n += 1
            for k, blob in images.items():
                if blob is not None:
                    txn.put(k, blob, db=arch._dbs["img"], overwrite=False)
            txn.put(f"count:{table}".encode(), _key(n), db=arch._dbs["meta"])
        arch.counts[table] = n
        self.archived += len(recs)
