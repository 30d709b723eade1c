"""The local launcher: learner and actors as processes on this machine, supervised.

A learner that dies or goes silent is restarted from its last checkpoint and the store on the
same addresses; an actor that crashes is restarted and resends what it journaled (supervisor.py:
backoff, restart budget, `<run_dir>/supervisor.jsonl`). Shutdown: the learner stopping (solved,
budget) ends the run; a spent restart budget ends it naming what failed and how often; an actor
whose robot is lost stops and the others go on; Ctrl-C sets `stop` so the learner writes a final
checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import TYPE_CHECKING

from hal.leases import Lease, LeaseError, LeaseHeld, LeaseManager
from hal.resources import Resource, acquire_needs, parse_needs
from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import TrainPlan
from robo_async.launch.processes import ROBOT_LOST, actor_main, learner_main
from robo_async.launch.wiring import with_addresses
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.supervisor import EventLog, RestartBudget, RestartPolicy, RunFailed
from robo_async.learner.learner import LearnerConfig

if TYPE_CHECKING:
    from robo_async.dashboard.server import Dashboard


@dataclass
class RunResult:
    reason: str
    checkpoint: str | None
    progress: dict[str, float]
    interrupted: bool = False


def exit_reason(code: int | None) -> str:
    name = f" ({signal.Signals(-code).name})" if code is not None and code < 0 else ""
    return f"exit code {code}{name}"


def _drain_errors(errors: mp.Queue) -> dict[str, str]:
    out = {}
    while True:
        try:
            who, msg = errors.get_nowait()
        except queue.Empty:
            return out
        out[who] = msg


def lease_resources(plan: TrainPlan) -> list[Lease]:
    """One lease per actor (its robot or a simulator slot), all or nothing, held for the run;
    released by the kernel if this process dies."""
    opts = plan.resources
    leases = LeaseManager(opts.lease_dir)
    found: list[Resource] = []
    needs: dict[str, int] = {}
    for cfg in plan.actors:
        t = plan.task_of(cfg.actor_id)
        needs[t.resource_need] = needs.get(t.resource_need, 0) + 1
        if t.robot is not None:
            rid = t.resource_id(cfg.actor_id)
            kind, _, rest = rid.partition(":")
            typ, _, name = rest.partition("/")
            found.append(Resource(kind, typ, name, str(t.robot.get("port", "local"))))
    for need in needs:
        if need.startswith("sim:"):
            task = need.split(":", 1)[1]
            found += [Resource("sim", task, str(i), "local") for i in range(opts.sim_slots)]
    job = plan.run_dir.name
    try:
        got = acquire_needs(found, parse_needs([f"{k}*{n}" for k, n in needs.items()]), leases, job,
                            opts.wait_s)
    except (LeaseHeld, LeaseError) as e:
        raise RunFailed(str(e)) from None
    return [lease for _, lease in got]


def launch_local(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    held = lease_resources(plan)
    try:
        return _launch(plan, display)
    finally:
        for lease in held:
            lease.release()


def start_dashboard(plan: TrainPlan, display: ProgressDisplay) -> "Dashboard | None":
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
    display.message(f"dashboard: {dash.url} (loopback; from another machine: ssh -L {dash.url.split(':')[-1]
                    .strip('/')}:127.0.0.1:{dash.url.split(':')[-1].strip('/')} <this host>)")
    return dash


class _Learner:
    """One incarnation of the learner process, with its own queues (a process killed while
    writing to a multiprocessing queue can leave that queue unusable)."""

    def __init__(self, ctx: BaseContext, cfg: LearnerConfig, stop: Event) -> None:
        self.status, self.errors = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=learner_main, args=(cfg, stop, self.status, self.errors), name="learner")
        self.proc.start()
        self.heard = time.monotonic()  # any report counts as a heartbeat
        self.ready = False
        self.ready_at = time.monotonic()

    def why(self) -> str:
        return _drain_errors(self.errors).get("learner", exit_reason(self.proc.exitcode))


def _restart_config(cfg: LearnerConfig, addresses: tuple[str, str], restarted: int) -> LearnerConfig:
    """The same learner on the same addresses (actors reconnect by themselves), from its last
    checkpoint if it wrote one, else counting what the store holds as this run's env steps."""
    ckpts = Path(cfg.run_dir) / "checkpoints"
    has_ckpt = any(ckpts.glob("ckpt_*.safetensors")) if ckpts.exists() else False
    return dataclasses.replace(cfg, data_address=addresses[0], weights_address=addresses[1], resume=has_ckpt,
                               count_stored=not has_ckpt, restarted=restarted)


