"""Benchmarks: `robo-async bench <name>` prints a table, then one JSON object as its last line."""

from __future__ import annotations

from collections.abc import Callable

BENCHES: dict[str, Callable[[dict[str, str]], int]] = {}


def register(name: str) -> Callable[[Callable[[dict[str, str]], int]], Callable[[dict[str, str]], int]]:
    def deco(fn: Callable[[dict[str, str]], int]) -> Callable[[dict[str, str]], int]:
        BENCHES[name] = fn
        return fn

    return deco


MODULES = (
    "async_inference",
    "buffer",
    "chaos",
    "envs",
    "fuzz",
    "hil",
    "learn",
    "learn_reach",
    "multi_actor",
    "remote_inference",
    "twin",
    "weight_push",
)  # each registers its benches when imported


def load_all() -> dict[str, Callable[[dict[str, str]], int]]:
    """Every benchmark, registered by importing its module (`MODULES`)."""
    import importlib

    for m in MODULES:
        importlib.import_module(f"robo_async.bench.{m}")
    return BENCHES


def run_bench(name: str, args: dict[str, str]) -> int:
    from robo_async.config import UserError

    load_all()

    if name not in BENCHES:
        raise UserError(f"unknown benchmark '{name}'; available: {', '.join(sorted(BENCHES))}")
    return BENCHES[name](args)
