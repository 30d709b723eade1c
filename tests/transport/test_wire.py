import msgpack
import numpy as np
import pytest
import zmq

from robo_async.transport import (
    EpisodeStats,
    Heartbeat,
    LearnerStatus,
    PortInUse,
    TransitionBatch,
    TransitionReceiver,
    TransitionSender,
    WeightClient,
    WeightPublisher,
    Weights,
    WireError,
    decode,
    encode,
)
from robo_async.transport.stats import FIELD_TYPES, HIST_EDGES_MS, ActorStats, histogram


def batch(n=4, seq=10, actor=3):
    rng = np.random.default_rng(0)
    return TransitionBatch(
        actor,
        seq,
        {
            "obs/state": rng.normal(size=(n, 6)).astype(np.float32),
            "next_obs/state": rng.normal(size=(n, 6)).astype(np.float32),
            "obs/front": rng.integers(0, 255, size=(n, 8, 8, 3), dtype=np.uint8),
            "action": rng.normal(size=(n, 6)).astype(np.float32),
            "reward": rng.normal(size=n).astype(np.float32),
            "terminated": np.array([False] * (n - 1) + [True]),
            "truncated": np.zeros(n, bool),
            "policy_version": np.arange(n, dtype=np.int64),
        },
    )


def roundtrip(msg):
    return decode([bytes(f) for f in encode(msg)])


def test_transitions_roundtrip():
    b = batch()
    out = roundtrip(b)
    assert isinstance(out, TransitionBatch) and out.actor_id == 3 and out.seq == 10 and out.count == 4
    for k, a in b.arrays.items():
        np.testing.assert_array_equal(out.arrays[k], a)
        assert out.arrays[k].dtype == a.dtype


def test_weights_roundtrip():
    w = Weights(7, {"l.weight": np.ones((3, 2), np.float32), "l.bias": np.zeros(3, np.float32)}, "mlp:2-3")
    out = roundtrip(w)
    assert out.version == 7 and out.architecture == "mlp:2-3"
    np.testing.assert_array_equal(out.arrays["l.weight"], w.arrays["l.weight"])


@pytest.mark.parametrize(
    "msg",
    [
        EpisodeStats(1, 5, -3.5, 50, True, 12),
        LearnerStatus(100, 10, 2000, 2512, False),
        Heartbeat(2, 999, 4, ActorStats(clipped=3, unacked=0)),
    ],
)
def test_header_only_roundtrip(msg):
    assert roundtrip(msg) == msg


def _header(**over):
    frames = encode(batch(2))
    h = msgpack.unpackb(bytes(frames[0]))
    h.update(over)
    return [msgpack.packb(h), *[bytes(f) for f in frames[1:]]]


@pytest.mark.parametrize(
    "frames,match",
    [
        ([b"\xc1garbage"], "not valid msgpack"),
        ([msgpack.packb([1, 2])], "must be a map"),
        (None, "schema 99 not supported"),
        ("kind", "unknown message kind"),
        ("short", "needs 48 bytes"),
        ("dtype", "dtype 'object'"),
        ("count", "header lists 8 arrays but 7"),
        ([], "empty message"),
    ],
)
def test_malformed_messages_are_named(frames, match):
    if frames is None:
        frames = _header(schema=99)
    elif frames == "kind":
        frames = _header(kind="evil")
    elif frames == "short":
        frames = [bytes(f) for f in encode(batch(2))]
        frames[1] = frames[1][:-4]
    elif frames == "dtype":
        frames = encode(batch(2))
        h = msgpack.unpackb(bytes(frames[0]))
        h["arrays"][0][1] = "object"
        frames = [msgpack.packb(h), *frames[1:]]
    elif frames == "count":
        frames = [bytes(f) for f in encode(batch(2))][:-1]
    with pytest.raises(WireError, match=match):
        decode(frames)


def _encoded(n=4):
    from robo_async.buffer.codec import encode_frames

    b = batch(n)
    return b, TransitionBatch(b.actor_id, b.seq, encode_frames(b.arrays))


def test_frames_encoded_at_the_actor_travel_as_bytes_and_decode_to_the_pixels():
    from robo_async.buffer.codec import Column, decode_frames
    from robo_async.transport.wire import Frames

    raw, enc = _encoded()
    assert isinstance(enc.arrays["obs/front"], Frames) and isinstance(enc.arrays["obs/state"], np.ndarray)
    out = roundtrip(enc)
    f = out.arrays["obs/front"]
    assert isinstance(f, Frames) and f.blobs == enc.arrays["obs/front"].blobs and f.shape == (4, 8, 8, 3)
    np.testing.assert_array_equal(decode_frames(f, Column("obs/front", "uint8", (8, 8, 3))), raw.arrays["obs/front"])


