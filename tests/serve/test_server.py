"""The policy server and the actor's remote policy, over real ZMQ sockets (loopback): identical
chunks to a local policy, batching, re-requests and stale replies with the loop ticking, refusals
named, malformed replies dropped, a server down at start or gone mid-run."""

import logging
import socket
import threading
import time

import numpy as np
import pytest
import torch
import zmq

from hal.safety import SafeRobot
from policies.base import ActionChunk, Policy
from policies.flow import FlowChunkPolicy
from robo_async.actor.inference import InferenceEngine
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.remote import RemotePolicy, RemotePolicyError, ServerUnavailable
from robo_async.bench.netem import NetemProxy
from robo_async.serve import PolicyServer, ServeConfig
from robo_async.transport.wire import ChunkReply, InferRequest, decode, encode
from sim import PushTask, ReachTask, SimRobot

SPEC = ReachTask().spec()
A = SPEC.action_dim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flow() -> FlowChunkPolicy:
    p = FlowChunkPolicy(("state",), (SPEC.state_dim,), SPEC.joint_low, SPEC.joint_high, horizon=8, seed=3)
    p.version = 4
    return p


class Echo(Policy):
    """Chunks that echo the request: row 0 the forwarded state, rows 1.. the prefix, the last row
    the delay; records every batch it was given."""

    architecture = "echo"

    def __init__(self, horizon=8, gate=None):
        self.horizon, self.batches, self.gate = horizon, [], gate
        self.version = 0

    def predict_chunk(self, obs, *, forwarded_state=None, prefix=None, delay_ticks=0):
        a = np.tile(np.asarray(obs["state"], np.float32)[:A], (self.horizon, 1))
        if forwarded_state is not None:
            a[0] = forwarded_state[:A]
        if prefix is not None:
            a[1 : 1 + len(prefix)] = prefix[: self.horizon - 2]
        a[-1] = delay_ticks
        return ActionChunk(a, SPEC.dt, self.version)

    def predict_chunks(self, requests):
        if self.gate is not None:
            self.gate.wait(30)
        self.batches.append(len(requests))
        return super().predict_chunks(requests)

    def module(self):
        return torch.nn.Linear(1, 1)


@pytest.fixture
def serve():
    servers = []

    def start(policy, address="tcp://127.0.0.1:0", **kw):
        s = PolicyServer(policy, SPEC, ServeConfig(address, **kw)).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def test_remote_and_local_engines_give_identical_chunks(serve):
    local = flow()
    server = serve(flow(), policy_name="flow")
    remote = RemotePolicy(server.bound, SPEC, policy="flow")
    remote.connect(10)
    assert (remote.architecture, remote.horizon, remote.version) == (local.architecture, 8, 4)
    rng = np.random.default_rng(0)
    for deterministic in (True, False):
        for prefix_len in (0, 3):
            obs = {"state": rng.uniform(-1, 1, SPEC.state_dim).astype(np.float32)}
            fstate = obs["state"] + 0.05
            prefix = rng.uniform(-1, 1, (prefix_len, A)).astype(np.float32) if prefix_len else None
            results = []
            for policy in (local, remote):
                if not deterministic:  # the same noise on both sides: the same generator seed
                    torch.manual_seed(0)
                    for p in (local, server.policy):
                        p._gen.manual_seed(11)
                policy.deterministic = deterministic
                engine = InferenceEngine(policy, A, 8)
                engine.submit(obs, fstate, prefix, 10, obs_tick=8)
                deadline = time.monotonic() + 20
                while (r := engine.poll()) is None and time.monotonic() < deadline:
                    time.sleep(0.002)
                engine.close()
                assert r is not None and engine.bad_chunks == 0
                results.append(r)
            np.testing.assert_array_equal(results[0].chunk.actions, results[1].chunk.actions)
            assert results[1].chunk.policy_version == 4 and results[1].start_tick == 10
    remote.close()


