"""Restart rules shared by the local and Ray launchers.

A learner that dies (any exit but a clean one after "done") or stops reporting for `liveness_s`
(its progress reports are the heartbeat: a hung loop is caught, not only a dead process) is killed
and started again from its last checkpoint and the store, on the same addresses, so actors
reconnect by themselves and resend what was not acked. Actors that crash are restarted too (a lost
robot is not: that robot is held and closed). Each process has a restart budget: at most
`restarts` within `window_s`, waiting `backoff_s`, doubled per recent restart up to
`max_backoff_s`; past the budget the run stops and says what failed and how often.

    policy = plan.launcher.supervise
    budget = RestartBudget("learner", policy)
    delay = budget.next_delay(now)            # None: budget spent -> RunFailed(budget.exhausted(why))
    budget.record(now, why); log.event(...)   # then start it again after `delay`
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class RestartPolicy:
    restarts: int = 5  # restarts allowed per process within window_s (0: never restart)
    window_s: float = 3600.0
    backoff_s: float = 1.0  # wait before a restart, doubled for each restart in the window ...
    max_backoff_s: float = 30.0  # ... up to this
    liveness_s: float = 30.0  # a learner that reports nothing for this long is killed and restarted

    def __post_init__(self) -> None:
        if (self.restarts < 0 or self.window_s <= 0 or self.backoff_s < 0 or self.max_backoff_s < self.backoff_s
                or self.liveness_s <= 0):
            raise ValueError(f"launcher.supervise {self}: restarts >= 0, window_s > 0, "
                             f"0 <= backoff_s <= max_backoff_s, liveness_s > 0")


@dataclass(frozen=True)
class LauncherConfig:
    """`launcher`: which runner places the learner and the actors, and how they are supervised."""

    name: str = "local"  # serial (one process) | local (processes on this machine) | ray (a Ray cluster)
    start_timeout_s: float = 60.0  # the learner must be ready (bound, checkpoint loaded) within this
    shutdown_timeout_s: float = 20.0  # processes get this long to flush and save before they are killed
    address: str | None = None  # ray: e.g. ray://head:10001 or auto; null starts a local Ray
    num_cpus: int | None = None  # ray: CPUs of a local Ray (null: all)
    learner_num_cpus: float = 1.0  # ray: CPUs reserved for the learner
    actor_num_cpus: float = 0.5  # ray: CPUs reserved per actor
    supervise: RestartPolicy = RestartPolicy()  # restart budgets and liveness (all runners)


@dataclass(frozen=True)
class RayLauncherConfig(LauncherConfig):
    """`launcher=ray`: as `LauncherConfig`, with start-up and shutdown allowances for a cluster."""

    name: str = "ray"
    start_timeout_s: float = 120.0
    shutdown_timeout_s: float = 30.0


@dataclass(frozen=True)
class ResourcesConfig:
    """`resources`: the leases that make robots and simulators schedulable (hal.leases)."""

    lease_dir: str | None = None  # where leases live (default ~/.cache/robo_async/leases or $ROBO_ASYNC_LEASE_DIR)
    wait_s: float = 0.0  # a held robot: 0 fails at once naming the holder; > 0 waits in line this long
    sim_slots: int = 64  # simulators available per task on this machine


class RunFailed(RuntimeError):
    """The run stops: what failed, said in one line."""


class RestartBudget:
    """Restart bookkeeping of one process (bounded: only restarts inside the window are kept)."""

    def __init__(self, who: str, policy: RestartPolicy) -> None:
        self.who = who
        self.policy = policy
        self.total = 0
        self._recent: deque[float] = deque()
        self.last_why = ""

    def next_delay(self, now: float) -> float | None:
        """Seconds to wait before the next restart, or None when the budget is spent."""
        p = self.policy
        while self._recent and now - self._recent[0] > p.window_s:
            self._recent.popleft()
        if len(self._recent) >= p.restarts:
            return None
        return min(p.backoff_s * 2 ** len(self._recent), p.max_backoff_s)

    def record(self, now: float, why: str) -> None:
        self._recent.append(now)
        self.total += 1
        self.last_why = why

    def claim(self, why: str) -> float:
        """Record a restart for `why` and return the wait before it; RunFailed when the budget is spent."""
        now = time.monotonic()
        delay = self.next_delay(now)
        if delay is None:
            raise RunFailed(self.exhausted(why))
        self.record(now, why)
        return delay

    def exhausted(self, why: str) -> str:
        p = self.policy
        return (f"{self.who} failed {len(self._recent) + 1} times within {p.window_s:.0f} s "
                f"(restart budget launcher.supervise.restarts={p.restarts}); last: {why}")


class EventLog:
    """`<run_dir>/supervisor.jsonl`: one line per failure and restart, for people and benchmarks."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "supervisor.jsonl"

    def write(self, event: str, who: str, **fields: object) -> None:
        line = json.dumps({"t": time.time(), "event": event, "who": who, **fields})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def read_events(run_dir: Path) -> list[dict]:
    path = run_dir / "supervisor.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
