"""A bare ingest server and a synthetic actor, as real processes, for crash trials.

The server is the learner's ingest path without the learning: PULL transitions into a
`PersistentReplayStore`, publish `LearnerStatus` with acks and a boot id. The producer is the
actor's delivery path without a robot: `Adder` + `Uplink` (+ journal) fed with transitions whose
`obs/state[0]` is their own seq, so a checker can tell lost, duplicated and wrong data apart.

    python -m robo_async.bench.loadgen serve --store DIR --data tcp://127.0.0.1:5555 --status tcp://127.0.0.1:5556
    python -m robo_async.bench.loadgen produce --data ... --status ... --journal DIR --until 5000
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import signal
import sys
import time
import uuid

import numpy as np

from robo_async.actor.adder import Adder
from robo_async.actor.uplink import Uplink
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.store import ReplayError
from robo_async.transport.channels import TransitionReceiver, WeightClient
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.wire import LearnerStatus, TransitionBatch


def serve(store_dir: str, data: str, status: str, config: StoreConfig, keys: str | None = None) -> None:
    """Ingest until SIGTERM. Prints `ready ...` once open and a JSON stats line every second.
    With `keys` (a `robo-async keys` directory) both sockets are CURVE servers, as the learner's."""
    t0 = time.monotonic()
    store = PersistentReplayStore(store_dir, config).open()
    opened = time.monotonic() - t0
    while len(store) and not store.can_sample() and time.monotonic() - t0 < 60:
        time.sleep(0.001)  # the pager brings the newest data in first
    first_sample = time.monotonic() - t0
    print(f"ready recovery_s={opened:.4f} first_sample_s={first_sample:.4f} count={len(store)}", flush=True)
    auth = None
    if keys:
        from robo_async.transport.curve import LearnerAuth

        auth = LearnerAuth(keys).start()
    rx, pub = TransitionReceiver(data, auth=auth), WeightPublisher(status, auth=auth)
    boot = uuid.uuid4().hex[:12]
    stop = False

    def _term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _term)
    next_status = next_stats = 0.0
    while not stop:
        for msg in rx.poll(timeout_ms=5) if store.accepting() else time.sleep(0.005) or []:
            if isinstance(msg, TransitionBatch):
                try:
                    store.insert(msg)
                except ReplayError as e:
                    logging.error("rejected: %s", e)
        now = time.monotonic()
        if now >= next_status:
            next_status = now + 0.02
            pub.publish_status(
                LearnerStatus(0, 0, len(store), 2**62, False, boot, tuple(sorted(store.high_water().items())))
            )
        if now >= next_stats:
            next_stats = now + 1.0
            gaps = np.diff(store.commit_times[-1000:]) * 1000 if len(store.commit_times) > 1 else np.zeros(1)
            print(
                json.dumps(
                    {
                        "count": len(store),
                        "commits": len(store.commit_times),
                        "commit_p50_ms": float(np.median(gaps)),
                        "commit_p99_ms": float(np.percentile(gaps, 99)),
                        "commit_max_ms": float(gaps.max()),
                        "write_errors": store.write_errors,
                        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    }
                ),
                flush=True,
            )
    store.close()
    rx.close()
    pub.close()
    if auth is not None:
        auth.stop()


def _frame(frames: np.ndarray, seq: int) -> np.ndarray:
    """A recorded camera frame made unique to `seq` (its seq in the first pixels' bytes)."""
    f = frames[seq % len(frames)].copy()
    f.reshape(-1)[:8] = np.frombuffer(np.int64(seq).tobytes(), np.uint8)
    return f


