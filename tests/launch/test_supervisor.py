"""The supervision loop on its own, over a scripted runner and a scripted clock: the rules every
runner gets (serial, local, Ray). Real processes under each runner are in test_e2e.py; here the
order of decisions is checked, which real processes cannot make deterministic: a pending restart
is a scheduled time while the loop keeps watching, a hung real-time actor is killed and restarted,
a runner that cannot kill (serial) is never asked to."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from robo_async.launch import supervisor
from robo_async.launch.options import RestartPolicy
from robo_async.launch.restarts import read_events
from robo_async.launch.runner import Exit, Ready
from robo_async.launch.supervisor import (
    RunFailed,
    Supervisor,
)


class Clock:
    """Stands in for the `time` module inside supervisor.py: sleeping advances it, and `at(t, f)`
    makes something happen once the clock passes t."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.script: list[tuple[float, object]] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, dt: float) -> None:
        self.now += dt
        for t, f in [s for s in self.script if s[0] <= self.now]:
            self.script.remove((t, f))
            f()

    def at(self, t: float, f) -> None:
        self.script.append((t, f))


class Proc:
    def __init__(self, runner: Runner, who: str, pid: int) -> None:
        self.runner, self.who, self._pid = runner, who, pid
        self.ended: Exit | None = None
        self.reports: list[tuple[str, object]] = []
        self.killed = False
        self.silent = False  # a learner that stops reporting

    def pid(self) -> int | None:
        return self._pid

    def poll(self) -> list[tuple[str, object]]:
        out, self.reports = self.reports, []
        if self.who == "learner" and self.ended is None and not self.silent:
            out.append(("progress", {"time/env_steps": 1.0}))
            out.append(
                ("actors", {a: {"heard_s": self.runner.clock.now - heard} for a, heard in self.runner.heard.items()})
            )
        return out

    def exit(self) -> Exit | None:
        return self.ended

    def why(self) -> str:
        return "killed" if self.killed else "it crashed"

    def kill(self) -> None:
        self.killed, self.ended = True, Exit.FAILED

    def terminate(self) -> None:
        self.ended = self.ended or Exit.CLEAN


class Runner:
    name = "scripted"

    def __init__(self, clock: Clock, kills: bool = True) -> None:
        self.clock, self.kills, self.restarts_learner = clock, kills, True
        self.started: list[tuple[float, Proc]] = []
        self.heard: dict[int, float] = {}  # actor id -> when the learner last heard it
        self.pids = iter(range(100, 10_000))
        self.stopped = False

    def start_learner(self, cfg: object) -> Proc:
        p = Proc(self, "learner", next(self.pids))
        p.reports.append(("ready", Ready(("tcp://a:1", "tcp://a:2"), ("tcp://*:1", "tcp://*:2"))))
        self.started.append((self.clock.now, p))
        return p

    def start_actor(self, cfg: object) -> Proc:
        p = Proc(self, f"actor {cfg.actor_id}", next(self.pids))
        self.heard[cfg.actor_id] = self.clock.now
        self.started.append((self.clock.now, p))
        return p

    def procs(self, who: str) -> list[Proc]:
        return [p for _, p in self.started if p.who == who]

    def stop(self) -> None:
        self.stopped = True
        for _, p in self.started:
            if p.ended is None and p.who != "learner":
                p.ended = Exit.CLEAN

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class Loop:
    realtime: bool = True


@dataclasses.dataclass(frozen=True)
class ActorCfg:
    actor_id: int
    loop: Loop = Loop()
    data_address: str = ""
    weights_address: str = ""


@dataclasses.dataclass(frozen=True)
class LearnerCfg:
    run_dir: str
    data_address: str = ""
    weights_address: str = ""
    resume: bool = False
    count_stored: bool = False
    restarted: int = 0


@dataclasses.dataclass(frozen=True)
class Launcher:
    supervise: RestartPolicy


class Task:
    def resource_id(self, actor_id: int) -> str:
        return f"sim:reach/{actor_id}"


@dataclasses.dataclass
class Plan:
    run_dir: Path
    actors: list
    learner: LearnerCfg
    launcher: Launcher
    start_timeout_s: float = 60.0
    shutdown_timeout_s: float = 20.0
    dashboard_port: int | None = None

    def task_of(self, actor_id: int) -> Task:
        return Task()


class Display:
    def __init__(self) -> None:
        self.said: list[str] = []

    def update(self, progress: dict) -> None:
        pass

    def message(self, text: str) -> None:
        self.said.append(text)


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(supervisor, "time", c)
    return c