@pytest.mark.parametrize(
    "damage,match",
    [
        ("sum", "frame has"),
        ("tag", "unknown codec tag"),
        ("huge", "image lengths in"),
        ("shape", "bad shape"),
        ("count", "image lengths"),
        ("where", "encoded frames are for observations"),
    ],
)
def test_malformed_frames_are_named(damage, match):
    from robo_async.transport.wire import Frames

    _, enc = _encoded(2)
    frames = [bytes(f) for f in encode(enc)]
    h = msgpack.unpackb(frames[0])
    i = next(j for j, spec in enumerate(h["arrays"]) if spec[1] == "frames")
    spec = h["arrays"][i]
    if damage == "sum":
        frames[i + 1] = frames[i + 1][:-1]
    elif damage == "tag":
        frames[i + 1] = b"X" + frames[i + 1][1:]
    elif damage == "huge":
        spec[3] = [Frames.max_blob((8, 8, 3)) + 1, 6]  # more than any 8x8 RGB image can need
    elif damage == "shape":
        spec[2] = [2, 8, 8, 2]
    elif damage == "count":
        spec[3] = spec[3][:1]
    elif damage == "where":
        spec[0] = "action_frames"
    frames[0] = msgpack.packb(h)
    with pytest.raises(WireError, match=match):
        decode(frames)


def test_transitions_disagreeing_batch_size_rejected():
    b = batch(3)
    arrays = dict(b.arrays)
    arrays["action"] = arrays["action"][:2]
    with pytest.raises(WireError, match="disagree on batch size"):
        decode([bytes(f) for f in encode(TransitionBatch(0, 0, arrays))])


def test_object_dtype_cannot_be_sent():
    with pytest.raises(WireError, match="dtype object"):
        encode(Weights(1, {"x": np.array([object()])}))


def _poll_until(rx, n):
    got = []
    for _ in range(400):
        got += rx.poll(timeout_ms=50)
        if len(got) >= n:
            break
    return got


def test_socket_roundtrip_and_bad_message_dropped():
    rx = TransitionReceiver("tcp://127.0.0.1:0")
    tx = TransitionSender(rx.address)
    raw = zmq.Context.instance().socket(zmq.PUSH)
    raw.connect(rx.address)
    raw.send_multipart([b"not msgpack \xc1"])
    raw.send_multipart([bytes(f) for f in encode(batch(2, seq=0, actor=1))])  # after the bad one, on its socket
    assert tx.send(batch(5, seq=0))
    got = _poll_until(rx, 2)
    assert sorted(b.count for b in got) == [2, 5]
    assert rx.dropped == 1  # the sentinel behind it on the same connection arrived: it was processed
    raw.close(0)
    tx.close()
    rx.close()


def test_recv_frames_reads_a_message_of_too_many_parts_to_its_end_and_refuses_it():
    from robo_async.transport.wire import recv_frames

    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://too-many")
    b.connect("inproc://too-many")
    a.send_multipart([b"h"] + [b"x"] * 9)  # 10 parts
    a.send_multipart([b"next", b"1"])
    with pytest.raises(WireError, match="message of 10 frames; at most 4"):
        recv_frames(b, max_frames=4)
    assert [bytes(f.buffer) for f in recv_frames(b, max_frames=4)] == [b"next", b"1"]  # nothing left over
    a.close(0)
    b.close(0)


def test_a_message_of_too_many_parts_is_refused_and_the_next_arrives():
    from robo_async.transport.wire import MAX_FRAMES

    rx = TransitionReceiver("tcp://127.0.0.1:0")
    raw = zmq.Context.instance().socket(zmq.PUSH)
    raw.connect(rx.address)
    good = [bytes(f) for f in encode(batch(3, seq=0))]
    raw.send_multipart([good[0]] + [b""] * (MAX_FRAMES + 5))
    raw.send_multipart(good)
    got = _poll_until(rx, 1)
    assert [b.count for b in got] == [3] and rx.dropped == 1
    assert f"{MAX_FRAMES + 6} frames" in rx.last_dropped
    raw.close(0)
    rx.close()


