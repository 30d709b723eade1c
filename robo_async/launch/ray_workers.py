"""What runs inside the Ray cluster's processes for `launcher=ray` (ray_launcher.py places and
supervises them): `RayLearner` (the learner as a threaded Ray actor, answering `progress()` while it
trains, and rank 0's meeting point for `learner.replicas` > 1), `RayReplica` (a learner replica,
rank >= 1) and `RayActorWorker` (one actor, leasing its robot or a sim slot on its node).
"""

from __future__ import annotations

import os
import threading
import time

from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs
from robo_async.launch.options import ResourcesConfig
from robo_async.learner.config import LearnerConfig


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
