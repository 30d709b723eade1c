"""The Ray launcher: the learner as a Ray actor (on a GPU node when the cluster has one), each
actor as a Ray task placed on the node whose resources include its robot. The data plane stays
ZMQ; Ray only places and supervises processes: a learner that dies or stops reporting is
restarted on the same node and addresses from its checkpoint and the store, crashed actor tasks
are started again, hung real-time actors are killed and restarted: the one loop of
supervisor.py, over the Ray runner below.

Robots are Ray custom resources named by their resource id: start a robot machine with
`ray start --address=HEAD --resources='{"robot:so101_follower/left": 1}'` (`robo-async resources
ray=true` prints the line for what it finds). With no `launcher.address`, a local Ray is started
and this run's robots are declared on it. Each actor leases its robot (or a sim slot) on its node.

`learner.replicas` > 1: rank 0 is the learner's Ray actor as ever; it picks its meeting point (its
node's address and a free port there) and each replica (rank >= 1) is a Ray actor of its own,
placed wherever the cluster has room (a GPU each where the cluster has GPUs), joining it over
torch.distributed. The ranks are one supervised unit, as with the local launcher: any rank that
dies or hangs ends them all, and the group restarts from the checkpoint (events name the rank).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs
from robo_async.launch.options import ResourcesConfig
from robo_async.launch.plan import TrainPlan
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.runner import Exit, Ready, RunFailed, RunResult
from robo_async.launch.supervisor import Supervisor
from robo_async.learner.config import LearnerConfig

log = logging.getLogger(__name__)


class RayLearner:
    """Runs in a Ray actor (threaded: `progress()` answers while `run()` trains)."""

    def __init__(self, cfg: LearnerConfig) -> None:
        import torch

        from robo_async.learner.learner import Learner

        torch.set_num_threads(max(cfg.options.threads, 1))
        self.learner = Learner(cfg)
        self._stop = threading.Event()
        self._progress: dict[str, float] = {}
        self._actors: dict[int, dict[str, float]] = {}
        self._heard = time.monotonic()
        self._reports = 0  # counts reports: the supervisor takes each one once

    def rendezvous(self, world: int) -> tuple[str, int]:
        """Rank 0's meeting point for `world` ranks (learner.replicas > 1): this node's address and
        a port free on it, set as torchrun's variables for `open()` (the learner joins there)."""
        import socket

        import ray

        from robo_async.learner.replicas import Rendezvous

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        ip = ray.util.get_node_ip_address()
        os.environ.update(Rendezvous(ip, port, 0, world, 0).env())
        return ip, port

    def open(self) -> tuple[tuple[str, str], tuple[str, str], str, int]:
        """(addresses for actors, addresses bound, node id, pid): a restart binds the same ones there."""
        import os

        import ray

        self.learner.open()
        ip = ray.util.get_node_ip_address()
        bound = self.learner.addresses
        return (
            tuple(a.replace("0.0.0.0", ip) for a in bound),
            bound,  # type: ignore[return-value]
            ray.get_runtime_context().get_node_id(),
            os.getpid(),
        )

    def run(self) -> dict:
        from robo_async.launch.wiring import learner_loop

        def report(p: dict[str, float]) -> None:
            self._progress = p
            self._actors = self.learner.actor_rows()  # taken on the loop's thread: a consistent copy
            self._heard = time.monotonic()
            self._reports += 1

        return learner_loop(self.learner, self._stop.is_set, report)

    def progress(self) -> tuple[int, dict[str, float], float, dict[int, dict[str, float]]]:
        """The newest report's number, its progress, its age in seconds, and the per-actor rows."""
        return self._reports, self._progress, time.monotonic() - self._heard, self._actors

    def stop(self) -> None:
        self._stop.set()


class RayReplica:
    """A learner replica (rank >= 1) in a Ray actor of its own: joins rank 0, updates on the shards
    it is sent, ends when rank 0 stops (replicas.py)."""

    def pid(self) -> int:
        return os.getpid()

    def run(self, cfg: LearnerConfig, env: dict[str, str]) -> int:
        """Rank `env["RANK"]` from joining to rank 0's stop; the updates it made."""
        from robo_async.learner.replicas import Rendezvous, run_replica

        os.environ.update(env)
        done = [0]
        run_replica(cfg, Rendezvous.from_env(), on_update=lambda n: done.__setitem__(0, n))
        return done[0]


class RayActorWorker:
    """One actor in a Ray actor process of its own (so it has a pid to report and to kill)."""

    def pid(self) -> int:
        return os.getpid()

    def run(
        self,
        task: TaskArgs,
        policy: PolicyArgs,
        cfg: ActorConfig,
        resource_id: str,
        lease_opts: ResourcesConfig,
        job: str,
    ) -> tuple[bool, str]:
        """Lease its robot (or a sim slot) on this node, run until the learner stops. Returns (clean,
        message): clean when it ended because the learner is stopping, else its robot was lost."""
        import torch

        from hal.leases import LeaseManager
        from hal.robot import RobotError
        from robo_async.launch.wiring import run_actor

        torch.set_num_threads(1)
        from robo_async.actor.actor import lane_actor_id

        manager = LeaseManager(lease_opts.lease_dir)
        leases = [manager.acquire(resource_id, job, lease_opts.wait_s)]
        try:  # a vectorized actor: a simulator slot for each of its other simulators too
            leases += [
                manager.acquire(task.resource_id(lane_actor_id(cfg.actor_id, j)), job, lease_opts.wait_s)
                for j in range(1, cfg.options.envs)
            ]
            actor = run_actor(task, policy, cfg, threading.Event())  # ends when the learner says it is stopping
            return True, f"done: {actor.env_steps} env steps"
        except RobotError as e:
            return False, f"robot lost: {e}"
        finally:
            for lease in leases:
                lease.release()


