"""The actor in async-inference mode against a real ingest server: a slow chunk policy thinks on
its own thread while the real-time loop keeps ticking; transitions carry the producing version."""

import socket
import subprocess
import sys
import threading

import pytest

from hal.safety import SafeRobot
from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.options import ActorOptions
from robo_async.buffer.lmdb_store import PersistentReplayStore
from sim import ReachTask, SimRobot


class GatedPolicy(DelayedPolicy):
    """A slow chunk policy whose inferences wait for `gate` (opened from the test), after the two
    warm-up calls the loop makes before its first tick."""

    def __init__(self, inner, delay_ms):
        super().__init__(inner, delay_ms)
        self.gate = threading.Event()
        self.opened_at = None  # the actor's env steps when the gate opened; None: given up
        self.calls = 0

    def predict_chunk(self, obs, **kw):
        self.calls += 1
        if self.calls > 2:
            self.gate.wait()
        return super().predict_chunk(obs, **kw)

    def predict_chunks(self, requests):
        self.gate.wait()
        return super().predict_chunks(requests)


def open_when(policy, actor, ticks, limit_s=120.0):
    """Opens `policy.gate` once `actor` has stepped `ticks` times (or after `limit_s`, leaving
    `opened_at` None so the test fails rather than hangs)."""
    import time

    deadline = time.monotonic() + limit_s
    while actor.env_steps < ticks and time.monotonic() < deadline:
        time.sleep(0.005)
    if actor.env_steps >= ticks:
        policy.opened_at = actor.env_steps
    policy.gate.set()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["async_forward_rtc", "async_naive", "sync"])
def test_realtime_loop_keeps_every_tick_while_a_slow_chunk_policy_thinks(tmp_path, mode):
    data, status = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robo_async.bench.loadgen",
            "serve",
            "--store",
            str(tmp_path / "r"),
            "--data",
            data,
            "--status",
            status,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout.readline().startswith("ready")
    spec = ReachTask().spec()
    flow = FlowChunkPolicy(
        ("state", "ee_to_target"), (6, 3), spec.joint_low, spec.joint_high, horizon=10, steps=2, hidden=(32,)
    )
    policy = GatedPolicy(flow, delay_ms=200)  # six control ticks at 30 Hz
    cfg = ActorConfig(0, data, status, LoopConfig(realtime=True, max_steps=45, eval_every=0, inference=mode))
    actor = Actor(SafeRobot(SimRobot(ReachTask())), policy, cfg)
    if mode == "sync":
        policy.gate.set()
    else:
        # No tick waits for an inference: the first one is held until the loop has ticked 10 times
        # on its own (a loop that waited for it would never get there: the watcher gives up at 120 s)
        opened = threading.Thread(target=open_when, args=(policy, actor, 10), daemon=True)
        opened.start()
    actor.run(threading.Event())
    server.terminate()
    server.wait(30)
    assert actor.env_steps == 45
    late = actor.loop.lateness
    if mode == "sync":  # the baseline waits for every chunk: the loop sees its late ticks
        assert late.missed >= 3 and late.max > 0.15
        return
    opened.join(5)
    assert policy.opened_at is not None and policy.opened_at >= 10, "the loop waited for a stuck inference"
    runner = actor.loop.runner
    assert runner.holds >= 10  # it held the robot while the first chunk was stuck
    assert len(runner.versions) >= 3  # chunks kept arriving while the loop ran
    assert runner.holds < 45
    if mode == "async_naive":
        assert runner.schedule.stale_dropped > 0  # its first actions were in the past on arrival
    store = PersistentReplayStore(tmp_path / "r").open(readonly=True)
    versions = [int(r["policy_version"]) for _, r in store.rows()]
    store.close()
    assert len(versions) == 45 and set(versions) <= {-1}  # stamped by the chunk that produced them


def test_weights_hot_swapped_over_zmq_mid_episode_without_a_missed_tick(tmp_path):
    """A stand-in learner (real ZMQ sockets, real store) publishes new weights while the
    real-time actor runs async inference; a set for another architecture is refused."""
    from robo_async.transport.channels import TransitionReceiver
    from robo_async.transport.publisher import WeightPublisher
    from robo_async.transport.wire import LearnerStatus, TransitionBatch, Weights

    spec = ReachTask().spec()

    def flow(hidden):
        return FlowChunkPolicy(
            ("state", "ee_to_target"), (6, 3), spec.joint_low, spec.joint_high, horizon=8, steps=2, hidden=hidden
        )

    rx, pub = TransitionReceiver("tcp://127.0.0.1:0"), WeightPublisher("tcp://127.0.0.1:0")
    store = PersistentReplayStore(tmp_path / "r").open()
    stop, boot = threading.Event(), "hotswap"
    swapped, wrong = threading.Event(), threading.Event()
    running: dict[str, Actor] = {}

    def learner():
        new = flow((32,)).weights()
        while not stop.is_set():
            for msg in rx.poll(timeout_ms=5):
                if isinstance(msg, TransitionBatch):
                    store.insert(msg)
            pub.publish_status(
                LearnerStatus(0, 0, len(store), 2**62, False, boot, tuple(sorted(store.high_water().items())))
            )
            if len(store) >= 10 and not wrong.is_set():  # another architecture: refused, old weights kept
                pub.publish(Weights(1, flow((64,)).weights(), flow((64,)).architecture))
                wrong.set()
            # mid-episode (episodes are 50 ticks), once the actor has refused the other architecture (sent
            # together, the newer set would supersede it before the actor looked)
            loop = getattr(running.get("actor"), "loop", None)  # made when the actor starts running
            refused = loop is not None and 1 in loop._bad_weights_logged
            if len(store) >= 20 and refused and not swapped.is_set():
                pub.publish(Weights(2, new, flow((32,)).architecture))
                swapped.set()

    t = threading.Thread(target=learner, daemon=True)
    t.start()
    policy = DelayedPolicy(flow((32,)), delay_ms=60)
    # 150 ticks (5 s): the refused push and the new one make their round trip (actor -> store ->
    # stand-in learner -> publisher -> weight client) well within the run, however loaded the machine
    cfg = ActorConfig(
        0,
        rx.address,
        pub.address,
        LoopConfig(realtime=True, max_steps=150, eval_every=0, inference="async_forward_rtc", episode_ticks=50),
        ActorOptions(flush_every=4),
    )
    actor = running["actor"] = Actor(SafeRobot(SimRobot(ReachTask())), policy, cfg)
    try:
        actor.run(threading.Event())
        deadline = __import__("time").monotonic() + 20
        while len(store) < 150 and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.01)
    finally:
        stop.set()
        t.join(5)
    versions = [int(r["policy_version"]) for _, r in store.rows()]
    store.close()
    rx.close()
    pub.close()
    assert swapped.is_set() and actor.env_steps == 150
    assert len(versions) == 150
    assert versions[0] == -1 and versions[-1] == 2  # the new version reached the robot mid-episode
    assert versions == sorted(versions)  # never back to older weights
    assert 1 not in versions and policy.version == 2  # the other architecture was refused
    assert 1 in actor.loop._bad_weights_logged  # refused, and said so