def plan_for(tmp_path: Path, n_actors: int = 1, realtime: bool = True, **policy: float) -> Plan:
    return Plan(
        tmp_path,
        [ActorCfg(a, Loop(realtime)) for a in range(n_actors)],
        LearnerCfg(str(tmp_path)),
        Launcher(RestartPolicy(**policy)),
    )


def finish(runner: Runner) -> None:
    """The newest learner says it is done (the run's end)."""
    learner = runner.procs("learner")[-1]
    learner.reports.append(("done", {"reason": "budget", "checkpoint": "ckpt"}))
    learner.ended = Exit.CLEAN


def test_a_pending_learner_restart_is_a_time_and_the_actors_are_watched_meanwhile(tmp_path, clock):
    runner = Runner(clock)
    t0 = clock.now
    clock.at(t0 + 5, lambda: setattr(runner.procs("learner")[0], "ended", Exit.FAILED))
    clock.at(t0 + 6, lambda: setattr(runner.procs("actor 0")[0], "ended", Exit.FAILED))
    clock.at(t0 + 30, lambda: finish(runner))
    plan = plan_for(tmp_path, backoff_s=10, max_backoff_s=10)
    result = Supervisor(plan, runner, Display()).run()
    assert result.reason == "budget" and result.progress["supervisor/learner_restarts"] == 1
    events = [(e["event"], e["who"], round(e["t"] - t0)) for e in read_events(tmp_path)]
    # the actor's crash, during the learner's 10 s backoff, is seen at once and restarted on its own time
    assert events == [
        ("failed", "learner", 5),
        ("failed", "actor 0", 6),
        ("restarted", "learner", 15),
        ("ready", "learner", 15),
        ("restarted", "actor 0", 16),
    ], events
    assert [round(t - t0) for t, p in runner.started if p.who == "actor 0"] == [0, 16]


@pytest.mark.parametrize("realtime", [True, False])
def test_a_hung_real_time_actor_is_killed_and_restarted_and_an_as_fast_one_is_not(tmp_path, clock, realtime):
    runner = Runner(clock)
    t0 = clock.now

    def hear() -> None:  # the learner hears actor 1 always, actor 0 until t0 + 5 (then it hangs)
        runner.heard[1] = clock.now
        if clock.now < t0 + 5 or len(runner.procs("actor 0")) > 1:  # (its restart is heard again)
            runner.heard[0] = clock.now
        clock.at(clock.now + 0.5, hear)

    clock.at(t0 + 0.5, hear)
    clock.at(t0 + 40, lambda: finish(runner))
    plan = plan_for(tmp_path, n_actors=2, realtime=realtime, liveness_s=4, backoff_s=1)
    Supervisor(plan, runner, Display()).run()
    events = [(e["event"], e["who"]) for e in read_events(tmp_path)]
    if realtime:
        assert events == [("failed", "actor 0"), ("restarted", "actor 0")], events
        failed = read_events(tmp_path)[0]
        assert failed["why"].startswith("hung: no heartbeat for ")
        assert t0 + 4 + 4 < failed["t"] < t0 + 5 + 4 + 1  # heard last in [4, 5], then liveness_s
        assert runner.procs("actor 0")[0].killed and len(runner.procs("actor 1")) == 1
    else:  # an as-fast simulator may wait at its allowance: silence is no sign of a hang
        assert events == [] and not runner.procs("actor 0")[0].killed


def test_a_runner_that_cannot_kill_is_never_asked_to(tmp_path, clock):
    runner = Runner(clock, kills=False)  # serial: threads
    t0 = clock.now
    clock.at(t0 + 1, lambda: setattr(runner.procs("learner")[0], "silent", True))
    clock.at(t0 + 1, lambda: runner.heard.update({0: t0 - 100}))
    clock.at(t0 + 100, lambda: finish(runner))
    result = Supervisor(plan_for(tmp_path, liveness_s=4), runner, Display()).run()
    assert result.reason == "budget" and read_events(tmp_path) == []
    assert not any(p.killed for _, p in runner.started)


def test_a_spent_restart_budget_stops_the_run_naming_what_failed(tmp_path, clock):
    runner = Runner(clock)
    clock.at(clock.now + 1, lambda: setattr(runner.procs("actor 0")[-1], "ended", Exit.FAILED))
    clock.at(clock.now + 3, lambda: setattr(runner.procs("actor 0")[-1], "ended", Exit.FAILED))
    with pytest.raises(
        RunFailed,
        match=r"actor 0 failed 2 times within 3600 s \(restart budget "
        r"launcher.supervise.restarts=1\); last: it crashed",
    ):
        Supervisor(plan_for(tmp_path, restarts=1, backoff_s=1), runner, Display()).run()
    assert runner.stopped  # the learner was asked to stop (and save) on the way down
