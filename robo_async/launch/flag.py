"""The launcher's stop flag, shared by its processes, safe against kill -9.

`multiprocessing.Event` takes a lock (a POSIX semaphore) in `is_set()` and `set()`. A process
killed with -9 while inside either leaves that lock held for good, and every process that asks
`is_set()` afterwards waits forever: a learner restarted after a kill -9 wedged on its first look
at the flag (all threads waiting on a futex, no CPU, "no report for 30 s" after every restart of
a 60-minute soak), and actors stopped their heartbeats the same way. `StopFlag` is one byte of
shared memory, read and written without any lock (a byte store is atomic; the flag only ever goes
from 0 to 1 during a run), so a process killed anywhere cannot wedge the others.

    stop = StopFlag(mp.get_context("spawn"))   # pass to Process(args=...) like an Event
    stop.set(); stop.is_set(); stop.wait(timeout)
"""

from __future__ import annotations

import time
from multiprocessing.context import BaseContext


class StopFlag:
    """`is_set`, `set`, `clear` and `wait` of an Event, without a lock (see the module's docstring)."""

    def __init__(self, ctx: BaseContext) -> None:
        self._v = ctx.RawValue("b", 0)

    def is_set(self) -> bool:
        return bool(self._v.value)

    def set(self) -> None:
        self._v.value = 1

    def clear(self) -> None:
        self._v.value = 0

    def wait(self, timeout: float | None = None, poll_s: float = 0.02) -> bool:
        """True once set; False if `timeout` passed first (polls: nothing to wake)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._v.value:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))
        return True
