"""`TrainPlan`: one training run as plain values, what a runner needs to start it (the learner's
config, each actor's, the tasks they drive, the launcher and the leases). The builders
(`builders.build_plan`) make it from the typed config; the runners and the supervisor read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from robo_async.actor.actor import ActorConfig
from robo_async.launch.options import LauncherConfig, ResourcesConfig
from robo_async.launch.policy_args import PolicyArgs
from robo_async.launch.tasks import TaskArgs
from robo_async.learner.config import LearnerConfig


@dataclass(frozen=True)
class TrainPlan:
    """Everything a runner needs to start one training run: the learner's config, each actor's, the
    tasks they drive, the launcher and the leases."""

    run_dir: Path
    learner: LearnerConfig
    task: TaskArgs
    policy: PolicyArgs
    actors: tuple[ActorConfig, ...]
    launcher: LauncherConfig = field(default_factory=LauncherConfig)  # runner, timeouts, supervision
    actor_tasks: tuple[TaskArgs, ...] = ()  # per actor (heterogeneous robots); default: `task` for all
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)  # leases: lease_dir, wait_s, sim_slots
    dashboard_port: int | None = 0  # the live page on loopback (0: any free port; None: none)
    advertise: tuple[str, str] | None = None  # data, weights as actors dial them (transport.advertise); None: as bound

    @property
    def start_timeout_s(self) -> float:
        return self.launcher.start_timeout_s

    @property
    def shutdown_timeout_s(self) -> float:
        return self.launcher.shutdown_timeout_s

    def task_of(self, actor_id: int) -> TaskArgs:
        return self.actor_tasks[actor_id] if self.actor_tasks else self.task