def test_forwarded_state_prefix_and_delay_arrive_intact(serve):
    server = serve(Echo())
    remote = RemotePolicy(server.bound, SPEC)
    state = np.linspace(-1, 1, SPEC.state_dim).astype(np.float32)
    fstate = (state * 0.37 + 0.001).astype(np.float32)
    prefix = np.random.default_rng(1).normal(size=(3, A)).astype(np.float32)
    chunk = remote.predict_chunk({"state": state}, forwarded_state=fstate, prefix=prefix, delay_ticks=5)
    np.testing.assert_array_equal(chunk.actions[0], fstate[:A])
    np.testing.assert_array_equal(chunk.actions[1:4], prefix)
    assert (chunk.actions[-1] == 5).all() and chunk.policy_version == 0
    remote.close()


def test_batching_returns_each_actor_its_own_chunk(serve):
    n = 8
    server = serve(Echo(), max_batch=n, batch_window_ms=20_000)  # waits for every actor that said hello
    out, errors = {}, []
    hello = threading.Barrier(n)

    def actor(i):
        p = RemotePolicy(server.bound, SPEC, actor_id=i, give_up_s=60)
        try:
            p.connect(30)
            hello.wait(30)
            out[i] = p.predict_chunk({"state": np.full(SPEC.state_dim, i, np.float32)}).actions
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            p.close()

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors and sorted(out) == list(range(n))
    for i, a in out.items():
        assert (a[:-1] == i).all()  # its own observation came back, not a neighbour's
    assert server.policy.batches == [n] and server.stats()["batch_sizes"] == {str(n): 1}


def test_batched_flow_equals_one_by_one():
    from policies.base import ChunkRequest

    p = flow()
    p.deterministic = True
    rng = np.random.default_rng(2)
    reqs = [
        ChunkRequest(
            {"state": rng.uniform(-1, 1, SPEC.state_dim).astype(np.float32)},
            rng.uniform(-1, 1, SPEC.state_dim).astype(np.float32),
            None if i % 2 else rng.uniform(-1, 1, (2, A)).astype(np.float32),
            i,
        )
        for i in range(6)
    ]
    batched = p.predict_chunks(reqs)
    for r, b in zip(reqs, batched, strict=False):
        single = p.predict_chunk(r.obs, forwarded_state=r.forwarded_state, prefix=r.prefix, delay_ticks=r.delay_ticks)
        np.testing.assert_allclose(b.actions, single.actions, atol=1e-5)


def loop(policy, ticks, observer=None, realtime=True):
    robot = SafeRobot(SimRobot(ReachTask()))
    robot.connect()
    cfg = LoopConfig(
        episode_ticks=10_000,
        realtime=realtime,
        max_steps=ticks,
        inference="async_forward_rtc",
        inference_timeout_s=30,
        warmup_inference=False,
        eval_every=0,
        server_wait_s=30,
    )
    lp = ControlLoop(robot, policy, cfg, observer=observer)
    return lp, lp.run()


def test_a_lost_reply_is_rerequested_and_a_late_duplicate_dropped_while_the_loop_ticks(serve):
    server = serve(flow())
    # reply 1 answers the hello; reply 3 is lost, reply 5 arrives twice
    proxy = NetemProxy(server.bound, rtt_ms=20, drop_replies=(3,), dup_replies=(5,))
    with proxy as front:
        remote = RemotePolicy(front, SPEC, min_retry_s=0.2)
        lp, result = loop(remote, 90)
        remote.close()
    assert result.ticks == 90  # every tick ran: none waited for the network
    assert remote.rerequests >= 1 and remote.stale_replies >= 1
    assert proxy.counts["dropped"] == 1 and proxy.counts["duplicated"] == 1
    # the duplicate was never merged: at most one chunk per reply taken (the hello's aside)
    assert 5 <= lp.runner.chunks_merged <= remote.replies - 1


def test_a_server_down_at_start_is_waited_for_and_named(serve, caplog):
    address = f"tcp://127.0.0.1:{free_port()}"
    remote = RemotePolicy(address, SPEC)
    done = threading.Event()

    def connect():
        remote.connect(60, say_every_s=0.5)
        done.set()

    caplog.set_level(logging.WARNING, "robo_async.actor.remote")
    t = threading.Thread(target=connect)
    t.start()
    deadline = time.monotonic() + 30
    while "waiting for the policy server at " + address not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not done.is_set() and address in caplog.text
    serve(flow(), address=address)
    t.join(60)
    assert done.is_set() and remote.horizon == 8
    remote.close()
    nobody = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnavailable, match=f"no policy server answered at {nobody} in 0.5 s"):
        RemotePolicy(nobody, SPEC).connect(0.5)


