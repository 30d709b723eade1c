"""`robo-async bench multi-actor`: env steps/s into the learner and learner updates/s with 1, 2 and
4 simulated actors (state observations, as fast as they go: a low update-to-data ratio and a
large limiter slack so the actors and the ingest path, not the rate limiter, are the limit),
per-actor and learner CPU use, and lease latency; then one vectorized actor stepping `envs=`
simulators with one batched policy call per tick (`actor.envs`), against the best
process-per-simulator total of the same run (`vec_over_processes`).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from rich.console import Console
from rich.table import Table

from hal.leases import LeaseManager
from robo_async.bench import emit, register
from robo_async.commands.args import arg

CLK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK  # utime + stime
    except (OSError, IndexError, ValueError):
        return float("nan")


def lease_latency(n: int = 500) -> tuple[float, float]:
    leases = LeaseManager(tempfile.mkdtemp(prefix="bench-leases-"))
    acq, rel = [], []
    for i in range(n):
        t0 = time.perf_counter()
        lease = leases.acquire(f"sim:reach/{i % 8}", job="bench")
        t1 = time.perf_counter()
        lease.release()
        acq.append((t1 - t0) * 1000)
        rel.append((time.perf_counter() - t1) * 1000)
    return float(np.median(acq)), float(np.median(rel))


def one_run(
    actors: int, seconds: float, utd: float, root: Path, envs: int = 1, uplink: str = "thread"
) -> dict[str, float]:
    from robo_async.commands.train import prepare
    from robo_async.launch.local import launch_local
    from robo_async.launch.progress import ProgressDisplay
    from robo_async.learner.metrics import read_metrics

    cfg, plan = prepare(
        [
            f"runs_root={root}",
            f"actors={actors}",
            f"actor.envs={envs}",
            f"budget.seconds={seconds}",
            "stop_at_success=null",
            "eval_episodes=0",
            f"algo.utd_ratio={utd}",
            "algo.limiter_slack=100000",
            "learner.log_every_s=0.5",
            "actor.journal=false",
            f"actor.uplink={uplink}",
        ]
    )
    plan.run_dir.mkdir(parents=True)
    cpu: dict[str, list[float]] = {}
    window = (seconds * 0.3, seconds * 0.9)  # skip start-up, stop before shutdown

    def sample() -> None:
        pids_file = plan.run_dir / "processes.json"
        while not pids_file.exists():
            time.sleep(0.1)
        t_start = time.monotonic()
        pids = json.loads(pids_file.read_text())
        for at in window:
            time.sleep(max(0.0, t_start + at - time.monotonic()))
            for who, pid in pids.items():
                cpu.setdefault(who, []).append(_cpu_seconds(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ProgressDisplay(f"bench multi-actor: {actors} actor(s) x {envs} simulator(s)") as display:
        launch_local(plan, display)
    sampler.join(timeout=5)
    rows = [r for r in read_metrics(plan.run_dir) if window[0] <= r["time/elapsed_s"] <= window[1]]
    span = rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"]
    steps = (rows[-1]["time/env_steps"] - rows[0]["time/env_steps"]) / span
    updates = (rows[-1]["time/updates"] - rows[0]["time/updates"]) / span
    dt = window[1] - window[0]
    per = {w: (v[1] - v[0]) / dt for w, v in cpu.items() if len(v) == 2}
    actor_cpu = [v for w, v in per.items() if w.startswith("actor")]
    return {
        "steps_per_s": steps,
        "updates_per_s": updates,
        "learner_cpu": per.get("learner", float("nan")),
        "actor_cpu_mean": float(np.mean(actor_cpu)) if actor_cpu else float("nan"),
    }


# learning rows: the same job with one simulator per actor and with one vectorized actor (the
# pick_lift row is bench learn's DSRL row from state: 20 demonstrations and the BC prior)
LEARN = {"reach": ["task=reach"], "pick_lift": None}  # built from bench learn's row (demos and the BC prior first)


def learn_row(task: str, envs: int, root: Path, budget_s: float) -> dict[str, object]:
    """Seconds to 90% rolling success of `robo-async train` on `task` with one actor stepping
    `envs` simulators (1: today's actor)."""
    from robo_async.bench.learn import ROWS
    from robo_async.bench.row_figures import control_hz, curve, first_reach, robot_minutes
    from robo_async.bench.rows import _cli, bc_start, record_demos

    extra = [f"actor.envs={envs}", "stop_at_success=0.9", "eval_episodes=0", f"budget.seconds={budget_s:g}"]
    if task == "pick_lift":
        row = ROWS["pick_lift-dsrl"]
        demos = root / "demos-pick_lift-state"
        record_demos(row.task, row.obs, demos, root / "demos.log")
        bc_dir, _ = bc_start(row.task, row.obs, demos, root, root / "bc.log", absolute=row.absolute)
        args = row.overrides(demos, bc_dir)
    else:
        args = list(LEARN[task] or [])
    run_dir = root / f"learn-{task}-envs{envs}"
    res = _cli(["train", *args, *extra, f"run_dir={run_dir}"], budget_s + 900, root / f"learn-{task}-envs{envs}.log")
    points = curve(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    t90, s90 = first_reach(points, 0.9)
    return {
        "task": task,
        "envs": envs,
        "seconds_to_90": t90,
        "env_steps_to_90": s90,
        "robot_minutes_to_90": robot_minutes(s90, control_hz(task)),  # env steps / the task's control rate
        "returncode": res.returncode,
    }


@dataclass(frozen=True, kw_only=True)
class MultiActorKeys:
    """The keys of `robo-async bench multi-actor`."""

    seconds: float = arg(30.0, help="seconds of each throughput run")
    actors: tuple[int, ...] = arg((1, 2, 4), help="actor processes (one simulator each) per run")
    envs: tuple[int, ...] = arg((4, 16, 64), help="simulators of the one vectorized actor, per run")
    utd: float = arg(0.02, help="update-to-data ratio of the learner")
    uplink: Literal["thread", "process"] = arg("thread", help="actor.uplink of every run")
    learn: tuple[str, ...] = arg(("reach", "pick_lift"), help="tasks of the seconds-to-90% runs (empty: none)")
    learn_budget_s: float = arg(600.0, help="wall-clock budget of each seconds-to-90% run, s")


@register("multi-actor", MultiActorKeys)
def bench_multi_actor(args: MultiActorKeys) -> int:
    seconds = args.seconds
    utd = args.utd
    counts = list(args.actors)
    root = Path(tempfile.mkdtemp(prefix="bench-multi-actor-"))
    acquire_ms, release_ms = lease_latency()
    vec_counts = list(args.envs)
    uplink = args.uplink  # actor.uplink of every run: thread | process
    results = {str(n): one_run(n, seconds, utd, root, uplink=uplink) for n in counts}
    vec = {str(n): one_run(1, seconds, utd, root, envs=n, uplink=uplink) for n in vec_counts}
    table = Table(title=f"bench multi-actor ({os.cpu_count()} cores, utd {utd}, {seconds:.0f} s per run)")
    for col in ("actors x simulators", "env steps/s", "updates/s", "learner CPU", "CPU per actor", "steps/s per sim"):
        table.add_column(col, justify="right")
    for label, n, r in [
        *((f"{n} x 1", int(n), r) for n, r in results.items()),
        *((f"1 x {n}", int(n), r) for n, r in vec.items()),
    ]:
        table.add_row(
            label,
            f"{r['steps_per_s']:,.0f}",
            f"{r['updates_per_s']:,.1f}",
            f"{r['learner_cpu']:.2f}",
            f"{r['actor_cpu_mean']:.2f}",
            f"{r['steps_per_s'] / n:,.0f}",
        )
    Console().print(table)
    best_proc = max(r["steps_per_s"] for r in results.values()) if results else None
    best_vec = max(r["steps_per_s"] for r in vec.values()) if vec else None
    print(f"lease acquire {acquire_ms:.3f} ms, release {release_ms:.3f} ms (median)")
    figures = {
        "steps_per_s": {n: round(r["steps_per_s"], 1) for n, r in results.items()},
        "steps_per_s_by_envs": {n: round(r["steps_per_s"], 1) for n, r in vec.items()},
        "steps_per_s_vec": round(best_vec, 1) if best_vec else None,
        "vec_over_processes": round(best_vec / best_proc, 2) if best_vec and best_proc else None,
        "updates_per_s": {n: round(r["updates_per_s"], 1) for n, r in results.items()},
        "actor_cpu": {n: round(r["actor_cpu_mean"], 3) for n, r in results.items()},
        "learner_cpu": {n: round(r["learner_cpu"], 3) for n, r in results.items()},
        "lease_acquire_ms": round(acquire_ms, 4),
        "lease_release_ms": round(release_ms, 4),
        "cores": os.cpu_count(),
        "utd_ratio": utd,
        "uplink": uplink,
    }
    learn = list(args.learn)
    if learn and vec:
        n_best = int(max(vec, key=lambda n: vec[n]["steps_per_s"]))
        budget = args.learn_budget_s
        rows = [learn_row(t, n, root, budget) for t in learn for n in (1, n_best)]
        lt = Table(title=f"seconds to 90% rolling success (one actor; 1 simulator vs {n_best} in one loop)")
        for col in ("task", "simulators", "seconds to 90%", "env steps to 90%", "robot-minutes to 90%"):
            lt.add_column(col, justify="right")
        for r in rows:
            keys = ("task", "envs", "seconds_to_90", "env_steps_to_90", "robot_minutes_to_90")
            lt.add_row(*(str(r[k]) for k in keys))
        Console().print(lt)
        figures["learn"] = rows
        for t in learn:
            one, many = (next(r for r in rows if r["task"] == t and r["envs"] == n) for n in (1, n_best))
            figures[f"{t}_seconds_to_90"] = {"1": one["seconds_to_90"], str(n_best): many["seconds_to_90"]}
    emit(figures)
    return 0