def test_anything_a_receivers_checks_raise_is_a_dropped_message(monkeypatch):
    """Containment behind `decode`: an exception other than WireError (a case the checks missed)
    drops that message, counted with its reason; the receiver goes on."""
    import robo_async.transport.channels as channels

    rx = TransitionReceiver("tcp://127.0.0.1:0")
    tx = TransitionSender(rx.address)
    real = channels.decode
    calls = []

    def flaky(frames):
        calls.append(1)
        if len(calls) == 1:
            raise IndexError("a check that was missed")
        return real(frames)

    monkeypatch.setattr(channels, "decode", flaky)
    assert tx.send(batch(2, seq=0)) and tx.send(batch(3, seq=2))
    got = _poll_until(rx, 1)
    assert [b.count for b in got] == [3] and rx.dropped == 1 and "IndexError" in rx.last_dropped
    tx.close()
    rx.close()


def test_weights_reach_a_late_subscriber():
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.05)
    pub.publish(Weights(3, {"w": np.arange(4, dtype=np.float32)}))
    client = WeightClient(pub.address).start()
    got = None
    for _ in range(200):
        pub.publish_status(LearnerStatus(1, 3, 0, 10))
        got = got or client.take_weights()
        if got is not None and client.status is not None:
            break
        import time

        time.sleep(0.01)
    assert got is not None and got.version == 3
    np.testing.assert_array_equal(got.arrays["w"], np.arange(4))
    assert client.take_weights() is None  # each version is handed over once
    client.close()
    pub.close()


def test_port_in_use_is_a_clear_error():
    first = TransitionReceiver("tcp://127.0.0.1:0")
    with pytest.raises(PortInUse, match="already in use"):
        TransitionReceiver(first.address)
    first.close()


# --- the policy server's kinds: infer (actor -> server) and chunk (server -> actor) ---------------
from robo_async.transport.wire import ChunkReply, InferRequest  # noqa: E402


def _infer(**kw):
    base = dict(
        actor_id=3,
        req=7,
        tick=120,
        delay=4,
        deterministic=True,
        obs={"state": np.arange(6, dtype=np.float32), "front": np.zeros((8, 8, 3), np.uint8)},
        forwarded_state=np.ones(6, np.float32),
        prefix=np.full((4, 6), 0.5, np.float32),
    )
    base.update(kw)
    return InferRequest(**base)


def test_infer_and_chunk_roundtrip():
    m = decode([bytes(f) for f in encode(_infer())])
    assert isinstance(m, InferRequest) and (m.actor_id, m.req, m.tick, m.delay, m.deterministic) == (3, 7, 120, 4, True)
    np.testing.assert_array_equal(m.obs["state"], np.arange(6, dtype=np.float32))
    assert m.obs["front"].shape == (8, 8, 3) and m.obs["front"].dtype == np.uint8
    np.testing.assert_array_equal(m.forwarded_state, np.ones(6, np.float32))
    np.testing.assert_array_equal(m.prefix, np.full((4, 6), 0.5, np.float32))
    assert decode(encode(_infer(instruction="lift the cube"))).instruction == "lift the cube"
    hello = decode(encode(InferRequest(1, 2, hello=True, policy="flow", spec='{"name":"x"}')))
    assert hello.hello and hello.policy == "flow" and hello.spec == '{"name":"x"}' and not hello.obs
    c = decode(encode(ChunkReply(7, 12, "flow:x", np.zeros((8, 6), np.float32), infer_us=900, batch=3)))
    assert isinstance(c, ChunkReply) and (c.req, c.version, c.architecture, c.infer_us, c.batch) == (
        7,
        12,
        "flow:x",
        900,
        3,
    )
    assert c.actions.shape == (8, 6)
    h = decode(encode(ChunkReply(2, -1, "flow:x", horizon=8, spec="{}")))
    assert h.actions is None and h.horizon == 8 and not h.error


