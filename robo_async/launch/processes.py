"""Entry points of the learner and actor processes (spawned by a launcher)."""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import time
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from robo_async.actor.actor import Actor, ActorConfig
from hal.robot import RobotError
from robo_async.launch.builders import PolicyArgs, TaskArgs, make_actor_policy, make_safe_robot, make_teleops
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
        next_report = 0.0
        while not learner.done() and not stop.is_set():
            learner.step()
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + report_s
                status.put(("progress", learner.progress()))
        path = learner.save()
        reason = learner.stop_reason or "stopped"
        learner.close()
        status.put(("done", {"reason": reason, "checkpoint": str(path), **learner.progress()}))
    except Exception as e:  # report, then exit non-zero: the launcher names us and stops the run
        _fail("learner", errors, e)


def actor_main(task: TaskArgs, policy: PolicyArgs, cfg: ActorConfig, stop: Event, errors: Queue) -> None:
    _child_setup()
    who = f"actor {cfg.actor_id}"
    try:
        robot = make_safe_robot(task)
        teleops = make_teleops(task)
        for t in teleops:
            t.connect()
        actor = Actor(robot, make_actor_policy(policy, robot.spec), cfg, teleops)
        actor.run(stop)
    except RobotError as e:  # unplugged / faulted: this robot stops (held, closed), the job goes on
        errors.put((who, f"robot lost: {e}"))
        sys.exit(ROBOT_LOST)
    except Exception as e:
        _fail(who, errors, e)


def with_addresses(cfg: ActorConfig, data: str, weights: str) -> ActorConfig:
    return dataclasses.replace(cfg, data_address=data, weights_address=weights)
