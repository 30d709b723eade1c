"""Fuzzing every field of every message kind against a real learner process (and an actor's
weight client): each mutation is dropped and counted, nothing crashes, valid data still flows.

The invalid values are listed by hand per field (not derived from `decode`), and each run ends
with a valid sentinel on the same socket: once the learner has acked it, every earlier message
was processed, so "dropped" cannot be confused with "not processed yet".
"""

import math
import multiprocessing as mp
import queue
import time

import msgpack
import numpy as np
import pytest
import zmq

from robo_async.launch.processes import learner_main
from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.config import LearnerConfig
from robo_async.transport.channels import STATUS_TOPIC, WEIGHTS_TOPIC, WeightClient
from robo_async.transport.stats import ActorStats
from robo_async.transport.weights import PushConfig, encode_push
from robo_async.transport.wire import (
    MAX_FRAMES,
    EpisodeStats,
    Heartbeat,
    LearnerStatus,
    TransitionBatch,
    Weights,
    WireError,
    decode,
    encode,
)

MISSING = object()
N = 4


def batch(seq: int, actor: int = 0) -> TransitionBatch:
    rng = np.random.default_rng(seq)
    return TransitionBatch(
        actor,
        seq,
        {
            "obs/state": rng.normal(size=(N, 6)).astype(np.float32),
            "next_obs/state": rng.normal(size=(N, 6)).astype(np.float32),
            "action": np.zeros((N, 6), np.float32),
            "reward": np.zeros(N, np.float32),
            "terminated": np.zeros(N, bool),
            "truncated": np.zeros(N, bool),
            "policy_version": np.zeros(N, np.int64),
            "success": np.zeros(N, bool),
            "intervention": np.zeros(N, np.uint8),
            "policy_action": np.zeros((N, 6), np.float32),
        },
    )


def frames_of(msg) -> list[bytes]:
    return [bytes(f) for f in encode(msg)]


def with_header(frames: list[bytes], key: str, value: object) -> list[bytes]:
    header = msgpack.unpackb(frames[0], raw=False)
    if value is MISSING:
        header.pop(key, None)
    else:
        header[key] = value
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


# invalid values for each header field, by kind (each one must be refused)
COMMON = {"schema": [2, "1", None, MISSING], "kind": ["nope", 3, None, MISSING]}
HEADER_BAD = {
    "transitions": {
        "actor_id": [-1, "0", 1.0, None, MISSING, 1 << 40, True],
        "seq": [-1, "0", 0.5, None, MISSING, 1 << 63],
        "arrays": ["x", None, MISSING, [], [["a", "float32", [1]]] * 300],
    },
    "episode": {
        "actor_id": [-1, "a", MISSING],
        "episode": [-1, 2.5, MISSING],
        "episode_return": [math.nan, math.inf, "x", None, MISSING],
        "length": [-1, "5", MISSING],
        "success": ["yes", 1, None, MISSING],
        "policy_version": [-2, "v", MISSING],
        "evaluation": ["no", 0],
        "operator_ticks": [-1, 51, "3"],
        "label": ["maybe", 3, None],
    },
    "heartbeat": {
        "actor_id": [-1, "x", MISSING],
        "env_steps": [-1, 0.5, MISSING],
        "policy_version": [-2, "1", MISSING],
        "stats": [
            "x",
            {1: 2},
            {"k": [1]},
            {f"k{i}": i for i in range(100)},
            {"k": "x" * 300},
            {"": 1},
            {"clipped": 1 << 63},
            {"unacked": None, "clipped": "x"},
            {"clipped": -1},
            {"late_p99_ms": math.nan},
            {"late_p99_ms": "1"},
            {"operator": 1},
            {"unacked": 2.0},
        ],
    },
}


def array_mutations(frames: list[bytes]) -> list[list[bytes]]:
    """Each array spec and frame of a transition batch broken one way at a time."""
    header = msgpack.unpackb(frames[0], raw=False)
    out = []

    def spec_variant(i: int, j: int, value: object) -> list[bytes]:
        h = msgpack.unpackb(frames[0], raw=False)
        h["arrays"][i][j] = value
        return [msgpack.packb(h, use_bin_type=True), *frames[1:]]

    for i, (_name, _dtype, shape) in enumerate(header["arrays"]):
        other = header["arrays"][(i + 1) % len(header["arrays"])][0]
        out += [spec_variant(i, 0, v) for v in ("", 5, other, "x" * 300)]
        out += [spec_variant(i, 1, v) for v in ("float16", "object", 3)]
        out += [spec_variant(i, 2, v) for v in ([-1, *shape[1:]], "x", [1] * 9, [shape[0] + 1, *shape[1:]])]
        cut = list(frames)
        cut[1 + i] = frames[1 + i][:-1]  # a byte short
        out.append(cut)
    return out


