"""The one wiring: what runs in a learner and in an actor, whichever runner places them (serial:
one process; local: processes on this machine; Ray: nodes of a cluster).

    addresses = learner.open()                      # run_learner does this, then the loop
    run_actor(task, policy, with_addresses(cfg, *addresses), stop)   # per actor, anywhere
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from pathlib import Path
from threading import Event as ThreadEvent

from hal.safety import SafeRobot
from hal.spec import RobotSpec
from policies.base import Policy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.launch.builders import PolicyArgs, TaskArgs, make_actor_policy, make_safe_robot, make_teleops
from robo_async.launch.experts import expert_policy
from robo_async.launch.flag import StopFlag
from robo_async.launch.sources import policy_source
from robo_async.learner.learner import Learner

AnyEvent = Event | ThreadEvent | StopFlag


def run_actor(task: TaskArgs, policy: PolicyArgs, cfg: ActorConfig, stop: AnyEvent) -> Actor:
    """Build the actor's robot (behind the safety layer), teleops and policy; run until the
    learner stops or `stop`. Raises hal's RobotError when the robot is lost."""
    robots = [make_safe_robot(task) for _ in range(cfg.options.envs)]  # a vectorized actor: several simulators
    robot = robots[0]
    teleops = make_teleops(task, robot)
    for t in teleops:
        t.connect()
    try:
        actor = Actor(
            robots if len(robots) > 1 else robot,
            remote_policy(cfg, policy, robot.spec)
            if cfg.options.inference_server
            else make_actor_policy(policy, robot.spec),
            cfg,
            teleops,
            guide=make_guide(cfg.options.guide, task, robot) if cfg.options.guide else None,
        )
        actor.run(stop)
        return actor
    finally:
        for t in teleops:
            t.close()


def remote_policy(cfg: ActorConfig, policy: PolicyArgs, spec: RobotSpec) -> Policy:
    """The actor's side of a policy on a `robo-async serve` server (CURVE with the actor's keys)."""
    from functools import partial

    from robo_async.actor.remote import RemotePolicy
    from robo_async.transport.curve import secure_client

    assert cfg.options.inference_server is not None
    secure = partial(secure_client, keys_dir=cfg.keys_dir, actor_id=cfg.actor_id) if cfg.keys_dir else None
    return RemotePolicy(
        cfg.options.inference_server,
        spec,
        cfg.actor_id,
        policy.name,
        secure=secure,
        instruction=str(policy.option("instruction") or ""),
        image_codec=cfg.options.server_image_codec,
    )


def make_guide(source: str, task: TaskArgs, robot: SafeRobot) -> Policy:
    """The JSRL guide: `expert` (the task's scripted expert, reading the simulator) or a
    `robo-async bc` run directory (its flow policy, deterministic)."""
    if source == "expert":
        return expert_policy(task, robot)
    src = policy_source(Path(source))
    guide = make_actor_policy(src.policy, robot.spec, deterministic=True)
    if src.weights is not None:
        guide.load_weights(src.version, src.weights)
    return guide


def learner_loop(
    learner: Learner, stop: Callable[[], bool], report: Callable[[dict], None], report_s: float = 0.5
) -> dict:
    """Step an opened learner until it is done or `stop()`; `report(progress)` every `report_s`.
    Saves, closes, and returns {"reason", "checkpoint", **progress}."""
    next_report = 0.0
    while not learner.done() and not stop():
        learner.step()
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + report_s
            report(learner.progress())
    path = learner.save()
    reason = learner.stop_reason or "stopped"
    learner.close()
    return {"reason": reason, "checkpoint": str(path), **learner.progress()}


def with_addresses(cfg: ActorConfig, data: str, weights: str) -> ActorConfig:
    return dataclasses.replace(cfg, data_address=data, weights_address=weights)
