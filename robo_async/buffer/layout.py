"""What the replay store's parts share: its tables, its configuration, its errors, and the LMDB
layout (handles, keys, reading one record). The store (lmdb_store.py), its group commit
(ingest.py), its pager (pager.py) and retention (retention.py) all import from here, and none of
them from each other's modules except the store, which composes them.

Layout (LMDB sub-databases):

    meta           schema, per-table counts (`count:<table>`), per-actor high-water marks (`hw:<actor>`),
                   retention marks (`first:<table>`, `ev:<table>:<actor>`, `pm:<actor>`), last commit time
    img            encoded camera images keyed by content (stored once; see codec.py)
    t:<table>      one record per transition, keyed by its 8-byte big-endian index in the table
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lmdb
import numpy as np

from robo_async.buffer.codec import CorruptRecord, Schema, decode_image, decode_record

TABLES = ("online", "demos", "interventions")
MIRROR = "interventions"  # online rows an operator acted on are also indexed here (same commit)


class StoreError(RuntimeError):
    """The store on disk cannot be used (damaged beyond repair, or written by another schema)."""


@dataclass(frozen=True)
class StoreConfig:
    """Settings of a `PersistentReplayStore` (the `buffer.*` config keys it reads)."""

    commit_every: int = 512  # transitions per group commit ...
    commit_ms: float = 50.0  # ... or this long after the first uncommitted one, whichever first
    image_codec: str = "qoi"  # qoi or png (lossless), or jpeg
    jpeg_quality: int = 95
    cache_mb: float = 1024.0  # decoded transitions kept in RAM, per table ...
    cache_transitions: int = 1_000_000  # ... and at most this many
    map_size_gb: float = 1024.0  # LMDB address space; the file grows only as data is written
    encode_threads: int = 2  # image encoders (OpenCV releases the GIL)
    tail_check: int = 64  # records at the end of each table verified on open
    max_queued_mb: float = 256.0  # uncommitted data; insert() waits beyond this (backpressure)
    page_chunk: int = 256  # records the pager reads per step
    refresh_per_s: float = 200.0  # older records swapped into a full reservoir per second (bounded CPU)
    page_run: int = 64  # consecutive records per refresh (windows need neighbours)
    # Retention (days-long runs): the oldest records of a table go first. Per table, at most this
    # many rows (absent: no limit), e.g. {online: 5000000}; and the whole store at most max_gb on
    # disk (online rows are evicted to stay under it). Evicted records are first copied, as they
    # are, into the store at archive_dir (same format; committed before they are deleted here).
    max_rows: dict[str, int | None] = field(default_factory=dict)
    max_gb: float | None = None
    archive_dir: str | None = None
    evict_chunk: int = 2048  # records deleted per transaction (the committer does it between commits)
    disk_warn_gb: float = 5.0  # warn (logged, metric) when the disk holding the store has less free space ...
    disk_min_gb: float = 1.0  # ... and stop accepting data below this (actors keep it and resend later)

    def __post_init__(self) -> None:
        # a table limited to null rows is not limited (the config lists every table, null by default)
        unknown = set(self.max_rows) - set(TABLES)
        if unknown or any(v is not None and int(v) < 1 for v in self.max_rows.values()):
            raise ValueError(f"buffer.max_rows {dict(self.max_rows)}: tables are {TABLES}, limits at least 1")


def index_key(i: int) -> bytes:
    """The key of record `i` of a table (8 bytes, big-endian, so keys sort by index)."""
    return i.to_bytes(8, "big")


def read_int(b: bytes | None) -> int:
    """An integer stored by `index_key` (0 when absent)."""
    return int.from_bytes(b, "big") if b else 0


@dataclass(frozen=True)
class Handles:
    """An open store's LMDB environment and its named sub-databases (`meta`, `img`, `t:<table>`)."""

    env: lmdb.Environment
    dbs: dict[str, lmdb._Database]

    def read_record(
        self, txn: lmdb.Transaction, schema: Schema, table: str, i: int, memo: dict[bytes, np.ndarray] | None = None
    ) -> tuple[int, int, dict[str, np.ndarray]]:
        """(actor_id, seq, decoded transition) of record `i` of `table`; raises CorruptRecord.
        `memo` keeps decoded frames across calls: consecutive records share frames (a next_obs
        frame is the next record's obs frame), decoded once."""
        value = txn.get(index_key(i), db=self.dbs[f"t:{table}"])
        if value is None:
            raise CorruptRecord(f"record {i} of '{table}' is missing")
        actor, seq, row, img_keys = decode_record(schema, value)
        for c, k in zip(schema.images, img_keys, strict=False):
            if memo is not None and k in memo:
                row[c.name] = memo[k]
                continue
            blob = txn.get(k, db=self.dbs["img"])
            if blob is None:
                raise CorruptRecord(f"record {i} of '{table}': image '{c.name}' is missing")
            row[c.name] = decode_image(blob, c)
            if memo is not None:
                memo[k] = row[c.name]
        return actor, seq, row

    def data_bytes(self) -> int:
        """Bytes of the pages holding data (the file keeps freed pages and reuses them, so it
        stops growing once retention frees as much as is written)."""
        with self.env.begin() as txn:
            pages = 0
            for db in self.dbs.values():
                st = txn.stat(db)
                pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            return pages * self.env.stat()["psize"]
