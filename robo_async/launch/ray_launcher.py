"""The Ray launcher: the learner as a Ray actor (on a GPU node when the cluster has one), each actor as
a Ray task placed on the node whose resources include its robot (what runs in them: ray_workers.py;
how the supervisor polls them: ray_procs.py).
The data plane stays ZMQ; Ray only places and supervises processes: a learner that dies or stops
reporting is restarted on the same node and addresses from its checkpoint and the store, crashed
actor tasks are started again, hung real-time actors are killed and restarted: the one loop of
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

from robo_async.actor.actor import ActorConfig
from robo_async.launch.plan import TrainPlan
from robo_async.launch.progress import ProgressDisplay
from robo_async.launch.ray_procs import RayActorProc, RayLearnerProc
from robo_async.launch.ray_workers import RayActorWorker
from robo_async.launch.runner import RunFailed, RunResult
from robo_async.launch.supervisor import Supervisor
from robo_async.learner.config import LearnerConfig

log = logging.getLogger(__name__)


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
        self.learner: RayLearnerProc | None = None
        self.actors: list[RayActorProc] = []

    def start_learner(self, cfg: LearnerConfig) -> RayLearnerProc:
        self.learner = RayLearnerProc(self, cfg)
        return self.learner

    def start_actor(self, cfg: ActorConfig) -> RayActorProc:
        import ray

        t = self.plan.task_of(cfg.actor_id)
        rid = t.resource_id(cfg.actor_id)
        resources = {rid: 1} if t.robot is not None else {}
        handle = (
            ray.remote(RayActorWorker)
            .options(num_cpus=self.opts.actor_num_cpus, resources=resources, max_restarts=0)
            .remote()
        )
        proc = RayActorProc(handle, (t, self.plan.policy, cfg, rid, self.plan.resources, self.plan.run_dir.name))
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
