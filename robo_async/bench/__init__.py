"""Benchmarks: `robo-async bench <name>` prints a table, then one JSON object as its last line
(`emit`), which carries where and when it was measured (`provenance`: date, commit, CPU model,
cores, torch, Python), so a figure copied into the docs keeps its context."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

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


def emit(figures: dict[str, object]) -> None:
    """A benchmark's last line: its figures as one JSON object, with `provenance`."""
    print(json.dumps({**figures, "provenance": provenance()}), flush=True)
