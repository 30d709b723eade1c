"""Benchmarks: `robo-async bench <name> [key=value ...]` prints a table, then one JSON object as its
last line (`emit`), which carries where and when it was measured (`provenance`: date, commit, CPU
model, cores, torch, Python), so a figure copied into the docs keeps its context.

Each benchmark declares its keys as a frozen, keyword-only dataclass (`robo_async.commands.args`:
each field a key with its type, default and `arg(help=...)`), registered beside its entry function:

    @dataclass(frozen=True, kw_only=True)
    class FuzzKeys:
        messages: int = arg(100_000, help="mutated messages of each kind per target")

    @register("fuzz", FuzzKeys)
    def bench_fuzz(keys: FuzzKeys) -> int: ...

`run_bench` reads the command line against that dataclass (the one key=value parser: an unknown key
or a bad value is one UserError line naming it) and `robo-async bench <name> --help` lists the same
keys with their defaults and meanings."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Bench:
    """A registered benchmark: its entry function, called with its keys parsed into `keys`."""

    name: str
    run: Callable[[Any], int]
    keys: type


BENCHES: dict[str, Bench] = {}


def register(name: str, keys: type) -> Callable[[Callable[[Any], int]], Callable[[Any], int]]:
    """Register the entry function of benchmark `name`, which takes an instance of `keys` (a frozen
    dataclass of `arg(...)` fields: the keys `robo-async bench <name>` accepts)."""
    if not (is_dataclass(keys) and keys.__dataclass_params__.frozen):
        raise TypeError(f"bench {name}: its keys must be a frozen dataclass, got {keys!r}")

    def deco(fn: Callable[[Any], int]) -> Callable[[Any], int]:
        BENCHES[name] = Bench(name, fn, keys)
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


def load_all() -> dict[str, Bench]:
    """Every benchmark, registered by importing its module (`MODULES`)."""
    import importlib

    for m in MODULES:
        importlib.import_module(f"robo_async.bench.{m}")
    return BENCHES


def parse_keys(name: str, argv: Sequence[str]) -> Any:
    """`argv` (`key=value` words) read against the keys benchmark `name` declares; an unknown
    benchmark or key, or a bad value, is one UserError line."""
    from robo_async.commands.args import parse
    from robo_async.config import UserError

    load_all()
    if name not in BENCHES:
        raise UserError(f"unknown benchmark '{name}'; available: {', '.join(sorted(BENCHES))}")
    return parse(BENCHES[name].keys, argv, f"bench {name}")


def run_bench(name: str, argv: Sequence[str] = ()) -> int:
    """Benchmark `name` with the `key=value` words `argv`, parsed before anything runs."""
    keys = parse_keys(name, argv)
    return BENCHES[name].run(keys)


def provenance() -> dict[str, object]:
    """Where and when a benchmark ran: UTC date and time, the checkout's commit (and whether it had
    changes), the CPU model and the cores this process may use, torch's and Python's versions."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    cpu = platform.processor() or ""
    try:
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            cpu,
        )
    except OSError:
        pass
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short", "HEAD") or None,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "torch": torch_version,
        "python": platform.python_version(),
    }


def show(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1) -> None:
    """A table on stdout: every cell as plain text (`[80, never]` is not markup), at least 240
    columns wide (a log file gets whole rows); the first `left` columns left-aligned."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title))
    for i, c in enumerate(columns):
        table.add_column(Text(c), justify="left" if i < left else "right")
    for r in rows:
        table.add_row(*(Text(str(c)) for c in r))
    Console(width=max(Console().width, 240)).print(table)


def emit(figures: dict[str, object]) -> None:
    """A benchmark's last line: its figures as one JSON object, with `provenance`."""
    print(json.dumps({**figures, "provenance": provenance()}), flush=True)
