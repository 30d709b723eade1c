"""The local runner: learner and actors as processes on this machine (spawned), supervised by
supervisor.Supervisor: a learner that dies or goes silent is restarted from its last checkpoint
and the store on the same addresses; an actor that crashes or hangs is restarted and resends what
it journaled. Ctrl-C sets `stop` so the learner writes a final checkpoint.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import socket
import struct
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler

from robo_async.actor.actor import ActorConfig
from robo_async.launch.flag import StopFlag
from robo_async.launch.plan import TrainPlan
from robo_async.launch.processes import ROBOT_LOST, actor_main, learner_main, rank_main, replica_main
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.runner import Exit, Ready, RunFailed, RunResult, lease_resources
from robo_async.launch.supervisor import Supervisor
from robo_async.learner.config import LearnerConfig
from robo_async.learner.replicas import Rendezvous

__all__ = ["LocalRunner", "RunFailed", "RunResult", "exit_reason", "launch_local"]  # (train.py takes the results here)

log = logging.getLogger(__name__)


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


class _Inbox:
    """Whole messages from a multiprocessing queue that only this process reads, taken without
    ever blocking.

    `Queue.get_nowait` can block forever: it sees bytes in the pipe, then reads a whole message. A
    child killed half-way through writing one (a status with camera frames exceeds a pipe's 64 KiB,
    so it goes in several writes) leaves a length with too few bytes after it, and no end-of-file
    ever comes (this process holds the pipe's write end too). So the pipe is read here
    non-blocking into a buffer of our own, and only whole messages are unpickled: a dead writer's
    half message stays in the buffer, and its process is judged by its exit. (A reader thread would
    stay blocked for the launcher's life, one per such death; capping the children's messages
    would have to hold for every kind they send.) The framing is `multiprocessing.Connection`'s: a
    4-byte big-endian length (-1, then 8 bytes, from 2 GiB on), then the pickle."""

    def __init__(self, q: mp.Queue) -> None:
        self._fd = q._reader.fileno()  # type: ignore[attr-defined]  # the queue's read end (q.get is never called)
        os.set_blocking(self._fd, False)
        self._q = q  # keeps the pipe open
        self._buf = bytearray()

    def take(self) -> list:
        """Every whole message that has arrived, in order; [] when none has."""
        while True:
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:  # every write end closed
                break
            self._buf += chunk
        out = []
        while (data := self._next()) is not None:
            try:
                out.append(ForkingPickler.loads(data))
            # a child's message we cannot read is dropped, never the launcher's end
            except Exception as e:  # noqa: BLE001
                log.error("dropped a message from a child process that could not be read: %s", e)
        return out

    def _next(self) -> bytes | None:
        """The next whole message's bytes, taken out of the buffer; None until one has arrived."""
        if len(self._buf) < 4:
            return None
        head, (n,) = 4, struct.unpack_from("!i", self._buf)
        if n == -1:
            if len(self._buf) < 12:
                return None
            head, (n,) = 12, struct.unpack_from("!Q", self._buf, 4)
        if len(self._buf) < head + n:
            return None
        data = bytes(self._buf[head : head + n])
        del self._buf[: head + n]
        return data


class _Process:
    """One incarnation of a learner or actor process, with its own queues (a process killed while
    writing to a multiprocessing queue can leave that queue unusable)."""

    def __init__(self, ctx: BaseContext, who: str, target: object, args: tuple, status: mp.Queue | None) -> None:
        self.who, self.status, self.errors = who, status, ctx.Queue()
        self._status_in = _Inbox(status) if status is not None else None  # read without blocking (_Inbox)
        self._errors_in = _Inbox(self.errors)
        self.proc = ctx.Process(target=target, args=(*args, self.errors), name=who.replace(" ", "-"))
        self.proc.start()
        self._why: str | None = None

    def pid(self) -> int | None:
        return self.proc.pid

    def poll(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        for kind, payload in self._status_in.take() if self._status_in is not None else []:
            if kind == "ready":
                payload = Ready(tuple(payload), tuple(payload))
            out.append((kind, payload))
        return out

    def exit(self) -> Exit | None:
        if self.proc.is_alive():
            return None
        code = self.proc.exitcode
        return (
            Exit.CLEAN
            if code == 0
            else Exit.ROBOT_LOST
            if code == ROBOT_LOST and not self.who.startswith("learner")
            else Exit.FAILED
        )

    def why(self) -> str:
        if self._why is None:
            said = dict(self._errors_in.take())
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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _LearnerGroup:
    """The learner's ranks (`learner.replicas` > 1) as one supervised process: rank 0 is the learner
    (its reports, its pid), ranks >= 1 its replicas, meeting on a fresh loopback port each start.
    Any rank failing ends them all (the others would wait on it): the supervisor then restarts the
    group from the last checkpoint. `failure()` says which rank failed first."""

    def __init__(self, ctx: BaseContext, cfg: LearnerConfig, stop: StopFlag) -> None:
        port, n = free_port(), cfg.options.replicas
        env = [Rendezvous("127.0.0.1", port, r, n, r).env() for r in range(n)]
        status = ctx.Queue()
        self.ranks = [_Process(ctx, "learner", rank_main, (env[0], learner_main, cfg, stop, status), status)]
        self.ranks += [
            _Process(ctx, f"learner rank {r}", rank_main, (env[r], replica_main, cfg, stop), None) for r in range(1, n)
        ]
        self.failed: int | None = None  # the rank whose failure ended the group
        self.also: list[int] = []  # other ranks that had failed by then (often of the first one's death)

    def pid(self) -> int | None:
        return self.ranks[0].pid()

    def rank_pids(self) -> dict[str, int | None]:
        """processes.json entries of the replicas ("learner rank 1": pid, ...)."""
        return {p.who: p.pid() for p in self.ranks[1:]}

    def poll(self) -> list[tuple[str, object]]:
        return self.ranks[0].poll()

    def exit(self) -> Exit | None:
        ended = [p.exit() for p in self.ranks]
        if self.failed is None:
            bad = [r for r, e in enumerate(ended) if e is not None and e is not Exit.CLEAN]
            if not bad:  # replicas end cleanly when rank 0 stops them: the group ends with rank 0
                return None if ended[0] is None else Exit.CLEAN if all(e is Exit.CLEAN for e in ended) else None
            # the first to fail is blamed; killed by a signal beats an error (that one's peers see it die)
            self.failed = min(bad, key=lambda r: (self.ranks[r].proc.exitcode or 0) >= 0)
            self.also = [r for r in bad if r != self.failed]
            for p in self.ranks:
                if p.exit() is None:
                    p.kill()
        return Exit.FAILED

    def _said(self, r: int) -> str:
        p = self.ranks[r]
        return p.why() if r == 0 else f"learner rank {r} (pid {p.pid()}): {p.why()}"

    def why(self) -> str:
        """The failed rank's reason (rank 0's alone, as a single learner's), then any other rank's
        that had failed by then."""
        first = self.failed if self.failed is not None else 0
        return "; ".join(
            [self._said(first)] + [f"also {'rank 0: ' if r == 0 else ''}{self._said(r)}" for r in self.also]
        )

    def failure(self) -> dict[str, object]:
        """What the supervisor's "failed" event adds: the rank that failed and its pid."""
        r = self.failed if self.failed is not None else 0
        return {"rank": r, "rank_pid": self.ranks[r].pid()}

    def kill(self) -> None:
        for p in self.ranks:
            p.proc.kill()
        for p in self.ranks:
            p.proc.join(5.0)

    def terminate(self) -> None:
        for p in self.ranks:
            p.terminate()


class LocalRunner:
    """`launcher=local`: the learner and each actor as a spawned process on this machine; the
    supervisor can kill (SIGKILL) and restart any of them."""

    name = "local"
    kills = True
    restarts_learner = True

    def __init__(self, plan: TrainPlan) -> None:
        self.plan = plan
        self.ctx = mp.get_context("spawn")
        self.stop_event = StopFlag(self.ctx)  # never an mp.Event: a kill -9 inside it wedges the rest (flag.py)

    def start_learner(self, cfg: LearnerConfig) -> _Process | _LearnerGroup:
        if cfg.options.replicas > 1:
            return _LearnerGroup(self.ctx, cfg, self.stop_event)
        status = self.ctx.Queue()
        return _Process(self.ctx, "learner", learner_main, (cfg, self.stop_event, status), status)

    def start_actor(self, cfg: ActorConfig) -> _Process:
        return _Process(
            self.ctx,
            f"actor {cfg.actor_id}",
            actor_main,
            (self.plan.task_of(cfg.actor_id), self.plan.policy, cfg, self.stop_event),
            None,
        )

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        pass
