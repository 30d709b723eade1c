"""The actor in async-inference mode against a real ingest server: a slow chunk policy thinks on
its own thread while the real-time loop keeps ticking; transitions carry the producing version."""

import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.buffer.lmdb_store import PersistentReplayStore
from sim import ReachTask, SimRobot


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["async_forward_rtc", "async_naive"])
def test_realtime_loop_keeps_every_tick_while_a_slow_chunk_policy_thinks(tmp_path, mode):
    data, status = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    server = subprocess.Popen([sys.executable, "-m", "robo_async.buffer.loadgen", "serve", "--store",
                               str(tmp_path / "r"), "--data", data, "--status", status],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().startswith("ready")
    spec = ReachTask().spec()
    flow = FlowChunkPolicy(("state", "ee_to_target"), (6, 3), spec.joint_low, spec.joint_high, horizon=10,
                           steps=2, hidden=(32,))
    policy = DelayedPolicy(flow, delay_ms=100)  # three control ticks at 30 Hz
    cfg = ActorConfig(0, data, status, realtime=True, max_steps=45, eval_every=0, inference=mode)
    actor = Actor(SimRobot(ReachTask()), policy, cfg)
    actor.run(threading.Event())
    server.terminate()
    server.wait(30)
    assert actor.env_steps == 45 and actor.tick == 45  # no tick was skipped or waited for
    runner = actor.runner
    assert len(runner.versions) >= 3  # chunks kept arriving while the loop ran
    assert runner.holds < 45
    if mode == "async_naive":
        assert runner.schedule.stale_dropped > 0  # its first actions were in the past on arrival
    store = PersistentReplayStore(tmp_path / "r").open(readonly=True)
    versions = [int(r["policy_version"]) for _, r in store.rows()]
    store.close()
    assert len(versions) == 45 and set(versions) <= {-1}  # stamped by the chunk that produced them
