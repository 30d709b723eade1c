"""Real-time pacing of the control loop: tick k starts at t0 + k*dt, and a late tick restarts the
pacing, never catches up (`Pacer`); and the GIL switch interval held short while a real-time loop
runs, so a tick waking while another thread runs Python waits little for the GIL
(`realtime_switch_interval`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from robo_async.actor.records import LatenessTracker

REALTIME_SWITCH_S = 0.0005  # GIL switch interval while a real-time loop runs (see ControlLoop.run)


class Pacer:
    """When each tick of a real-time loop starts, and how late it was (into `lateness`)."""

    def __init__(self, dt: float, lateness: LatenessTracker) -> None:
        self.dt, self.lateness = dt, lateness
        self.next_tick = time.monotonic()

    def wait(self) -> float:
        """Sleep until this tick's start; how late it starts (seconds). Tick k starts at t0 + k * dt;
        a late tick restarts the pacing."""
        now = time.monotonic()
        if now < self.next_tick:
            time.sleep(self.next_tick - now)
            now = time.monotonic()
        lateness = now - self.next_tick
        self.lateness.add(lateness)
        self.next_tick = now + self.dt if lateness > self.dt else self.next_tick + self.dt
        return lateness

    def restart(self) -> None:
        """The next tick starts now (after a reset, which may take a while on a real robot)."""
        self.next_tick = time.monotonic()


@contextmanager
def realtime_switch_interval(realtime: bool) -> Iterator[None]:
    """While inside, with `realtime`, the GIL switch interval at most REALTIME_SWITCH_S; restored on
    exit. When the control thread wakes for its tick while another thread (uplink, inference,
    weights) runs Python, it waits for the GIL up to the switch interval (5 ms by default): the
    tick's lateness. 0.5 ms bounds that wait."""
    switch = sys.getswitchinterval()
    if realtime:
        sys.setswitchinterval(min(switch, REALTIME_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(switch)
