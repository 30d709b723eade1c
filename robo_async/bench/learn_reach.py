"""`robo-async bench learn-reach`: time and env steps until reach hits >= 90% success, and what
the actor path (safety layer, adder, ZMQ transport) costs against the bare simulator."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from hal.safety import SafeRobot
from policies.scripted import HoldPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop import LoopConfig
from robo_async.actor.uplink import UplinkConfig
from robo_async.bench import register
from robo_async.bench.ingest import IngestProcess
from robo_async.launch.builders import TaskArgs, make_robot

TASK = TaskArgs("reach", {})


def raw_sim_rate(steps: int, task: TaskArgs = TASK, episode: int = 50) -> float:
    """The bare simulator through its `hal.Robot` interface: act, observe, score, reset (every
    `episode` ticks)."""
    robot = make_robot(task)
    robot.connect()
    obs = robot.reset(seed=0)
    hold = robot.spec.hold_action
    t0 = time.perf_counter()
    for i in range(steps):
        robot.send_action(hold(obs.state))
        robot.outcome()
        obs = robot.get_observation()
        if (i + 1) % episode == 0:
            obs = robot.reset(seed=i)
    rate = steps / (time.perf_counter() - t0)
    robot.close()
    return rate


def actor_vs_raw(steps: int, rounds: int, task: TaskArgs = TASK, episode: int = 50) -> dict[str, object]:
    """The training actor users run (SafeRobot, the control loop, Adder, Uplink with its journal,
    WeightClient, allowance gate) against a stand-in learner process that acks everything, and the
    bare simulator, alternated `rounds` times: this machine's speed drifts by tens of percent
    within a minute, so each actor run is compared with the mean of the bare runs just before and
    just after it, and the median of those ratios is reported. The
    actor's rate is its loop's (first tick to last; start-up and connect are not timed)."""
    ingest = IngestProcess()
    raws, acts, ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-actor-") as tmp, ingest as (data, weights):
        def run(n: int, journal: str) -> float:
            cfg = ActorConfig(0, data, weights, LoopConfig(max_steps=n, eval_every=0, inference="inline",
                                                           episode_ticks=episode),
                              uplink=UplinkConfig(journal_dir=journal), start_seq=sent[0])
            robot = SafeRobot(make_robot(task))
            actor = Actor(robot, HoldPolicy(robot.spec), cfg)
            res = actor.run(threading.Event())
            assert res is not None
            sent[0] += res.ticks
            return res.ticks / res.seconds

        sent = [0]
        run(200, f"{tmp}/journal")  # connect, first status, imports
        raws.append(raw_sim_rate(steps, task, episode))
        for _ in range(rounds):  # raw, actor, raw, actor, ..., raw: each actor run between two raw ones
            acts.append(run(steps, f"{tmp}/journal"))
            raws.append(raw_sim_rate(steps, task, episode))
            ratios.append(acts[-1] / ((raws[-2] + raws[-1]) / 2))
    return {"sim_steps_per_s_raw": round(float(np.median(raws)), 1),
            "sim_steps_per_s_actor": round(float(np.median(acts)), 1),
            "actor_over_raw": round(float(np.median(ratios)), 3),
            "actor_over_raw_rounds": [round(r, 3) for r in ratios],
            "actor_transitions_sent": sent[0], "actor_transitions_received": ingest.received}


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
    steps = int(args.get("steps", 5_000))
    figures: dict[str, object] = actor_vs_raw(steps, int(args.get("rounds", 7)))
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