def test_a_server_gone_mid_run_the_robot_holds_and_the_actor_reconnects(serve):
    address = f"tcp://127.0.0.1:{free_port()}"
    server = serve(flow(), address=address)
    remote = RemotePolicy(address, SPEC, give_up_s=0.5)
    marks = {}

    def observer(t):
        if t.tick == 20:
            server.close()
            marks["gone"] = t.new_chunks
        if t.tick == 60:
            marks["back_at"] = t.new_chunks
            serve(flow(), address=address)
        marks["last"] = t.new_chunks

    lp, result = loop(remote, 120, observer)
    remote.close()
    assert result.ticks == 120
    assert lp.runner.holds >= 20  # no chunks while the server was away: the robot held
    assert marks["back_at"] - marks["gone"] <= 1  # (one in flight at most)
    assert marks["last"] > marks["back_at"]  # chunks again after it came back


def test_another_robot_spec_or_policy_is_refused_by_name(serve):
    server = serve(flow(), policy_name="flow")
    with pytest.raises(RemotePolicyError, match="robot spec differs: .*name: server 'sim_so101_reach', actor"):
        RemotePolicy(server.bound, PushTask().spec()).connect(10)
    with pytest.raises(RemotePolicyError, match="runs policy 'flow' .*expects 'mlp'"):
        RemotePolicy(server.bound, SPEC, policy="mlp").connect(10)
    assert server.refused == 2
    ok = RemotePolicy(server.bound, SPEC, policy="flow")
    ok.connect(10)
    ok.close()