def _launch(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    ctx = mp.get_context("spawn")
    stop, errors = ctx.Event(), ctx.Queue()
    policy = plan.launcher.supervise
    events = EventLog(plan.run_dir)
    learner: _Learner | None = _Learner(ctx, plan.learner, stop)
    learner_budget = RestartBudget("the learner", policy)
    actor_budgets = {cfg.actor_id: RestartBudget(f"actor {cfg.actor_id}", policy) for cfg in plan.actors}
    procs: dict[str, mp.Process] = {}  # actors by name
    pending: dict[str, float] = {}  # what waits to be restarted, and when
    progress: dict[str, float] = {}
    done: dict | None = None
    interrupted = False

    heard_at: dict[int, float] = {}  # actor id -> when the learner last heard it (this clock)
    rows_at = [0.0]  # when the learner last reported its actors: silence is judged as of then
    started_at: dict[str, float] = {}
    hung: dict[str, str] = {}  # actors killed as hung, and why

    def start_actor(cfg: ActorConfig, addresses: tuple[str, str]) -> None:
        p = ctx.Process(target=actor_main, name=f"actor-{cfg.actor_id}",
                        args=(plan.task_of(cfg.actor_id), plan.policy, with_addresses(cfg, *addresses), stop, errors))
        p.start()
        procs[f"actor {cfg.actor_id}"] = p
        started_at[f"actor {cfg.actor_id}"] = time.monotonic()

    def kill_hung(learner_since: float) -> None:
        """A real-time actor whose messages (a heartbeat every actor.heartbeat_s from its control loop) stopped
        reaching a healthy learner for liveness_s, or that never sent one within start_timeout_s of
        starting, is hung (a deadlock, a stuck driver call): killed here, restarted below. As-fast
        simulators may wait at their allowance, so silence is no sign of a hang there."""
        for who, p in procs.items():
            aid = int(who.split()[1])
            if who in hung or not p.is_alive() or not by_id[aid].loop.realtime:
                continue
            now = rows_at[0]  # a learner that stops reporting fails itself; its actors are not blamed
            since = max(started_at[who], learner_since)
            heard = heard_at.get(aid, float("-inf"))
            if heard > started_at[who]:
                silent, limit = now - max(heard, since), policy.liveness_s
            else:
                silent, limit = now - since, max(policy.liveness_s, plan.start_timeout_s)
            if silent > limit:
                hung[who] = f"hung: no heartbeat for {silent:.0f} s (launcher.supervise.liveness_s)"
                p.kill()

    def write_pids() -> None:
        pids = {w: p.pid for w, p in procs.items()}
        if learner is not None:
            pids["learner"] = learner.proc.pid
        (plan.run_dir / "processes.json").write_text(json.dumps(pids))

    def restarts() -> dict[str, float]:
        return {"supervisor/learner_restarts": learner_budget.total,
                "supervisor/actor_restarts": sum(b.total for b in actor_budgets.values())}

    dash = start_dashboard(plan, display)
    resources = {c.actor_id: plan.task_of(c.actor_id).resource_id(c.actor_id) for c in plan.actors}
    try:
        deadline = time.monotonic() + plan.start_timeout_s
        addresses = None
        while addresses is None:
            try:
                kind, payload = learner.status.get(timeout=0.2)
                if kind == "ready":
                    addresses = payload
            except queue.Empty:
                pass
            if not learner.proc.is_alive():
                raise RunFailed(f"the learner failed to start: {learner.why()}")
            if time.monotonic() > deadline:
                raise RunFailed(f"the learner did not start within {plan.start_timeout_s:.0f} s")
        learner.ready = True
        learner.ready_at = time.monotonic()
        (plan.run_dir / "addresses.json").write_text(json.dumps(list(addresses)))  # data, weights
        by_id = {cfg.actor_id: cfg for cfg in plan.actors}
        for cfg in plan.actors:
            start_actor(cfg, addresses)
        write_pids()
        all_done_at: float | None = None  # when the last actor ended cleanly
        stopping = False  # an actor ended cleanly: the learner said it is stopping
        while done is None:
            now = time.monotonic()
            if all_done_at is None and not procs and not any(w != "learner" for w in pending):
                all_done_at = now
            if all_done_at is not None and now - all_done_at > plan.shutdown_timeout_s:
                break  # every actor ended and the learner has not said "done": stop it (below)
            if learner is not None:
                try:
                    kind, payload = learner.status.get(timeout=0.2)
                    learner.heard = time.monotonic()
                    if kind == "progress":
                        progress = {**payload, **restarts()}
                        display.update(progress)
                        if dash is not None:
                            dash.update(progress=progress)
                    elif kind == "actors":
                        rows_at[0] = time.monotonic()
                        for a, row in payload.items():
                            heard_at[a] = rows_at[0] - row["heard_s"]
                        if dash is not None:
                            dash.update(actors={a: {**row, "resource": resources.get(a, "-")}
                                                for a, row in payload.items()})
                    elif kind == "done":
                        done = payload
                    elif kind == "ready":
                        learner.ready = True
                        learner.ready_at = time.monotonic()
                        events.write("ready", "learner", pid=learner.proc.pid)
                        display.message(f"[green]the learner is back (pid {learner.proc.pid})[/]")
                except queue.Empty:
                    pass
                now = time.monotonic()
                silent = now - learner.heard
                limit = policy.liveness_s if learner.ready else plan.start_timeout_s
                alive = learner.proc.is_alive()
                if done is None and ((not alive and not (learner.proc.exitcode == 0 and stopping))
                                     or silent > limit):
                    why = learner.why() if not alive else f"no report for {silent:.0f} s (launcher.supervise.liveness_s)"
                    if alive:
                        learner.proc.kill()
                        learner.proc.join(5.0)
                    events.write("failed", "learner", pid=learner.proc.pid, why=why)
                    delay = learner_budget.claim(why)
                    display.message(f"[red]the learner (pid {learner.proc.pid}) failed: {why}; restarting it in "
                                    f"{delay:.0f} s from its last checkpoint and the store "
                                    f"(restart {learner_budget.total}); actors keep their robots meanwhile[/]")
                    learner, pending["learner"] = None, now + delay
            else:
                time.sleep(0.05)
            if learner is not None and learner.ready and done is None and not stopping:
                kill_hung(learner.ready_at)
            if learner is None and time.monotonic() >= pending.get("learner", float("inf")):
                del pending["learner"]
                learner = _Learner(ctx, _restart_config(plan.learner, addresses, learner_budget.total), stop)
                events.write("restarted", "learner", pid=learner.proc.pid, restart=learner_budget.total)
                write_pids()
            for who, p in list(procs.items()):
                if p.is_alive() or done is not None:
                    continue
                del procs[who]
                aid = int(who.split()[1])
                if p.exitcode == 0:  # it ended because the learner said it is stopping: wait for "done"
                    stopping = True
                    continue
                why = hung.pop(who, None) or _drain_errors(errors).get(who, exit_reason(p.exitcode))
                events.write("failed", who, pid=p.pid, why=why)
                if p.exitcode == ROBOT_LOST:  # that robot is stopped and held; the others carry on
                    left = len(procs) + sum(w != "learner" for w in pending)
                    display.message(f"[red]{who} (pid {p.pid}) stopped: {why}; continuing with {left} actor(s)[/]")
                    if not left and not stopping:  # (once the learner is stopping, its result follows)
                        raise RunFailed(f"{who} (pid {p.pid}): {why}; no robots left, stopping the run")
                    continue
                if stopping:
                    continue
                budget = actor_budgets[aid]
                delay = budget.claim(why)
                display.message(f"[red]{who} (pid {p.pid}) died: {why}; restarting it in {delay:.0f} s "
                                f"(restart {budget.total}); it resends what it journaled[/]")
                pending[who] = time.monotonic() + delay
            for who, at in list(pending.items()):
                if who != "learner" and time.monotonic() >= at:
                    del pending[who]
                    start_actor(by_id[int(who.split()[1])], addresses)
                    events.write("restarted", who, pid=procs[who].pid, restart=actor_budgets[int(who.split()[1])].total)
                    write_pids()
    except KeyboardInterrupt:
        interrupted = True
        display.message("[yellow]Ctrl-C: stopping; the learner writes a final checkpoint...[/]")
    finally:
        stop.set()
        finals: list[dict] = []

        def drain() -> None:  # keep reading so no child blocks at exit on a full pipe
            while learner is not None:
                try:
                    kind, payload = learner.status.get_nowait()
                except queue.Empty:
                    return
                if kind == "done":
                    finals.append(payload)

        if learner is not None:
            procs["learner"] = learner.proc
        _shutdown(procs, plan.shutdown_timeout_s, drain)
        drain()
        if dash is not None:
            dash.update(run={"name": plan.run_dir.name, "status": "ended"})
            dash.close()
        if done is None and finals:
            done = finals[-1]
    if done is None:
        return RunResult("interrupted", None, {**progress, **restarts()}, interrupted)
    return RunResult(done.pop("reason"), done.pop("checkpoint"), {**done, **restarts()}, interrupted)


def _shutdown(procs: dict[str, mp.Process], timeout_s: float, drain: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout_s
    # Actors first (they flush), then the learner (it saves).
    for who, p in sorted(procs.items(), key=lambda kv: kv[0] == "learner"):
        while p.is_alive() and time.monotonic() < deadline:
            drain()
            p.join(0.1)
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)
