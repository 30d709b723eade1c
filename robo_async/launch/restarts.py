"""The supervisor's restart rules: each process's restart budget (`RestartBudget`: at most
`restarts` within `window_s`, waiting `backoff_s`, doubled per recent restart up to `max_backoff_s`;
the settings are `options.RestartPolicy`), the run's event log (`supervisor.jsonl`: one line per
failure and restart, `read_events`), and the learner restarted on the same addresses from its last
checkpoint (`restart_config`). The loop that applies them is supervisor.py.

    budget = RestartBudget("learner", plan.launcher.supervise)
    delay = budget.next_delay(now)            # None: budget spent -> RunFailed(budget.exhausted(why))
    budget.record(now, why); events.write(...)   # then start it again after `delay`
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from robo_async.launch.options import RestartPolicy
from robo_async.launch.runner import RunFailed
from robo_async.learner.config import LearnerConfig


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

    def claim(self, why: str, now: float) -> float:
        """Record a restart for `why` at `now` (monotonic s) and return the wait before it; RunFailed
        when the budget is spent."""
        delay = self.next_delay(now)
        if delay is None:
            raise RunFailed(self.exhausted(why))
        self.record(now, why)
        return delay

    def exhausted(self, why: str) -> str:
        p = self.policy
        return (
            f"{self.who} failed {len(self._recent) + 1} times within {p.window_s:.0f} s "
            f"(restart budget launcher.supervise.restarts={p.restarts}); last: {why}"
        )


class EventLog:
    """`<run_dir>/supervisor.jsonl`: one line per failure and restart, for people and benchmarks,
    each stamped `t` by `clock` (wall-clock seconds)."""

    def __init__(self, run_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = run_dir / "supervisor.jsonl"
        self.clock = clock

    def write(self, event: str, who: str, **fields: object) -> None:
        line = json.dumps({"t": self.clock(), "event": event, "who": who, **fields})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def read_events(run_dir: Path) -> list[dict]:
    path = run_dir / "supervisor.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def restart_config(cfg: LearnerConfig, bind: tuple[str, str], restarted: int) -> LearnerConfig:
    """The same learner on the same addresses (actors reconnect by themselves), from its last
    checkpoint if it wrote one, else counting what the store holds as this run's env steps."""
    ckpts = Path(cfg.run_dir) / "checkpoints"
    has_ckpt = any(ckpts.glob("ckpt_*.safetensors")) if ckpts.exists() else False
    return dataclasses.replace(
        cfg,
        data_address=bind[0],
        weights_address=bind[1],
        resume=has_ckpt,
        count_stored=not has_ckpt,
        restarted=restarted,
    )
