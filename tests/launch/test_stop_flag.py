"""The launcher's stop flag survives its processes being killed -9 anywhere (flag.py)."""

import multiprocessing as mp
import os
import signal
import threading

from robo_async.launch.flag import StopFlag


def _hot(stop, ready) -> None:  # asks the flag as often as a learner's loop does, and more
    ready.send(os.getpid())
    while not stop.is_set():
        pass


def _waits(stop, out) -> None:
    out.put(stop.wait(120))


def test_processes_killed_while_asking_the_flag_do_not_wedge_the_others():
    """Ten processes spinning on `is_set()` killed -9: with a multiprocessing.Event one of them
    is killed holding its lock and the next `is_set()` waits forever (the learner that never
    reported again after a restart). Then the flag still stops a process waiting on it."""
    ctx = mp.get_context("spawn")
    stop, out = StopFlag(ctx), ctx.Queue()
    for _ in range(10):
        back, ready = ctx.Pipe(duplex=False)  # one per process: a killed writer cannot wedge the next
        p = ctx.Process(target=_hot, args=(stop, ready))
        p.start()
        assert back.poll(120)
        back.recv()  # it spins on the flag now
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        asked = threading.Thread(target=stop.is_set, daemon=True)
        asked.start()
        asked.join(60)
        assert not asked.is_alive(), "is_set() wedged by a process killed while asking it"
    waiter = ctx.Process(target=_waits, args=(stop, out))
    waiter.start()
    stop.set()
    assert out.get(timeout=120) is True
    waiter.join(60)
    assert waiter.exitcode == 0 and stop.is_set()
    stop.clear()
    assert not stop.is_set() and stop.wait(0.01) is False
