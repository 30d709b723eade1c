"""Opening a replay store after any stop, clean or not: its meta read back, a damaged tail of a
table discarded, the per-actor high-water marks rebuilt from the records when anything was
repaired. Functions over the store's handles; `PersistentReplayStore.recover` calls them in order::

    schema, hw = read_meta(h, path, on_other=retention.load)
    count, repaired = repair_tail(h, schema, table, first, tail_check, writable, path)   # per table
    hw = rebuild_high_water(h, writable)                                                # if repaired
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import msgpack

from robo_async.buffer.codec import STORE_SCHEMA, CorruptRecord, Schema, peek_record
from robo_async.buffer.layout import TABLES, Handles, StoreError, index_key, read_int

log = logging.getLogger("robo_async.buffer.lmdb_store")


def read_meta(h: Handles, path: Path, on_other: Callable[[bytes, bytes], None]) -> tuple[Schema | None, dict[int, int]]:
    """The stored schema (None for a new store) and committed high-water marks (`hw:<actor>`);
    every other meta entry goes to `on_other(key, value)`. Raises StoreError for a store written
    with another STORE_SCHEMA."""
    schema = None
    hw = {}
    with h.env.begin(db=h.dbs["meta"]) as txn:
        raw = txn.get(b"schema")
        if raw is not None:
            d = msgpack.unpackb(raw, raw=False)
            if d.get("store_schema") != STORE_SCHEMA:
                raise StoreError(
                    f"replay store {path} was written with store schema "
                    f"{d.get('store_schema')}, this version reads {STORE_SCHEMA}; "
                    f"export it with the version that wrote it, or start a new store"
                )
            schema = Schema.from_msgpack(d)
        for k, v in txn.cursor():
            if k.startswith(b"hw:"):
                hw[int(k[3:])] = read_int(v)
            else:
                on_other(k, v)
    return schema, hw


def repair_tail(
    h: Handles, schema: Schema, table: str, first: int, tail_check: int, writable: bool, path: Path
) -> tuple[int, str | None]:
    """Check the last `tail_check` records of `table`; discard a damaged run at its end (logged; on
    disk too when `writable`). Returns (the table's count, what was repaired or None). `first`
    is the count of a table whose records were all evicted."""
    db = h.dbs[f"t:{table}"]
    with h.env.begin(db=db) as txn:
        cur = txn.cursor()
        n = read_int(cur.key()) + 1 if cur.last() else first  # (all evicted: empty, count kept)
        meta_n = read_int(txn.get(f"count:{table}".encode(), db=h.dbs["meta"]))
        bad = 0
        for i in range(n - 1, max(-1, n - 1 - tail_check), -1):
            try:
                h.read_record(txn, schema, table, i)
                break
            except CorruptRecord:
                bad += 1
    if not bad and meta_n == n:
        return n, None
    msg = (
        f"replay store {path}: table '{table}' had {n} records (meta said {meta_n}); "
        f"discarded {bad} damaged record(s) at the tail; actors resend what was not acked"
    )
    log.warning(msg)
    if writable:
        with h.env.begin(write=True) as txn:
            for i in range(n - bad, n):
                txn.delete(index_key(i), db=db)
            txn.put(f"count:{table}".encode(), index_key(n - bad), db=h.dbs["meta"])
    return n - bad, msg


def rebuild_high_water(h: Handles, writable: bool) -> dict[int, int]:
    """Per actor, one past the highest seq any table holds (stored too when `writable`)."""
    hw: dict[int, int] = {}
    with h.env.begin() as txn:
        for table in TABLES:
            for _, v in txn.cursor(db=h.dbs[f"t:{table}"]):
                try:
                    a, s = peek_record(v)
                except Exception:  # noqa: BLE001
                    continue
                hw[a] = max(hw.get(a, 0), s + 1)
        cur = txn.cursor(db=h.dbs["meta"])  # ranges refused and passed over (no rows of theirs)
        if cur.set_range(b"refused:"):
            for k, v in cur:
                if not k.startswith(b"refused:"):
                    break
                a = int(k[len(b"refused:") :])
                hw[a] = max(hw.get(a, 0), read_int(v))
        if writable:
            with h.env.begin(write=True) as w:
                for a, s in hw.items():
                    w.put(f"hw:{a}".encode(), index_key(s), db=h.dbs["meta"])
    return hw
