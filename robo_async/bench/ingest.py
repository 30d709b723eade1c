"""A stand-in learner for benchmarks, in its own process: receives transitions over the real ZMQ
sockets, commits them to a real replay store (or only counts them, `store_dir=None`), acks what
is committed in its status, and grants an unlimited step allowance (no learning)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from robo_async.buffer.store import ReplayError
from robo_async.transport.channels import TransitionReceiver
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.wire import LearnerStatus, TransitionBatch


def _ingest(address_q: Queue, stop: Event, counts: Queue, store_dir: str | None) -> None:
    store = None
    if store_dir is not None:
        from robo_async.buffer.lmdb_store import PersistentReplayStore

        store = PersistentReplayStore(store_dir).open()
    rx = TransitionReceiver("tcp://127.0.0.1:0")
    pub = WeightPublisher("tcp://127.0.0.1:0")
    address_q.put((rx.address, pub.address))
    hw: dict[int, int] = {}
    rejected = [0]
    next_status = 0.0

    def take(msgs: list) -> None:
        for m in msgs:
            if not isinstance(m, TransitionBatch):
                continue
            if store is not None:
                try:
                    store.insert(m, "online")
                except ReplayError as e:  # like the learner: refuse it, never crash (unacked: resent)
                    rejected[0] += 1
                    if rejected[0] <= 3:
                        log.error("bench ingest refused a batch: %s", e)
            elif m.seq <= hw.get(m.actor_id, 0):
                hw[m.actor_id] = max(hw.get(m.actor_id, 0), m.seq + m.count)

    while not stop.is_set():
        take(rx.poll(timeout_ms=5))
        if time.monotonic() >= next_status:  # the learner's cadence (status_every_s = 0.02)
            next_status = time.monotonic() + 0.02
            acked = store.high_water() if store is not None else hw
            pub.publish_status(
                LearnerStatus(0, 0, sum(acked.values()), 1 << 60, False, "bench-ingest", tuple(sorted(acked.items())))
            )
    take(rx.poll(timeout_ms=200, max_messages=100_000))
    if store is not None:
        store.flush()
        counts.put(sum(store.high_water().values()))
        store.close()
    else:
        counts.put(sum(hw.values()))
    rx.close()
    pub.close()


log = logging.getLogger(__name__)


class IngestProcess:
    """`with IngestProcess(store_dir) as (data_address, weights_address): ...`; `.received` after."""

    def __init__(self, store_dir: str | None = None) -> None:
        ctx = mp.get_context("spawn")
        self._q, self._counts, self._stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        self._proc = ctx.Process(target=_ingest, args=(self._q, self._stop, self._counts, store_dir), daemon=True)
        self.received = 0

    def __enter__(self) -> tuple[str, str]:
        self._proc.start()
        return self._q.get(timeout=120)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.received = self._counts.get(timeout=120)
        self._proc.join(10)
