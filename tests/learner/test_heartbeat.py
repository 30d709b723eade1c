"""Heartbeats against a live learner: a real `Learner` process (the launcher's own entry point,
`launch.processes.learner_main`) on loopback, fed over a real ZMQ PUSH socket. A heartbeat whose
figures have the wrong type (the one that once killed a learner in `progress()`: `unacked: None,
clipped: "x"`) or an unknown key is refused and counted in `transport/malformed`; the same learner
process keeps training and keeps reporting the last good figures.

Ordering, not time, says when the bad messages were processed: a transition batch sent after them
on the same socket is acked only once everything before it was taken."""

import multiprocessing as mp
import queue
import time

import msgpack
import numpy as np
import pytest
import zmq

from robo_async.launch.processes import learner_main
from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.config import LearnerConfig
from robo_async.learner.options import LearnerOptions
from robo_async.transport.channels import WeightClient
from robo_async.transport.stats import FIELD_TYPES, ActorStats
from robo_async.transport.wire import Heartbeat, TransitionBatch, encode

N = 16  # transitions per batch
WRONG = {
    int: "3",
    float: "fast",
    bool: "yes",
    tuple: [1.5],
}  # a value of another type for each declared type (histograms: counts)
GOOD = ActorStats(clipped=7, unacked=3, late_p99_ms=1.5, operator=False, infer_p50_ms=4.0, infer_p95_ms=6.0)


def batch(seq: int) -> TransitionBatch:
    rng = np.random.default_rng(seq)
    return TransitionBatch(
        0,
        seq,
        {
            "obs/state": rng.uniform(-1, 1, (N, 6)).astype(np.float32),
            "next_obs/state": rng.uniform(-1, 1, (N, 6)).astype(np.float32),
            "action": rng.uniform(-1, 1, (N, 6)).astype(np.float32),
            "reward": rng.normal(size=N).astype(np.float32),
            "terminated": np.zeros(N, bool),
            "truncated": np.zeros(N, bool),
            "policy_version": np.zeros(N, np.int64),
            "success": np.zeros(N, bool),
        },
    )


def frames_of(msg) -> list[bytes]:
    return [bytes(f) for f in encode(msg)]


def heartbeat_with(stats: object, key: str = "stats") -> list[bytes]:
    """A well-formed heartbeat from actor 0 whose figures map is `stats` (sent as it is)."""
    header = msgpack.unpackb(frames_of(Heartbeat(0, 100, 0, GOOD))[0], raw=False)
    del header["stats"]
    header[key] = stats
    return [msgpack.packb(header, use_bin_type=True)]


@pytest.fixture()
def learner_proc(tmp_path):
    ctx = mp.get_context("spawn")
    stop, status, errors = ctx.Event(), ctx.Queue(), ctx.Queue()
    cfg = LearnerConfig(
        str(tmp_path),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6, hidden=(32, 32)),
        algo_config=SACConfig(batch_size=16, warmup_steps=32, hidden=(32, 32)),
        tensorboard=False,
        stop_at_success=None,
        options=LearnerOptions(checkpoint_every_s=3600.0),
    )
    proc = ctx.Process(target=learner_main, args=(cfg, stop, status, errors, 0.1))
    proc.start()
    kind, addresses = status.get(timeout=180)
    assert kind == "ready", addresses
    yield proc, addresses, status, errors
    stop.set()
    proc.join(60)
    if proc.is_alive():
        proc.kill()


def fresh(status: mp.Queue, kind: str, deadline_s: float = 60.0) -> dict:
    """A `kind` report ("progress" or "actors") made after this call (older queued ones skipped)."""
    while True:
        try:
            status.get_nowait()
        except queue.Empty:
            break
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        k, value = status.get(timeout=deadline_s)
        if k == kind:
            return value
    raise AssertionError(f"no {kind} report in {deadline_s:.0f} s")


def acked(proc: mp.Process, errors: mp.Queue, client: WeightClient, seq: int, deadline_s: float = 120.0) -> None:
    """Wait until the learner has acked actor 0's transitions below `seq`; fail at once if it died."""
    deadline = time.monotonic() + deadline_s
    while (client.status is None or (client.status.acked_for(0) or 0) < seq) and time.monotonic() < deadline:
        if not proc.is_alive():
            proc.join()
            raise AssertionError(
                f"the learner died (exit code {proc.exitcode}): "
                f"{errors.get(timeout=5) if proc.exitcode else 'no error'}"
            )
        time.sleep(0.05)
    assert client.status is not None and client.status.acked_for(0) == seq


