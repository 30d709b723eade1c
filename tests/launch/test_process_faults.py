"""The local launcher reading a child killed half-way through writing to it: real spawned
processes, a real multiprocessing queue, SIGKILL. What it had sent whole arrives; the half message
never blocks the launcher; the child is reported dead by its exit."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import struct
import time

import pytest

BIG = 1 << 20  # a status with camera frames: far more than a pipe holds (64 KiB)


def _whole_then_half(status: mp.Queue, errors: mp.Queue) -> None:
    """Whole statuses (one of 1 MiB: it reaches the reader in parts), then the first bytes of
    another 1 MiB one (its length, a little of its body), then SIGKILL: what a child killed while
    its queue's feeder thread writes a large status leaves."""
    fd = os.dup(status._writer.fileno())  # the pipe the queue's feeder thread writes
    status.put(("progress", {"step": 1}))
    status.put(("progress", {"step": 2, "frame": b"\x01" * BIG}))
    status.close()
    status.join_thread()  # the whole messages are in the pipe, or read
    os.write(fd, struct.pack("!i", BIG) + b"\x80" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)


def _half_error(errors: mp.Queue) -> None:
    """The same half message on the errors queue (read when the launcher asks why a child died)."""
    os.write(errors._writer.fileno(), struct.pack("!i", BIG) + b"\x80" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(60)  # the guard: the old reader blocked here forever
def test_a_child_killed_mid_status_neither_blocks_the_launcher_nor_loses_what_it_sent_whole():
    from robo_async.launch.local import _Process  # here: the spawned children import this module
    from robo_async.launch.runner import Exit

    ctx = mp.get_context("spawn")
    status = ctx.Queue()
    p = _Process(ctx, "learner", _whole_then_half, (status,), status)
    got = []
    while p.exit() is None:  # as the supervisor polls (its tick), while the child writes and dies
        got += p.poll()
        time.sleep(0.01)
    got += p.poll()  # the rest of what it wrote whole
    assert p.poll() == []  # the half message stays unread, and asking again returns at once
    assert got == [("progress", {"step": 1}), ("progress", {"step": 2, "frame": b"\x01" * BIG})]
    assert p.exit() is Exit.FAILED
    assert "SIGKILL" in p.why()


@pytest.mark.timeout(60)
def test_a_child_killed_mid_error_is_reported_by_its_exit():
    from robo_async.launch.local import _Process  # here: the spawned children import this module
    from robo_async.launch.runner import Exit

    ctx = mp.get_context("spawn")
    p = _Process(ctx, "actor 3", _half_error, (), None)
    p.proc.join()
    assert p.exit() is Exit.FAILED
    assert p.why() == "exit code -9 (SIGKILL)"  # the half message is not taken for a reason
    assert p.poll() == []
