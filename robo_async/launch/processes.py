"""Entry points of the learner and actor processes of the local launcher (spawned)."""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from hal.robot import RobotError
from robo_async.actor.actor import ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs
from robo_async.launch.wiring import learner_loop, run_actor
from robo_async.learner.learner import Learner, LearnerConfig

ROBOT_LOST = 3  # exit code of an actor whose robot failed: the run continues with the others


def _child_setup() -> None:
    # The launcher owns Ctrl-C: it sets `stop` so every process shuts down in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(processName)s %(levelname)s %(message)s")
    import torch

    torch.set_num_threads(1)


def _fail(who: str, errors: Queue, e: BaseException) -> None:
    errors.put((who, f"{type(e).__name__}: {e}"))
    traceback.print_exc(file=sys.stderr)
    sys.exit(1)


def learner_main(cfg: LearnerConfig, stop: Event, status: Queue, errors: Queue, report_s: float = 0.5) -> None:
    _child_setup()
    try:
        learner = Learner(cfg)
        learner.open()
        status.put(("ready", learner.addresses))
        done = learner_loop(learner, stop.is_set, lambda p: status.put(("progress", p)), report_s)
        status.put(("done", done))
    except Exception as e:  # report, then exit non-zero: the launcher names us and stops the run
        _fail("learner", errors, e)


def actor_main(task: TaskArgs, policy: PolicyArgs, cfg: ActorConfig, stop: Event, errors: Queue) -> None:
    _child_setup()
    who = f"actor {cfg.actor_id}"
    try:
        run_actor(task, policy, cfg, stop)
    except RobotError as e:  # unplugged / faulted: this robot stops (held, closed), the job goes on
        errors.put((who, f"robot lost: {e}"))
        sys.exit(ROBOT_LOST)
    except Exception as e:
        _fail(who, errors, e)
