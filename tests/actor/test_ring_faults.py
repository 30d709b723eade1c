"""`actor.uplink=process` under faults: a /dev/shm too small for the ring, and rows larger than a
ring slot among ordinary ones with no ack coming and the transport process killed (-9). Real
shared memory, processes and sockets; the learner is a bare PULL socket that records arrivals."""

from __future__ import annotations

import errno
import os
import signal
import time
from multiprocessing import shared_memory
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import zmq

from robo_async.actor import ring as ring_module
from robo_async.actor.ring import SharedMemoryFull, SlotRing
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.wire import Heartbeat, TransitionBatch, decode, encode


def _shm_path(name: str) -> Path:
    return Path("/dev/shm", name.lstrip("/"))


@pytest.fixture
def made(monkeypatch):
    """The names of the shared memory segments `SlotRing.create` makes here (not all of /dev/shm:
    tests run side by side)."""
    names: list[str] = []

    class Recorded(shared_memory.SharedMemory):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            names.append(self.name)

    monkeypatch.setattr(ring_module.shared_memory, "SharedMemory", Recorded)
    return names


def test_the_ring_takes_its_memory_when_it_is_made(made):
    ring = SlotRing.create(slots=4, slot_bytes=1 << 20)
    try:  # pages allocated now, not at the first write (a sparse segment has none)
        assert os.stat(_shm_path(ring.name)).st_blocks * 512 >= 4 << 20
    finally:
        ring.close()


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def test_a_ring_larger_than_dev_shm_fails_when_made_naming_the_sizes_and_the_fix(made):
    st = os.statvfs("/dev/shm")
    total = st.f_blocks * st.f_frsize
    if total == 0:
        pytest.skip("/dev/shm has no size limit here")
    with pytest.raises(SharedMemoryFull) as err:  # twice /dev/shm's size: refused before any page is taken
        SlotRing.create(slots=2, slot_bytes=total)
    msg = str(err.value)
    assert "\n" not in msg and "/dev/shm" in msg and "--shm-size" in msg and "actor.uplink=thread" in msg
    assert f"needs {_mib(2 * total + 64)}" in msg and f"of {_mib(total)}" in msg
    assert made and not _shm_path(made[0]).exists()  # nothing left behind


def test_a_full_dev_shm_fails_when_made_naming_its_free_space(made, monkeypatch):
    """The same on a /dev/shm with 3 MiB of its 64 MiB free (a container's default size)."""

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ring_module.os, "posix_fallocate", full)
    monkeypatch.setattr(
        ring_module.os, "statvfs", lambda path: SimpleNamespace(f_frsize=4096, f_blocks=16384, f_bavail=768)
    )
    with pytest.raises(SharedMemoryFull) as err:
        SlotRing.create(slots=4, slot_bytes=1 << 20)
    assert "needs 4.0 MiB of shared memory and /dev/shm has 3.0 MiB free of 64.0 MiB" in str(err.value)
    assert made and not _shm_path(made[0]).exists()


# --- rows larger than a slot ----------------------------------------------------------------------
NARROW, WIDE = 4, 20_000  # floats per row: 20,000 x 4 bytes x 2 columns is more than a 66 KiB slot


def _batch(seq: int, n: int, dim: int) -> TransitionBatch:
    """Rows whose reward is their seq (so the receiver can tell each row's place)."""
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


class Learner:
    """A PULL socket that never acks: what arrives, in arrival order, as the rows' seqs."""

    def __init__(self) -> None:
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.PULL)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"

    def receive(self, n: int, g, guard_s: float = 60.0) -> list[int]:
        """The next `n` rows to arrive (fewer if the guard passes first: the test then fails on
        them), while `g` is given heartbeats between polls, as the control loop gives it (no batches)."""
        got: list[int] = []
        deadline = time.monotonic() + guard_s
        while len(got) < n and time.monotonic() < deadline:
            g.lanes[0].put(Heartbeat(0, 0, -1))
            if self.sock.poll(100):
                msg = decode(self.sock.recv_multipart())
                if not isinstance(msg, TransitionBatch):
                    continue
                assert np.array_equal(msg.arrays["reward"], np.arange(msg.seq, msg.seq + msg.count))  # whole
                assert msg.arrays["obs/state"][:, -1].tolist() == msg.arrays["reward"].tolist()
                got += list(range(msg.seq, msg.seq + msg.count))
        return got

    def close(self) -> None:
        self.sock.close(linger=0)


# ordinary batches and rows larger than a slot, alone and three in one batch
MIX = [(3, NARROW), (1, WIDE), (2, NARROW), (1, WIDE), (1, WIDE), (4, NARROW), (3, WIDE), (1, NARROW)]


@pytest.fixture
def group():
    from robo_async.actor.uplink_process import ProcessUplinks

    learner = Learner()
    # no journal and no acks: no slot is ever released; resend_s: no resend within the test
    g = ProcessUplinks(
        0, [0], [UplinkConfig(message_bytes=1024, resend_s=3600)], learner.address, "tcp://127.0.0.1:9", ring_mb=2
    )
    try:
        assert g.open() == [0]
        g.start([0])
        yield g, learner
    finally:
        g.close(0)
        learner.close()


def _put(g, mix, seq: int = 0) -> int:
    for n, dim in mix:
        g.lanes[0].put(_batch(seq, n, dim))
        seq += n
    return seq


@pytest.mark.timeout(300)
def test_rows_larger_than_a_slot_keep_their_place_in_the_stream_with_no_ack_coming(group):
    """Each wide row goes over the pipe, its place held by an empty slot: every row arrives, in
    order, once, though the learner acks nothing (before: a wide row waited for every slot before
    it to be released, i.e. for acks, and the rows after it waited behind it)."""
    g, learner = group
    assert not g.ring.fits(encode(_batch(0, 1, WIDE)))  # the case under test: a row larger than a slot
    n = _put(g, MIX)
    assert learner.receive(n, g) == list(range(n))


@pytest.mark.timeout(300)
def test_a_new_transport_process_gets_the_rows_over_the_pipe_again(group):
    """The transport process killed (-9) after sending everything: its successor reads the ring
    again from the first unreleased slot (nothing acked: slot 0) and gets each wide row again from
    the actor: the whole stream arrives again, in order, then the rows put after the kill."""
    g, learner = group
    n = _put(g, MIX)
    assert learner.receive(n, g) == list(range(n))
    pid = g._proc.pid
    os.kill(pid, signal.SIGKILL)
    g._proc.join()
    m = _put(g, [(1, WIDE), (2, NARROW)], seq=n)  # the first put starts another
    assert g.restarts == 1 and g._proc.pid != pid
    assert learner.receive(m, g) == list(range(m))