def column_mutations(b: TransitionBatch) -> list[list[bytes]]:
    """Well-formed arrays with bad contents: NaN, infinities, wrong dtypes, unknown columns."""
    a = dict(b.arrays)
    nan_obs = a["obs/state"].copy()
    nan_obs[1, 2] = np.nan
    inf_action = a["action"].copy()
    inf_action[0, 0] = np.inf
    variants = [
        {**a, "obs/state": nan_obs},
        {**a, "action": inf_action},
        {**a, "reward": np.full(N, np.nan, np.float32)},
        {**a, "terminated": np.zeros(N, np.uint8)},
        {**a, "policy_version": np.full(N, -5, np.int64)},
        {**a, "intervention": np.full(N, 7, np.uint8)},
        {**a, "evil": np.zeros(N, np.float32)},
        {**a, "obs/": np.zeros((N, 1), np.float32)},
        {k: v for k, v in a.items() if k != "reward"},
    ]
    return [frames_of(TransitionBatch(b.actor_id, b.seq, v)) for v in variants]


# the 88-byte message that killed a learner (issue 37): an empty array of 2^80 elements
HUGE_EMPTY = [
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


def garbage() -> list[list[bytes]]:
    return [
        [b""],
        [b"\xc1\xc1\xc1"],
        [msgpack.packb([1, 2, 3])],
        [msgpack.packb({"x": "y" * (2 << 20)})],
        HUGE_EMPTY,
        [frames_of(batch(0))[0]] + [b""] * (MAX_FRAMES + 10),  # more parts than any message has
        [
            msgpack.packb(
                {
                    "schema": 1,
                    "kind": "heartbeat",
                    "actor_id": 0,
                    "env_steps": 0,
                    "policy_version": 0,
                    "stats": {"k": [[[[[[[[1]]]]]]]]},
                    "arrays": [],
                }
            )
        ],
    ]


def mutations_for(kind: str, frames: list[bytes]) -> list[list[bytes]]:
    out = []
    for key, values in {**COMMON, **HEADER_BAD[kind]}.items():
        out += [with_header(frames, key, v) for v in values]
    out.append(with_header(frames, "evil", 1))  # an unknown key
    return out


@pytest.fixture()
def learner_proc(tmp_path):
    ctx = mp.get_context("spawn")
    stop, status, errors = ctx.Event(), ctx.Queue(), ctx.Queue()
    cfg = LearnerConfig(
        str(tmp_path),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6),
        tensorboard=False,
        max_actors=4,
    )
    proc = ctx.Process(target=learner_main, args=(cfg, stop, status, errors, 0.1))
    proc.start()
    kind, addresses = status.get(timeout=120)
    assert kind == "ready"
    yield proc, addresses, status
    stop.set()
    proc.join(30)
    if proc.is_alive():
        proc.kill()


def fresh_progress(status: mp.Queue) -> dict:
    """A progress report made after this call (older queued ones are skipped)."""
    while True:
        try:
            status.get_nowait()
        except queue.Empty:
            break
    while True:
        kind, p = status.get(timeout=30)
        if kind == "progress":
            return p


def progress_when(status: mp.Queue, ready, timeout: float = 60.0) -> dict:
    """The first progress report for which `ready(report)` holds (counters only grow: a report
    still in the queue's feeder may predate the last message counted); the newest one at the
    deadline otherwise, for the caller's assertion to name."""
    deadline, p = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        try:
            kind, got = status.get(timeout=1)
        except queue.Empty:
            continue
        if kind == "progress":
            p = got
            if ready(p):
                break
    return p