def _with(frames, **header):
    h = msgpack.unpackb(bytes(frames[0]), raw=False)
    h.update(header)
    return [msgpack.packb(h, use_bin_type=True), *[bytes(f) for f in frames[1:]]]


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: encode(_infer(prefix=np.full((2, 6), np.nan, np.float32))), "'prefix' has NaN"),
        (lambda: encode(_infer(forwarded_state=np.ones((2, 3), np.float32))), "'fstate' must be float32 with 1"),
        (lambda: encode(_infer(obs={"state": np.array([np.inf], np.float32)})), "'obs/state' has NaN"),
        (lambda: _with(encode(_infer()), delay=5000), "'delay'"),
        (lambda: _with(encode(_infer()), req=-1), "'req'"),
        (lambda: _with(encode(_infer()), deterministic=1), "'deterministic'"),
        (lambda: _with(encode(_infer()), spec="x" * 20000), "'spec'"),
        (lambda: _with(encode(_infer()), hello=True), "hello carries no arrays"),
        (lambda: _with(encode(_infer()), evil=1), "unknown keys"),
        (lambda: _with(encode(_infer()), instruction=3), "'instruction'"),
        (lambda: _with(encode(_infer()), instruction="x" * 300), "'instruction'"),
        (
            lambda: encode(_infer(obs={}, forwarded_state=None, prefix=np.zeros((2, 2000), np.float32))),
            "'prefix' has shape",
        ),
        (lambda: _with(encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float32))), error="both"), "not both"),
        (lambda: encode(ChunkReply(1, 0, "a")), "a 'horizon'"),
        (lambda: encode(ChunkReply(1, 0, "a", np.full((8, 6), np.nan, np.float32))), "'actions' has NaN"),
        (lambda: encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float64))), "must be float32 with 2"),
        (lambda: encode(ChunkReply(1, 0, "a", np.zeros((0, 6), np.float32))), "has shape"),
        (lambda: _with(encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float32))), version=-2), "'version'"),
        (lambda: _with(encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float32))), architecture=7), "'architecture'"),
    ],
)
def test_malformed_infer_and_chunk_are_named(make, match):
    with pytest.raises(WireError, match=match):
        decode([bytes(f) for f in make()])


def test_a_chunk_with_an_unknown_array_is_refused():
    frames = [bytes(f) for f in encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float32)))]
    h = msgpack.unpackb(frames[0], raw=False)
    h["arrays"][0][0] = "extra"
    with pytest.raises(WireError, match="unknown arrays"):
        decode([msgpack.packb(h, use_bin_type=True), frames[1]])


def test_an_infer_request_may_carry_one_encoded_camera_frame():
    from robo_async.buffer.codec import encode_image
    from robo_async.transport.wire import Frames

    img = np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    one = Frames([encode_image(img, "png")], (1, 8, 8, 3))
    m = decode([bytes(f) for f in encode(_infer(obs={"state": np.zeros(6, np.float32), "front": one}))])
    assert isinstance(m.obs["front"], Frames) and m.obs["front"].blobs == one.blobs
    two = Frames([encode_image(img, "png")] * 2, (2, 8, 8, 3))
    with pytest.raises(WireError, match="holds 2 encoded images, expected 1"):
        decode([bytes(f) for f in encode(_infer(obs={"front": two}))])
    with pytest.raises(WireError, match="encoded frames are for observations"):
        decode(_frames_in_chunk(one))  # a reply may not carry encoded frames


def _frames_in_chunk(frames):
    """A chunk reply whose array is an encoded frame (only observations may be)."""
    import msgpack as mp

    good = [bytes(f) for f in encode(ChunkReply(1, 0, "a", np.zeros((8, 6), np.float32)))]
    h = mp.unpackb(good[0], raw=False)
    h["arrays"] = [["actions", "frames", list(frames.shape), [len(b) for b in frames.blobs]]]
    return [mp.packb(h, use_bin_type=True), b"".join(frames.blobs)]


# --- a heartbeat's figures (ActorStats): declared fields only, each of its type and range ---------
VALID = {bool: True, int: 7, float: 2.5}
WRONG = {  # per declared type: values of another type, or out of range
    int: ["3", 1.5, None, True, -1, 1 << 63, [1]],
    float: ["x", None, True, float("nan"), float("inf"), -0.5, 1e16, {"ms": 1}],
    bool: [1, 0, "true", None, 1.0],
}


def valid(name):
    if FIELD_TYPES[name] is tuple:  # a histogram: one count per bin
        return tuple(range(len(HIST_EDGES_MS[name])))
    return VALID[FIELD_TYPES[name]]


def wrong(name):
    if FIELD_TYPES[name] is tuple:
        n = len(HIST_EDGES_MS[name])
        return [
            [0] * (n - 1),
            [0] * (n + 1),
            [-1] + [0] * (n - 1),
            [0.5] + [0] * (n - 1),
            [True] + [0] * (n - 1),
            "x",
            None,
            3,
        ]
    return WRONG[FIELD_TYPES[name]]


def heartbeat_with(stats: object, key: str = "stats") -> list[bytes]:
    frames = encode(Heartbeat(0, 10, 1, ActorStats(clipped=1)))
    h = msgpack.unpackb(bytes(frames[0]), raw=False)
    del h["stats"]
    h[key] = stats
    return [msgpack.packb(h, use_bin_type=True)]


def test_every_figure_round_trips_with_its_type():
    full = ActorStats(**{name: valid(name) for name in FIELD_TYPES})
    out = roundtrip(Heartbeat(1, 5, 2, full))
    assert out == Heartbeat(1, 5, 2, full)
    assert all(type(getattr(out.stats, n)) is t for n, t in FIELD_TYPES.items())
    assert roundtrip(Heartbeat(1, 5, 2)).stats == ActorStats()  # an actor with nothing to report
    assert decode(heartbeat_with({"late_p99_ms": 3})).stats.late_p99_ms == 3.0  # an int is a number


