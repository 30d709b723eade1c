"""`robo-async bench multi-actor`: env steps/s into the learner and learner updates/s with 1, 2 and
4 simulated actors (state observations, as fast as they go: a low update-to-data ratio and a
large limiter slack so the actors and the ingest path, not the rate limiter, are the limit),
per-actor and learner CPU use, and lease latency."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from hal.leases import LeaseManager
from robo_async.bench import register

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


def one_run(actors: int, seconds: float, utd: float, root: Path) -> dict[str, float]:
    from robo_async.launch.local import launch_local
    from robo_async.launch.progress import ProgressDisplay
    from robo_async.learner.metrics import read_metrics
    from robo_async.train import prepare

    cfg, plan = prepare([f"runs_root={root}", f"actors={actors}", f"budget.seconds={seconds}",
                         "stop_at_success=null", "eval_episodes=0", f"algo.utd_ratio={utd}",
                         "algo.limiter_slack=100000",
                         "learner.log_every_s=0.5", "actor.journal=false"])
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
    with ProgressDisplay(f"bench multi-actor: {actors} actor(s)") as display:
        launch_local(plan, display)
    sampler.join(timeout=5)
    rows = [r for r in read_metrics(plan.run_dir) if window[0] <= r["time/elapsed_s"] <= window[1]]
    span = rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"]
    steps = (rows[-1]["time/env_steps"] - rows[0]["time/env_steps"]) / span
    updates = (rows[-1]["time/updates"] - rows[0]["time/updates"]) / span
    dt = window[1] - window[0]
    per = {w: (v[1] - v[0]) / dt for w, v in cpu.items() if len(v) == 2}
    actor_cpu = [v for w, v in per.items() if w.startswith("actor")]
    return {"steps_per_s": steps, "updates_per_s": updates, "learner_cpu": per.get("learner", float("nan")),
            "actor_cpu_mean": float(np.mean(actor_cpu)) if actor_cpu else float("nan")}


@register("multi-actor")
def bench_multi_actor(args: dict[str, str]) -> int:
    seconds = float(args.get("seconds", 30))
    utd = float(args.get("utd", 0.02))
    counts = [int(x) for x in args.get("actors", "1,2,4").split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-multi-actor-"))
    acquire_ms, release_ms = lease_latency()
    results = {str(n): one_run(n, seconds, utd, root) for n in counts}
    table = Table(title=f"bench multi-actor ({os.cpu_count()} cores, utd {utd}, {seconds:.0f} s per run)")
    for col in ("actors", "env steps/s", "updates/s", "learner CPU", "CPU per actor", "steps/s per actor"):
        table.add_column(col, justify="right")
    for n, r in results.items():
        table.add_row(n, f"{r['steps_per_s']:,.0f}", f"{r['updates_per_s']:,.1f}", f"{r['learner_cpu']:.2f}",
                      f"{r['actor_cpu_mean']:.2f}", f"{r['steps_per_s'] / int(n):,.0f}")
    Console().print(table)
    print(f"lease acquire {acquire_ms:.3f} ms, release {release_ms:.3f} ms (median)")
    figures = {
        "steps_per_s": {n: round(r["steps_per_s"], 1) for n, r in results.items()},
        "updates_per_s": {n: round(r["updates_per_s"], 1) for n, r in results.items()},
        "actor_cpu": {n: round(r["actor_cpu_mean"], 3) for n, r in results.items()},
        "learner_cpu": {n: round(r["learner_cpu"], 3) for n, r in results.items()},
        "lease_acquire_ms": round(acquire_ms, 4), "lease_release_ms": round(release_ms, 4),
        "cores": os.cpu_count(), "utd_ratio": utd,
    }
    print(json.dumps(figures))
    return 0
