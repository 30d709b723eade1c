"""The replay store's pager: a thread that pages older transitions from disk into each table's
RAM reservoir, newest first, then random runs of consecutive records (so windows of one actor's
episode exist among older data too). The store starts it on open and stops it with `stop`::

    threading.Thread(target=page, args=(store, handles, config, stop, held_from, on_corrupt)).start()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import CorruptRecord, Schema
from robo_async.buffer.layout import Handles, StoreConfig


class Paged(Protocol):
    """What the pager reads of its store: the schema and caches (both set on the first insert of a
    new store)."""

    schema: Schema | None
    caches: dict[str, TableCache]


def page(
    store: Paged,
    h: Handles,
    config: StoreConfig,
    stop: threading.Event,
    held_from: Callable[[str], int],
    on_corrupt: Callable[[str, int, Exception], None],
) -> None:
    """Fill and refresh the reservoirs of `store`'s caches until `stop` is set (a thread's target).
    A missing or damaged record at or above `held_from(table)` (rows below it are evicted or being
    evicted: `Retention.held_from`) is reported to `on_corrupt(table, index, error)`; all are skipped."""
    rng = np.random.default_rng()
    chunk, run = config.page_chunk, max(1, config.page_run)
    next_refresh: dict[str, float] = {}
    while not stop.is_set():
        busy = False
        for table, cache in list(store.caches.items()):
            older = cache.older_count()
            cap = cache.reservoir_capacity
            if older == 0 or cap == 0:
                continue
            filled = cache.reservoir_filled
            if filled < min(cap, older):  # first fill, newest first, each chunk in table order
                m = min(chunk, cap - filled, older - filled)
                slots = list(range(filled, filled + m))
                lo = older - filled - m
            elif older > cap and config.refresh_per_s > 0:
                # a random run of old records over a random run of slots, at a bounded rate
                if time.monotonic() < next_refresh.get(table, 0.0):
                    continue
                m = min(run, cap)
                next_refresh[table] = time.monotonic() + m / config.refresh_per_s
                first = int(rng.integers(0, cap - m + 1))
                slots = list(range(first, first + m))
                lo = int(rng.integers(0, older - m + 1))
            else:
                continue
            busy = True
            base = cache.first  # indices are offset by what retention evicted
            schema = store.schema
            assert schema is not None  # (caches exist only once the schema is known)
            memo: dict[bytes, np.ndarray] = {}
            got: tuple[list, list, list, list, list] = ([], [], [], [], [])
            with h.env.begin() as txn:
                for j, slot in enumerate(slots):
                    try:
                        actor, seq, row = h.read_record(txn, schema, table, base + lo + j, memo)
                    except CorruptRecord as e:
                        if base + lo + j >= held_from(table):  # (not an eviction racing the pager)
                            on_corrupt(table, base + lo + j, e)
                        continue
                    for part, v in zip(got, (slot, base + lo + j, row, actor, seq), strict=False):
                        part.append(v)
            cache.put_reservoir_run(*got)
        stop.wait(0.002 if busy else 0.05)
