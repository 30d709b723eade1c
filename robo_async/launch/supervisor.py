"""The one supervisor: the loop that applies the restart rules (restarts.py) on every runner (serial,
local, Ray; runner.py holds the interface they implement; the rules' settings, `launcher.supervise`,
are `options.RestartPolicy`).

A learner that dies (any exit but a clean one after "done") or stops reporting for `liveness_s`
(its progress reports are the heartbeat: a hung loop is caught, not only a dead process) is killed
and started again from its last checkpoint and the store, on the same addresses, so actors
reconnect by themselves and resend what was not acked. Actors that crash are restarted too (a lost
robot is not: that robot is held and closed; one whose port went away, a pulled cable, rejoins when
the port is back). Each process has a restart budget (restarts.py); past it the run stops and says
what failed and how often.

    result = Supervisor(plan, LocalRunner(plan), display).run()   # the loop, over any runner

The loop never sleeps through a backoff: a pending restart is a time, and the learner, the other
actors and the dashboard are watched meanwhile. A real-time actor whose heartbeats stop reaching a
healthy learner for `liveness_s` is hung and is killed and restarted (where the runner can kill).
Shutdown: actors first (they flush), then the learner (it saves); stragglers are terminated.

Actors dial the addresses the learner reports once bound (`Ready.addresses`), or, where
`transport.advertise` is set (`plan.advertise`: a NAT, an ssh -L tunnel or a proxy between them),
the advertised pair (`actor_addresses`). `addresses.json` in the run directory stays the learner's
own pair either way (data, weights, as reported: what a tool on the learner's side connects to); the
advertised pair is in the run's `config.yaml` (`transport.advertise`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import TYPE_CHECKING

from robo_async.launch.plan import TrainPlan
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.restarts import EventLog, RestartBudget, restart_config
from robo_async.launch.runner import Exit, Proc, Ready, RunFailed, Runner, RunResult
from robo_async.learner.config import LearnerConfig

if TYPE_CHECKING:  # imported only when a dashboard starts (start_dashboard)
    from robo_async.dashboard.server import Dashboard

log = logging.getLogger(__name__)

__all__ = ["RunFailed", "RunResult", "Supervisor", "actor_addresses", "start_dashboard"]


def actor_addresses(ready: Ready, advertise: tuple[str, str] | None) -> tuple[str, str]:
    """(data, weights) as actors dial them: `transport.advertise` where set, else what the learner
    reported once bound."""
    return advertise if advertise is not None else ready.addresses


def start_dashboard(plan: TrainPlan, display: ProgressDisplay) -> Dashboard | None:
    """The live web page (`dashboard.port`; null: none), on loopback; its address is printed."""
    port = plan.dashboard_port
    if port is None:
        return None
    from robo_async.dashboard.server import Dashboard

    try:
        dash = Dashboard(int(port)).start()
    except (RuntimeError, OSError) as e:  # a busy port: the run goes on without the page
        display.message(f"[yellow]dashboard not started: {e}[/]")
        return None
    dash.update(run={"name": plan.run_dir.name, "status": "running"})
    (plan.run_dir / "dashboard.url").write_text(dash.url)
    port_s = dash.url.split(":")[-1].strip("/")
    display.message(
        f"dashboard: {dash.url} (loopback; from another machine: ssh -L {port_s}:127.0.0.1:{port_s} <this host>)"
    )
    return dash


TICK_S = 0.05  # how often the loop looks at every process


class Supervisor:
    """Starts the learner, then the actors on its addresses; watches them all until the learner is
    done; restarts what fails within its budget; shuts down in order. One loop for every runner."""

    def __init__(self, plan: TrainPlan, runner: Runner, display: ProgressDisplay) -> None:
        self.plan, self.runner, self.display = plan, runner, display
        self.policy = plan.launcher.supervise
        self.events = EventLog(plan.run_dir, lambda: time.time())  # (late-bound: the loop's clock stands in in tests)
        self.by_id = {cfg.actor_id: cfg for cfg in plan.actors}
        self.learner_budget = RestartBudget("the learner", self.policy)
        self.actor_budgets = {a: RestartBudget(f"actor {a}", self.policy) for a in self.by_id}
        self.resources = {a: plan.task_of(a).resource_id(a) for a in self.by_id}
        self.learner: Proc | None = None
        self.ready: Ready | None = None  # the first learner's addresses: every restart binds them again
        self.learner_ready = False  # the current learner said "ready"
        self.learner_heard = self.learner_ready_at = time.monotonic()  # any report is a heartbeat
        self.actors: dict[int, Proc] = {}
        self.pending: dict[str, float] = {}  # "learner" / "actor N" waiting to be restarted -> when
        self.lost_ports: dict[int, str] = {}  # actors whose robot's port went away -> that port (rejoin on return)
        self.started_at: dict[int, float] = {}
        self.heard_at: dict[int, float] = {}  # actor id -> when the learner last heard it (this clock)
        self.rows_at = 0.0  # when the learner last reported its actors: silence is judged as of then
        self.hung: dict[int, str] = {}  # actors killed as hung, and why
        self.pids: dict[str, int] = {}
        self.progress: dict[str, float] = {}
        self.done: dict | None = None
        self.stopping = False  # an actor ended cleanly: the learner said it is stopping
        self.dash: Dashboard | None = None

    def run(self) -> RunResult:
        interrupted = False
        self.dash = start_dashboard(self.plan, self.display)
        try:
            self._start()
            self._watch()
        except KeyboardInterrupt:
            interrupted = True
            self.display.message("[yellow]Ctrl-C: stopping; the learner writes a final checkpoint...[/]")
        finally:
            self._shutdown()
            if self.dash is not None:
                self.dash.update(run={"name": self.plan.run_dir.name, "status": "ended"})
                self.dash.close()
        if self.done is None:
            return RunResult("interrupted", None, {**self.progress, **self.restarts()}, interrupted)
        done = dict(self.done)
        return RunResult(done.pop("reason"), done.pop("checkpoint"), {**done, **self.restarts()}, interrupted)

    def restarts(self) -> dict[str, float]:
        return {
            "supervisor/learner_restarts": self.learner_budget.total,
            "supervisor/actor_restarts": sum(b.total for b in self.actor_budgets.values()),
        }

    # -- start-up ---------------------------------------------------------------------------------
    def _start(self) -> None:
        self._new_learner(self.plan.learner)
        deadline = time.monotonic() + self.plan.start_timeout_s
        while self.ready is None:
            self._read_learner()
            if self.ready is not None:
                break
            assert self.learner is not None
            if self.learner.exit() is not None:
                raise RunFailed(f"the learner failed to start: {self.learner.why()}")
            if time.monotonic() > deadline:
                raise RunFailed(f"the learner did not start within {self.plan.start_timeout_s:.0f} s")
            time.sleep(TICK_S)
        (self.plan.run_dir / "addresses.json").write_text(json.dumps(list(self.ready.addresses)))  # data, weights
        for aid in self.by_id:
            self._start_actor(aid)
        deadline = time.monotonic() + self.plan.start_timeout_s  # processes.json once every pid is known
        while not self._write_pids() and time.monotonic() < deadline:
            self._read_learner()
            time.sleep(TICK_S)

    def _new_learner(self, cfg: LearnerConfig) -> None:
        self.learner = self.runner.start_learner(cfg)
        self.learner_ready = False
        self.learner_heard = time.monotonic()

    def _start_actor(self, aid: int) -> None:
        assert self.ready is not None
        data, weights = actor_addresses(self.ready, getattr(self.plan, "advertise", None))  # plans without it: bound
        cfg = dataclasses.replace(self.by_id[aid], data_address=data, weights_address=weights)
        self.actors[aid] = self.runner.start_actor(cfg)
        self.started_at[aid] = time.monotonic()

    def _write_pids(self) -> bool:
        """processes.json: the newest pid of each process (a dead one's stays until its restart).
        Written when it changed and every running process's pid is known; True once written."""
        running = {f"actor {a}": p for a, p in self.actors.items()}
        if self.learner is not None:
            running["learner"] = self.learner
        pids = {who: p.pid() for who, p in running.items()}
        if self.learner is not None and hasattr(self.learner, "rank_pids"):  # learner.replicas > 1 (local)
            pids.update(self.learner.rank_pids())
        if any(pid is None for pid in pids.values()):
            return False
        new = {**self.pids, **pids}
        if new != self.pids or not (self.plan.run_dir / "processes.json").exists():
            self.pids = new
            tmp = self.plan.run_dir / ".processes.json.tmp"  # replaced whole: a reader never sees it half written
            tmp.write_text(json.dumps(new))
            os.replace(tmp, self.plan.run_dir / "processes.json")
        return True

    # -- the loop ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        all_done_at: float | None = None  # when the last actor ended cleanly
        while self.done is None:
            now = time.monotonic()
            if (
                all_done_at is None
                and not self.actors
                and not self.lost_ports
                and not any(w != "learner" for w in self.pending)
            ):
                all_done_at = now
            if all_done_at is not None and now - all_done_at > self.plan.shutdown_timeout_s:
                return  # every actor ended and the learner has not said "done": stop it (shutdown)
            if self.learner is not None:
                self._read_learner()
                self._check_learner()
            if self.learner is not None and self.learner_ready and self.done is None and not self.stopping:
                self._kill_hung()
            self._check_actors()
            self._rejoin_returned()
            self._restart_due()
            self._write_pids()
            time.sleep(TICK_S)

    def _read_learner(self) -> None:
        if self.learner is None:
            return
        for kind, payload in self.learner.poll():
            now = time.monotonic()
            self.learner_heard = now
            if kind == "ready":
                assert isinstance(payload, Ready)
                if self.ready is None:
                    self.ready = payload
                else:
                    self._write_pids()  # processes.json names the new pid before the event says it is back
                    self.events.write("ready", "learner", pid=self.learner.pid())
                    self.display.message(f"[green]the learner is back (pid {self.learner.pid()})[/]")
                self.learner_ready, self.learner_ready_at = True, now
            elif kind == "progress":
                self.progress = {**payload, **self.restarts()}  # type: ignore[dict-item]
                self.display.update(self.progress)
                if self.dash is not None:
                    self.dash.update(progress=self.progress)
            elif kind == "actors":
                self.rows_at = now
                rows: dict = payload  # type: ignore[assignment]
                for a, row in rows.items():
                    self.heard_at[int(a)] = now - row["heard_s"]
                if self.dash is not None:
                    self.dash.update(
                        actors={a: {**row, "resource": self.resources.get(int(a), "-")} for a, row in rows.items()}
                    )
            elif kind == "done":
                self.done = payload  # type: ignore[assignment]

    def _check_learner(self) -> None:
        """A learner that exits (but cleanly after the actors saw it stopping) or is silent past its
        limit is killed and restarted after its backoff, from its checkpoint, on the same addresses."""
        learner = self.learner
        assert learner is not None
        if self.done is not None:
            return
        ended = learner.exit()
        if ended is not None:
            self._read_learner()  # what it said on its way out ("done") is read before judging
            if self.done is not None or (ended is Exit.CLEAN and self.stopping):
                return
        silent = time.monotonic() - self.learner_heard
        limit = self.policy.liveness_s if self.learner_ready else self.plan.start_timeout_s
        if ended is None and (silent <= limit or not self.runner.kills):
            return
        if ended is None:
            why = f"no report for {silent:.0f} s (launcher.supervise.liveness_s)"
            learner.kill()
        else:
            why = learner.why()
        # a group of learner ranks (learner.replicas > 1) also names the rank that failed and its pid
        self.events.write(
            "failed",
            "learner",
            pid=learner.pid(),
            why=why,
            **(learner.failure() if hasattr(learner, "failure") else {}),
        )
        if not self.runner.restarts_learner:
            raise RunFailed(f"the learner failed: {why}; launcher={self.runner.name} does not restart it")
        delay = self.learner_budget.claim(why, time.monotonic())
        self.display.message(
            f"[red]the learner (pid {learner.pid()}) failed: {why}; restarting it in {delay:.0f} s "
            f"from its last checkpoint and the store (restart {self.learner_budget.total}); "
            f"actors keep their robots meanwhile[/]"
        )
        self.learner = None
        self.pending["learner"] = time.monotonic() + delay

    def _kill_hung(self) -> None:
        """A real-time actor whose messages (a heartbeat every actor.heartbeat_s from its control loop)
        stopped reaching a healthy learner for liveness_s, or that never sent one within start_timeout_s
        of starting, is hung (a deadlock, a stuck driver call): killed here, restarted as a crash. As-fast
        simulators may wait at their allowance, so silence is no sign of a hang there."""
        if not self.runner.kills:
            return
        now = self.rows_at  # a learner that stops reporting fails itself; its actors are not blamed
        for aid, p in self.actors.items():
            if aid in self.hung or not self.by_id[aid].loop.realtime or p.exit() is not None:
                continue
            since = max(self.started_at[aid], self.learner_ready_at)
            heard = self.heard_at.get(aid, float("-inf"))
            if heard > self.started_at[aid]:
                silent, limit = now - max(heard, since), self.policy.liveness_s
            else:
                silent, limit = now - since, max(self.policy.liveness_s, self.plan.start_timeout_s)
            if silent > limit:
                self.hung[aid] = f"hung: no heartbeat for {silent:.0f} s (launcher.supervise.liveness_s)"
                p.kill()

    def _check_actors(self) -> None:
        for aid, p in list(self.actors.items()):
            ended = p.exit()
            if ended is None or self.done is not None:
                continue
            del self.actors[aid]
            who = f"actor {aid}"
            if ended is Exit.CLEAN:  # it ended because the learner said it is stopping: wait for "done"
                self.stopping = True
                continue
            why = self.hung.pop(aid, None) or p.why()
            self.events.write("failed", who, pid=p.pid(), why=why)
            if ended is Exit.ROBOT_LOST:  # that robot is stopped and held; the others carry on
                left = len(self.actors) + sum(w != "learner" for w in self.pending)
                port = self._port_of(aid)
                if port is not None and not os.path.exists(port):  # unplugged: taken back when it returns
                    self.lost_ports[aid] = port
                    self.events.write("robot_lost", who, port=port, why=why)
                self.display.message(
                    f"[red]{who} (pid {p.pid()}) stopped: {why}; continuing with {left} actor(s)"
                    + (f"; it rejoins when {port} is back" if aid in self.lost_ports else "")
                    + "[/]"
                )
                if not left and not self.lost_ports and not self.stopping:  # (once stopping, its result follows)
                    raise RunFailed(f"{who} (pid {p.pid()}): {why}; no robots left, stopping the run")
                continue
            if self.stopping:
                continue
            budget = self.actor_budgets[aid]
            delay = budget.claim(why, time.monotonic())
            self.display.message(
                f"[red]{who} (pid {p.pid()}) died: {why}; restarting it in {delay:.0f} s "
                f"(restart {budget.total}); it resends what it journaled[/]"
            )
            self.pending[who] = time.monotonic() + delay

    def _port_of(self, aid: int) -> str | None:
        robot = self.plan.task_of(aid).robot
        port = robot.get("port") if robot else None
        return str(port) if port else None

    def _rejoin_returned(self) -> None:
        """An arm whose port went away (a pulled cable) is taken back once the port is there again:
        its actor starts anew (it leases the robot, connects, and its journal resends)."""
        for aid, port in list(self.lost_ports.items()):
            if os.path.exists(port) and not self.stopping:
                del self.lost_ports[aid]
                self.events.write("robot_back", f"actor {aid}", port=port)
                self.display.message(f"[green]{port} is back: actor {aid} rejoins[/]")
                self.pending[f"actor {aid}"] = time.monotonic()

    def _restart_due(self) -> None:
        now = time.monotonic()
        for who, at in list(self.pending.items()):
            if now < at:
                continue
            del self.pending[who]
            if who == "learner":
                assert self.ready is not None
                self._new_learner(restart_config(self.plan.learner, self.ready.bind, self.learner_budget.total))
                assert self.learner is not None
                self.events.write("restarted", "learner", pid=self.learner.pid(), restart=self.learner_budget.total)
            else:
                aid = int(who.split()[1])
                self._start_actor(aid)
                self.events.write("restarted", who, pid=self.actors[aid].pid(), restart=self.actor_budgets[aid].total)

    # -- shutdown ---------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        """Actors first (they flush), then the learner (it saves); within shutdown_timeout_s, then
        terminated. The learner's reports are read meanwhile (its "done" is the run's result)."""
        self.runner.stop()
        deadline = time.monotonic() + self.plan.shutdown_timeout_s
        order = list(self.actors.values()) + ([self.learner] if self.learner is not None else [])
        for p in order:
            while p.exit() is None and time.monotonic() < deadline:
                self._drain()
                time.sleep(TICK_S)
            if p.exit() is None:
                p.terminate()
        self._drain()
        self.runner.close()

    def _drain(self) -> None:
        try:
            self._read_learner()
        except Exception as e:  # noqa: BLE001 - a learner dying at shutdown: its checkpoint is what it is
            log.warning("reading the learner at shutdown: %s", e)