def test_malformed_and_foreign_replies_are_dropped_and_counted():
    """A server that first answers garbage, then NaN actions, then a chunk of another
    architecture: each dropped and counted, the good chunk after them taken."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def fake():
        while not stop.is_set():
            if not router.poll(50):
                continue
            frames = router.recv_multipart()
            env, req = frames[:2], decode(frames[2:])
            if req.hello:
                router.send_multipart(
                    [*env, *encode(ChunkReply(req.req, 0, "arch-a", horizon=8, spec=remote._spec_json))]
                )
                continue
            good = ChunkReply(req.req, 1, "arch-a", np.zeros((8, A), np.float32))
            nan = [bytes(f) for f in encode(ChunkReply(req.req, 1, "arch-a", np.zeros((8, A), np.float32)))]
            nan[1] = np.full((8, A), np.nan, np.float32).tobytes()
            router.send_multipart([*env, b"\x93garbage"])
            router.send_multipart([*env, *nan])
            if req.req == 2:
                router.send_multipart([*env, *encode(ChunkReply(req.req, 1, "arch-b", np.zeros((8, A), np.float32)))])
            else:
                router.send_multipart([*env, *encode(good)])

    remote = RemotePolicy(f"tcp://127.0.0.1:{port}", SPEC)
    t = threading.Thread(target=fake, daemon=True)
    t.start()
    try:
        remote.connect(10)
        with pytest.raises(RemotePolicyError, match="now answers for arch-b, it said arch-a"):
            remote.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)})
        chunk = remote.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)})
        assert chunk.actions.shape == (8, A) and remote.malformed == 4 and remote.refused == 1
    finally:
        stop.set()
        t.join(5)
        router.close(0)
        remote.close()


def test_malformed_requests_are_dropped_and_counted_and_the_server_goes_on(serve):
    server = serve(flow())
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(server.bound)
    dealer.send_multipart([b"", b"\xc1garbage"])
    dealer.send_multipart([b"no-delimiter"])
    remote = RemotePolicy(server.bound, SPEC)
    chunk = remote.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)})  # after the two bad ones
    assert chunk.actions.shape == (8, A)
    deadline = time.monotonic() + 10
    while server.malformed < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.malformed == 2 and server.alive()
    bad_obs = RemotePolicy(server.bound, SPEC)
    with pytest.raises(RuntimeError, match="inference failed: .*state"):
        bad_obs.predict_chunk({"nope": np.zeros(3, np.float32)})
    assert server.errors == 1
    dealer.close(0)
    remote.close()
    bad_obs.close()


def test_the_server_follows_the_learners_weights():
    from robo_async.transport.publisher import WeightPublisher
    from robo_async.transport.wire import Weights

    pub = WeightPublisher("tcp://127.0.0.1:0")
    policy = flow()
    server = PolicyServer(policy, SPEC, ServeConfig("tcp://127.0.0.1:0", weights_address=pub.address)).start()
    try:
        new = {k: v + 0.5 for k, v in flow().weights().items()}
        pub.publish(Weights(9, new, policy.architecture))
        remote = RemotePolicy(server.bound, SPEC)
        deadline = time.monotonic() + 20
        version = -1
        while version != 9 and time.monotonic() < deadline:
            version = remote.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)}).policy_version
            time.sleep(0.05)
        assert version == 9 and server.weight_swaps == 1
        np.testing.assert_array_equal(policy.weights()["net.0.weight"], new["net.0.weight"])
        pub.publish(Weights(10, {"x": np.zeros(1, np.float32)}, "another-arch"))
        while server.weights_rejected == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.weights_rejected == 1 and policy.version == 9
        remote.close()
    finally:
        server.close()
        pub.close()


def test_a_batch_waits_only_for_actors_that_are_asking(serve):
    """A 20 s batch window, one actor: answered at once (nobody else to wait for); a second
    actor that said hello is waited for, and both are answered in one batch."""
    server = serve(Echo(), batch_window_ms=20_000)
    a = RemotePolicy(server.bound, SPEC, actor_id=0, give_up_s=10)
    assert a.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)}).actions.shape == (8, A)
    assert server.policy.batches == [1]
    b = RemotePolicy(server.bound, SPEC, actor_id=1, give_up_s=30)
    b.connect(10)
    got = {}
    t = threading.Thread(
        target=lambda: got.setdefault("a", a.predict_chunk({"state": np.ones(SPEC.state_dim, np.float32)}))
    )
    t.start()
    got["b"] = b.predict_chunk({"state": np.full(SPEC.state_dim, 2, np.float32)})
    t.join(30)
    assert server.policy.batches == [1, 2] and (got["a"].actions[0] == 1).all() and (got["b"].actions[0] == 2).all()
    a.close()
    b.close()


def test_curve_only_listed_actor_keys_get_chunks_and_ids_are_bound_to_keys(tmp_path):
    from functools import partial

    from robo_async.transport.curve import create_keys, secure_client

    keys = tmp_path / "keys"
    create_keys(keys, [0, 1])
    server = PolicyServer(flow(), SPEC, ServeConfig("tcp://127.0.0.1:0", keys_dir=str(keys))).start()
    try:
        good = RemotePolicy(server.bound, SPEC, actor_id=1, secure=partial(secure_client, keys_dir=keys, actor_id=1))
        assert good.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)}).actions.shape == (8, A)
        liar = RemotePolicy(server.bound, SPEC, actor_id=0, secure=partial(secure_client, keys_dir=keys, actor_id=1))
        with pytest.raises(RemotePolicyError, match="this connection's key is actor 1's, not actor 0's"):
            liar.connect(10)
        clear = RemotePolicy(server.bound, SPEC, actor_id=0)  # no keys: the handshake fails, nothing comes back
        with pytest.raises(ServerUnavailable):
            clear.connect(1.5)
        assert server.refused == 1 and server.chunks == 1
        for p in (good, liar, clear):
            p.close()
    finally:
        server.close()


BAD_FIELDS = {
    "actor_id": [-1, "0", 1.5, None, 1 << 40, True],
    "req": [-1, "1", None, 1 << 63],
    "tick": [-1, "0", 1.5],
    "delay": [-1, 5000, "2"],
    "deterministic": [1, "yes", None],
    "hello": [1, "no"],
    "policy": [3, "x" * 300],
    "spec": [7, "x" * 20000],
    "instruction": [5, None, "x" * 300],
    "arrays": ["x", None, [["a", "float32", [1]]] * 100],
    "evil": [1],
    "schema": [2, None],
    "kind": ["chunk", "nope", 3],
}


def test_every_field_of_a_request_is_checked_and_a_bad_one_dropped(serve):
    """Each mutation of an infer request is dropped and counted; the valid sentinel sent after
    them on the same socket is answered (so 'dropped' is not 'not processed yet')."""
    import msgpack

    server = serve(flow())
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(server.bound)
    good = [bytes(f) for f in encode(InferRequest(0, 1, obs={"state": np.zeros(SPEC.state_dim, np.float32)}))]
    sent = 0
    for key, values in BAD_FIELDS.items():
        for v in values:
            h = msgpack.unpackb(good[0], raw=False)
            h[key] = v
            dealer.send_multipart([b"", msgpack.packb(h, use_bin_type=True), *good[1:]])
            sent += 1
    dealer.send_multipart([b"", *good])  # the sentinel
    assert dealer.poll(20_000)
    reply = decode(dealer.recv_multipart()[1:])
    assert isinstance(reply, ChunkReply) and reply.req == 1 and reply.actions.shape == (8, A)
    assert server.malformed == sent and server.chunks == 1 and server.alive()
    dealer.close(0)


class Instructed(Echo):
    """Echo that records the instruction it was asked under, per batch."""

    def __init__(self):
        super().__init__()
        self.instruction = "the server's own"
        self.heard = []

    def predict_chunks(self, requests):
        self.heard.append((self.instruction, len(requests)))
        return super().predict_chunks(requests)


def test_each_actor_is_answered_under_its_own_instruction(serve):
    server = serve(Instructed(), batch_window_ms=20_000)
    a = RemotePolicy(server.bound, SPEC, actor_id=0, instruction="lift the cube")
    b = RemotePolicy(server.bound, SPEC, actor_id=1)  # none: the server's policy's own
    for p in (a, b):
        p.connect(10)
    t = threading.Thread(target=a.predict_chunk, args=({"state": np.zeros(SPEC.state_dim, np.float32)},))
    t.start()
    b.predict_chunk({"state": np.zeros(SPEC.state_dim, np.float32)})
    t.join(30)
    assert sorted(server.policy.heard) == [("lift the cube", 1), ("the server's own", 1)]
    assert server.policy.instruction == "the server's own"  # restored after the batch
    a.close()
    b.close()


def test_camera_frames_travel_encoded_lossless_ones_give_identical_chunks(serve):
    def cam_policy():
        p = FlowChunkPolicy(
            ("state",),
            (SPEC.state_dim,),
            SPEC.joint_low,
            SPEC.joint_high,
            horizon=8,
            seed=3,
            cameras=("front",),
            image_size=32,
        )
        p.deterministic = True
        return p

    local = cam_policy()
    server = serve(cam_policy())
    img = np.random.default_rng(0).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    obs = {"state": np.zeros(SPEC.state_dim, np.float32), "front": img}
    want = local.predict_chunk(obs).actions
    for codec in ("png", "jpeg", "raw"):
        remote = RemotePolicy(server.bound, SPEC, image_codec=codec)
        remote.deterministic = True
        got = remote.predict_chunk(obs).actions
        if codec in ("png", "raw"):
            np.testing.assert_array_equal(got, want)  # lossless: the same pixels, the same chunk
        else:
            assert np.abs(got - want).max() < 0.05  # lossy, close
        remote.close()
    smooth = np.tile(np.linspace(0, 255, 96, dtype=np.uint8)[:, None, None], (1, 96, 3))  # a camera-like image
    jpeg = RemotePolicy(server.bound, SPEC)._encoded({"front": smooth})["front"]
    assert len(jpeg.blobs[0]) < smooth.nbytes / 10  # what the default saves on the link


def test_a_corrupt_camera_frame_is_refused_by_name_and_counted(serve):
    from robo_async.transport.wire import Frames

    server = serve(flow())
    remote = RemotePolicy(server.bound, SPEC)
    remote.connect(10)
    frame = bytearray(
        RemotePolicy(server.bound, SPEC)._encoded({"front": np.zeros((16, 16, 3), np.uint8)})["front"].blobs[0]
    )
    frame[-1] ^= 0xFF  # fails its checksum
    req = InferRequest(
        0, 99, obs={"state": np.zeros(SPEC.state_dim, np.float32), "front": Frames([bytes(frame)], (1, 16, 16, 3))}
    )
    reply = remote._exchange(req, 10)
    assert "bad camera frame" in reply.error and "obs/front" in reply.error and server.malformed == 1
    remote.close()