def make_row(
    seq: int, state_dim: int, images: int, size: int, frames: list[np.ndarray] | None = None
) -> tuple[dict, dict]:
    """Observation and next observation for transition `seq` (state[0] == seq). Images are
    gradients, or (with `frames`, one array of recorded frames per camera) real renders."""
    obs = {"state": np.full(state_dim, seq, np.float32)}
    nxt = {"state": np.full(state_dim, seq + 1, np.float32)}
    if frames is not None:
        for c, fr in enumerate(frames):
            obs[f"cam{c}"], nxt[f"cam{c}"] = _frame(fr, seq), _frame(fr, seq + 1)
        return obs, nxt
    for c in range(images):  # a gradient that shifts with seq: realistic to compress, unique per frame
        base = np.add.outer(np.arange(size), np.arange(size)).astype(np.uint8)
        obs[f"cam{c}"] = np.stack([base + seq % 251, base * 2 + c, base + seq // 251], -1).astype(np.uint8)
        nxt[f"cam{c}"] = np.stack([base + (seq + 1) % 251, base * 2 + c, base + (seq + 1) // 251], -1).astype(np.uint8)
    return obs, nxt


def produce(
    data: str,
    status: str,
    journal: str | None,
    until: int,
    actor_id: int = 0,
    images: int = 0,
    size: int = 128,
    per_s: float = 0.0,
    flush_every: int = 32,
    drain_s: float = 300.0,
    frames_file: str | None = None,
    max_pending: int = 4096,
    keys: str | None = None,
) -> int:
    """Send transitions up to seq `until`, then wait until all are acked. Prints the start seq,
    then `done ...` with the send and ack timings and the highest ack ever seen."""
    frames = None
    if frames_file:
        with np.load(frames_file) as z:
            frames = [z[k] for k in sorted(z.files)]
    secure = None
    if keys:  # the actor's CURVE client key, as a training actor uses it
        from functools import partial

        from robo_async.transport.curve import secure_client

        secure = partial(secure_client, keys_dir=keys, actor_id=actor_id)
    client = WeightClient(status, secure=secure).start()
    uplink = Uplink(
        actor_id,
        data,
        lambda: client.status,
        UplinkConfig(journal_dir=journal, resend_s=1.0, journal_commit_ms=50),
        secure=secure,
    )
    journal_next = uplink.open()
    while client.status is None:
        time.sleep(0.01)
    acked = client.status.acked_for(actor_id) or 0
    start = max(acked, journal_next)
    print(f"start seq={start} acked={acked} journal={journal_next}", flush=True)
    uplink.start(acked)
    adder = Adder(actor_id, uplink, flush_every, start_seq=start)
    t0 = time.monotonic()
    max_acked = [acked]

    def watch() -> None:  # the highest ack ever published: all below it was reported durable
        while not stop_watch.is_set():
            st = client.status
            if st is not None:
                max_acked[0] = max(max_acked[0], st.acked_for(actor_id) or 0)
            time.sleep(0.005)

    import threading

    stop_watch = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    while adder.seq < until:
        while uplink.pending > max_pending:  # an as-fast-as-possible actor waits for the learner
            time.sleep(0.001)
        seq = adder.seq
        obs, nxt = make_row(seq, 4, images, size, frames)
        adder.add(obs, np.zeros(2, np.float32), float(seq), nxt, False, False, 0)
        if per_s > 0:
            delay = t0 + (seq - start + 1) / per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    adder.flush()
    sent_s = time.monotonic() - t0
    deadline = time.monotonic() + drain_s
    while uplink.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    acked_s = time.monotonic() - t0
    left = uplink.unacked
    stop_watch.set()
    watcher.join()
    uplink.close(drain_s=0)
    client.close()
    print(
        f"done unacked={left} resends={uplink.resends} sent_s={sent_s:.3f} acked_s={acked_s:.3f} "
        f"n={until - start} max_acked={max_acked[0]}",
        flush=True,
    )
    return 0 if left == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m robo_async.bench.loadgen")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--store", required=True)
    s.add_argument("--commit-ms", type=float, default=50.0)
    r = sub.add_parser("produce")
    r.add_argument("--journal", default=None)
    r.add_argument("--until", type=int, required=True)
    r.add_argument("--images", type=int, default=0)
    r.add_argument("--per-s", type=float, default=0.0)
    r.add_argument("--frames", default=None, help="an .npz of recorded frames, one array per camera")
    for q in (s, r):
        q.add_argument("--keys", default=None, help="a `robo-async keys` directory: CURVE on every socket")
        q.add_argument("--data", required=True)
        q.add_argument("--status", required=True)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    if a.cmd == "serve":
        serve(a.store, a.data, a.status, StoreConfig(commit_ms=a.commit_ms), keys=a.keys)
        return 0
    return produce(
        a.data, a.status, a.journal, a.until, images=a.images, per_s=a.per_s, frames_file=a.frames, keys=a.keys
    )


if __name__ == "__main__":
    sys.exit(main())
