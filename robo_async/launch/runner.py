"""What every runner shares: the small interface the supervisor drives, the run's result, and the
leases that make robots and simulators schedulable.

A runner (serial: threads of this process; local: processes on this machine; Ray: actors on a
cluster) only places processes and reports on them; the rules (restart budgets, liveness, hung
actors, shutdown order, events, dashboard) live once, in `supervisor.Supervisor`:

    runner = LocalRunner(plan)
    learner = runner.start_learner(plan.learner)     # a Proc
    for kind, payload in learner.poll(): ...         # ("ready", Ready) ("progress", {}) ("actors", {}) ("done", {})
    actor = runner.start_actor(with_addresses(cfg, *ready.addresses))
    actor.exit()                                     # None while it runs, else an Exit; then actor.why()
    actor.kill()                                     # hung: now; terminate() at shutdown: politely first
    runner.stop()                                    # everyone: the learner saves, actors hold and close
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from hal.leases import Lease, LeaseError, LeaseHeld, LeaseManager
from hal.resources import Resource, acquire_needs, parse_needs
from robo_async.actor.actor import ActorConfig
from robo_async.launch.plan import TrainPlan
from robo_async.learner.config import LearnerConfig


class RunFailed(RuntimeError):
    """The run stops: what failed, said in one line."""


@dataclass
class RunResult:
    """How a run ended: the learner's stop reason, its last checkpoint, the final progress figures."""

    reason: str
    checkpoint: str | None
    progress: dict[str, float]
    interrupted: bool = False


class Exit(enum.Enum):
    """How a process ended."""

    CLEAN = "clean"  # the learner after "done"; an actor because the learner said it is stopping
    ROBOT_LOST = "robot lost"  # an actor whose robot failed: held and closed; the others go on
    FAILED = "failed"  # crashed, killed, or could not start


@dataclass(frozen=True)
class Ready:
    """What a learner says once bound: where actors reach it, and what a restart binds again."""

    addresses: tuple[str, str]  # data, weights, as actors dial them
    bind: tuple[str, str]  # data, weights, as bound (a restart binds these, on the same node)


class Proc(Protocol):
    """One incarnation of the learner or of an actor, as a runner placed it."""

    def pid(self) -> int | None:
        """Its OS process id, once known (a Ray actor says it when it has started)."""

    def poll(self) -> list[tuple[str, object]]:
        """The learner's reports since the last poll: ("ready", Ready), ("progress", dict),
        ("actors", {actor id: row with "heard_s"}), ("done", dict); an actor has none."""

    def exit(self) -> Exit | None:
        """None while it runs."""

    def why(self) -> str:
        """Why it ended, in one line (its error, or its exit code)."""

    def kill(self) -> None:
        """End it now (SIGKILL): it is hung or silent."""

    def terminate(self) -> None:
        """End it at shutdown, after its grace: politely first, then for sure."""


class Runner(Protocol):
    """A back end of the one `Supervisor` loop: places the learner and actors and ends them (serial,
    local, Ray). It makes no restart decisions; the supervisor does."""

    name: str
    kills: bool  # can end a hung or silent process (serial cannot: its processes are threads)
    restarts_learner: bool  # can start the learner again in a fresh process

    def start_learner(self, cfg: LearnerConfig) -> Proc: ...

    def start_actor(self, cfg: ActorConfig) -> Proc: ...

    def stop(self) -> None:
        """Ask every process to stop: the learner writes its final checkpoint, actors flush."""

    def close(self) -> None:
        """Release whatever the runner still holds (after the supervisor's shutdown)."""


def lease_resources(plan: TrainPlan) -> list[Lease]:
    """One lease per actor's robot (its robot, or a simulator slot for each of its simulators), all or nothing, held
    for the run;
    released by the kernel if this process dies (serial and local; Ray leases on each node)."""
    opts = plan.resources
    leases = LeaseManager(opts.lease_dir)
    found: list[Resource] = []
    needs: dict[str, int] = {}
    for cfg in plan.actors:
        t = plan.task_of(cfg.actor_id)
        needs[t.resource_need] = (
            needs.get(t.resource_need, 0) + cfg.options.envs
        )  # a vectorized actor: a slot per simulator
        if t.robot is not None:
            rid = t.resource_id(cfg.actor_id)
            kind, _, rest = rid.partition(":")
            typ, _, name = rest.partition("/")
            found.append(Resource(kind, typ, name, str(t.robot.get("port", "local"))))
    for need in needs:
        if need.startswith("sim:"):
            task = need.split(":", 1)[1]
            found += [Resource("sim", task, str(i), "local") for i in range(opts.sim_slots)]
    job = plan.run_dir.name
    try:
        got = acquire_needs(found, parse_needs([f"{k}*{n}" for k, n in needs.items()]), leases, job, opts.wait_s)
    except (LeaseHeld, LeaseError) as e:
        raise RunFailed(str(e)) from None
    return [lease for _, lease in got]
