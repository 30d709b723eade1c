"""The Ray launcher: the learner as a Ray actor (on a GPU node when the cluster has one), each
actor as a Ray task placed on the node whose resources include its robot. The data plane stays
ZMQ; Ray only places and supervises processes.

Robots are Ray custom resources named by their resource id: start a robot machine with
`ray start --address=HEAD --resources='{"robot:so101_follower/left": 1}'` (`robo-async resources
ray=true` prints the line for what it finds). With no `launcher.address`, a local Ray is started
and this run's robots are declared on it. Each actor leases its robot (or a sim slot) on its node.
"""

from __future__ import annotations

import logging
import threading
import time

from robo_async.launch.builders import PolicyArgs, TaskArgs, TrainPlan
from robo_async.launch.local import RunFailed, RunResult
from robo_async.launch.progress import ProgressDisplay
from robo_async.learner.learner import LearnerConfig

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

    def open(self) -> tuple[str, str]:
        import ray

        self.learner.open()
        ip = ray.util.get_node_ip_address()
        return tuple(a.replace("0.0.0.0", ip) for a in self.learner.addresses)  # type: ignore[return-value]

    def run(self) -> dict:
        from robo_async.launch.wiring import learner_loop

        def report(p: dict[str, float]) -> None:
            self._progress = p

        return learner_loop(self.learner, self._stop.is_set, report)

    def progress(self) -> dict[str, float]:
        return self._progress

    def stop(self) -> None:
        self._stop.set()


def ray_actor_task(task: TaskArgs, policy: PolicyArgs, cfg, resource_id: str, lease_opts: dict,
                   job: str) -> tuple[bool, str]:
    """One actor on whatever node Ray placed it: lease its robot there, run until the learner stops.
    Returns (clean, message): clean when it ended because the learner is stopping."""
    import torch

    from hal.leases import LeaseManager
    from hal.robot import RobotError
    from robo_async.launch.wiring import run_actor

    torch.set_num_threads(1)
    lease = LeaseManager(lease_opts.get("lease_dir")).acquire(resource_id, job, float(lease_opts.get("wait_s") or 0))
    try:
        actor = run_actor(task, policy, cfg, threading.Event())  # ends when the learner says it is stopping
        return True, f"done: {actor.env_steps} env steps"
    except RobotError as e:
        return False, f"robot lost: {e}"
    finally:
        lease.release()


def launch_ray(plan: TrainPlan, display: ProgressDisplay) -> RunResult:
    import ray

    from robo_async.launch.wiring import with_addresses

    opts = plan.launcher
    robot_ids = {plan.task_of(c.actor_id).resource_id(c.actor_id) for c in plan.actors
                 if plan.task_of(c.actor_id).robot is not None}
    started = False
    if not ray.is_initialized():
        if opts.get("address"):
            ray.init(address=opts["address"], log_to_driver=False)
        else:  # a local Ray with this run's robots declared on this node
            ray.init(num_cpus=opts.get("num_cpus"), resources={r: 1 for r in robot_ids} or None,
                     include_dashboard=False, log_to_driver=False)
        started = True
    try:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        learner = ray.remote(RayLearner).options(num_cpus=float(opts.get("learner_num_cpus", 1)), num_gpus=gpus,
                                                 max_concurrency=2).remote(plan.learner)
        try:
            data, weights = ray.get(learner.open.remote(), timeout=plan.start_timeout_s)
        except Exception as e:
            raise RunFailed(f"the learner failed to start on Ray: {e}") from None
        run_ref = learner.run.remote()
        task_fn = ray.remote(ray_actor_task)
        refs = {}
        for cfg in plan.actors:
            t = plan.task_of(cfg.actor_id)
            rid = t.resource_id(cfg.actor_id)
            resources = {rid: 1} if t.robot is not None else {}
            refs[task_fn.options(num_cpus=float(opts.get("actor_num_cpus", 0.5)), resources=resources).remote(
                t, plan.policy, with_addresses(cfg, data, weights), rid, plan.leases, plan.run_dir.name)] = \
                f"actor {cfg.actor_id}"
        progress: dict[str, float] = {}
        interrupted = False
        all_done_at: float | None = None  # when the last actor ended cleanly (the learner is stopping)
        stopping = False  # an actor ended cleanly: the learner said it is stopping
        try:
            while not ray.wait([run_ref], timeout=0.5)[0]:
                if all_done_at is not None and time.monotonic() - all_done_at > plan.shutdown_timeout_s:
                    learner.stop.remote()  # every actor ended and the learner has not: stop it
                    all_done_at = float("inf")
                progress = ray.get(learner.progress.remote()) or progress
                if progress:
                    display.update(progress)
                finished, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
                for ref in finished:
                    who = refs.pop(ref)
                    try:
                        clean, msg = ray.get(ref)
                    except Exception as e:
                        learner.stop.remote()
                        raise RunFailed(f"{who} failed on Ray: {str(e).splitlines()[-1]}; stopping the run") from None
                    if clean or (stopping and not refs):  # the learner is stopping: its result follows
                        stopping = True
                        if not refs and all_done_at is None:
                            all_done_at = time.monotonic()
                        continue
                    display.message(f"[red]{who}: {msg}; continuing with {len(refs)} actor(s)[/]")
                    if not refs:
                        learner.stop.remote()
                        raise RunFailed(f"{who}: {msg}; no robots left, stopping the run")
        except KeyboardInterrupt:
            interrupted = True
            learner.stop.remote()
        done = ray.get(run_ref, timeout=plan.shutdown_timeout_s + 60)
        if refs:  # actors end when the learner says it is stopping
            _, late = ray.wait(list(refs), num_returns=len(refs), timeout=plan.shutdown_timeout_s)
            for ref in late:
                ray.cancel(ref, force=True)
        return RunResult(done.pop("reason"), done.pop("checkpoint"), done, interrupted)
    finally:
        if started:
            ray.shutdown()
