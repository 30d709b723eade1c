"""`launcher:` and `resources:` config sections: which runner places the run's processes, how the
supervisor (`supervisor.py`) restarts them, and the leases of robots and simulators. The schema
(`schema.py`) checks them; the builders carry them in the plan (`plan.TrainPlan`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    """`launcher.supervise`: restart budgets and liveness, the same on every runner."""

    restarts: int = 5  # restarts allowed per process within window_s (0: never restart)
    window_s: float = 3600.0
    backoff_s: float = 1.0  # wait before a restart, doubled for each restart in the window ...
    max_backoff_s: float = 30.0  # ... up to this
    liveness_s: float = 30.0  # a learner that reports nothing for this long is killed and restarted

    def __post_init__(self) -> None:
        if (
            self.restarts < 0
            or self.window_s <= 0
            or self.backoff_s < 0
            or self.max_backoff_s < self.backoff_s
            or self.liveness_s <= 0
        ):
            raise ValueError(
                f"launcher.supervise {self}: restarts >= 0, window_s > 0, "
                f"0 <= backoff_s <= max_backoff_s, liveness_s > 0"
            )


@dataclass(frozen=True)
class LauncherConfig:
    """`launcher`: which runner places the learner and the actors, and how they are supervised."""

    name: str = "local"  # serial (one process) | local (processes on this machine) | ray (a Ray cluster)
    start_timeout_s: float = 60.0  # the learner must be ready (bound, checkpoint loaded) within this
    shutdown_timeout_s: float = 20.0  # processes get this long to flush and save before they are killed
    address: str | None = None  # ray: e.g. ray://head:10001 or auto; null starts a local Ray
    num_cpus: int | None = None  # ray: CPUs of a local Ray (null: all)
    learner_num_cpus: float = 1.0  # ray: CPUs reserved for the learner
    actor_num_cpus: float = 0.5  # ray: CPUs reserved per actor
    supervise: RestartPolicy = RestartPolicy()  # restart budgets and liveness (all runners)


@dataclass(frozen=True)
class RayLauncherConfig(LauncherConfig):
    """`launcher=ray`: as `LauncherConfig`, with start-up and shutdown allowances for a cluster."""

    name: str = "ray"
    start_timeout_s: float = 120.0
    shutdown_timeout_s: float = 30.0


@dataclass(frozen=True)
class ResourcesConfig:
    """`resources`: the leases that make robots and simulators schedulable (hal.leases)."""

    lease_dir: str | None = None  # where leases live (default ~/.cache/robo_async/leases or $ROBO_ASYNC_LEASE_DIR)
    wait_s: float = 0.0  # a held robot: 0 fails at once naming the holder; > 0 waits in line this long
    sim_slots: int = 64  # simulators available per task on this machine
