"""Benchmarks: `robo-async bench <name>` prints a table, then one JSON object as its last line."""

from __future__ import annotations

from collections.abc import Callable

BENCHES: dict[str, Callable[[dict[str, str]], int]] = {}


def register(name: str) -> Callable[[Callable[[dict[str, str]], int]], Callable[[dict[str, str]], int]]:
    def deco(fn: Callable[[dict[str, str]], int]) -> Callable[[dict[str, str]], int]:
        BENCHES[name] = fn
        return fn

    return deco


def run_bench(name: str, args: dict[str, str]) -> int:
    from robo_async.bench import (async_inference, buffer, envs, hil, learn, learn_reach, multi_actor,  # noqa: F401
                                  fuzz, remote_inference, soak, twin, weight_push)  # (they register)
    from robo_async.config import UserError

    if name not in BENCHES:
        raise UserError(f"unknown benchmark '{name}'; available: {', '.join(sorted(BENCHES))}")
    return BENCHES[name](args)
