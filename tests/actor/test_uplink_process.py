"""`actor.uplink=process`: the shared-memory ring, and the transport process killed (-9) on either
side with nothing lost: real processes, sockets, LMDB journals and a real replay store."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from robo_async.actor.ring import HEADER, RingError, SlotRing
from robo_async.actor.uplink import Uplink
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.bench.ingest import IngestProcess
from robo_async.transport.wire import encode


def test_the_ring_hands_frames_over_in_order_and_reuses_only_released_slots():
    ring = SlotRing.create(slots=3, slot_bytes=1024)
    peer = SlotRing.attach(ring.name)
    try:
        arr = np.arange(6, dtype=np.float32)
        assert ring.write(2, [b"head", arr])
        assert peer.read(0) == (2, [b"head", arr.tobytes()])
        assert ring.write(0, [b"b"]) and ring.write(0, [b"c"])
        assert not ring.write(0, [b"d"])  # full: three written, none released
        peer.release(1)
        assert ring.write(1, [b"d"]) and ring.free() == 0
        assert peer.read(3) == (1, [b"d"])  # slot 3 reuses slot 0's memory
        with pytest.raises(RingError, match="not readable"):
            peer.read(0)  # released: gone
        assert not ring.write(0, [b"x" * 2000])  # larger than a slot: refused, nothing written
        assert ring.written == 4
    finally:
        peer.close()
        ring.close()
    assert not Path("/dev/shm", ring.name.lstrip("/")).exists()  # the owner removed it


def test_a_damaged_slot_is_refused_naming_it():
    ring = SlotRing.create(slots=2, slot_bytes=1024)
    try:
        ring.write(0, [b"abc"])
        ring._buf[HEADER + 4 : HEADER + 8] = (1000).to_bytes(4, "little")  # frame count past MAX_FRAMES
        with pytest.raises(RingError, match="slot 0 says 1000 frames"):
            SlotRing.attach(ring.name).read(0)
    finally:
        ring.close()


def _actor(data, weights, journal, steps, start_seq=0, commit_ms=100.0):
    from hal.safety import SafeRobot
    from policies.scripted import HoldPolicy
    from robo_async.actor.actor import Actor, ActorConfig
    from robo_async.actor.loop_config import LoopConfig
    from robo_async.actor.options import ActorOptions
    from robo_async.launch.builders import TaskArgs, make_robot

    robot = SafeRobot(make_robot(TaskArgs("reach", {})))
    cfg = ActorConfig(
        0,
        data,
        weights,
        LoopConfig(max_steps=steps, eval_every=0, inference="inline", episode_ticks=50),
        ActorOptions(uplink="process"),
        delivery=UplinkConfig(journal_dir=str(journal), journal_commit_ms=commit_ms),
        start_seq=start_seq,
    )
    return Actor(robot, HoldPolicy(robot.spec), cfg)


def _stored(store_dir):
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    store = PersistentReplayStore(store_dir).open()
    try:
        return store.counts["online"], dict(store.high_water())
    finally:
        store.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_killed_transport_process_is_replaced_and_every_row_arrives_once(tmp_path, sig):
    """With the learner stand-in frozen (no acks) and no journal commit due, the child takes
    batches it cannot release; then it is stopped while the actor writes on (slots pile up unread)
    and killed (-9), or terminated. A new child reads the ring again from the first unreleased
    slot: every row 0..n-1 is stored exactly once."""
    ingest = IngestProcess(str(tmp_path / "store"))
    with ingest as (data, weights):
        actor = _actor(data, weights, tmp_path / "journal", steps=6000, commit_ms=600_000)
        done = threading.Event()
        t = threading.Thread(target=lambda: (actor.run(threading.Event()), done.set()), daemon=True)
        t.start()
        deadline = time.monotonic() + 120
        while (
            actor.transport is None or not actor.transport.alive() or actor.transport.ring.written < 20
        ) and time.monotonic() < deadline:
            time.sleep(0.01)
        group = actor.transport
        pid = group._proc.pid
        os.kill(ingest._proc.pid, signal.SIGSTOP)  # no acks: what the child takes stays unreleased
        try:
            for stop_child in (False, True):
                w = group.ring.written
                while group.ring.written < w + 10 and not done.is_set():  # the control loop goes on, into the ring
                    time.sleep(0.005)
                if stop_child:
                    os.kill(pid, signal.SIGSTOP)
            assert group.ring.written - group.ring.released >= 20  # taken or not, none released
            os.kill(pid, sig)  # SIGTERM: it journals what it took and leaves the ring to its successor
            os.kill(pid, signal.SIGCONT)
        finally:
            os.kill(ingest._proc.pid, signal.SIGCONT)
        t.join(timeout=180)
        assert done.is_set()
        assert group.restarts == 1 and group._proc.pid != pid
        ticks = actor.result.ticks
    assert ingest.received == ticks  # the store's high water: 0..ticks-1 without a gap
    count, hw = _stored(tmp_path / "store")
    assert count == ticks and hw == {0: ticks}  # and nothing twice


CHILD = textwrap.dedent("""
    import sys, threading
    from robo_async.actor import uplink_process
    from tests.actor.test_uplink_process import _actor
    put = uplink_process.ProcessUplinks.put
    out = open(sys.argv[4], "w")
    def logged(self, lane, msg):
        put(self, lane, msg)
        if not out.tell():
            open(sys.argv[4] + ".ring", "w").write(self.ring.name)
        if hasattr(msg, "seq"):
            out.write(f"{msg.seq + msg.count}\\n"); out.flush()
    uplink_process.ProcessUplinks.put = logged
    _actor(sys.argv[1], sys.argv[2], sys.argv[3], steps=10**9).run(threading.Event())
