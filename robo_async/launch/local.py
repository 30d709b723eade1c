"""The local runner: learner and actors as processes on this machine (spawned), supervised by
supervisor.Supervisor: a learner that dies or goes silent is restarted from its last checkpoint
and the store on the same addresses; an actor that crashes or hangs is restarted and resends what
it journaled. Ctrl-C sets `stop` so the learner writes a final checkpoint.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
from multiprocessing.context import BaseContext
from multiprocessing.synchronize import Event

from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import TrainPlan
from robo_async.launch.processes import ROBOT_LOST, actor_main, learner_main
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.runner import Exit, Ready, RunFailed, RunResult, lease_resources
from robo_async.launch.supervisor import Supervisor
from robo_async.learner.learner import LearnerConfig

__all__ = ["LocalRunner", "RunFailed", "RunResult", "exit_reason", "launch_local"]  # (train.py takes the results here)


def exit_reason(code: int | None) -> str:
    name = f" ({signal.Signals(-code).name})" if code is not None and code < 0 else ""
    return f"exit code {code}{name}"


def launch_local(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    held = lease_resources(plan)
    try:
        return Supervisor(plan, LocalRunner(plan), display).run()
    finally:
        for lease in held:
            lease.release()


class _Process:
    """One incarnation of a learner or actor process, with its own queues (a process killed while
    writing to a multiprocessing queue can leave that queue unusable)."""

    def __init__(self, ctx: BaseContext, who: str, target: object, args: tuple, status: mp.Queue | None) -> None:
        self.who, self.status, self.errors = who, status, ctx.Queue()
        self.proc = ctx.Process(target=target, args=(*args, self.errors), name=who.replace(" ", "-"))
        self.proc.start()
        self._why: str | None = None

    def pid(self) -> int | None:
        return self.proc.pid

    def poll(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        while self.status is not None:
            try:
                kind, payload = self.status.get_nowait()
            except queue.Empty:
                break
            if kind == "ready":
                payload = Ready(tuple(payload), tuple(payload))
            out.append((kind, payload))
        return out

    def exit(self) -> Exit | None:
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        return Exit.CLEAN if code == 0 else Exit.ROBOT_LOST if code == ROBOT_LOST and self.who != "learner" \
            else Exit.FAILED

    def why(self) -> str:
        if self._why is None:
            said = {}
            while True:
                try:
                    who, msg = self.errors.get_nowait()
                except queue.Empty:
                    break
                said[who] = msg
            self._why = said.get(self.who, exit_reason(self.proc.exitcode))
        return self._why

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5.0)

    def terminate(self) -> None:
        self.proc.terminate()
        self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)


class LocalRunner:
    """`launcher=local`: the learner and each actor as a spawned process on this machine; the
    supervisor can kill (SIGKILL) and restart any of them."""

    name = "local"
    kills = True
    restarts_learner = True

    def __init__(self, plan: TrainPlan) -> None:
        self.plan = plan
        self.ctx = mp.get_context("spawn")
        self.stop_event: Event = self.ctx.Event()

    def start_learner(self, cfg: LearnerConfig) -> _Process:
        status = self.ctx.Queue()
        return _Process(self.ctx, "learner", learner_main, (cfg, self.stop_event, status), status)

    def start_actor(self, cfg: ActorConfig) -> _Process:
        return _Process(self.ctx, f"actor {cfg.actor_id}", actor_main,
                        (self.plan.task_of(cfg.actor_id), self.plan.policy, cfg, self.stop_event), None)

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        pass
