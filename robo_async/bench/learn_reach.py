"""`robo-async bench learn-reach`: time and env steps until reach hits >= 90% success, and what
the actor path (safety layer, adder, ZMQ transport) costs against the bare simulator.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from hal.safety import SafeRobot
from policies.scripted import HoldPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.options import ActorOptions
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.bench import emit, register
from robo_async.bench.ingest import IngestProcess
from robo_async.commands.args import arg
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


def actor_vs_raw(
    steps: int, rounds: int, task: TaskArgs = TASK, episode: int = 50, uplinks: tuple[str, ...] = ("thread",)
) -> dict[str, object]:
    """The training actor users run (SafeRobot, the control loop, Adder, Uplink with its journal,
    WeightClient, allowance gate) against a stand-in learner process that acks everything, and the
    bare simulator, alternated `rounds` times: this machine's speed drifts by tens of percent
    within a minute, so each actor run is compared with the mean of the bare runs just before and
    just after it, and the median of those ratios is reported. The
    actor's rate is its loop's (first tick to last; start-up and connect are not timed). `uplinks`:
    where delivery runs (`actor.uplink`), each measured in every round; the first is the headline,
    the others' figures carry their name (`actor_over_raw_process`)."""
    ingest = IngestProcess()
    raws: list[float] = []
    acts: dict[str, list[float]] = {u: [] for u in uplinks}
    ratios: dict[str, list[float]] = {u: [] for u in uplinks}
    with tempfile.TemporaryDirectory(prefix="bench-actor-") as tmp, ingest as (data, weights):

        def run(n: int, journal: str, uplink: str = uplinks[0]) -> float:
            cfg = ActorConfig(
                0,
                data,
                weights,
                LoopConfig(max_steps=n, eval_every=0, inference="inline", episode_ticks=episode),
                delivery=UplinkConfig(journal_dir=journal),
                start_seq=sent[0],
                options=ActorOptions(uplink=uplink),
            )
            robot = SafeRobot(make_robot(task))
            actor = Actor(robot, HoldPolicy(robot.spec), cfg)
            res = actor.run(threading.Event())
            assert res is not None
            sent[0] += res.ticks
            return res.ticks / res.seconds

        sent = [0]
        for u in uplinks:
            run(200, f"{tmp}/journal", u)  # connect, first status, imports (a transport process's start)
        raws.append(raw_sim_rate(steps, task, episode))
        for _ in range(rounds):  # raw, actor, raw, actor, ..., raw: each actor run between two raw ones
            for u in uplinks:
                acts[u].append(run(steps, f"{tmp}/journal", u))
                raws.append(raw_sim_rate(steps, task, episode))
                ratios[u].append(acts[u][-1] / ((raws[-2] + raws[-1]) / 2))
    out: dict[str, object] = {"sim_steps_per_s_raw": round(float(np.median(raws)), 1)}
    for i, u in enumerate(uplinks):
        tag = "" if i == 0 else f"_{u}"
        out.update(
            {
                f"sim_steps_per_s_actor{tag}": round(float(np.median(acts[u])), 1),
                f"actor_over_raw{tag}": round(float(np.median(ratios[u])), 3),
                f"actor_over_raw_rounds{tag}": [round(r, 3) for r in ratios[u]],
            }
        )
    out.update(
        {"actor_uplink": uplinks[0], "actor_transitions_sent": sent[0], "actor_transitions_received": ingest.received}
    )
    return out


def realtime_jitter(seconds: float, uplinks: tuple[str, ...], task: TaskArgs = TASK) -> dict[str, object]:
    """A real-time actor (the wall-clock simulator at its 30 Hz, the same path as above) for
    `seconds` per uplink mode: how late its ticks start, p99 (ms), and ticks missed."""
    import dataclasses

    out: dict[str, object] = {}
    ingest = IngestProcess()
    rt = dataclasses.replace(task, realtime=True)
    with tempfile.TemporaryDirectory(prefix="bench-actor-rt-") as tmp, ingest as (data, weights):
        sent = 0
        for i, u in enumerate(uplinks):
            robot = SafeRobot(make_robot(rt))
            n = int(seconds * robot.spec.hz)
            cfg = ActorConfig(
                0,
                data,
                weights,
                LoopConfig(max_steps=n, eval_every=0, inference="inline", realtime=True, episode_ticks=50),
                delivery=UplinkConfig(journal_dir=f"{tmp}/journal"),
                start_seq=sent,
                options=ActorOptions(uplink=u),
            )
            res = Actor(robot, HoldPolicy(robot.spec), cfg).run(threading.Event())
            assert res is not None
            sent += res.ticks
            tag = "" if i == 0 else f"_{u}"
            out[f"realtime_jitter_p99_ms{tag}"] = round(res.lateness_p99_ms, 3)
            out[f"realtime_missed_ticks{tag}"] = res.missed_ticks
    return out


def learn(budget_s: float, actors: int) -> dict[str, float | None]:
    from robo_async.commands.train import prepare
    from robo_async.launch.local import launch_local
    from robo_async.launch.progress import ProgressDisplay

    root = Path(tempfile.mkdtemp(prefix="bench-learn-reach-"))
    cfg, plan = prepare([f"runs_root={root}", f"budget.seconds={budget_s}", f"actors={actors}"])
    plan.run_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    with ProgressDisplay("bench learn-reach") as display:
        result = launch_local(plan, display)
    wall = time.perf_counter() - t0
    solved = result.reason.startswith("solved")
    p = result.progress
    return {
        "solved": solved,
        "seconds_to_90": p.get("time/elapsed_s") if solved else None,
        "wall_s_including_startup": wall if solved else None,
        "env_steps_to_90": p.get("time/env_steps") if solved else None,
        "updates_to_90": p.get("time/updates") if solved else None,
        "final_success": p.get("charts/success_rate"),
        "run_dir": str(plan.run_dir),
    }


@dataclass(frozen=True, kw_only=True)
class LearnReachKeys:
    """The keys of `robo-async bench learn-reach`."""

    budget_s: float = arg(300.0, help="wall-clock budget of the training run, s")
    steps: int = arg(5_000, help="ticks per round of the bare-sim vs actor rate")
    rounds: int = arg(7, help="rounds of the rate comparison (the median is reported)")
    uplinks: tuple[str, ...] = arg(("thread", "process"), help="actor.uplink variants measured: thread, process")
    realtime_s: float = arg(30.0, help="seconds of the real-time jitter measurement (0: skipped)")
    skip_learning: bool = arg(False, help="measure the rates only, no training run")
    actors: int = arg(1, help="actors of the training run")


@register("learn-reach", LearnReachKeys)
def bench_learn_reach(args: LearnReachKeys) -> int:
    budget_s = args.budget_s
    steps = args.steps
    uplinks = args.uplinks
    figures: dict[str, object] = actor_vs_raw(steps, args.rounds, uplinks=uplinks)
    if args.realtime_s > 0:
        figures.update(realtime_jitter(args.realtime_s, uplinks))
    if not args.skip_learning:
        figures.update(learn(budget_s, args.actors))
    table = Table(title="bench learn-reach")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in figures.items():
        table.add_row(k, f"{v:.2f}" if isinstance(v, float) else str(v))
    Console().print(table)
    emit(figures)
    return 0
