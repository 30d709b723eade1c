"""`launcher=serial`: the learner and one actor in this one process (Sample Factory's debugging
mode), each on a thread, with the same wiring and the same loopback ZMQ sockets as every other
runner, supervised by the same loop (supervisor.Supervisor) on the calling thread. A debugger or
profiler sees both; the fast tests use it (no process start-up).

What threads cannot do: be killed. So serial does not restart a hung or silent process (no
liveness check, no hung-actor detection) and does not restart the learner (its store is opened in
this process); a learner that fails ends the run naming why. A crashed actor is restarted within
its budget, as elsewhere.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from hal.robot import RobotError
from robo_async.actor.actor import ActorConfig
from robo_async.launch.plan import TrainPlan
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.runner import Exit, Ready, RunFailed, RunResult, lease_resources
from robo_async.launch.supervisor import Supervisor
from robo_async.launch.wiring import learner_loop, run_actor
from robo_async.learner.config import LearnerConfig
from robo_async.learner.learner import Learner

log = logging.getLogger(__name__)


def launch_serial(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    if len(plan.actors) != 1:
        raise RunFailed(f"launcher=serial runs one actor; this run asks for {len(plan.actors)} (use launcher=local)")
    held = lease_resources(plan)
    try:
        return Supervisor(plan, SerialRunner(plan), display).run()
    finally:
        for lease in held:
            lease.release()


class _Thread:
    """A learner or an actor on a daemon thread of this process."""

    def __init__(self, who: str, body: Callable[[queue.Queue], None]) -> None:
        self.reports: queue.Queue[tuple[str, object]] = queue.Queue()
        self.outcome: Exit | None = None
        self._why = ""

        def main() -> None:
            try:
                body(self.reports)
                self.outcome = Exit.CLEAN
            except RobotError as e:
                self._why, self.outcome = f"robot lost: {e}", Exit.ROBOT_LOST
            except Exception as e:
                log.exception("%s failed", who)
                self._why, self.outcome = f"{type(e).__name__}: {e}", Exit.FAILED

        self.thread = threading.Thread(target=main, name=who.replace(" ", "-"), daemon=True)
        self.thread.start()

    def pid(self) -> int | None:
        return os.getpid()

    def poll(self) -> list[tuple[str, object]]:
        out = []
        while True:
            try:
                out.append(self.reports.get_nowait())
            except queue.Empty:
                return out

    def exit(self) -> Exit | None:
        return None if self.thread.is_alive() else self.outcome or Exit.FAILED

    def why(self) -> str:
        return self._why

    def kill(self) -> None:  # a thread cannot be killed (the runner says so: kills = False)
        pass

    def terminate(self) -> None:
        pass


class SerialRunner:
    """`launcher=serial`: the learner and one actor on threads of this process (a debugger or
    profiler sees both), the same wiring and loopback sockets; threads cannot be killed, so it
    neither restarts the learner nor ends hung processes."""

    name = "serial"
    kills = False
    restarts_learner = False

    def __init__(self, plan: TrainPlan) -> None:
        self.plan = plan
        self.stop_event = threading.Event()

    def start_learner(self, cfg: LearnerConfig) -> _Thread:
        def body(reports: queue.Queue) -> None:
            learner = Learner(cfg)
            learner.open()
            addresses = tuple(learner.addresses)
            reports.put(("ready", Ready(addresses, addresses)))  # type: ignore[arg-type]

            def report(p: dict) -> None:
                reports.put(("progress", p))
                reports.put(("actors", learner.actor_rows()))

            reports.put(("done", learner_loop(learner, self.stop_event.is_set, report)))

        return _Thread("learner", body)

    def start_actor(self, cfg: ActorConfig) -> _Thread:
        return _Thread(
            f"actor {cfg.actor_id}",
            lambda _: run_actor(self.plan.task_of(cfg.actor_id), self.plan.policy, cfg, self.stop_event),
        )

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        pass
