"""Entry points of the learner and actor processes of the local launcher (spawned)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from hal.robot import RobotError
from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs
from robo_async.launch.wiring import learner_loop, run_actor
from robo_async.learner.learner import Learner, LearnerConfig

ROBOT_LOST = 3  # exit code of an actor whose robot failed: the run continues with the others


def _watch_parent(stop: Event, every_s: float = 1.0) -> None:
    """If the launcher dies (kill -9, a crashed terminal), set `stop`: the learner writes its
    final checkpoint and the actors hold and close their robots, instead of running orphaned."""
    parent = os.getppid()

    def watch() -> None:
        # Poll with is_set(), never stop.wait(): a process killed while waiting on a
        # multiprocessing Event stays counted as a sleeper, and the launcher's stop.set() then
        # blocks forever waiting for it to wake.
        while not stop.is_set():
            time.sleep(every_s)
            if os.getppid() != parent:
                logging.getLogger(__name__).error("the launcher (pid %d) is gone; stopping", parent)
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child_setup(stop: Event) -> None:
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


def learner_main(cfg: LearnerConfig, stop: Event, status: Queue, errors: Queue, report_s: float = 0.5) -> None:
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
    except Exception as e:  # report, then exit non-zero: the launcher names us and stops the run
        _fail("learner", errors, e)


def actor_main(task: TaskArgs, policy: PolicyArgs, cfg: ActorConfig, stop: Event, errors: Queue) -> None:
    _child_setup(stop)
    who = f"actor {cfg.actor_id}"
    try:
        run_actor(task, policy, cfg, stop)
    except RobotError as e:  # unplugged / faulted: this robot stops (held, closed), the job goes on
        errors.put((who, f"robot lost: {e}"))
        sys.exit(ROBOT_LOST)
    except Exception as e:
        _fail(who, errors, e)
