"""Entry points of the learner and actor processes of the local launcher (spawned)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.queues import Queue

from hal.robot import RobotError
from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs
from robo_async.launch.flag import StopFlag
from robo_async.launch.wiring import learner_loop, run_actor
from robo_async.learner.config import LearnerConfig
from robo_async.learner.learner import Learner
from robo_async.learner.replicas import Rendezvous, run_replica

ROBOT_LOST = 3  # exit code of an actor whose robot failed: the run continues with the others


def _watch_parent(stop: StopFlag, every_s: float = 1.0) -> None:
    """If the launcher dies (kill -9, a crashed terminal), set `stop`: the learner writes its
    final checkpoint and the actors hold and close their robots, instead of running orphaned."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.is_set():
            time.sleep(every_s)
            if os.getppid() != parent:
                logging.getLogger(__name__).error("the launcher (pid %d) is gone; stopping", parent)
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child_setup(stop: StopFlag) -> None:
    # The launcher owns Ctrl-C: it sets `stop` so every process shuts down in order.
    _watch_parent(stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(processName)s %(levelname)s %(message)s")
    import torch

    torch.set_num_threads(1)


def _fail(who: str, errors: Queue, e: BaseException) -> None:
    errors.put((who, f"{type(e).__name__}: {e}"))
    traceback.print_exc(file=sys.stderr)
    sys.exit(1)


def learner_main(cfg: LearnerConfig, stop: StopFlag, status: Queue, errors: Queue, report_s: float = 0.5) -> None:
    _child_setup(stop)
    try:
        learner = Learner(cfg)
        learner.open()
        status.put(("ready", learner.addresses))

        def report(p: dict) -> None:
            status.put(("progress", p))
            status.put(("actors", learner.actor_rows()))

        done = learner_loop(learner, stop.is_set, report, report_s)
        status.put(("done", done))
    except Exception as e:  # noqa: BLE001 - report, then exit non-zero: the launcher names us and stops the run
        _fail("learner", errors, e)


def rank_main(env: dict[str, str], target: Callable[..., None], *args: object) -> None:
    """A learner rank (`learner.replicas` > 1): torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, LOCAL_RANK) set before `target` (learner_main or replica_main) runs."""
    os.environ.update(env)
    target(*args)


REPLICA_GRACE_S = 60.0  # a replica still running this long after `stop` (its learner gone): it exits


def replica_main(cfg: LearnerConfig, stop: StopFlag, errors: Queue) -> None:
    """A learner replica (rank >= 1): no sockets, no store; ends when rank 0 says stop."""
    _child_setup(stop)
    rdv = Rendezvous.from_env()
    who = f"learner rank {rdv.rank}"

    def backstop() -> None:  # rank 0 stops it; should rank 0 be gone as well, do not linger
        while not stop.is_set():
            time.sleep(1.0)
        time.sleep(REPLICA_GRACE_S)
        logging.getLogger(__name__).error(
            "%s: no stop from rank 0 within %.0f s of the run's stop; exiting", who, REPLICA_GRACE_S
        )
        os._exit(1)

    threading.Thread(target=backstop, name="replica-backstop", daemon=True).start()
    try:
        run_replica(cfg, rdv)
    except Exception as e:  # noqa: BLE001
        _fail(who, errors, e)


def actor_main(task: TaskArgs, policy: PolicyArgs, cfg: ActorConfig, stop: StopFlag, errors: Queue) -> None:
    _child_setup(stop)
    who = f"actor {cfg.actor_id}"
    try:
        run_actor(task, policy, cfg, stop)
    except RobotError as e:  # unplugged / faulted: this robot stops (held, closed), the job goes on
        errors.put((who, f"robot lost: {e}"))
        sys.exit(ROBOT_LOST)
    except Exception as e:  # noqa: BLE001
        _fail(who, errors, e)