ASK_EVERY_S = 0.2  # how often the learner's progress is asked for (it reports every 0.5 s)


def _last_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__


def _ready(ref) -> bool:
    import ray

    return bool(ray.wait([ref], timeout=0)[0])


class _RayLearnerProc:
    """One incarnation of the learner: a RayLearner opened, then running; its progress asked for
    without blocking (an unanswered question is a silent learner, judged by the supervisor). With
    `learner.replicas` > 1 also its replicas (Ray actors), one supervised unit: rank 0 picks the
    meeting point, then the replicas start and rank 0 opens (joining them)."""

    def __init__(self, runner: RayRunner, cfg: LearnerConfig) -> None:
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


class _RayActorProc:
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


class RayRunner:
    """`launcher=ray`: the learner as a Ray actor (on a GPU node when there is one), each actor as a
    Ray actor on the node that offers its robot; restarts go to the same node and addresses."""

    name = "ray"
    kills = True
    restarts_learner = True

    def __init__(self, plan: TrainPlan) -> None:
        import ray

        self.plan, self.opts = plan, plan.launcher
        self.gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        self.node: str | None = None  # where the first learner ran: restarts go there
        self.learner: _RayLearnerProc | None = None
        self.actors: list[_RayActorProc] = []

    def start_learner(self, cfg: LearnerConfig) -> _RayLearnerProc:
        self.learner = _RayLearnerProc(self, cfg)
        return self.learner

    def start_actor(self, cfg: ActorConfig) -> _RayActorProc:
        import ray

        t = self.plan.task_of(cfg.actor_id)
        rid = t.resource_id(cfg.actor_id)
        resources = {rid: 1} if t.robot is not None else {}
        handle = (
            ray.remote(RayActorWorker)
            .options(num_cpus=self.opts.actor_num_cpus, resources=resources, max_restarts=0)
            .remote()
        )
        proc = _RayActorProc(handle, (t, self.plan.policy, cfg, rid, self.plan.resources, self.plan.run_dir.name))
        self.actors.append(proc)
        return proc

    def stop(self) -> None:
        if self.learner is not None and self.learner.exit() is None:
            self.learner.handle.stop.remote()

    def close(self) -> None:
        import ray

        if self.learner is not None:
            self.learner.kill()  # and its replicas
        for p in self.actors:
            try:
                ray.kill(p.handle)
            except Exception as e:  # noqa: BLE001 - already gone
                log.debug("ray.kill: %s", e)


def launch_ray(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    import ray

    from hal.leases import LeaseHeld

    opts = plan.launcher
    robot_ids = {
        plan.task_of(c.actor_id).resource_id(c.actor_id)
        for c in plan.actors
        if plan.task_of(c.actor_id).robot is not None
    }
    started = False
    if not ray.is_initialized():
        if opts.address:
            from robo_async.launch.fleet import join_cluster

            try:
                join_cluster(opts.address)
            except ConnectionError as e:
                raise RunFailed(str(e)) from None
        else:  # a local Ray with this run's robots declared on this node
            ray.init(
                num_cpus=opts.num_cpus,
                resources={r: 1 for r in robot_ids} or None,
                include_dashboard=False,
                log_to_driver=False,
            )
        started = True
    try:
        from robo_async.launch.fleet import FleetLeases

        # a robot is a custom resource its node declares: an actor asking for one no node has would wait forever
        offered = ray.cluster_resources()
        missing = sorted(r for r in robot_ids if offered.get(r, 0) < 1)
        if missing:
            raise RunFailed(
                f"no node of the Ray cluster offers {', '.join(missing)}: start the node the robot is "
                f"plugged into with ray start --address=<head> --resources='"
                f"{json.dumps({r: 1 for r in missing})}' (`robo-async resources ray=true` prints it)"
            )
        # the cluster's lease authority: this job's robots, all or nothing, first come first served
        try:
            fleet = FleetLeases(
                sorted(robot_ids), plan.run_dir.name, plan.resources.wait_s, say=display.message
            ).__enter__()
        except LeaseHeld as e:
            raise RunFailed(str(e)) from None
        try:
            return Supervisor(plan, RayRunner(plan), display).run()
        finally:
            fleet.__exit__(None, None, None)
            if fleet.resources:
                (plan.run_dir / "fleet.json").write_text(
                    json.dumps(
                        {
                            "resources": fleet.resources,
                            "waited_s": fleet.waited_s,
                            "granted": fleet.granted,
                            "released": fleet.released,
                        }
                    )
                )
    finally:
        if started:
            ray.shutdown()