def test_every_field_mutation_reaching_a_learner_is_dropped_and_counted(learner_proc):
    proc, (data, weights), status = learner_proc
    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.connect(data)
    client = WeightClient(weights, every_s=0.01).start()
    try:
        good = batch(0)
        bad = (
            mutations_for("transitions", frames_of(good))
            + array_mutations(frames_of(good))
            + column_mutations(batch(0, actor=1))  # (another stream: passed over, below)
            + mutations_for("episode", frames_of(EpisodeStats(0, 0, 1.0, 50, False, 0)))
            + mutations_for("heartbeat", frames_of(Heartbeat(0, 10, 0, ActorStats(unacked=0))))
            + garbage()
        )
        # well-formed messages from more actor ids than the learner keeps state for (max_actors=4)
        strangers = [frames_of(Heartbeat(100 + i, 1, 0)) for i in range(6)]
        assert len(bad) > 150
        for frames in bad:
            with pytest.raises(WireError):  # each variant is refused, as a WireError only
                decode(frames)
        push.send_multipart(frames_of(Heartbeat(0, 0, 0)))  # actor 0 is known before the strangers come
        for frames in bad + strangers:
            push.send_multipart(frames)
        push.send_multipart(frames_of(good))  # the sentinel: acked once everything before it was processed
        push.send_multipart(frames_of(batch(N)))
        deadline = time.monotonic() + 60
        while (client.status is None or (client.status.acked_for(0) or 0) < 2 * N) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.status is not None and client.status.acked_for(0) == 2 * N
        p = progress_when(status, lambda p: p["transport/malformed"] >= len(bad) and p["transport/refused"] >= 4)
        assert proc.is_alive()
        assert p["transport/malformed"] == len(bad)
        # ids 100 and 101 fill the cap with actors 0 and 1 (4: actor 1's refused batches made it a
        # peer); the other four are refused
        assert p["transport/refused"] == 4
        # well-formed batches of actor 1 refused for what they hold: the first's range is passed over
        # (its stream would wait for it forever), the others are then moot; nothing of them stored
        assert p["buffer/rejected_batches"] == len(column_mutations(good)) - 1  # (one lacks 'reward': no range)
        assert p["buffer/rows_refused"] == N
    finally:
        push.close(linger=0)
        client.close()


def test_every_field_mutation_reaching_an_actor_is_dropped_and_counted():
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    client = WeightClient(f"tcp://127.0.0.1:{port}", every_s=0.01).start()
    try:
        first = LearnerStatus(5, 1, 100, 200, boot_id="first", acked=((0, 64),))
        while client.status is None:  # the subscription is live once the first status gets through
            pub.send_multipart([STATUS_TOPIC, *frames_of(first)])
            time.sleep(0.02)
        w = Weights(3, {"fc.weight": np.ones((4, 3), np.float32), "fc.bias": np.zeros(4, np.float32)}, "mlp:3-4")
        pub.send_multipart([WEIGHTS_TOPIC, *frames_of(w)])
        status_bad = {
            "updates": [-1, "1", MISSING],
            "version": [-1, None, MISSING],
            "env_steps": [0.5, MISSING],
            "allowed_env_steps": [-3, "x", MISSING],
            "stopping": ["no", 1],
            "boot_id": [7, "b" * 100],
            "acked": ["x", [[0]], [[0, -1]], [["a", 1]], [[1 << 20, 1]]],
            "actors": [-1, "2"],
        }
        weights_bad = {
            "version": [-1, "4", MISSING, 1 << 63],
            "architecture": [5, "a" * 300],
            "arrays": ["x", MISSING, [["fc.weight", "float32", [4, 3]]] * 70_000],
        }
        wf = frames_of(Weights(9, w.arrays, "mlp:3-4"))
        bad = [with_header(frames_of(first), k, v) for k, vs in {**COMMON, **status_bad}.items() for v in vs]
        bad += [with_header(frames_of(first), "evil", 1)] + garbage()
        on_status_topic = len(bad)  # the rest travel under the weights topic
        bad += [with_header(wf, k, v) for k, vs in weights_bad.items() for v in vs]
        bad += [with_header(wf, "evil", 1)]
        nan_w = frames_of(Weights(9, {**w.arrays, "fc.bias": np.full(4, np.nan, np.float32)}, "mlp:3-4"))
        bad += array_mutations(wf)[:8] + [nan_w]
        # streamed pushes (wpart): every header field, the manifest and the piece names
        parts, _, _ = encode_push(11, w.arrays, "mlp:3-4", PushConfig(part_mb=0.00003, whole_mb=0))
        assert len(parts) >= 2
        p0, p1 = frames_of(parts[0]), frames_of(parts[1])
        wpart_bad = {
            "version": [-1, "1", MISSING],
            "part": [-1, 99, MISSING],
            "parts": [0, "2", MISSING],
            "base": [-2, 11, "k"],
            "precision": ["fp8", None, MISSING],
            "architecture": [5, "a" * 300],
            "manifest": [
                "x",
                [],
                [["fc.bias", [4], "float32", -1]],
                [["fc.bias", [4], "float99", 1]],
                [["a", [1], "float32", 1], ["a", [1], "float32", 1]],
                MISSING,
            ],
            "sums": [
                "x",
                [["fc.bias"]],
                [["fc.bias", -1]],
                [["fc.bias", 1.5]],
                [["", 1]],
                [[3, 1]],
                [["a" * 300, 1]],
                [["a", 1], ["a", 2]],
            ],
        }
        bad += [with_header(p0, k, v) for k, vs in wpart_bad.items() for v in vs]
        bad += [with_header(p1, "manifest", [["fc.bias", [4], "float32", 1]])]  # a manifest outside part 0
        bad += [with_header(p0, "evil", 1)]
        for name in ("q:fc.weight:0", "d:fc.weight:x", "d::0", "v:fc.weight:0"):
            h = msgpack.unpackb(p0[0], raw=False)
            h["arrays"][0][0] = name
            bad.append([msgpack.packb(h, use_bin_type=True), *p0[1:]])
        for frames in bad:
            with pytest.raises(WireError):
                decode(frames)
        topical = [(STATUS_TOPIC if i < on_status_topic else WEIGHTS_TOPIC, f) for i, f in enumerate(bad)]
        # good messages under a topic that is not ours (but passes the subscription's prefix), or the other one
        topical += [
            (STATUS_TOPIC + b"X", frames_of(first)),
            (WEIGHTS_TOPIC + b"2", wf),
            (WEIGHTS_TOPIC, frames_of(first)),
            (STATUS_TOPIC, wf),
        ]
        # in rounds the client's queue holds (a SUB drops what overflows it, however slow the machine):
        # each round is sent once the client has dropped the one before
        for i in range(0, len(topical), 8):
            for topic, frames in topical[i : i + 8]:
                pub.send_multipart([topic, *frames])
            deadline = time.monotonic() + 30
            while client.dropped < min(i + 8, len(topical)) and time.monotonic() < deadline:
                time.sleep(0.005)
        pub.send_multipart([STATUS_TOPIC, *frames_of(LearnerStatus(6, 3, 100, 200, boot_id="sentinel"))])
        deadline = time.monotonic() + 30
        while client.status.boot_id != "sentinel" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.status.boot_id == "sentinel"
        assert client.dropped == len(topical)
        got = client.take_weights()
        assert got is not None and got.version == 3 and client.take_weights() is None
    finally:
        client.close()
        pub.close(linger=0)


