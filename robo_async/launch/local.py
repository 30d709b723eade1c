"""The local launcher: learner and actors as processes on this machine, supervised.

Shutdown: the learner stopping (solved, budget) ends the run; any process dying ends it with a
message naming which and why; Ctrl-C sets `stop` so the learner writes a final checkpoint.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from hal.leases import Lease, LeaseError, LeaseHeld, LeaseManager
from hal.resources import Resource, acquire_needs, parse_needs
from robo_async.launch.builders import TrainPlan
from robo_async.launch.processes import ROBOT_LOST, actor_main, learner_main
from robo_async.launch.wiring import with_addresses
from robo_async.launch.progress import ProgressDisplay


class RunFailed(RuntimeError):
    pass


@dataclass
class RunResult:
    reason: str
    checkpoint: str | None
    progress: dict[str, float]
    interrupted: bool = False


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
    opts = plan.leases
    leases = LeaseManager(opts.get("lease_dir"))
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
            found += [Resource("sim", task, str(i), "local") for i in range(int(opts.get("sim_slots", 64)))]
    job = plan.run_dir.name
    try:
        got = acquire_needs(found, parse_needs([f"{k}*{n}" for k, n in needs.items()]), leases, job,
                            float(opts.get("wait_s") or 0))
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


def _launch(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    ctx = mp.get_context("spawn")
    stop, status, errors = ctx.Event(), ctx.Queue(), ctx.Queue()
    learner = ctx.Process(target=learner_main, args=(plan.learner, stop, status, errors), name="learner")
    learner.start()
    procs: dict[str, mp.Process] = {"learner": learner}
    progress: dict[str, float] = {}
    done: dict | None = None
    interrupted = False
    try:
        deadline = time.monotonic() + plan.start_timeout_s
        addresses = None
        while addresses is None:
            try:
                kind, payload = status.get(timeout=0.2)
                if kind == "ready":
                    addresses = payload
            except queue.Empty:
                pass
            if not learner.is_alive():
                why = _drain_errors(errors).get("learner", f"exit code {learner.exitcode}")
                raise RunFailed(f"the learner failed to start: {why}")
            if time.monotonic() > deadline:
                raise RunFailed(f"the learner did not start within {plan.start_timeout_s:.0f} s")
        for cfg in plan.actors:
            p = ctx.Process(target=actor_main, name=f"actor-{cfg.actor_id}",
                            args=(plan.task_of(cfg.actor_id), plan.policy, with_addresses(cfg, *addresses),
                                  stop, errors))
            p.start()
            procs[f"actor {cfg.actor_id}"] = p
        (plan.run_dir / "processes.json").write_text(json.dumps({w: p.pid for w, p in procs.items()}))
        all_done_at: float | None = None  # when the last actor ended cleanly
        stopping = False  # an actor ended cleanly: the learner said it is stopping
        while done is None:
            if all_done_at is None and not any(w != "learner" for w in procs):
                all_done_at = time.monotonic()
            if all_done_at is not None and time.monotonic() - all_done_at > plan.shutdown_timeout_s:
                break  # every actor ended and the learner has not said "done": stop it (below)
            try:
                kind, payload = status.get(timeout=0.2)
                if kind == "progress":
                    progress = payload
                    display.update(progress)
                elif kind == "done":
                    done = payload
            except queue.Empty:
                pass
            for who, p in list(procs.items()):
                if not p.is_alive() and done is None and p.exitcode == 0 and who != "learner":
                    del procs[who]  # it ended because the learner said it is stopping: wait for its "done"
                    stopping = True
                    continue
                if not p.is_alive() and done is None and not (who == "learner" and p.exitcode == 0):
                    why = _drain_errors(errors).get(who, f"exit code {p.exitcode}")
                    if p.exitcode == ROBOT_LOST and who != "learner":
                        del procs[who]  # that robot is stopped and held; the others carry on
                        left = [w for w in procs if w != "learner"]
                        display.message(f"[red]{who} (pid {p.pid}) stopped: {why}; continuing with "
                                        f"{len(left)} actor(s)[/]")
                        if not left and not stopping:  # (once the learner is stopping, its result follows)
                            raise RunFailed(f"{who} (pid {p.pid}): {why}; no robots left, stopping the run")
                        continue
                    raise RunFailed(f"{who} (pid {p.pid}) died: {why}; stopping the run")
    except KeyboardInterrupt:
        interrupted = True
        display.message("[yellow]Ctrl-C: stopping; the learner writes a final checkpoint...[/]")
    finally:
        stop.set()
        finals: list[dict] = []

        def drain() -> None:  # keep reading so no child blocks at exit on a full pipe
            while True:
                try:
                    kind, payload = status.get_nowait()
                except queue.Empty:
                    return
                if kind == "done":
                    finals.append(payload)

        _shutdown(procs, plan.shutdown_timeout_s, drain)
        drain()
        if done is None and finals:
            done = finals[-1]
    if done is None:
        return RunResult("interrupted", None, progress, interrupted)
    return RunResult(done.pop("reason"), done.pop("checkpoint"), done, interrupted)


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