""")


def test_an_actor_killed_leaves_its_transport_process_to_journal_every_batch_it_handed_over(tmp_path):
    """The learner stand-in frozen (nothing acked), the actor process killed (-9): its transport
    process journals every batch the actor had handed over, removes the ring and exits; a new
    actor resends them and numbers on after them."""
    ingest = IngestProcess(str(tmp_path / "store"))
    handed = tmp_path / "handed.txt"
    with ingest as (data, weights):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, data, weights, str(tmp_path / "journal"), str(handed)],
            cwd=Path(__file__).parents[2],
        )
        try:
            deadline = time.monotonic() + 120
            while (not handed.exists() or len(handed.read_text().split()) < 20) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(ingest._proc.pid, signal.SIGSTOP)  # no more acks
            n = len(handed.read_text().split())
            while len(handed.read_text().split()) < n + 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            proc.kill()
            proc.wait(timeout=30)
            last = int(handed.read_text().split()[-1])  # the rows the actor had handed over
            lock = tmp_path / "journal" / "uplink.lock"
            import fcntl

            with open(lock) as f:  # the orphaned transport process holds it until it has journaled and gone
                fcntl.flock(f, fcntl.LOCK_EX)
            up = Uplink(0, data, lambda: None, UplinkConfig(journal_dir=str(tmp_path / "journal")))
            assert up.open() == last  # every batch handed over is in the journal
            up.close(0)
            ring = Path(str(handed) + ".ring").read_text()  # not all of /dev/shm: tests run side by side
            assert ring and not Path("/dev/shm", ring.lstrip("/")).exists()  # the ring was removed
        finally:
            os.kill(ingest._proc.pid, signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
        actor = _actor(data, weights, tmp_path / "journal", steps=500)
        actor.run(threading.Event())
    total = last + actor.result.ticks
    assert ingest.received == total
    count, hw = _stored(tmp_path / "store")
    assert count == total and hw == {0: total}


def _wide(seq: int, n: int, dim: int):
    from robo_async.transport.wire import TransitionBatch

    rows = np.arange(seq, seq + n, dtype=np.float32)
    state = np.repeat(rows[:, None], dim, axis=1)
    return TransitionBatch(
        0,
        seq,
        {
            "obs/state": state,
            "next_obs/state": state + 1,
            "action": np.zeros((n, 2), np.float32),
            "reward": rows,
            "terminated": np.zeros(n, bool),
            "truncated": np.zeros(n, bool),
            "policy_version": np.zeros(n, np.int64),
            "success": np.zeros(n, bool),
        },
    )


@pytest.mark.parametrize("dim", [3000, 10_000], ids=["split-into-slots", "a-row-larger-than-a-slot"])
def test_batches_larger_than_a_slot_arrive_whole_and_in_order(tmp_path, dim):
    """Bigger rows than the spec said: a batch larger than a ring slot goes in slices of rows that
    each fit one; a row larger than a slot goes over the pipe once every slot before it is freed.
    The store gets every row once, in order (its rewards are the seqs), with nothing resent (a batch
    sent out of order is stored only after a resend fills the gap before it)."""
    from robo_async.actor.uplink_process import ProcessUplinks
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    ingest = IngestProcess(str(tmp_path / "store"))
    with ingest as (data, weights):
        group = ProcessUplinks(
            0,
            [0],
            [UplinkConfig(journal_dir=str(tmp_path / "journal"), message_bytes=1024)],
            data,
            weights,
            ring_mb=0.5,
        )
        try:
            assert group.open() == [0]
            group.start([0])
            parts = group._parts(_wide(0, 6, dim))
            # the case under test: 6 rows do not fit a slot; 3,000 wide: one row does; 10,000: not even one
            assert not group.ring.fits(encode(_wide(0, 6, dim)))
            assert all(isinstance(f, tuple) == (dim == 10_000) for f, _ in parts) and len(parts) > 1
            seq = 0
            for n in (6, 1, 9, 2, 6, 1, 1, 12, 3) * 3:
                group.lanes[0].put(_wide(seq, n, dim))
                seq += n
            deadline = time.monotonic() + 120
            while group.lanes[0].unacked and time.monotonic() < deadline:
                group._drain()
                time.sleep(0.01)
            assert group.lanes[0].unacked == 0
            assert group.lanes[0].resends == 0  # in order the first time: no gap the learner had to wait out
        finally:
            group.close(5)
    assert ingest.received == seq
    store = PersistentReplayStore(tmp_path / "store").open()
    try:
        assert store.counts["online"] == seq and dict(store.high_water()) == {0: seq}
        recs = [(s_, float(row["reward"]), float(row["obs/state"][-1])) for _, _, s_, row in store.records("online")]
    finally:
        store.close()
    assert recs == [(i, float(i), float(i)) for i in range(seq)]  # each row once, in order, whole