def test_an_oversized_message_is_refused_by_the_socket_and_others_still_arrive():
    from robo_async.transport.channels import TransitionReceiver

    rx = TransitionReceiver("tcp://127.0.0.1:0", max_message_mb=1.0)
    ctx = zmq.Context.instance()
    big, ok = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    try:
        big.connect(rx.address)
        ok.connect(rx.address)
        huge = batch(0, actor=1)
        wide = np.zeros((N, 70_000), np.float32)  # a valid message with a 1.1 MB frame, past the 1 MiB cap
        big.send_multipart(frames_of(TransitionBatch(1, 0, {**huge.arrays, "obs/state": wide, "next_obs/state": wide})))
        ok.send_multipart(frames_of(batch(0, actor=2)))
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got += rx.poll(timeout_ms=100)
        time.sleep(0.3)
        got += rx.poll(timeout_ms=100)
        assert [m.actor_id for m in got] == [2]
    finally:
        big.close(linger=0)
        ok.close(linger=0)
        rx.close()


def test_a_batch_refused_mid_stream_is_passed_over_and_the_stream_is_not_wedged(learner_proc):
    """Actor 0 sends rows 0..3, then rows 4..7 with a NaN (an old or broken actor: ours never sends
    one), then rows 8..11. Before, the refused batch was resent and refused forever and every later
    batch was a gap; now its range is passed over (counted, named) and the stream goes on."""
    proc, (data, weights), status = learner_proc
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(data)
    client = WeightClient(weights, every_s=0.01).start()
    try:
        nan = batch(N)
        bad = dict(nan.arrays)
        bad["reward"] = bad["reward"].copy()
        bad["reward"][2] = np.nan
        for msg in (batch(0), TransitionBatch(0, N, bad), batch(2 * N)):
            push.send_multipart(frames_of(msg))
        deadline = time.monotonic() + 60
        while (client.status is None or (client.status.acked_for(0) or 0) < 3 * N) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.status is not None and client.status.acked_for(0) == 3 * N
        p = progress_when(status, lambda p: p["buffer/rows_refused"] >= N)
        assert p["buffer/rows_refused"] == N and p["transport/malformed"] == 1
        assert proc.is_alive()
    finally:
        push.close(linger=0)
        client.close()
