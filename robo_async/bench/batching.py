"""Part 2 of `robo-async bench remote-inference`, batching at the policy server: 1, 2, 4 and 8
actors (processes, each a `RemotePolicy` in a closed loop) against a server process (real compute,
no injected time) batching (`max_batch=16`) and one by one (`max_batch=1`), chunks/s; the gain at
8 actors, beside what the large policy alone gains from batching on this CPU (`compute_gain`)."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np

from robo_async.bench.server_process import LARGE, ServerProcess, large_policy


def _client_main(address: str, actor_id: int, obs: dict, ready: Any, go: Any, seconds: float, counts: Any) -> None:
    """One edge actor in its own process: chunks in a closed loop for `seconds` after `go`."""
    from robo_async.actor.remote import RemotePolicy
    from sim import ReachTask

    p = RemotePolicy(address, ReachTask().spec(), actor_id=actor_id, give_up_s=30)
    p.connect(60)
    p.deterministic = True
    p.predict_chunk(obs)  # warm
    ready.put(actor_id)
    go.wait()
    until, n = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        p.predict_chunk(obs, forwarded_state=obs["state"])
        n += 1
    p.close()
    counts.put(n)


def _load(address: str, actors: int, seconds: float, obs: dict) -> tuple[int, float]:
    """`actors` closed-loop client processes for `seconds`: chunks received, wall time."""
    ctx = mp.get_context("spawn")
    ready, counts, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_client_main, args=(address, i, obs, ready, go, seconds, counts), daemon=True)
        for i in range(actors)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    t0 = time.monotonic()
    go.set()
    total = sum(counts.get(timeout=seconds + 120) for _ in procs)
    wall = time.monotonic() - t0
    for p in procs:
        p.join(timeout=10)
    return total, wall


def compute_gain(horizon: int, rows: int = 8, reps: int = 10) -> float:
    """The large policy alone on this CPU: `rows` one by one against one batch of `rows` (the
    most batching can give end to end here)."""
    from policies.base import ChunkRequest
    from robo_async.bench.cells import DIMS

    p = large_policy(horizon)
    p.deterministic = True
    obs = {k: np.zeros(d, np.float32) for k, d in zip(("state", "target", "ee_to_target"), DIMS, strict=False)}
    one, many = [ChunkRequest(obs, obs["state"])], [ChunkRequest(obs, obs["state"])] * rows
    p.predict_chunks(many)
    t0 = time.perf_counter()
    for _ in range(reps):
        for _ in range(rows):
            p.predict_chunks(one)
    t1 = time.perf_counter()
    for _ in range(reps):
        p.predict_chunks(many)
    return (t1 - t0) / (time.perf_counter() - t1)


def batching(
    horizon: int, bc_steps: int, seconds: float, policies: tuple[str, ...]
) -> tuple[dict[str, dict[str, dict[str, float]]], dict]:
    """Chunks/s of each of `policies` ("large", "bench") behind a server batching and one by one, by
    actors (1, 2, 4, 8) in closed loops for `seconds` each; and the batch sizes each server saw."""
    from sim import ReachTask, SimRobot

    robot = SimRobot(ReachTask())
    robot.connect()
    obs = robot.reset(seed=0).as_dict()
    robot.close()
    out: dict[str, dict[str, dict[str, float]]] = {}
    sizes = {}
    for kind in policies:
        out[kind] = {"batched": {}, "one_by_one": {}}
        for name, max_batch in (("batched", 16), ("one_by_one", 1)):
            server = ServerProcess(horizon, bc_steps, 0.0, max_batch, kind)
            with server as address:
                for n in (1, 2, 4, 8):
                    chunks, wall = _load(address, n, seconds, obs)
                    out[kind][name][str(n)] = round(chunks / wall, 1)
                    print(f"  {kind} policy, server {name:<10} {n} actor(s): {chunks / wall:7.1f} chunks/s", flush=True)
            sizes[f"{kind}/{name}"] = server.stats.get("batch_sizes", {})
    return out, sizes


def batching_figures(chunks_per_s: dict, sizes: dict, horizon: int) -> dict[str, object]:
    figures: dict[str, object] = {}
    main = "large" if "large" in chunks_per_s else next(iter(chunks_per_s))
    figures["batching_policy"] = (
        f"flow head {'x'.join(map(str, LARGE))} (25 M parameters, random init)"
        if main == "large"
        else "the sweep's flow policy"
    )
    figures["server_chunks_per_s"] = chunks_per_s[main]
    figures["batching_gain_8"] = round(chunks_per_s[main]["batched"]["8"] / chunks_per_s[main]["one_by_one"]["8"], 2)
    for kind, modes in chunks_per_s.items():
        if kind != main:
            figures[f"server_chunks_per_s_{kind}"] = modes
            figures[f"batching_gain_8_{kind}"] = round(modes["batched"]["8"] / modes["one_by_one"]["8"], 2)
    if main == "large":
        figures["batching_compute_gain_8"] = round(compute_gain(horizon), 2)
    figures["batch_sizes"] = sizes
    print(
        f"batching gain at 8 actors: {figures['batching_gain_8']}x (goal 3x; the policy alone batches "
        f"{figures.get('batching_compute_gain_8')}x on this CPU)",
        flush=True,
    )
    return figures
