"""`robo-async bench learn-reach`: time and env steps until reach hits >= 90% success, and what
the actor path (safety layer, adder, ZMQ transport) costs against the bare simulator."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from hal.safety import SafeRobot
from policies.base import ActionChunk, Policy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop import LoopConfig
from robo_async.actor.uplink import UplinkConfig
from robo_async.bench import register
from robo_async.bench.ingest import IngestProcess
from robo_async.launch.builders import TaskArgs, make_robot

TASK = TaskArgs("reach", {})


class HoldPolicy(Policy):
    """Commands the current joint state: the cheapest possible policy, to isolate actor overhead."""

    version = 0
    architecture = "hold"

    def predict_chunk(self, obs: Mapping[str, np.ndarray], *, forwarded_state: np.ndarray | None = None,
                      prefix: np.ndarray | None = None, delay_ticks: int = 0) -> ActionChunk:
        return ActionChunk(np.asarray(obs["state"], np.float32)[None], 1 / 30, self.version)

    def module(self) -> torch.nn.Module:
        return torch.nn.Identity()


def raw_sim_rate(steps: int) -> float:
    """The bare simulator through its `hal.Robot` interface: act, observe, score, reset."""
    robot = make_robot(TASK)
    robot.connect()
    obs = robot.reset(seed=0)
    t0 = time.perf_counter()
    for i in range(steps):
        robot.send_action(obs.state)
        robot.outcome()
        obs = robot.get_observation()
        if (i + 1) % 50 == 0:
            obs = robot.reset(seed=i)
    rate = steps / (time.perf_counter() - t0)
    robot.close()
    return rate


def actor_rate(steps: int) -> tuple[float, int]:
    """The training actor users run (SafeRobot, the control loop, Adder, Uplink with its journal,
    allowance gate) against a stand-in learner process that acks everything."""
    ingest = IngestProcess()
    with tempfile.TemporaryDirectory(prefix="bench-actor-") as tmp, ingest as (data, weights):
        def run(n: int, journal: str) -> float:
            cfg = ActorConfig(0, data, weights, LoopConfig(max_steps=n, eval_every=0, inference="inline"),
                              uplink=UplinkConfig(journal_dir=journal))
            actor = Actor(SafeRobot(make_robot(TASK)), HoldPolicy(), cfg)
            t0 = time.perf_counter()
            actor.run(threading.Event())
            return n / (time.perf_counter() - t0)

        run(200, f"{tmp}/warmup")  # connect, first status, imports: not timed
        rate = run(steps, f"{tmp}/journal")
    return rate, ingest.received - 200  # all of them arrived (acked delivery), the warm-up's too


def learn(budget_s: float, actors: int) -> dict[str, float | None]:
    from robo_async.launch.local import launch_local
    from robo_async.launch.progress import ProgressDisplay
    from robo_async.train import prepare

    root = Path(tempfile.mkdtemp(prefix="bench-learn-reach-"))
    cfg, plan = prepare([f"runs_root={root}", f"budget.seconds={budget_s}", f"actors={actors}"])
    plan.run_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    with ProgressDisplay("bench learn-reach") as display:
        result = launch_local(plan, display)
    wall = time.perf_counter() - t0
    solved = result.reason.startswith("solved")
    p = result.progress
    return {"solved": solved, "seconds_to_90": p.get("time/elapsed_s") if solved else None,
            "wall_s_including_startup": wall if solved else None,
            "env_steps_to_90": p.get("time/env_steps") if solved else None,
            "updates_to_90": p.get("time/updates") if solved else None,
            "final_success": p.get("charts/success_rate"), "run_dir": str(plan.run_dir)}


@register("learn-reach")
def bench_learn_reach(args: dict[str, str]) -> int:
    budget_s = float(args.get("budget_s", 300))
    steps = int(args.get("steps", 20_000))
    raw = raw_sim_rate(steps)
    act, received = actor_rate(steps)
    figures: dict[str, object] = {
        "sim_steps_per_s_raw": round(raw, 1), "sim_steps_per_s_actor": round(act, 1),
        "actor_over_raw": round(act / raw, 3), "actor_transitions_received": received,
    }
    if args.get("skip_learning", "false") != "true":
        figures.update(learn(budget_s, int(args.get("actors", 1))))
    table = Table(title="bench learn-reach")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in figures.items():
        table.add_row(k, f"{v:.2f}" if isinstance(v, float) else str(v))
    Console().print(table)
    print(json.dumps(figures))
    return 0
