"""CURVE: keys from `robo-async keys`, a learner that admits only listed actor keys, ids bound to
keys, and the refusal to bind beyond loopback in the clear. Real processes and sockets."""

import multiprocessing as mp
import stat
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from robo_async.launch.processes import learner_main
from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.config import LearnerConfig
from robo_async.transport.channels import WeightClient
from robo_async.transport.curve import LANE_STRIDE, secure_client
from robo_async.transport.wire import encode
from tests.transport.test_fuzz import batch, progress_when

EXE = [sys.executable, "-m", "robo_async.cli"]
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys") / "keys"
    res = subprocess.run(EXE + ["keys", f"dir={d}", "actors=2"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return d


def test_keys_writes_the_learner_pair_one_pair_per_actor_and_the_allow_list(keys):
    for p in (
        "learner.key",
        "learner.key_secret",
        "actors/actor-0.key_secret",
        "actors/actor-1.key_secret",
        "authorized/actor-0.key",
        "authorized/actor-1.key",
    ):
        assert (keys / p).exists(), p
    assert stat.S_IMODE((keys / "learner.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((keys / "actors/actor-1.key_secret").stat().st_mode) == 0o600
    assert (keys / "authorized/actor-0.lanes").read_text().strip() == "1"  # one robot's stream (lanes=1)
    pub, sec = zmq.auth.load_certificate(keys / "authorized/actor-0.key")
    assert sec is None  # the allow-list holds public keys only
    # running it again keeps existing keys (actors' copies stay valid)
    before = (keys / "learner.key_secret").read_bytes()
    subprocess.run(EXE + ["keys", f"dir={keys}", "actors=2"], capture_output=True, timeout=60, check=True)
    assert (keys / "learner.key_secret").read_bytes() == before


@pytest.fixture()
def secure_learner(tmp_path, keys):
    ctx = mp.get_context("spawn")
    stop, status, errors = ctx.Event(), ctx.Queue(), ctx.Queue()
    cfg = LearnerConfig(
        str(tmp_path / "run"),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6),
        tensorboard=False,
        keys_dir=str(keys),
    )
    proc = ctx.Process(target=learner_main, args=(cfg, stop, status, errors, 0.1))
    proc.start()
    kind, addresses = status.get(timeout=120)
    assert kind == "ready", addresses
    yield proc, addresses, status
    stop.set()
    proc.join(30)
    if proc.is_alive():
        proc.kill()


def handshake_fails(sock: zmq.Socket, address: str) -> None:
    """Connect and wait for the handshake's outcome: it must fail (a definite event, not a timeout)."""
    mon = sock.get_monitor_socket()
    sock.connect(address)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if mon.poll(200):
                ev = recv_monitor_message(mon)
                assert ev["event"] != zmq.EVENT_HANDSHAKE_SUCCEEDED, "a stranger completed the handshake"
                if ev["event"] & HANDSHAKE_FAILED:
                    return
        raise AssertionError("no handshake outcome within 30 s")
    finally:
        sock.disable_monitor()
        mon.close(linger=0)


@pytest.mark.e2e
def test_strangers_get_no_weights_and_cannot_insert_and_keys_bind_actor_ids(secure_learner, keys, tmp_path):
    proc, (data, weights), status = secure_learner
    ctx = zmq.Context.instance()
    member = WeightClient(weights, secure=lambda s: secure_client(s, keys, 1)).start()
    clear_sub, clear_push = ctx.socket(zmq.SUB), ctx.socket(zmq.PUSH)
    rogue_sub, rogue_push = ctx.socket(zmq.SUB), ctx.socket(zmq.PUSH)
    mine = ctx.socket(zmq.PUSH)
    try:
        # a listed actor key: statuses and weights arrive
        deadline, got = time.monotonic() + 30, None
        while got is None and time.monotonic() < deadline:  # weights are republished every second
            got = member.take_weights()
            time.sleep(0.05)
        assert member.status is not None and got is not None
        # no keys at all (clear text against a CURVE server): the handshake fails
        clear_sub.setsockopt(zmq.SUBSCRIBE, b"")
        handshake_fails(clear_sub, weights)
        handshake_fails(clear_push, data)
        # a well-formed key pair that is not on the allow-list: ZAP refuses it (counted)
        pub, sec = zmq.curve_keypair()
        server_pub, _ = zmq.auth.load_certificate(keys / "learner.key")
        for s in (rogue_sub, rogue_push):
            s.curve_publickey, s.curve_secretkey, s.curve_serverkey = pub, sec, server_pub
        rogue_sub.setsockopt(zmq.SUBSCRIBE, b"")
        handshake_fails(rogue_sub, weights)
        handshake_fails(rogue_push, data)
        for s in (clear_push, rogue_push):  # queued on the stranger's side, or refused at once when its
            try:  # failed connection is already gone: no delivery either way
                s.send_multipart(encode(batch(0, actor=0)), flags=zmq.NOBLOCK)
            except zmq.Again:
                pass
        for s in (clear_sub, rogue_sub):
            with pytest.raises(zmq.Again):
                s.recv_multipart(flags=zmq.NOBLOCK)
        # actor 1's key writing under actor 0's id: refused and counted; under its own id: stored
        secure_client(mine, keys, 1)
        mine.connect(data)
        mine.send_multipart(encode(batch(0, actor=0)))
        # ... or as its second robot's stream (1 + LANE_STRIDE): its key was issued for one lane only
        mine.send_multipart(encode(batch(0, actor=1 + LANE_STRIDE)))
        mine.send_multipart(encode(batch(0, actor=1)))  # the sentinel, on the same connection
        deadline = time.monotonic() + 30
        while (member.status.acked_for(1) or 0) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert member.status.acked_for(1) == 4
        assert member.status.acked_for(0) is None  # nothing under actor 0
        assert member.status.acked_for(1 + LANE_STRIDE) is None  # nor under a lane it was not issued
        p = progress_when(status, lambda p: p["transport/id_mismatch"] >= 2 and p["transport/auth_denied"] >= 2)
        assert p["transport/id_mismatch"] == 2
        assert p["transport/auth_denied"] >= 2  # the rogue key, once per socket
        assert proc.is_alive()
    finally:
        member.close()
        for s in (clear_sub, clear_push, rogue_sub, rogue_push, mine):
            s.close(linger=0)


@pytest.mark.e2e
def test_streams_beyond_the_keys_lanes_or_the_learners_capacity_are_refused_at_plan_time(keys):
    res = subprocess.run(
        EXE + ["train", f"transport.keys={keys}", "actors=2", "actor.envs=2", "budget.env_steps=10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(err) == 1, res.stderr
    assert "do not cover actors [0, 1] with 2 env(s) each" in err[0] and "lanes=2" in err[0], err[0]
    res = subprocess.run(
        EXE + ["train", "actors=600", "actor.envs=2", "budget.env_steps=10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(err) == 1 and "1200 streams; the learner keeps 1024" in err[0], res.stderr


@pytest.mark.e2e
def test_binding_beyond_loopback_in_the_clear_is_refused_in_one_line():
    res = subprocess.run(
        EXE + ["train", "transport.host=0.0.0.0", "budget.env_steps=10"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "transport.host=0.0.0.0 binds beyond loopback without keys" in err[0], res.stderr


@pytest.mark.e2e
def test_a_training_run_over_curve_links(tmp_path, keys):
    from robo_async.learner.metrics import read_metrics

    run_dir = tmp_path / "curve"
    res = subprocess.run(
        EXE
        + [
            "train",
            f"run_dir={run_dir}",
            f"transport.keys={keys}",
            "actors=2",
            "budget.env_steps=3000",
            "algo.warmup_steps=200",
            "algo.batch_size=32",
            "policy.hidden=[32,32]",
            "algo.hidden=[32,32]",
            "stop_at_success=null",
            "eval_episodes=0",
            "learner.log_every_s=0.2",
            "learner.publish_every=2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    last = read_metrics(run_dir)[-1]
    assert last["time/env_steps"] >= 3000 and last["charts/actor_policy_version"] > 0  # weights crossed CURVE
    assert last["transport/id_mismatch"] == 0 and last["transport/auth_denied"] == 0
