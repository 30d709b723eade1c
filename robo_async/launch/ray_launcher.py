"""The Ray launcher: the learner as a Ray actor (on a GPU node when the cluster has one), each
actor as a Ray task placed on the node whose resources include its robot. The data plane stays
ZMQ; Ray only places and supervises processes: a learner that dies or stops reporting is
restarted on the same node and addresses from its checkpoint and the store, crashed actor tasks
are resubmitted, both within the restart budget of supervisor.py.

Robots are Ray custom resources named by their resource id: start a robot machine with
`ray start --address=HEAD --resources='{"robot:so101_follower/left": 1}'` (`robo-async resources
ray=true` prints the line for what it finds). With no `launcher.address`, a local Ray is started
and this run's robots are declared on it. Each actor leases its robot (or a sim slot) on its node.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING

from robo_async.launch.builders import PolicyArgs, TaskArgs, TrainPlan
from robo_async.launch.local import RunFailed, RunResult
from robo_async.launch.progress import ProgressDisplay
from robo_async.learner.learner import LearnerConfig

if TYPE_CHECKING:
    from robo_async.launch.supervisor import EventLog, LauncherConfig, ResourcesConfig, RestartPolicy

log = logging.getLogger(__name__)


class RayLearner:
    """Runs in a Ray actor (threaded: `progress()` answers while `run()` trains)."""

    def __init__(self, cfg: LearnerConfig) -> None:
        import torch

        from robo_async.learner.learner import Learner

        torch.set_num_threads(max(cfg.threads, 1))
        self.learner = Learner(cfg)
        self._stop = threading.Event()
        self._progress: dict[str, float] = {}
        self._actors: dict[int, dict[str, float]] = {}
        self._heard = time.monotonic()

    def open(self) -> tuple[tuple[str, str], tuple[str, str], str, int]:
        """(addresses for actors, addresses bound, node id, pid): a restart binds the same ones there."""
        import os

        import ray

        self.learner.open()
        ip = ray.util.get_node_ip_address()
        bound = self.learner.addresses
        return (tuple(a.replace("0.0.0.0", ip) for a in bound), bound,  # type: ignore[return-value]
                ray.get_runtime_context().get_node_id(), os.getpid())

    def run(self) -> dict:
        from robo_async.launch.wiring import learner_loop

        def report(p: dict[str, float]) -> None:
            self._progress = p
            self._actors = self.learner.actor_rows()  # taken on the loop's thread: a consistent copy
            self._heard = time.monotonic()

        return learner_loop(self.learner, self._stop.is_set, report)

    def progress(self) -> tuple[dict[str, float], float, dict[int, dict[str, float]]]:
        """The newest progress, its age in seconds (the loop's heartbeat), and the per-actor rows."""
        return self._progress, time.monotonic() - self._heard, self._actors

    def stop(self) -> None:
        self._stop.set()


def ray_actor_task(task: TaskArgs, policy: PolicyArgs, cfg, resource_id: str, lease_opts: "ResourcesConfig",
                   job: str) -> tuple[bool, str]:
    """One actor on whatever node Ray placed it: lease its robot there, run until the learner stops.
    Returns (clean, message): clean when it ended because the learner is stopping."""
    import torch

    from hal.leases import LeaseManager
    from hal.robot import RobotError
    from robo_async.launch.wiring import run_actor

    torch.set_num_threads(1)
    lease = LeaseManager(lease_opts.lease_dir).acquire(resource_id, job, lease_opts.wait_s)
    try:
        actor = run_actor(task, policy, cfg, threading.Event())  # ends when the learner says it is stopping
        return True, f"done: {actor.env_steps} env steps"
    except RobotError as e:
        return False, f"robot lost: {e}"
    finally:
        lease.release()


def _start_learner(cfg: LearnerConfig, opts: "LauncherConfig", gpus: int, node: str | None, timeout_s: float):
    """A RayLearner opened (bound) on `node` (None: anywhere); returns (handle, open()'s answer)."""
    import ray

    extra = {}
    if node is not None:  # a restart: the same node, so the actors' addresses stay right
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        extra["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
    learner = ray.remote(RayLearner).options(num_cpus=opts.learner_num_cpus, num_gpus=gpus,
                                             max_concurrency=2, max_restarts=0, **extra).remote(cfg)
    try:
        return learner, ray.get(learner.open.remote(), timeout=timeout_s)
    except Exception as e:
        ray.kill(learner)
        raise RunFailed(f"the learner failed to start on Ray: {str(e).splitlines()[-1] if str(e) else e!r}") from None


def launch_ray(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    import ray

    from hal.leases import LeaseHeld
    from robo_async.launch.supervisor import EventLog

    opts = plan.launcher
    policy = opts.supervise
    events = EventLog(plan.run_dir)
    robot_ids = {plan.task_of(c.actor_id).resource_id(c.actor_id) for c in plan.actors
                 if plan.task_of(c.actor_id).robot is not None}
    started = False
    if not ray.is_initialized():
        if opts.address:
            from robo_async.launch.fleet import join_cluster

            try:
                join_cluster(opts.address)
            except ConnectionError as e:
                raise RunFailed(str(e)) from None
        else:  # a local Ray with this run's robots declared on this node
            ray.init(num_cpus=opts.num_cpus, resources={r: 1 for r in robot_ids} or None,
                     include_dashboard=False, log_to_driver=False)
        started = True
    try:
        from robo_async.launch.fleet import FleetLeases

        # a robot is a custom resource its node declares: an actor asking for one no node has would wait forever
        offered = ray.cluster_resources()
        missing = sorted(r for r in robot_ids if offered.get(r, 0) < 1)
        if missing:
            raise RunFailed(f"no node of the Ray cluster offers {', '.join(missing)}: start the node the robot is "
                            f"plugged into with ray start --address=<head> --resources='"
                            f"{json.dumps({r: 1 for r in missing})}' (`robo-async resources ray=true` prints it)")
        # the cluster's lease authority: this job's robots, all or nothing, first come first served
        try:
            fleet = FleetLeases(sorted(robot_ids), plan.run_dir.name, plan.resources.wait_s,
                                say=display.message).__enter__()
        except LeaseHeld as e:
            raise RunFailed(str(e)) from None
        try:
            return _run_on_ray(plan, display, opts, policy, events)
        finally:
            fleet.__exit__(None, None, None)
            if fleet.resources:
                (plan.run_dir / "fleet.json").write_text(json.dumps(
                    {"resources": fleet.resources, "waited_s": fleet.waited_s, "granted": fleet.granted,
                     "released": fleet.released}))
    finally:
        if started:
            ray.shutdown()


def _run_on_ray(plan: TrainPlan, display: ProgressDisplay, opts: "LauncherConfig", policy: "RestartPolicy",
                events: "EventLog") -> RunResult:
    import ray

    from robo_async.launch.local import _restart_config, start_dashboard
    from robo_async.launch.supervisor import RestartBudget
    from robo_async.launch.wiring import with_addresses

    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    learner, ((data, weights), bound, node, pid) = _start_learner(plan.learner, opts, gpus, None,
                                                                  plan.start_timeout_s)
    pids = plan.run_dir / "processes.json"
    pids.write_text(json.dumps({"learner": pid}))
    learner_budget = RestartBudget("the learner", policy)
    run_ref = learner.run.remote()
    task_fn = ray.remote(max_retries=0)(ray_actor_task)  # restarts are ours: budgeted, logged
    refs = {}
    budgets = {c.actor_id: RestartBudget(f"actor {c.actor_id}", policy) for c in plan.actors}

    def submit(cfg) -> None:
        t = plan.task_of(cfg.actor_id)
        rid = t.resource_id(cfg.actor_id)
        resources = {rid: 1} if t.robot is not None else {}
        refs[task_fn.options(num_cpus=opts.actor_num_cpus, resources=resources).remote(
            t, plan.policy, with_addresses(cfg, data, weights), rid, plan.resources, plan.run_dir.name)] = cfg

    for cfg in plan.actors:
        submit(cfg)
    resource_of = {c.actor_id: plan.task_of(c.actor_id).resource_id(c.actor_id) for c in plan.actors}
    dash = start_dashboard(plan, display)  # served here, by the driver, on loopback
    progress: dict[str, float] = {}
    interrupted = False
    all_done_at: float | None = None  # when the last actor ended cleanly (the learner is stopping)
    stopping = False  # an actor ended cleanly: the learner said it is stopping
    done = None

    def restarts() -> dict[str, float]:
        return {"supervisor/learner_restarts": learner_budget.total,
                "supervisor/actor_restarts": sum(b.total for b in budgets.values())}

    try:
        while done is None:
            why = None
            if ray.wait([run_ref], timeout=0.5)[0]:
                try:
                    done = ray.get(run_ref)
                    break
                except Exception as e:  # the learner's process died or its loop raised
                    why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            else:
                try:
                    got, age, rows = ray.get(learner.progress.remote(), timeout=policy.liveness_s)
                    if age > policy.liveness_s:
                        why = f"no report for {age:.0f} s (launcher.supervise.liveness_s)"
                    elif got:
                        progress = {**got, **restarts()}
                        display.update(progress)
                        if dash is not None:
                            dash.update(progress=progress, actors={
                                a: {**row, "resource": resource_of.get(a, "-")} for a, row in rows.items()})
                except ray.exceptions.GetTimeoutError:
                    why = f"no answer for {policy.liveness_s:.0f} s (launcher.supervise.liveness_s)"
                except ray.exceptions.RayActorError as e:
                    why = str(e).strip().splitlines()[-1]
            if why is not None:  # restart the learner where it ran, on the same addresses
                ray.kill(learner)
                events.write("failed", "learner", why=why)
                delay = learner_budget.claim(why)
                display.message(f"[red]the learner failed: {why}; restarting it in {delay:.0f} s from its last "
                                f"checkpoint and the store (restart {learner_budget.total})[/]")
                time.sleep(delay)
                cfg = _restart_config(plan.learner, bound, learner_budget.total)
                learner, (_, _, _, pid) = _start_learner(cfg, opts, gpus, node, plan.start_timeout_s)
                run_ref = learner.run.remote()
                pids.write_text(json.dumps({"learner": pid}))
                events.write("ready", "learner", pid=pid, restart=learner_budget.total)
                display.message("[green]the learner is back[/]")
            if all_done_at is not None and time.monotonic() - all_done_at > plan.shutdown_timeout_s:
                learner.stop.remote()  # every actor ended and the learner has not: stop it
                all_done_at = float("inf")
            finished, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in finished:
                cfg = refs.pop(ref)
                who = f"actor {cfg.actor_id}"
                try:
                    clean, msg = ray.get(ref)
                except Exception as e:  # it crashed (or its worker died): restart it, within budget
                    msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                    events.write("failed", who, why=msg)
                    if stopping:
                        continue
                    try:
                        delay = budgets[cfg.actor_id].claim(msg)
                    except RunFailed:
                        learner.stop.remote()
                        raise
                    display.message(f"[red]{who} failed on Ray: {msg}; restarting it in {delay:.0f} s[/]")
                    time.sleep(delay)
                    submit(cfg)
                    events.write("restarted", who, restart=budgets[cfg.actor_id].total)
                    continue
                if clean or (stopping and not refs):  # the learner is stopping: its result follows
                    stopping = True
                    if not refs and all_done_at is None:
                        all_done_at = time.monotonic()
                    continue
                events.write("failed", who, why=msg)
                display.message(f"[red]{who}: {msg}; continuing with {len(refs)} actor(s)[/]")
                if not refs:
                    learner.stop.remote()
                    raise RunFailed(f"{who}: {msg}; no robots left, stopping the run")
    except KeyboardInterrupt:
        interrupted = True
        learner.stop.remote()
    finally:
        if dash is not None:
            dash.update(run={"name": plan.run_dir.name, "status": "ended"})
            dash.close()
    if done is None:
        done = ray.get(run_ref, timeout=plan.shutdown_timeout_s + 60)
    if refs:  # actors end when the learner says it is stopping
        _, late = ray.wait(list(refs), num_returns=len(refs), timeout=plan.shutdown_timeout_s)
        for ref in late:
            ray.cancel(ref, force=True)
    return RunResult(done.pop("reason"), done.pop("checkpoint"), {**done, **restarts()}, interrupted)
