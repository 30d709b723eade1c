"""A hostile peer for `robo-async bench chaos`: a process that holds a valid actor key of its own
(its own actor id, as a compromised robot computer would) and, at `rate` messages a second, sends
the learner a mix of what issue 37 found could stop a run:

- mutants of every message kind (`bench.mutate.Mutants`: fields, specs, frames, nesting);
- the 88-byte message (an array spec of 2^80 elements with an empty data frame);
- batches with a NaN in them under its own id, in its stream's order (refused and passed over);
- well-formed batches and gap messages claiming the real actors' ids (a key owns only its lanes);
- now and then a message of 65,542 frames;

and on the weights socket a subscriber that never reads (a stopped robot computer), re-subscribing
every few seconds (each join asks for the keyframe). Counts per case come back at the end.

    with HostilePeer(data, weights, keys_dir, own_id=90, victims=[0, 1, 2], rate=100) as peer:
        ...
    peer.counts -> {"sent": ..., "mutant": ..., "nan_own": ..., "forged_batch": ..., ...}
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from typing import Any

import msgpack
import numpy as np
import zmq

from robo_async.transport.wire import KINDS, MAX_FRAMES, StreamGap, encode

KILLER = [
    msgpack.packb(
        {
            "schema": 1,
            "kind": "transitions",
            "actor_id": 0,
            "seq": 0,
            "arrays": [["obs/state", "float32", [0, 1 << 40, 1 << 40]]],
        }
    ),
    b"",
]
# the mix, by weight: mutants most, each named case often enough to show in an hour
CASES = (
    ["mutant"] * 70 + ["killer"] * 5 + ["nan_own"] * 8 + ["forged_batch"] * 8 + ["forged_gap"] * 5 + ["resubscribe"] * 4
)


def hostile_main(
    data: str,
    weights: str,
    keys_dir: str | None,
    own_id: int,
    victims: list[int],
    rate: float,
    seed: int,
    stop: Any,
    counts_out: Any,
) -> None:
    from robo_async.bench.mutate import Mutants, valid
    from robo_async.launch.processes import _watch_parent
    from robo_async.transport.curve import secure_client

    _watch_parent(stop)
    ctx = zmq.Context()
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    mutants = Mutants(seed, 99)

    def socket(kind: int) -> zmq.Socket:
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if keys_dir:
            secure_client(s, keys_dir, own_id)
        return s

    push = socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(data)
    sub = socket(zmq.SUB)  # never read: its queue fills and stays full
    sub.setsockopt(zmq.RCVHWM, 1)
    sub.subscribe(b"")
    sub.connect(weights)
    c = {"sent": 0, "blocked": 0, "floods": 0, **{k: 0 for k in sorted(set(CASES))}}
    own_seq = 0  # the hostile key's own stream: its NaN batches come in order, so each is passed over
    period = 1.0 / rate
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - next_at > 1.0:  # fell behind (a paused process): no burst to catch up
                next_at = time.monotonic()
            case = rng.choice(CASES)
            if case == "resubscribe":
                sub.unsubscribe(b"")
                sub.subscribe(b"")  # a join: the publisher may send the keyframe again (throttled)
                c[case] += 1
                continue
            if case == "mutant":
                if rng.random() < 0.001:
                    frames = [b"\x80"] + [b""] * (MAX_FRAMES + 5)  # past the frame cap
                    c["floods"] += 1
                else:
                    frames = mutants.malformed(rng.choice(KINDS))
            elif case == "killer":
                frames = KILLER
            elif case == "nan_own":
                batch = valid("transitions", nrng)
                arrays = dict(batch.arrays)
                x = np.array(arrays["reward"], np.float32)
                x[0] = np.nan
                arrays["reward"] = x
                batch = type(batch)(own_id, own_seq, arrays)
                frames = [bytes(f) for f in encode(batch)]
                own_seq += batch.count
            elif case == "forged_batch":  # well formed, under a real actor's id, at a seq it may be waiting for
                b = valid("transitions", nrng)
                frames = [bytes(f) for f in encode(type(b)(rng.choice(victims), rng.randrange(0, 200_000), b.arrays))]
            else:  # a gap in a real actor's stream would make the learner pass over its rows
                frames = [
                    bytes(f)
                    for f in encode(
                        StreamGap(rng.choice(victims), rng.randrange(0, 200_000), rng.randrange(1, 1000), "forged")
                    )
                ]
            try:
                push.send_multipart(frames, flags=zmq.NOBLOCK)
                c["sent"] += 1
                c[case] += 1
            except zmq.Again:  # the learner is down (a kill -9): its queue is full
                c["blocked"] += 1
    finally:
        counts_out.put(c)
        push.close(0)
        sub.close(0)
        ctx.term()


class HostilePeer:
    """`hostile_main` in a process of its own; `counts` filled when it stops."""

    def __init__(
        self,
        data: str,
        weights: str,
        keys_dir: str | None,
        own_id: int,
        victims: list[int],
        rate: float = 100.0,
        seed: int = 0,
    ) -> None:
        ctx = mp.get_context("spawn")
        self._stop, self._counts = ctx.Event(), ctx.Queue()
        self._proc = ctx.Process(
            target=hostile_main,
            daemon=True,
            name="hostile-peer",
            args=(data, weights, keys_dir, own_id, list(victims), rate, seed, self._stop, self._counts),
        )
        self.counts: dict[str, int] = {}

    def __enter__(self) -> HostilePeer:
        self._proc.start()
        return self

    def alive(self) -> bool:
        return self._proc.is_alive()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.counts = self._counts.get(timeout=15)
        except Exception:  # noqa: BLE001 - it died: no counts
            self.counts = {}
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
