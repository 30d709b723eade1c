"""Kill -9 the learner's ingest server, the actor, or both, with real processes: nothing is lost."""

import signal
import socket
import subprocess
import sys
import time

import numpy as np

from robo_async.buffer.lmdb_store import PersistentReplayStore


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, tmp_path):
        self.store = str(tmp_path / "replay")
        self.journal = str(tmp_path / "journal")
        self.data = f"tcp://127.0.0.1:{free_port()}"
        self.status = f"tcp://127.0.0.1:{free_port()}"
        self.server = self.producer = None

    def _spawn(self, *args):
        return subprocess.Popen(
            [sys.executable, "-m", "robo_async.bench.loadgen", *args, "--data", self.data, "--status", self.status],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def start_server(self):
        self.server = self._spawn("serve", "--store", self.store)
        line = self.server.stdout.readline()
        assert line.startswith("ready"), line

    def start_producer(self, until, per_s=4000):
        self.producer = self._spawn("produce", "--journal", self.journal, "--until", str(until), "--per-s", str(per_s))
        line = self.producer.stdout.readline()
        assert line.startswith("start"), line
        return int(line.split()[1].split("=")[1])

    @staticmethod
    def kill(proc):
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def finish(self, timeout=120):
        out, _ = self.producer.communicate(timeout=timeout)
        assert self.producer.returncode == 0, out
        self.server.send_signal(signal.SIGTERM)
        self.server.wait(timeout=30)
        return out


def check_store(path, n):
    """Every seq 0..n-1 exactly once, each with its own content."""
    store = PersistentReplayStore(path).open(readonly=True)
    seqs = np.array([row["obs/state"][0] for _, row in store.rows("online")])
    rewards = np.array([row["reward"] for _, row in store.rows("online")])
    store.close()
    np.testing.assert_array_equal(np.sort(seqs), np.arange(n))  # none lost, none twice
    np.testing.assert_array_equal(seqs, rewards)


def test_learner_killed_repeatedly_loses_nothing(tmp_path):
    c = Cluster(tmp_path)
    rng = np.random.default_rng(1)
    c.start_server()
    c.start_producer(until=12_000)
    for _ in range(4):
        time.sleep(rng.uniform(0.2, 0.8))
        c.kill(c.server)
        time.sleep(rng.uniform(0.0, 0.3))
        c.start_server()
    c.finish()
    check_store(c.store, 12_000)


def test_actor_killed_resumes_from_its_journal(tmp_path):
    c = Cluster(tmp_path)
    c.start_server()
    c.start_producer(until=8_000, per_s=3000)
    time.sleep(1.0)
    c.kill(c.producer)
    start = c.start_producer(until=8_000)
    assert start > 0  # numbering continued after what the journal and the store already held
    c.finish()
    check_store(c.store, 8_000)


def test_both_killed_at_once(tmp_path):
    c = Cluster(tmp_path)
    c.start_server()
    c.start_producer(until=8_000, per_s=3000)
    time.sleep(1.2)
    c.kill(c.server)
    c.kill(c.producer)
    c.start_server()
    c.start_producer(until=8_000)
    c.finish()
    check_store(c.store, 8_000)
