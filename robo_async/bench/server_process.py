"""A policy server (`robo-async serve`'s `PolicyServer`) in its own spawned process, for `robo-async
bench remote-inference`: the benchmark's chunk policy (trained and cached, `bench.cells`) with an
injected inference time, or a VLA-class flow head (`large_policy`, 25 M parameters) with its real
compute; `ServerProcess` starts it, gives its address, and keeps its stats when it stops."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import torch

CACHE = Path.home() / ".cache" / "robo_async" / "bench"


LARGE = (2048, 2048, 2048)  # the batching benchmark's VLA-class flow head: 25 M parameters, real compute


def large_policy(horizon: int):
    from policies.flow import FlowChunkPolicy
    from robo_async.bench.cells import DIMS, KEYS, SCALE
    from sim import ReachTask

    spec = ReachTask().spec()
    return FlowChunkPolicy(
        KEYS,
        DIMS,
        spec.joint_low,
        spec.joint_high,
        horizon=horizon,
        steps=5,
        hidden=LARGE,
        obs_scale=SCALE,
        action_mode="delta",
        delta_range=0.6,
    )


def _server_main(
    horizon: int, bc_steps: int, infer_ms: float, max_batch: int, ready: Any, stop: Any, kind: str = "bench"
) -> None:
    """A policy server process: the benchmark's chunk policy (from the cache) with `infer_ms`
    added, or (`large`) a VLA-class flow head with its real compute."""
    import logging

    from policies.delayed import DelayedPolicy
    from robo_async.bench.cells import trained_policy
    from robo_async.launch.processes import _watch_parent
    from robo_async.serve import PolicyServer, ServeConfig
    from sim import ReachTask

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    policy = large_policy(horizon) if kind == "large" else trained_policy(horizon, bc_steps, CACHE)
    served = DelayedPolicy(policy, infer_ms) if infer_ms > 0 else policy
    server = PolicyServer(served, ReachTask().spec(), ServeConfig("tcp://127.0.0.1:0", max_batch=max_batch)).start()
    ready.put(server.bound)
    _watch_parent(stop)  # a benchmark killed with -9 leaves no server behind
    while not stop.is_set():  # polled (see _watch_parent): never stop.wait() on a process Event
        time.sleep(0.1)
    ready.put(server.stats())
    server.close()


class ServerProcess:
    """A policy server (`_server_main`) in its own spawned process, as a context manager:
    entering returns its bound address (after the policy is trained or loaded), leaving stops it
    and keeps its `PolicyServer.stats()` in `stats`. `infer_ms`: injected inference time (ms).

        with ServerProcess(horizon=8, bc_steps=4000, infer_ms=100) as address:
            policy = RemotePolicy(address, spec)"""

    def __init__(self, horizon: int, bc_steps: int, infer_ms: float, max_batch: int = 16, kind: str = "bench") -> None:
        ctx = mp.get_context("spawn")
        self._q, self._stop = ctx.Queue(), ctx.Event()
        self._p = ctx.Process(
            target=_server_main,
            args=(horizon, bc_steps, infer_ms, max_batch, self._q, self._stop, kind),
            daemon=True,
            name="policy-server",
        )
        self.stats: dict = {}

    def __enter__(self) -> str:
        self._p.start()
        return self._q.get(timeout=300)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            self.stats = self._q.get(timeout=20)
        except Exception:  # noqa: BLE001
            self.stats = {}
        self._p.join(timeout=10)
        if self._p.is_alive():
            self._p.kill()
