"""`robo-async bench <name> [key=value ...]`: a benchmark (robo_async/bench/), which prints a table,
then one JSON object with its figures and where and when they were measured. Each benchmark's
usage is the `robo-async bench <name> [...]` line of its module's docstring; `robo-async bench
<name> --help` prints that docstring."""

from __future__ import annotations

import re
import sys

from robo_async.commands.args import HELP, split_pairs, wants_help
from robo_async.config import UserError


def bench_usage(name: str) -> str:
    """The `robo-async bench <name> [...]` line of the docstring of the module that registers
    `name` (just `robo-async bench <name>` if it has none)."""
    from robo_async.bench import BENCHES

    doc = sys.modules[BENCHES[name].__module__].__doc__ or ""
    found = re.search(rf"^\s*(robo-async bench {re.escape(name)}(?:\s.*)?)$", doc, re.MULTILINE)
    return found.group(1).strip() if found else f"robo-async bench {name}"


def bench_summary(name: str) -> str:
    """The first sentence (at most 110 characters) of the docstring of the module that registers
    `name`, without the name it starts with."""
    from robo_async.bench import BENCHES

    doc = " ".join((sys.modules[BENCHES[name].__module__].__doc__ or "").split())
    first = re.sub(r"^`[^`]*`(?: and `[^`]*`)?:\s*", "", doc).split(". ")[0].rstrip(".")
    return first if len(first) <= 110 else first[:107].rsplit(" ", 1)[0] + " ..."


def usage_lines() -> str:
    """Every benchmark's usage line, for `robo-async --help`."""
    from robo_async.bench import load_all

    return "\n".join(bench_usage(n) for n in sorted(load_all()))


def main(argv: list[str]) -> int:
    """Run the benchmark `argv[0]` with the `key=value` arguments after it."""
    from robo_async.bench import load_all, run_bench

    benches = load_all()
    if not argv or argv[0] in HELP:
        print(f"usage: robo-async bench <name> [key=value ...]\n\n{(__doc__ or '').strip()}\n\nbenchmarks:")
        for n in sorted(benches):
            print(f"  {bench_usage(n)}\n      {bench_summary(n)}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in benches:
        raise UserError(f"unknown benchmark '{name}'; available: {', '.join(sorted(benches))}")
    if wants_help(rest):
        print((sys.modules[benches[name].__module__].__doc__ or bench_usage(name)).strip())
        return 0
    return run_bench(name, split_pairs(rest, f"bench {name}"))
