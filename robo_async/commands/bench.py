"""`robo-async bench <name> [key=value ...]`: a benchmark (robo_async/bench/), which prints a table,
then one JSON object with its figures and where and when they were measured. Each benchmark
declares its keys as a dataclass (`register(name, keys)`): its usage line, `robo-async bench <name>
--help` (the keys with their types, defaults and meanings, then the module's docstring) and the
parsing of its command line (an unknown key or a bad value is one line naming it) all come from it."""

from __future__ import annotations

import re
import sys

from robo_async.commands.args import HELP, help_text, usage, wants_help
from robo_async.config import UserError


def bench_usage(name: str) -> str:
    """`robo-async bench <name> [key=default] ...`, from the keys benchmark `name` declares."""
    from robo_async.bench import BENCHES

    return usage(BENCHES[name].keys, f"bench {name}")


def bench_summary(name: str) -> str:
    """The first sentence (at most 110 characters) of the docstring of the module that registers
    `name`, without the name it starts with."""
    from robo_async.bench import BENCHES

    doc = " ".join((sys.modules[BENCHES[name].run.__module__].__doc__ or "").split())
    first = re.sub(r"^`[^`]*`(?: and `[^`]*`)?:\s*", "", doc).split(". ")[0].rstrip(".")
    return first if len(first) <= 110 else first[:107].rsplit(" ", 1)[0] + " ..."


def bench_help(name: str) -> str:
    """`robo-async bench <name> --help`: its usage and keys (type, default, meaning) from the
    dataclass it declares, what it measures from its module's docstring."""
    from robo_async.bench import BENCHES

    b = BENCHES[name]
    return help_text(b.keys, f"bench {name}", sys.modules[b.run.__module__].__doc__)


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
        print(bench_help(name))
        return 0
    return run_bench(name, rest)
