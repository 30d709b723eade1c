"""The Ray runner's processes as the supervisor sees them (runner.py's `Proc`): `RayLearnerProc`, one
incarnation of the learner (a RayLearner opened, then running; with `learner.replicas` > 1 its
replicas too, one supervised unit) and `RayActorProc`, one actor; each polled without blocking (an
unanswered progress question is a silent learner, judged by the supervisor). `RayRunner`
(ray_launcher.py) starts them where `Placement` says.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from robo_async.launch.options import LauncherConfig
from robo_async.launch.ray_workers import RayLearner, RayReplica
from robo_async.launch.runner import Exit, Ready
from robo_async.learner.config import LearnerConfig

log = logging.getLogger(__name__)


class Placement(Protocol):
    """Where a learner goes (`RayRunner` holds it): the node its first incarnation ran on (restarts go
    there; set once it has opened), the launcher's settings and the GPUs a learner rank takes."""

    node: str | None
    opts: LauncherConfig
    gpus: int


ASK_EVERY_S = 0.2  # how often the learner's progress is asked for (it reports every 0.5 s)


def _last_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__


def _ready(ref) -> bool:
    import ray

    return bool(ray.wait([ref], timeout=0)[0])


class RayLearnerProc:
    """One incarnation of the learner: a RayLearner opened, then running; its progress asked for
    without blocking (an unanswered question is a silent learner, judged by the supervisor). With
    `learner.replicas` > 1 also its replicas (Ray actors), one supervised unit: rank 0 picks the
    meeting point, then the replicas start and rank 0 opens (joining them)."""

    def __init__(self, runner: Placement, cfg: LearnerConfig) -> None:
        import ray

        self.runner, self.cfg = runner, cfg
        extra = {}
        if runner.node is not None:  # a restart: the same node, so the actors' addresses stay right
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            extra["scheduling_strategy"] = NodeAffinitySchedulingStrategy(runner.node, soft=False)
        self.handle = (
            ray.remote(RayLearner)
            .options(
                num_cpus=runner.opts.learner_num_cpus, num_gpus=runner.gpus, max_concurrency=2, max_restarts=0, **extra
            )
            .remote(cfg)
        )
        self.rdv_ref = self.handle.rendezvous.remote(cfg.options.replicas) if cfg.options.replicas > 1 else None
        self.open_ref = None if self.rdv_ref is not None else self.handle.open.remote()
        self.replicas: list[tuple[object, object, object]] = []  # (handle, pid ref, run ref) of ranks 1..
        self._rank_pids: dict[int, int] = {}
        self.failed_rank: int | None = None
        self.run_ref = None
        self.asked = None  # a progress() call not yet answered
        self.asked_at = 0.0
        self.seen = 0  # the newest report number taken
        self._pid: int | None = None
        self._exit: Exit | None = None
        self._why = ""

    def pid(self) -> int | None:
        return self._pid

    def _start_replicas(self, addr: str, port: int) -> None:
        import ray

        from robo_async.learner.replicas import Rendezvous

        n = self.cfg.options.replicas
        for r in range(1, n):
            handle = (
                ray.remote(RayReplica)
                .options(num_cpus=self.runner.opts.learner_num_cpus, num_gpus=self.runner.gpus, max_restarts=0)
                .remote()
            )
            pid_ref = handle.pid.remote()
            self.replicas.append((handle, pid_ref, handle.run.remote(self.cfg, Rendezvous(addr, port, r, n, 0).env())))

    def rank_pids(self) -> dict[str, int | None]:
        """processes.json entries of the replicas ("learner rank 1": pid, ...)."""
        import ray

        for r, (_, pid_ref, _) in enumerate(self.replicas, start=1):
            if r not in self._rank_pids and _ready(pid_ref):
                try:
                    self._rank_pids[r] = ray.get(pid_ref)
                except Exception as e:  # noqa: BLE001 - it died before saying; its run says why
                    log.debug("replica pid unknown: %s", e)
        return {f"learner rank {r}": self._rank_pids.get(r) for r in range(1, len(self.replicas) + 1)}

    def _replica_failed(self, wait_s: float = 0.0, died_only: bool = False) -> int | None:
        """The first replica whose run ended with an error, waiting up to `wait_s` for one: its rank.
        `died_only`: only a replica whose process died counts (not one whose collective broke
        because rank 0 went first)."""
        import ray
        from ray.exceptions import RayActorError

        refs = [run for _, _, run in self.replicas]
        deadline = time.monotonic() + wait_s
        while refs:
            ended, refs = ray.wait(refs, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ended:
                return None
            r = 1 + [run for _, _, run in self.replicas].index(ended[0])
            try:
                ray.get(ended[0])
            except Exception as e:  # noqa: BLE001 - its process died or its loop raised
                if died_only and not isinstance(e, RayActorError):
                    continue
                self.rank_pids()
                self._why = f"learner rank {r} (pid {self._rank_pids.get(r)}): {_last_line(e)}"
                return r
        return None

    def _fail(self, e: BaseException, prefix: str = "") -> None:
        from ray.exceptions import RayActorError

        self._exit = Exit.FAILED
        # rank 0's loop raised (its collective broke): a replica whose process died is to blame;
        # Ray reports that death a moment later, so wait for it. Rank 0's own process died: it is.
        if self.replicas:
            self.failed_rank = self._replica_failed(
                wait_s=0.0 if isinstance(e, RayActorError) else 10.0, died_only=True
            )
        if self.failed_rank is None:
            self._why = prefix + _last_line(e)
        self.kill()

    def failure(self) -> dict[str, object]:
        """What the supervisor's "failed" event adds with replicas: the rank that failed and its pid."""
        if not self.replicas:
            return {}
        r = self.failed_rank or 0
        return {"rank": r, "rank_pid": self._pid if r == 0 else self._rank_pids.get(r)}

    def poll(self) -> list[tuple[str, object]]:
        import ray

        out: list[tuple[str, object]] = []
        if self._exit is not None:
            return out
        if self.open_ref is None:  # replicas: rank 0 picks the meeting point first
            if _ready(self.rdv_ref):
                try:
                    addr, port = ray.get(self.rdv_ref)
                except Exception as e:  # noqa: BLE001 - it could not start
                    self._fail(e, "on Ray: ")
                    return out
                self._start_replicas(addr, port)
                self.open_ref = self.handle.open.remote()
            return out
        if self.replicas:
            r = self._replica_failed()
            if r is not None:
                self._exit, self.failed_rank = Exit.FAILED, r
                self.kill()
                return out
        if self.run_ref is None:
            if _ready(self.open_ref):
                try:
                    addresses, bound, node, self._pid = ray.get(self.open_ref)
                except Exception as e:  # noqa: BLE001 - it could not bind, load or start
                    self._fail(e, "on Ray: ")
                    return out
                self.runner.node = self.runner.node or node
                out.append(("ready", Ready(tuple(addresses), tuple(bound))))
                self.run_ref = self.handle.run.remote()
            return out
        if _ready(self.run_ref):
            try:
                out.append(("done", ray.get(self.run_ref)))
                self._exit = Exit.CLEAN
                self.kill()  # (rank 0 stopped its replicas before it returned)
            except Exception as e:  # noqa: BLE001 - its process died or its loop raised
                self._fail(e)
            return out
        if self.asked is not None and _ready(self.asked):
            try:
                n, progress, age, rows = ray.get(self.asked)
            except Exception as e:  # noqa: BLE001 - its process died
                self._fail(e)
                return out
            self.asked = None
            if n != self.seen and progress:  # a new report: heard ages as of now
                self.seen = n
                out += [
                    ("progress", progress),
                    ("actors", {a: {**row, "heard_s": row["heard_s"] + age} for a, row in rows.items()}),
                ]
        if self.asked is None and time.monotonic() - self.asked_at >= ASK_EVERY_S:
            self.asked, self.asked_at = self.handle.progress.remote(), time.monotonic()
        return out

    def exit(self) -> Exit | None:
        return self._exit

    def why(self) -> str:
        return self._why

    def kill(self) -> None:
        import ray

        for handle in [self.handle, *(h for h, _, _ in self.replicas)]:
            try:
                ray.kill(handle)
            except Exception as e:  # noqa: BLE001 - already gone
                log.debug("ray.kill: %s", e)

    def terminate(self) -> None:
        self.kill()


class RayActorProc:
    """One actor in a RayActorWorker of its own: its pid once known, its run's end (clean when the
    learner stopped it, robot lost, or failed) polled without blocking."""

    def __init__(self, handle, run_args: tuple) -> None:
        self.handle = handle
        self.pid_ref = handle.pid.remote()  # first: calls run in order, and run() runs for the whole job
        self.run_ref = handle.run.remote(*run_args)
        self._pid: int | None = None
        self._exit: Exit | None = None
        self._why = ""

    def pid(self) -> int | None:
        import ray

        if self._pid is None and _ready(self.pid_ref):
            try:
                self._pid = ray.get(self.pid_ref)
            except Exception as e:  # noqa: BLE001 - it died before saying; its exit says why
                log.debug("actor pid unknown: %s", e)
        return self._pid

    def poll(self) -> list[tuple[str, object]]:
        return []

    def exit(self) -> Exit | None:
        import ray

        if self._exit is None and _ready(self.run_ref):
            try:
                clean, self._why = ray.get(self.run_ref)
                self._exit = Exit.CLEAN if clean else Exit.ROBOT_LOST
            except Exception as e:  # noqa: BLE001 - it crashed, or its process died
                self._exit, self._why = Exit.FAILED, _last_line(e)
            ray.kill(self.handle)  # an ended Ray actor still holds its process and CPUs
        return self._exit

    def why(self) -> str:
        return self._why

    def kill(self) -> None:
        import ray

        ray.kill(self.handle)

    def terminate(self) -> None:
        self.kill()