@pytest.mark.parametrize("name", sorted(FIELD_TYPES))
def test_a_figure_of_the_wrong_type_or_range_is_refused_by_name(name):
    for value in wrong(name):
        with pytest.raises(WireError, match=f"heartbeat figure '{name}' is "):
            decode(heartbeat_with({name: value}))
    decode(heartbeat_with({name: valid(name)}))  # the same message with a good value passes


@pytest.mark.parametrize(
    "stats,match",
    [
        ({"unacked": None, "clipped": "x"}, "heartbeat figure 'unacked' is None"),  # killed the learner once
        ({"pending": 0}, "unknown figure 'pending'"),
        ({1: 2}, "not valid msgpack: int is not allowed for map key"),  # msgpack itself refuses it
        ("x", "must be a map"),
        ({f"k{i}": 0 for i in range(len(FIELD_TYPES) + 1)}, "must be a map of at most"),
    ],
)
def test_a_malformed_stats_map_is_refused(stats, match):
    with pytest.raises(WireError, match=match):
        decode(heartbeat_with(stats))


def test_the_untyped_meta_map_of_older_actors_is_refused():
    with pytest.raises(WireError, match=r"heartbeat header has unknown keys \['meta'\]"):
        decode(heartbeat_with({"clipped": 1}, key="meta"))


def test_numpy_figures_become_plain_values_and_parts_merge_later_ones_winning():
    s = ActorStats(clipped=np.int64(2), late_p99_ms=np.float32(1.5), operator=np.bool_(True), infer_p50_ms=3)
    assert (type(s.clipped), type(s.late_p99_ms), type(s.operator), type(s.infer_p50_ms)) == (int, float, bool, float)
    merged = ActorStats.merge(s, ActorStats(clipped=5, unacked=9), ActorStats())
    assert merged.figures() == {"clipped": 5, "late_p99_ms": 1.5, "operator": True, "infer_p50_ms": 3.0, "unacked": 9}
    with pytest.raises(TypeError):
        ActorStats(pending=1)  # type: ignore[call-arg]


def test_histograms_count_each_sample_once_in_its_bin():
    got = histogram([0.0, 0.05, 0.1, 0.3, 3.0, 49.0, 50.0, 9_999.0], "late_hist")
    #      bins:  0  .1  .2  .5  1  2  5  10  20  50+
    assert got == (2, 1, 1, 0, 0, 1, 0, 0, 1, 2) and sum(got) == 8
    assert histogram([], "infer_hist") == (0,) * len(HIST_EDGES_MS["infer_hist"])


def _sender_then_wait(address: str) -> None:  # connects, sends one batch, then idles (SIGSTOPped by the test)
    import time

    tx = TransitionSender(address)
    tx.send(batch(2, seq=0))
    while True:
        time.sleep(1)


def test_zmq_heartbeats_close_the_link_of_a_peer_that_answers_nothing(monkeypatch):
    """An actor whose process (or host) stops answering: the learner's side closes its link after
    HEARTBEAT_TIMEOUT_MS of silence rather than keep it (and its queue) forever."""
    import multiprocessing as mp
    import os
    import signal
    import time

    from zmq.utils.monitor import recv_monitor_message

    import robo_async.transport.channels as channels

    monkeypatch.setattr(channels, "HEARTBEAT_IVL_MS", 200)
    monkeypatch.setattr(channels, "HEARTBEAT_TIMEOUT_MS", 1_000)
    rx = TransitionReceiver("tcp://127.0.0.1:0")
    monitor = rx._sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    peer = mp.get_context("spawn").Process(target=_sender_then_wait, args=(rx.address,), daemon=True)
    peer.start()
    try:
        assert [b.count for b in _poll_until(rx, 1)] == [2]  # linked, and heard from
        os.kill(peer.pid, signal.SIGSTOP)  # its ZMQ thread answers no PING from now on
        events, deadline = [], time.monotonic() + 60
        while zmq.EVENT_DISCONNECTED not in events and time.monotonic() < deadline:
            if monitor.poll(500):
                events.append(recv_monitor_message(monitor)["event"])
        assert zmq.EVENT_DISCONNECTED in events
    finally:
        os.kill(peer.pid, signal.SIGCONT)
        peer.kill()
        rx._sock.disable_monitor()
        monitor.close(0)
        rx.close()
