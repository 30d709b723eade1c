"""`launcher=serial`: the learner and one actor in this one process (Sample Factory's debugging
mode): the actor on a thread, the learner's loop on the calling thread, the same wiring and the
same loopback ZMQ sockets as every other runner. A debugger or profiler sees both; the fast
tests use it (no process start-up)."""

from __future__ import annotations

import threading

from hal.robot import RobotError
from robo_async.launch.builders import TrainPlan
from robo_async.launch.local import RunFailed, RunResult, lease_resources
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.wiring import learner_loop, run_actor, with_addresses
from robo_async.learner.learner import Learner


def launch_serial(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    if len(plan.actors) != 1:
        raise RunFailed(f"launcher=serial runs one actor; this run asks for {len(plan.actors)} (use launcher=local)")
    held = lease_resources(plan)
    stop = threading.Event()
    failure: list[str] = []
    learner = Learner(plan.learner)
    try:
        learner.open()
        cfg = with_addresses(plan.actors[0], *learner.addresses)

        def actor_thread() -> None:
            try:
                run_actor(plan.task_of(cfg.actor_id), plan.policy, cfg, stop)
            except RobotError as e:
                failure.append(f"actor 0: robot lost: {e}")
            except Exception as e:  # noqa: BLE001 - reported, and the run stops
                failure.append(f"actor 0 died: {type(e).__name__}: {e}")

        thread = threading.Thread(target=actor_thread, name="actor-0", daemon=True)
        thread.start()
        interrupted = False
        try:
            done = learner_loop(learner, lambda: bool(failure) or stop.is_set(), display.update)
        except KeyboardInterrupt:
            interrupted = True
            display.message("[yellow]Ctrl-C: stopping; the learner writes a final checkpoint...[/]")
            done = {"reason": "interrupted", "checkpoint": str(learner.save()), **learner.progress()}
            learner.close()
        stop.set()
        thread.join(plan.shutdown_timeout_s)
        if failure:
            raise RunFailed(f"{failure[0]}; stopping the run")
        return RunResult(done.pop("reason"), done.pop("checkpoint"), done, interrupted)
    finally:
        stop.set()
        for lease in held:
            lease.release()
