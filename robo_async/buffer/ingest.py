"""The replay store's group commit, as plain functions over explicit arguments: which frames of a
queued batch are new and under which keys (`frame_jobs`), writing a prepared group in one LMDB
transaction (`write_group`), and feeding the committed rows to the RAM caches (`feed_caches`).

The store's writer thread groups queued batches (`Pending`) and starts encoding their frames
(`Prepared`); its committer thread writes each group::

    group, taken, nbytes, last = next_group(item, pending, prepare, config, encode_s)  # writer thread
    keys, raw, as_sent = frame_jobs(batch, skip, schema)       # in prepare: raw frames go to encoders
    with env.begin(write=True) as txn:
        hw, kept, gaps = write_group(txn, handles, schema, group, counts, committed_hw)
    feed_caches(caches, kept, counts, mirrored)                 # after the commit returned
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

import lmdb
import numpy as np

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import Schema, encode_image, encode_record, image_key
from robo_async.buffer.layout import MIRROR, Handles, StoreConfig, index_key, read_int
from robo_async.transport.wire import Frames, TransitionBatch


@dataclass
class Pending:
    """A batch accepted by `insert`, queued for the writer thread."""

    table: str
    batch: TransitionBatch
    nbytes: int = 0  # its size in the queue (backpressure)
    enqueued: float = field(default_factory=time.monotonic)
    decoded: dict[str, np.ndarray] = field(default_factory=dict)  # frames that came encoded, for the cache
    # > 0: not rows but a refused range (`PersistentReplayStore.refuse`): seqs batch.seq ..
    # batch.seq + refused - 1 are passed over (counted, never stored) once all before them are
    refused: int = 0


class Prepared(NamedTuple):
    """A pending batch with what is new of it: rows from `skip` on, each image column's keys per
    row, and the encoded image of each new key (futures: encoding runs on the store's pool)."""

    item: Pending
    skip: int
    keys: dict[str, list[bytes]]
    futures: dict[bytes, Future[bytes]]


class Encoders:
    """A pool of image encoders (OpenCV releases the GIL) for one codec, with a running mean of
    one frame's encode time in seconds (`mean_s`, which sizes the writer's groups)."""

    def __init__(self, threads: int, codec: str, quality: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="encode")
        self.codec, self.quality = codec, quality
        self.mean_s = 0.5e-3

    def submit(self, img: np.ndarray) -> Future[bytes]:
        """Start encoding one frame; the future holds the encoded bytes."""
        return self._pool.submit(self._encode, img)

    @staticmethod
    def ready(blob: bytes) -> Future[bytes]:
        """A frame that is encoded already, as a finished future."""
        done: Future[bytes] = Future()
        done.set_result(blob)
        return done

    def _encode(self, img: np.ndarray) -> bytes:
        t0 = time.perf_counter()
        blob = encode_image(img, self.codec, self.quality)
        self.mean_s = 0.95 * self.mean_s + 0.05 * (time.perf_counter() - t0)
        return blob

    def shutdown(self) -> None:
        """Wait for the frames being encoded, then stop the threads."""
        self._pool.shutdown()


def mirrored_rows(table: str, intervention: np.ndarray, skip: int) -> np.ndarray | None:
    """Which rows of an online batch also go to the interventions table (None: none)."""
    if table != "online":
        return None
    m = np.asarray(intervention) > 0
    return m if m[skip:].any() else None


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each run of True in `mask`."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=False))


def frame_jobs(
    b: TransitionBatch, skip: int, schema: Schema
) -> tuple[dict[str, list[bytes]], dict[bytes, np.ndarray], dict[bytes, bytes]]:
    """For the rows of `b` from `skip` on: each image column's key per row; the raw frames to
    encode; the frames the actor already encoded (stored as they came). A next_obs frame equal to
    the next row's obs frame is not stored twice: its key is that obs frame's."""
    col_index = {c.name: j for j, c in enumerate(schema.columns)}
    keys: dict[str, list[bytes]] = {}
    todo: dict[bytes, np.ndarray] = {}
    blobs: dict[bytes, bytes] = {}
    n = b.count - skip
    for c in schema.images:
        col = b.arrays[c.name][skip:]
        obs_twin = "obs/" + c.name.removeprefix("next_obs/") if c.name.startswith("next_obs/") else None
        twin = b.arrays[obs_twin][skip:] if obs_twin is not None and obs_twin in b.arrays else None
        pre = isinstance(col, Frames)
        ks = []
        for i in range(n):
            seq = b.seq + skip + i
            if (
                twin is not None
                and i + 1 < n
                and (col[i] == twin[i + 1] if pre and isinstance(twin, Frames) else np.array_equal(col[i], twin[i + 1]))
            ):
                assert obs_twin is not None
                ks.append(image_key(b.actor_id, seq + 1, col_index[obs_twin]))  # stored as the next obs
                continue
            k = image_key(b.actor_id, seq, col_index[c.name])
            ks.append(k)
            if pre:
                blobs[k] = col[i]
            else:
                todo[k] = col[i]
        keys[c.name] = ks
    return keys, todo, blobs


def next_group(
    item: Pending,
    pending: queue.Queue[Pending | None],
    prepare: Callable[[Pending], Prepared | None],
    config: StoreConfig,
    encode_s: float,
) -> tuple[list[Prepared], int, int, bool]:
    """The writer's next group: `item` and what follows it in `pending`, each prepared (its frames
    start encoding), until `commit_every` new transitions, as many frames as the encoders handle
    in `commit_ms` (one frame takes `encode_s` seconds), or `commit_ms` passed. Returns (the
    group, items taken from the queue, their bytes, whether the queue's end marker was met)."""
    group: list[Prepared] = []
    deadline = time.monotonic() + config.commit_ms / 1000
    n, images, taken, nbytes, last = 0, 0, 1, item.nbytes, False
    image_cap = max(8, config.commit_ms / 1000 * config.encode_threads / max(encode_s, 1e-5))
    while True:
        prepared = prepare(item)
        if prepared is not None:
            group.append(prepared)
            n += prepared.item.batch.count - prepared.skip
            images += len(prepared.futures)
        if n >= config.commit_every or images >= image_cap or time.monotonic() >= deadline:
            break
        try:
            next_item = pending.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if next_item is None:
            last = True
            break
        item = next_item
        taken += 1
        nbytes += item.nbytes
    return group, taken, nbytes, last


def write_group(
    txn: lmdb.Transaction,
    h: Handles,
    schema: Schema | None,
    group: list[Prepared],
    counts: dict[str, int],
    committed_hw: Mapping[int, int],
) -> tuple[dict[int, int], list[tuple[Pending, int]], int]:
    """Write a group's frames and records (online rows an operator drove mirrored into
    interventions), the new counts (updated in `counts`) and high-water marks, in `txn`.
    Returns (high-water marks written, (item, skip) of each batch written, batches skipped
    because they do not follow what is committed: they follow a failed group, the actor resends)."""
    hw: dict[int, int] = {}
    kept = []
    gaps = 0
    before = dict(counts)
    embedded: dict[int, int] = {}
    for item, skip, keys, futures in group:
        b, db = item.batch, h.dbs[f"t:{item.table}"]
        if b.seq + skip != hw.get(b.actor_id, committed_hw.get(b.actor_id, 0)):
            gaps += 1
            continue
        if item.refused:  # a refused range: the stream goes on after it (kept for a rebuild, below)
            hw[b.actor_id] = b.seq + item.refused
            txn.put(f"refused:{b.actor_id}".encode(), index_key(b.seq + item.refused), db=h.dbs["meta"])
            key = b"rows_refused"
            txn.put(key, index_key(read_int(txn.get(key, db=h.dbs["meta"])) + item.refused), db=h.dbs["meta"])
            continue
        assert schema is not None  # rows come after the store took its schema from the first batch
        kept.append((item, skip))
        for k, fut in futures.items():
            txn.put(k, fut.result(), db=h.dbs["img"])
        mirror = mirrored_rows(item.table, b.arrays["intervention"], skip)
        for i in range(skip, b.count):
            row_keys = {c: ks[i - skip] for c, ks in keys.items()}
            record = encode_record(schema, b.actor_id, b.seq + i, b.arrays, i, row_keys)
            txn.put(index_key(counts[item.table]), record, db=db, append=True)
            counts[item.table] += 1
            if mirror is not None and mirror[i]:  # frames shared: keyed by (actor, seq)
                txn.put(index_key(counts[MIRROR]), record, db=h.dbs[f"t:{MIRROR}"], append=True)
                counts[MIRROR] += 1
        hw[b.actor_id] = b.seq + b.count
        v = b.arrays.get("obs/embedding_version")
        if isinstance(v, np.ndarray) and b.count > skip:  # rows per frozen-encoder version (buffer/embeddings.py)
            for version, n in zip(*np.unique(v[skip:], return_counts=True), strict=False):
                embedded[int(version)] = embedded.get(int(version), 0) + int(n)
    for version, n in embedded.items():
        key = f"emb:{version:014x}".encode()
        txn.put(key, index_key(read_int(txn.get(key, db=h.dbs["meta"])) + n), db=h.dbs["meta"])
    for t, n in counts.items():
        if n != before[t]:
            txn.put(f"count:{t}".encode(), index_key(n), db=h.dbs["meta"])
    for a, s in hw.items():
        txn.put(f"hw:{a}".encode(), index_key(s), db=h.dbs["meta"])
    return hw, kept, gaps


def feed_caches(
    caches: Mapping[str, TableCache], kept: list[tuple[Pending, int]], counts: Mapping[str, int], mirrored: int
) -> None:
    """Append committed rows to their tables' caches; each run of operator ticks of an online batch
    also to the interventions cache (consecutive seqs, so windows stay inside). `mirrored` is the
    interventions count before the commit."""
    for item, skip in kept:
        b = item.batch
        rows = {k: item.decoded.get(k, a)[skip:] for k, a in b.arrays.items()}
        caches[item.table].append(rows, counts[item.table], b.actor_id, b.seq + skip)
        mirror = mirrored_rows(item.table, b.arrays["intervention"], skip)
        if mirror is not None:
            for lo, hi in runs(mirror[skip:]):
                mirrored += hi - lo
                caches[MIRROR].append({k: a[lo:hi] for k, a in rows.items()}, mirrored, b.actor_id, b.seq + skip + lo)
