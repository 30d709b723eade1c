"""A delay/loss proxy between edge actors and the policy server, in its own process, on real sockets.

Actors connect to its ROUTER front end; it forwards to the server through a DEALER, so the server
sees an extra routing frame (the envelope is everything before the first empty frame). Each
message is delayed by half the round trip in each direction and dropped with probability `loss`;
for tests, `drop_replies` / `dup_replies` drop or duplicate the n-th reply (1-based) exactly.

    with NetemProxy(server_address, rtt_ms=150, loss=0.02) as front:
        policy = RemotePolicy(front, spec)
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import random
import time
from typing import Any

import zmq


def proxy_main(upstream: str, rtt_ms: float, loss: float, seed: int, drop_replies: tuple[int, ...],
               dup_replies: tuple[int, ...], ready: Any, stop: Any, counts: Any) -> None:
    from robo_async.launch.processes import _watch_parent

    _watch_parent(stop)  # a parent killed with -9 leaves no proxy behind
    ctx = zmq.Context()
    front, back = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for s in (front, back):
        s.setsockopt(zmq.LINGER, 0)
    front.bind("tcp://127.0.0.1:0")
    back.connect(upstream)
    ready.put(front.getsockopt_string(zmq.LAST_ENDPOINT))
    rng = random.Random(seed)
    half = rtt_ms / 2000
    queue: list[tuple[float, int, int, list[bytes]]] = []  # (due, order, 0: to server / 1: to actor, frames)
    n, replies = 0, 0
    c = {"requests": 0, "replies": 0, "dropped": 0, "duplicated": 0}
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(back, zmq.POLLIN)
    try:
        while not stop.is_set():
            wait = 10 if not queue else max(0, min(10, int((queue[0][0] - time.monotonic()) * 1000)))
            for sock, _ in poller.poll(wait):
                frames = sock.recv_multipart()
                now = time.monotonic()
                if sock is front:
                    c["requests"] += 1
                    if rng.random() < loss:
                        c["dropped"] += 1
                        continue
                    n += 1
                    heapq.heappush(queue, (now + half, n, 0, frames))
                else:
                    replies += 1
                    c["replies"] += 1
                    if replies in drop_replies or rng.random() < loss:
                        c["dropped"] += 1
                        continue
                    n += 1
                    heapq.heappush(queue, (now + half, n, 1, frames))
                    if replies in dup_replies:
                        c["duplicated"] += 1
                        n += 1
                        heapq.heappush(queue, (now + half + 0.005, n, 1, frames))
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, to_actor, frames = heapq.heappop(queue)
                try:
                    (front if to_actor else back).send_multipart(frames, flags=zmq.NOBLOCK)
                except zmq.ZMQError:  # the actor's socket is gone (it re-requested on a new one)
                    pass
    finally:
        counts.put(c)
        front.close(0)
        back.close(0)
        ctx.term()


class NetemProxy:
    """The proxy process as a context manager: entering starts it and returns the address actors
    connect to; leaving stops it and fills `counts` (requests, replies, dropped, duplicated).
    `rtt_ms`: the added round trip (ms), half each way; `loss`: drop probability per message."""

    def __init__(self, upstream: str, rtt_ms: float = 0.0, loss: float = 0.0, seed: int = 0,
                 drop_replies: tuple[int, ...] = (), dup_replies: tuple[int, ...] = ()) -> None:
        self._ctx = mp.get_context("spawn")
        self._ready, self._counts, self._stop = self._ctx.Queue(), self._ctx.Queue(), self._ctx.Event()
        self._proc = self._ctx.Process(target=proxy_main, daemon=True, name="netem-proxy", args=(
            upstream, rtt_ms, loss, seed, tuple(drop_replies), tuple(dup_replies), self._ready, self._stop,
            self._counts))
        self.counts: dict[str, int] = {}
        self.address = ""

    def __enter__(self) -> str:
        self._proc.start()
        self.address = self._ready.get(timeout=60)
        return self.address

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.counts = self._counts.get(timeout=10)
        except Exception:  # noqa: BLE001 - the proxy died: no counts
            self.counts = {}
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