def train_until(
    proc: mp.Process, errors: mp.Queue, status: mp.Queue, push: zmq.Socket, client: WeightClient, seq: int, updates: int
) -> tuple[int, dict]:
    """Send batches (each acked before the next) until the learner reports more than `updates`."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        push.send_multipart(frames_of(batch(seq)))
        seq += N
        acked(proc, errors, client, seq)
        p = fresh(status, "progress")
        if p["time/updates"] > updates:
            return seq, p
    raise AssertionError(f"the learner made no update past {updates} in 240 s")


def test_a_heartbeat_with_wrong_figures_is_refused_and_the_same_learner_keeps_training(learner_proc):
    proc, (data, weights), status, errors = learner_proc
    pid = proc.pid
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(data)
    client = WeightClient(weights, every_s=0.01, weights=False).start()
    try:
        push.send_multipart(frames_of(Heartbeat(0, 100, 0, GOOD)))
        seq, before = train_until(proc, errors, status, push, client, 0, 0)
        assert before["actors/clipped"] == 7 and before["actors/unacked"] == 3  # the good heartbeat was taken

        bad = [heartbeat_with({name: WRONG[t]}) for name, t in FIELD_TYPES.items()]  # one per declared field
        bad += [
            heartbeat_with({"pending": 1}),  # a figure nobody declared
            heartbeat_with({"clipped": 2}, key="meta"),  # the old untyped map
            heartbeat_with({"unacked": None, "clipped": "x"}),
        ]  # the message that killed a learner, last
        assert len(bad) == len(FIELD_TYPES) + 3
        for frames in bad:
            push.send_multipart(frames)
        push.send_multipart(frames_of(batch(seq)))  # acked once everything before it was processed
        seq += N
        acked(proc, errors, client, seq)

        seq, after = train_until(proc, errors, status, push, client, seq, before["time/updates"])
        assert proc.is_alive() and proc.pid == pid and errors.empty()
        assert after["transport/malformed"] == len(bad)
        # nothing of the refused heartbeats was taken: the learner reports the last good figures
        assert after["actors/clipped"] == 7 and after["actors/unacked"] == 3
        assert after["actors/infer_p95_ms"] == 6.0 and after["time/updates"] > before["time/updates"]
        row = fresh(status, "actors")[0]
        assert (row["clipped"], row["unacked"], row["late_p99_ms"], row["env_steps"]) == (7, 3, 1.5, 100)
    finally:
        push.close(linger=0)
        client.close()


def test_actors_count_as_heard_while_the_learner_leaves_their_messages_in_the_socket(tmp_path):
    """Paused ingest (disk full, writer behind) leaves every message, heartbeats too, in the socket:
    the actors are not silent, the learner is deaf. Their last-heard time moves on, so the
    supervisor does not take them for hung (a soak with a long disk-full pause killed every
    real-time actor each liveness_s)."""
    from robo_async.learner.learner import Learner

    cfg = LearnerConfig(
        str(tmp_path),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6, hidden=(32, 32)),
        algo_config=SACConfig(batch_size=16, warmup_steps=32, hidden=(32, 32)),
        tensorboard=False,
        stop_at_success=None,
        options=LearnerOptions(checkpoint_every_s=3600.0),
    )
    learner = Learner(cfg)
    learner.open()
    push = zmq.Context.instance().socket(zmq.PUSH)
    try:
        push.connect(learner.addresses[0])
        deadline = time.monotonic() + 60
        while 0 not in learner._heard and time.monotonic() < deadline:
            push.send_multipart(frames_of(Heartbeat(0, 100, 0, GOOD)))
            learner.step()
        heard = learner._heard[0]
        assert not learner.status().paused
        learner.store.accepting = lambda: False  # the disk monitor's pause
        before = time.monotonic()
        assert before > heard
        learner.step()
        assert learner._heard[0] >= before  # heard as of now, though nothing was read
        assert learner.status().paused  # and its status says so: the actors keep their rows, no resends
    finally:
        push.close(linger=0)
        learner.close()
